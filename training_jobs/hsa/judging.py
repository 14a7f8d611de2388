"""The reference judgments shared by every judge of a turn: the regeneration rules
(:func:`training_jobs.hsa.regenerate.rule_check`), the HAT rewards (:mod:`training_jobs.hat.rewards`) and
evaluation. What a reply is judged by — facts entity by entity, products, coupons, forbidden claims, intent,
text quality — is :mod:`streams.engine.rules` (the runtime hooks' own rules); this module binds a turn and its
reference to it.

A rollout and its reference may run under different harness states (tools renamed, parameters moved, ids as
digit strings), so calls are compared at the level of the code they reach: the *binding* and the
*implementation arguments* (:func:`streams.bound_calls.implementation_arguments`). The reference is a
:class:`~training_jobs.hsa.samples.Sample` already relabelled into the judged harness's names.

- :func:`bound_calls` / :func:`reference_calls` — (binding, implementation arguments) of calls under a manifest;
- :func:`match_reference_calls` — for each reference call: made the same, made with other arguments, missing;
- :func:`extra_bindings` — bindings called that the reference did not need;
- :func:`missing_skills` — reference skill loads the answer lacks;
- :func:`reference_facts` / :func:`missing_facts` / :func:`states_facts` — the exact strings (prices, stock, codes)
  the reply must state (:func:`streams.engine.rules.judge.states`, the tiny model's evaluation check);
- :func:`expectation_from_sample` — a reference sample as the rules' gold (:class:`~streams.engine.rules.Expectation`);
- :func:`turn_calls` / :func:`judge_result` — a finished turn of the engine judged by
  :func:`streams.engine.rules.judge_turn` (what the rewards and evaluation call).

Plain Python, no Django.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest
from streams.bound_calls import binding_key, implementation_arguments
from streams.engine import rules
from streams.engine.events import CommentReceived, ToolCallEvent, ToolResultEvent
from streams.engine.turn import TurnResult
from training_jobs.hsa.samples import Sample, ToolCall, canonical_target


class BoundCall(NamedTuple):
    """What a call does, whatever the harness calls it: the binding and its keyword arguments."""

    binding: str
    arguments: dict[str, Any]


def bound_call(manifest: Manifest, name: str, arguments: Mapping[str, Any] | None) -> BoundCall | None:
    """The call under ``manifest``, or None when the manifest has no tool of that name (``load_skill`` too)."""
    tool = manifest.tool(name)
    if tool is None:
        return None
    return BoundCall(binding_key(tool), implementation_arguments(tool, arguments or {}))


def bound_calls(manifest: Manifest, calls: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[BoundCall]:
    """``(name, arguments)`` pairs as bound calls, in order; names the manifest does not know are left out."""
    out = []
    for name, arguments in calls:
        b = bound_call(manifest, name, arguments)
        if b is not None:
            out.append(b)
    return out


@dataclass(frozen=True)
class ReferenceCall:
    """One tool call of the reference. ``bound`` is None when the manifest has no tool of that name (the
    reference was not relabelled into this harness: a builder bug, reported as such)."""

    name: str
    bound: BoundCall | None


def reference_calls(manifest: Manifest, reference: Sample) -> list[ReferenceCall]:
    """The reference's tool calls (hook retries left out), bound under ``manifest``."""
    return [ReferenceCall(s.name, bound_call(manifest, s.name, s.arguments))
            for s in canonical_target(reference.target) if isinstance(s, ToolCall)]


CallStatus = Literal["same", "other_arguments", "missing", "unmapped"]


@dataclass(frozen=True)
class CallMatch:
    """How the answer covers one reference call: ``same`` (a call to the same binding with the same
    implementation arguments), ``other_arguments`` (only calls to the binding with other arguments; ``got`` is
    the first one's), ``missing`` (no call to the binding) or ``unmapped`` (see :class:`ReferenceCall`)."""

    reference: ReferenceCall
    status: CallStatus
    got: dict[str, Any] | None = None


def match_reference_calls(manifest: Manifest, reference: Sample, calls: Sequence[BoundCall]) -> list[CallMatch]:
    """Each reference call, in order, against the answer's bound calls (a call may cover several reference
    calls: the question is whether the answer did what the reference did)."""
    out = []
    for ref in reference_calls(manifest, reference):
        if ref.bound is None:
            out.append(CallMatch(ref, "unmapped"))
            continue
        same_binding = [c.arguments for c in calls if c.binding == ref.bound.binding]
        if not same_binding:
            out.append(CallMatch(ref, "missing"))
        elif ref.bound.arguments in same_binding:
            out.append(CallMatch(ref, "same"))
        else:
            out.append(CallMatch(ref, "other_arguments", same_binding[0]))
    return out


def extra_bindings(manifest: Manifest, reference: Sample, calls: Sequence[BoundCall]) -> list[str]:
    """Bindings the answer called that no reference call needed (sorted, each once)."""
    needed = {r.bound.binding for r in reference_calls(manifest, reference) if r.bound is not None}
    return sorted({c.binding for c in calls if c.binding not in needed})


def missing_skills(wanted: Iterable[str], loaded: Iterable[str]) -> list[str]:
    """The skills of ``wanted`` (ids under the judged harness) that were not loaded, in order."""
    have = set(loaded)
    return [sid for sid in wanted if sid not in have]


def reference_facts(reference: Sample) -> list[str]:
    """The exact strings the reference says the reply must state (``meta["facts"]``: prices, stock, codes)."""
    return [str(f) for f in (reference.meta.get("facts") or [])]


def missing_facts(text: str, facts: Sequence[str]) -> list[str]:
    """The facts ``text`` does not state, checked one by one (:func:`streams.engine.rules.judge.states`: the
    exact number, not part of a longer one; the tiny model's evaluation reads facts the same way)."""
    return rules.missing_facts(text, facts)


def states_facts(text: str, facts: Sequence[str]) -> bool:
    return not missing_facts(text, facts)


# --- judging a turn -----------------------------------------------------------------------------------------------


def expectation_from_sample(manifest: Manifest, reference: Sample) -> rules.Expectation:
    """The reference as the rules' gold, under the judged harness: its facts, its calls (binding and
    implementation arguments) and its reply skills. A reference call the harness has no tool for was not
    relabelled into it: a caller's bug, so it raises."""
    calls = []
    unmapped = []
    for ref in reference_calls(manifest, reference):
        if ref.bound is None:
            unmapped.append(ref.name)
        else:
            calls.append(rules.ExpectedCall(ref.bound.binding, dict(ref.bound.arguments)))
    if unmapped:
        raise ValueError(f"the reference calls {', '.join(unmapped)}, which this harness does not have: relabel it "
                         "into the rollout's harness (training_jobs.hsa.operators.relabel_target)")
    kinds = {s.id: s.kind for s in manifest.skills}
    skills = tuple(sid for sid in reference.loaded_skills() if kinds.get(sid) == "reply")
    return rules.Expectation(facts=tuple(rules.GoldFact(f) for f in reference_facts(reference)),
                             calls=tuple(calls), reply_skills=skills)


def turn_calls(result: TurnResult, manifest: Manifest) -> list[rules.CallRecord]:
    """The turn's executed calls of manifest tools (``load_skill`` and rejected calls left out), bound, each
    with whether it succeeded (no error; no fault but ``slow``)."""
    results = {e.call_id: e for e in result.events if isinstance(e, ToolResultEvent)}
    out = []
    for e in result.events:
        if not isinstance(e, ToolCallEvent) or not e.valid or e.error is not None or e.name == LOAD_SKILL_TOOL:
            continue
        bound = bound_call(manifest, e.name, e.arguments)
        if bound is None:
            continue
        r = results.get(e.call_id)
        ok = r is not None and r.error is None and r.fault in (None, "slow")
        out.append(rules.CallRecord(bound.binding, bound.arguments, ok))
    return out


def turn_comments(result: TurnResult) -> list[dict[str, str]]:
    """The comments the turn answered, as the engine received them."""
    return [{"viewer": e.viewer, "viewer_id": e.viewer_id, "text": e.text}
            for e in result.events if isinstance(e, CommentReceived)]


def backing_results(result: TurnResult) -> list[dict[str, Any]]:
    """The tool results that back facts this turn: successful binding results (what the factual-risk hook reads);
    none for a fallback line, which no result stands behind."""
    if result.fallback:
        return []
    return [e.result for e in result.events
            if isinstance(e, ToolResultEvent) and e.binding is not None and e.error is None
            and isinstance(e.result, dict)]


def judge_result(result: TurnResult, manifest: Manifest, room: Mapping[str, Any],
                 expectation: rules.Expectation | None = None) -> rules.Judgement:
    """:func:`streams.engine.rules.judge_turn` on a finished turn of the engine: its reply (or fallback line),
    comments, successful results, bound calls and skills, in the room it ran in (pass the room as it was when
    the turn started: bindings mutate it)."""
    return rules.judge_turn(reply=result.reply, comments=turn_comments(result), room=room,
                            tool_results=backing_results(result), loaded_skills=list(result.loaded_skills),
                            manifest=manifest, expectation=expectation, calls=turn_calls(result, manifest),
                            outcome="ok" if not result.fallback and result.reason == "ok" else result.reason)
