"""Canonical samples from recorded turns: preview rooms and scenario runs (DESIGN.md section 6, "recorded preview
transcripts").

A recorded turn is what a model answered, not what it should have answered, so it becomes a sample only when it
is right. Each turn is **replayed** through the one turn engine (:class:`streams.engine.turn.ReplayBackend`: the
recorded model outputs, the real bindings on the room state the turn started from, the harness's hooks) and the
replay must reproduce the recorded tool results. The replayed answer is then **judged** by the same rules that
judge a teacher's answer (:func:`training_jobs.hsa.regenerate.rule_check`) against the reference policy's gold
turn for the comment: it ended ``ok``, every call was valid, the same bindings with the same implementation
arguments, the reply skill loaded, the exact facts stated, and the harness accepts it as it will be rendered.
Turns the reference policy cannot read (no intent, no single product named), batched turns (several comments),
turns under tool faults and turns that fail the judge are counted by reason and left out.

Plain Python, no Django: the console's selectors turn stored events into :class:`RecordedTurn`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_editor.schemas import Manifest
from streams.engine.turn import ReplayBackend, run_turn
from streams.reference_policy import ReferencePolicyError, gold_trajectory
from training_jobs.hsa.regenerate import RegenerateSettings, rule_check
from training_jobs.hsa.samples import Sample, from_gold_trajectory, gold_comment, target_problems

# Where a recorded turn ends up when it is left out (the keys of RecordedStats.rejected).
REASONS = {
    "several_comments": "the turn answered several comments at once (the reference policy answers one)",
    "tool_faults": "the scenario injected tool faults into the turn",
    "no_reference": "the reference policy cannot tell what the comment asks for, or about which product",
    "replay_failed": "the turn did not replay from its events",
    "replay_differs": "replayed tool results differ from the recorded ones",
    "not_ok": "the turn ended with a fallback, a block or an error",
}


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


def recorded_sample(turn: RecordedTurn, settings: RegenerateSettings | None = None) -> tuple[Sample | None, str, str]:
    """``(sample, "", "")`` for a turn that is right, else ``(None, reason, detail)`` (reasons: :data:`REASONS`
    and the judge's codes, e.g. ``wrong_arguments``, ``missing_fact``)."""
    settings = settings or RegenerateSettings()
    if len(turn.comments) != 1:
        return None, "several_comments", f"{len(turn.comments)} comments"
    if turn.faults:
        return None, "tool_faults", ", ".join(f"{k}: {v}" for k, v in turn.faults.items())
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
    try:
        result = run_turn(manifest=turn.manifest, room=copy.deepcopy(dict(turn.room)),
                          comments=[dict(c)], backend=ReplayBackend(list(turn.events)))
    except Exception as exc:  # a stored event the engine cannot read
        return None, "replay_failed", f"{type(exc).__name__}: {exc}"
    if _recorded_results(e.model_dump(mode="json") for e in result.events) != _recorded_results(turn.events):
        return None, "replay_differs", "the room state or the bindings changed since the turn was recorded"
    if result.fallback or result.reason != "ok":
        return None, "not_ok", result.reason
    prompt_count = next((e.message_count for e in result.events if e.type == "prompt_built"), None)
    if prompt_count is None:
        return None, "not_ok", result.reason
    judgement = rule_check(turn.manifest, reference, result, prompt_count, settings)
    if not judgement.passed:
        return None, judgement.reasons[0], "; ".join(judgement.detail)[:300]
    assert judgement.target is not None
    return reference.with_target(judgement.target), "", ""


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
