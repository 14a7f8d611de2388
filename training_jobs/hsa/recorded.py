"""Canonical samples from recorded turns: preview rooms and scenario runs (DESIGN.md section 6, "recorded preview
transcripts").

A recorded turn is what a model answered, not what it should have answered, so it becomes a sample only when it
is right. Each turn is **replayed** through the one turn engine (:class:`streams.engine.turn.ReplayBackend`: the
recorded model outputs, the harness's hooks, the real built-in bindings on the room state the turn started from)
and the replay must reproduce the recorded tool results. Tools with an open binding (fixture, http, mcp) answer
the replay with what they answered when the turn was recorded: an http or MCP call is never made twice (it may
have changed something out there), and a scenario's own fixtures are not stored with the turn.

The replayed answer is then **judged**, in one of two ways:

- *the live room* (the harness has a tool bound to an implementation the reference policy uses,
  :func:`reference_applies`): by the same rules that judge a teacher's answer
  (:func:`training_jobs.hsa.regenerate.rule_check`) against the reference policy's gold turn for the comment: it
  ended ``ok``, every call was valid, the same bindings with the same implementation arguments, the reply skill
  loaded, the exact facts stated, and the harness accepts it as it will be rendered. Turns the reference policy
  cannot read (no intent, no single product named) and batched turns (several comments) are left out;
- *any other harness* (an order desk, a help desk), which the reference policy does not know: by the one set of
  rules alone, as written gold turns are (:mod:`training_jobs.hsa.written`): it ended ``ok``, every call was valid
  for its tool's schema and answered without an error or a fault, the rules judge
  (:func:`streams.engine.rules.judge_turn`) finds no problem with the reply, and the harness accepts the turn as it
  stands (every before-reply hook, tool rounds, request and retry limits:
  :func:`training_jobs.hsa.samples.target_problems` with ``full=True``).

Turns under injected tool faults and turns that fail are counted by reason (:data:`REASONS`, the judge's codes)
and left out.

Plain Python, no Django: the console's selectors turn stored events into :class:`RecordedTurn`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_editor.schemas import Manifest
from harness_editor.schemas.bindings import FixtureBinding, FixtureCase, binding_kind
from streams.engine.turn import HOOK_FEEDBACK_ROLE, ReplayBackend, TurnResult, run_turn
from streams.reference_policy import (
    INTENT_BINDING,
    ReferencePolicyError,
    gold_trajectory,
)
from training_jobs.hsa.judging import judge_result
from training_jobs.hsa.regenerate import RegenerateSettings, rule_check, turn_target
from training_jobs.hsa.samples import (
    Reply,
    Sample,
    from_gold_trajectory,
    gold_comment,
    target_messages,
    target_problems,
)

# Where a recorded turn ends up when it is left out (the keys of RecordedStats.rejected).
REASONS = {
    "several_comments": "the turn answered several comments at once (the reference policy answers one)",
    "tool_faults": "the scenario injected tool faults into the turn",
    "no_reference": "the reference policy cannot tell what the comment asks for, or about which product",
    "replay_failed": "the turn did not replay from its events",
    "replay_differs": "replayed tool results differ from the recorded ones",
    "not_ok": "the turn ended with a fallback, a block or an error",
    # harnesses the reference policy does not know, judged by the rules alone
    "invalid_tool_call": "a call was not valid for its tool's schema",
    "tool_error": "a tool answered with an error or a fault",
    "not_representable": "the turn has no sample form, or the harness would not accept it as it stands "
                         "(a before-reply hook, tool rounds, the request or retry limit)",
    "inaccurate": "the rules judge found a claim in the reply that no tool result backs, or a forbidden one",
    "reply_problem": "the rules judge found another problem with the reply",
}

# The implementations the reference policy answers with (streams.reference_policy.INTENT_BINDING).
REFERENCE_BINDINGS: frozenset[str] = frozenset(b for b in INTENT_BINDING.values() if b)


def reference_applies(manifest: Manifest) -> bool:
    """Whether the reference policy knows this harness: a tool bound to one of the live room's implementations it
    answers with. Otherwise (a harness the project did not write) recorded turns are judged by the rules alone."""
    return any(isinstance(t.binding, str) and t.binding in REFERENCE_BINDINGS for t in manifest.tools)


@dataclass(frozen=True)
class RecordedTurn:
    """One stored turn: the harness it ran under, the room state it started from, its comments (``viewer``,
    ``text``, and when a scenario knows them ``persona_kind`` and ``link_ids``) and its engine events as
    stored (JSON payloads with their ``type``)."""

    id: str
    manifest: Manifest
    room: Mapping[str, Any]
    comments: Sequence[Mapping[str, Any]]
    events: Sequence[Mapping[str, Any]]
    source: str
    faults: Mapping[str, str] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class RecordedStats:
    considered: int = 0
    kept: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)  # a few rejected turns with why

    def reject(self, turn: RecordedTurn, reason: str, detail: str = "") -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if len(self.examples) < 20:
            self.examples.append({"turn": turn.id, "reason": reason, "detail": detail[:300]})

    def to_dict(self) -> dict[str, Any]:
        return {"considered": self.considered, "kept": self.kept, "rejected": dict(sorted(self.rejected.items())),
                "examples": list(self.examples)}


def _recorded_results(events: Iterable[Mapping[str, Any]]) -> list[Any]:
    return [e.get("result") for e in events if e.get("type") == "tool_result"]


def _replay_manifest(turn: RecordedTurn) -> Manifest:
    """The harness the replay runs under: tools with an open binding answer with the results recorded for their
    calls (by arguments, in the order they were made); built-in bindings run for real on the room state."""
    calls: dict[Any, Mapping[str, Any]] = {}  # the latest call of each id: a backend may reuse ids across requests
    cases: dict[str, list[FixtureCase]] = {}
    for e in turn.events:
        if e.get("type") == "tool_call":
            calls[e.get("call_id")] = e
        elif e.get("type") == "tool_result" and e.get("call_id") in calls:
            args = calls[e["call_id"]].get("arguments")
            if isinstance(args, dict):
                cases.setdefault(str(e.get("name")), []).append(FixtureCase(when=dict(args), result=e.get("result")))
    tools = []
    changed = False
    for t in turn.manifest.tools:
        if binding_kind(t.binding) in ("http", "fixture", "mcp"):
            # no default: a call the recorded turn did not make has no answer (the replay then differs)
            t = t.model_copy(update={"binding": FixtureBinding(kind="fixture", cases=cases.get(t.name, []))})
            changed = True
        tools.append(t)
    return turn.manifest.model_copy(update={"tools": tools}) if changed else turn.manifest


def _replay(turn: RecordedTurn) -> tuple[TurnResult | None, int, str, str]:
    """``(result, prompt_count, "", "")`` for a turn that replays to what was recorded and ended ``ok``, else
    ``(None, 0, reason, detail)``."""
    try:
        result = run_turn(manifest=_replay_manifest(turn), room=copy.deepcopy(dict(turn.room)),
                          comments=[dict(c) for c in turn.comments], backend=ReplayBackend(list(turn.events)))
    except Exception as exc:  # a stored event the engine cannot read
        return None, 0, "replay_failed", f"{type(exc).__name__}: {exc}"
    if _recorded_results(e.model_dump(mode="json") for e in result.events) != _recorded_results(turn.events):
        return None, 0, "replay_differs", "the room state or the bindings changed since the turn was recorded"
    if result.fallback or result.reason != "ok":
        return None, 0, "not_ok", result.reason
    prompt_count = next((e.message_count for e in result.events if e.type == "prompt_built"), None)
    if prompt_count is None:
        return None, 0, "not_ok", result.reason
    return result, prompt_count, "", ""


def recorded_sample(turn: RecordedTurn, settings: RegenerateSettings | None = None) -> tuple[Sample | None, str, str]:
    """``(sample, "", "")`` for a turn that is right, else ``(None, reason, detail)`` (reasons: :data:`REASONS`
    and the judge's codes, e.g. ``wrong_arguments``, ``missing_fact``)."""
    if reference_applies(turn.manifest) and len(turn.comments) != 1:
        return None, "several_comments", f"{len(turn.comments)} comments"
    if turn.faults:
        return None, "tool_faults", ", ".join(f"{k}: {v}" for k, v in turn.faults.items())
    if not reference_applies(turn.manifest):
        return _rules_sample(turn)
    settings = settings or RegenerateSettings()
    c = turn.comments[0]
    viewer, text = str(c.get("viewer") or "viewer"), str(c.get("text") or "")
    gold = gold_comment(text, viewer=viewer, room=turn.room, persona_kind=str(c.get("persona_kind") or ""),
                        link_ids=tuple(c.get("link_ids") or ()), infer_product=True)
    if gold is None:
        return None, "no_reference", text[:120]
    try:
        trajectory = gold_trajectory(turn.manifest, dict(turn.room), gold)
    except ReferencePolicyError as exc:
        return None, "no_reference", str(exc)
    comments = [{"viewer": viewer, "text": text}]
    reference = from_gold_trajectory(trajectory, turn.manifest, turn.room, comments, source=turn.source,
                                     sample_id=f"recorded-{turn.id}", meta={**turn.meta, "recorded_turn": turn.id})
    if target_problems(turn.manifest, reference, full=True):
        return None, "no_reference", "the reference policy's own turn does not pass this harness"
    result, prompt_count, reason, detail = _replay(turn)
    if result is None:
        return None, reason, detail
    judgement = rule_check(turn.manifest, reference, result, prompt_count, settings)
    if not judgement.passed:
        return None, judgement.reasons[0], "; ".join(judgement.detail)[:300]
    assert judgement.target is not None
    return reference.with_target(judgement.target), "", ""


def _rules_sample(turn: RecordedTurn) -> tuple[Sample | None, str, str]:
    """A turn of a harness the reference policy does not know, judged by the rules alone (module docstring)."""
    manifest = turn.manifest
    result, prompt_count, reason, detail = _replay(turn)
    if result is None:
        return None, reason, detail
    invalid = [e for e in result.events if e.type == "tool_call" and not e.valid]
    if invalid:
        return None, "invalid_tool_call", "; ".join(f"{e.name}: {e.error}" for e in invalid)[:300]
    faulted = [e for e in result.events if e.type == "tool_result" and (e.error is not None or e.fault is not None
                                                                        or _is_error(e.result))]
    if faulted:
        return None, "tool_error", "; ".join(f"{e.name}: {e.fault or e.error or e.result.get('error')}"
                                             for e in faulted)[:300]
    target, why = turn_target(result, prompt_count)
    if target is None:
        return None, "not_representable", why
    comments = tuple({"viewer": str(c.get("viewer") or "customer"), "text": str(c.get("text") or "")}
                     for c in turn.comments)
    kinds = {s.id: s.kind for s in manifest.skills}
    reply_skills = [sid for sid in result.loaded_skills if kinds.get(sid) == "reply"]
    sample = Sample(id=f"recorded-{turn.id}", manifest=manifest, room=dict(turn.room), comments=comments,
                    target=target, source=turn.source,
                    meta={**turn.meta, "recorded_turn": turn.id, "judged_by": "rules",
                          "skill": reply_skills[0] if reply_skills else ""})
    problems = target_problems(manifest, sample, full=True)
    if problems:
        return None, "not_representable", "; ".join(problems)[:300]
    engine_feedback = [m["content"] for m in result.messages[prompt_count:] if m.get("role") == HOOK_FEEDBACK_ROLE]
    rendered = [m["content"] for m in target_messages(manifest, sample) if m.get("role") == HOOK_FEEDBACK_ROLE]
    if engine_feedback != rendered:
        return None, "not_representable", "hook feedback differs when re-rendered"
    verdict = judge_result(result, manifest, turn.room)
    if verdict.problems:
        code = "inaccurate" if not verdict.accuracy else "reply_problem"
        return None, code, "; ".join(f"{p.rule}: {p.message}" for p in verdict.problems)[:300]
    assert isinstance(sample.target[-1], Reply)
    return sample, "", ""


def _is_error(result: Any) -> bool:
    # a binding's own fault (a fixture with no matching case, an http 500) comes back as {"error": ..., "code": ...}
    return isinstance(result, dict) and "error" in result


def recorded_samples(turns: Iterable[RecordedTurn], settings: RegenerateSettings | None = None
                     ) -> tuple[list[Sample], RecordedStats]:
    """The samples of the turns that are right, in order, and what happened to the rest."""
    stats = RecordedStats()
    out: list[Sample] = []
    for turn in turns:
        stats.considered += 1
        sample, reason, detail = recorded_sample(turn, settings)
        if sample is None:
            stats.reject(turn, reason, detail)
        else:
            stats.kept += 1
            out.append(sample)
    return out, stats
