"""The rewards of HAT stage 3, HSA agentic RL (DESIGN.md sections 7 and 8), and how they become advantages.

A rollout is one turn of the one turn engine (:func:`streams.engine.turn.run_turn`) under some harness state
(original or augmented); it is judged against the reference :class:`~training_jobs.hsa.samples.Sample` for the
same room and comment, relabelled into that harness's names (:func:`training_jobs.hsa.operators.relabel_target`).
Calls are compared by binding and implementation arguments, so a renamed tool or a moved parameter changes
nothing.

Every reward has the signature ``reward(result, manifest, room, reference) -> RewardScore``.

**accuracy** (0 or 1) and **effectiveness** (0, 0.5 or 1) are the judge's
(:func:`streams.engine.rules.judge_turn`, through :func:`training_jobs.hsa.judging.judge_result`): the same rule
functions the runtime hooks guard every live reply with, and evaluation scores with. The reference becomes the
judge's gold (:func:`training_jobs.hsa.judging.expectation_from_sample`: its facts, its calls by binding and
implementation arguments, its reply skills). In short (the rules, with ids: :mod:`streams.engine.rules`):

- accuracy is 1 unless the spoken reply states a price, stock count or discount that no successful tool result
  of this turn gives *for that product and field* (``facts.*``: "only 102 left" is not backed by link id 102,
  "$35" for a dryer not by a $35 free-shipping threshold or by another product's $35 price), names a product or
  link id the room does not have, names a coupon code no result returned or says a coupon was sent without a
  successful ``coupons.issue`` (a false promise), or makes a claim the products' compliance notes forbid
  (:data:`MEDICAL_RE`, :data:`CHANGE_RE` + :data:`CONDITION_RE`, :data:`PROMISE_RE`), or a banned phrase of the
  harness. A fallback line is judged with no tool result behind it: accurate only if it states no facts;
- effectiveness is 0 for a fallback (any reason but ``ok``), a reply that does not answer what the comment asks
  or answers about another product, broken text (cut off, garbled, empty), the wrong product (the reference is
  about link ids the rollout never called a tool with, while it called tools with other link ids), or off topic
  (it stated none of the reference facts and called none of the reference's bindings; when the reference calls
  no tool: it called some tool). It is 1 when every reference fact is stated, every room action of the
  reference (:data:`ROOM_ACTIONS`: a coupon issued, a card pinned) was carried out by a successful call with the
  reference's implementation arguments, and, when the reference has no facts to state (an efficacy question, a
  link that does not exist), every reference call was made with its implementation arguments; 0.5 otherwise (on
  topic but incomplete: the right tool called but the fact missing, the code said but never issued, a repeated
  phrase, a broken interaction constraint).

**tool_rationality** (0..1) — ``right / (1 + invalid + wasted)``:

- ``right``: each distinct reference call earns 1 when a call to the same binding with the same implementation
  arguments was made, 0.5 when only calls to that binding with other arguments were made (each distinct
  wrong-argument call earns one half credit at most once), 0 otherwise; the mean over reference calls, 1 when
  the reference calls no tool;
- ``invalid``: tool_call events the engine rejected (unknown tool or skill, unparsable JSON, schema-invalid
  arguments), ``load_skill`` included;
- ``wasted``: distinct calls to bindings the reference did not need, distinct wrong-argument calls on a
  reference binding not credited above, calls refused past the tool-round limit, and repeats of an identical
  call (``load_skill`` of the same skill included) whose earlier twin succeeded (a retry after a tool fault is
  not wasted).

So one needless or invalid call halves the score, two leave a third.

**skill_selection** (0 or 1) — 1 when every reply skill the reference loaded was loaded (by the manifest's id,
which augmentation may rename; failed loads do not count) and no other reply skill was. Strategy skills are
not judged here: what a strategy must do is judged by effectiveness.

:func:`combine` turns per-prompt groups of scores into advantages: each reward is normalised within its group
before the weighted sum, and the reasoning-length penalty (:func:`reasoning_length_penalty`) is added centred.
Plain Python, no Django.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest
from streams.engine.events import ToolCallEvent, ToolResultEvent
from streams.engine.rules import ROOM_ACTIONS, Judgement
from streams.engine.rules.compliance import (  # noqa: F401 (the accuracy rules, importable here as before)
    CHANGE_RE,
    CONDITION_RE,
    MEDICAL_RE,
    PROMISE_RE,
    forbidden_claims,
    restricts_claims,
    turn_products,
)
from streams.engine.rules.compliance import false_promises as _false_promises
from streams.engine.rules.facts import MONEY_KEYS, STOCK_KEYS, money_figures, unbacked_claims  # noqa: F401
from streams.engine.rules.judge import COUPON_ISSUE  # noqa: F401
from streams.engine.toolcalls import strip_think
from streams.engine.turn import TurnResult
from training_jobs.hsa.judging import (
    BoundCall,
    CallMatch,
    bound_call,
    expectation_from_sample,
    extra_bindings,
    judge_result,
    match_reference_calls,
    missing_skills,
)
from training_jobs.hsa.judging import backing_results as backing_results  # noqa: F401
from training_jobs.hsa.samples import Sample

REWARDS: tuple[str, ...] = ("accuracy", "effectiveness", "tool_rationality", "skill_selection")
DEFAULT_WEIGHTS: Mapping[str, float] = {name: 1.0 for name in REWARDS}


@dataclass(frozen=True)
class RewardScore:
    """One reward's value and why (for people reading a rollout, and for evaluation reports)."""

    value: float
    reason: str


# --- what a rollout did ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    event: ToolCallEvent
    result: ToolResultEvent | None
    bound: BoundCall | None  # None for load_skill and for calls the engine rejected

    @property
    def executed(self) -> bool:
        """Valid and run (a call refused past the round limit is valid but never ran)."""
        return self.event.valid and self.event.error is None

    @property
    def succeeded(self) -> bool:
        return self.executed and self.result is not None and self.result.error is None

    @property
    def faulted(self) -> bool:
        return self.result is not None and self.result.fault not in (None, "slow")

    def key(self) -> tuple[str, str]:
        if self.bound is None:
            return self.event.name, _canonical_json(self.event.arguments or {})
        return self.bound.binding, _canonical_json(self.bound.arguments)


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _calls(result: TurnResult, manifest: Manifest) -> list[_Call]:
    results = {e.call_id: e for e in result.events if isinstance(e, ToolResultEvent)}
    out = []
    for e in result.events:
        if isinstance(e, ToolCallEvent):
            bound = bound_call(manifest, e.name, e.arguments) if e.valid and e.name != LOAD_SKILL_TOOL else None
            out.append(_Call(e, results.get(e.call_id), bound))
    return out


def _tool_calls(calls: Iterable[_Call]) -> list[_Call]:
    """Executed calls of manifest tools (``load_skill`` left out), in order."""
    return [c for c in calls if c.executed and c.bound is not None]


def _bound(calls: Iterable[_Call]) -> list[BoundCall]:
    return [c.bound for c in calls if c.bound is not None]


def _checked_matches(manifest: Manifest, reference: Sample, calls: Sequence[BoundCall]
                     ) -> list[tuple[BoundCall, CallMatch]]:
    """Each reference call (bound) with how the rollout covers it; a reference that was not relabelled into the
    rollout's harness is a caller's bug, not a bad rollout, so it raises."""
    out = []
    unmapped = []
    for m in match_reference_calls(manifest, reference, calls):
        if m.reference.bound is None:
            unmapped.append(m.reference.name)
        else:
            out.append((m.reference.bound, m))
    if unmapped:
        raise ValueError(f"the reference calls {', '.join(unmapped)}, which this harness does not have: relabel it "
                         "into the rollout's harness (training_jobs.hsa.operators.relabel_target)")
    return out


def false_promises(reply: str, room: Mapping[str, Any], results: Sequence[Any], coupon_issued: bool) -> list[str]:
    """Coupon codes no result returned, and coupons said to be issued without a successful issue call."""
    return [what for _, what in _false_promises(reply, room, results, coupon_issued)]


# --- accuracy and effectiveness: the judge's ---------------------------------------------------------------------


def judgement(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample) -> Judgement:
    """The judge's verdict on a rollout, with the reference as gold (what accuracy and effectiveness read)."""
    return judge_result(result, manifest, room, expectation_from_sample(manifest, reference))


def accuracy(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample) -> RewardScore:
    """1 when the spoken reply states nothing false or unsupported (module docstring), else 0."""
    j = judgement(result, manifest, room, reference)
    return RewardScore(float(j.accuracy), j.accuracy_reason)


def effectiveness(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                  ) -> RewardScore:
    """1 answered and the strategy carried out, 0.5 on topic but incomplete, 0 fallback / unanswered / wrong
    product / off topic / broken text (module docstring)."""
    j = judgement(result, manifest, room, reference)
    return RewardScore(j.effectiveness, j.effectiveness_reason)


# --- tool rationality -------------------------------------------------------------------------------------------


def tool_rationality(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                     ) -> RewardScore:
    """``right / (1 + invalid + wasted)`` (module docstring)."""
    calls = _calls(result, manifest)
    invalid = [c.event for c in calls if not c.event.valid]
    refused = [c for c in calls if c.event.valid and c.event.error is not None]  # past the round limit
    tools = _tool_calls(calls)
    bound = _bound(tools)
    matches = _checked_matches(manifest, reference, bound)

    repeats = 0
    done: set[tuple[str, str]] = set()
    for c in calls:
        if not c.executed:
            continue
        key = c.key()
        if key in done:
            repeats += 1
        elif not c.faulted:
            done.add(key)

    distinct = {c.key() for c in tools}
    wanted: dict[tuple[str, str], CallMatch] = {}
    for ref, m in matches:
        wanted.setdefault((ref.binding, _canonical_json(ref.arguments)), m)
    credit = sum(1.0 for m in wanted.values() if m.status == "same")
    wasted_other = 0
    for binding in {k[0] for k in wanted}:
        attempts = [k for k in distinct if k[0] == binding and k not in wanted]  # wrong-argument calls
        missed = [m for k, m in wanted.items() if k[0] == binding and m.status == "other_arguments"]
        credited = min(len(attempts), len(missed))
        credit += 0.5 * credited
        wasted_other += len(attempts) - credited
    extra = set(extra_bindings(manifest, reference, bound))
    wasted_extra = sum(1 for k in distinct if k[0] in extra)
    wasted = wasted_extra + wasted_other + repeats + len(refused)
    right = credit / len(wanted) if wanted else 1.0
    value = right / (1 + len(invalid) + wasted)

    parts = [f"right {credit:g}/{len(wanted)}" if wanted else "no tool needed"]
    if invalid:
        parts.append(f"{len(invalid)} invalid ({'; '.join(f'{e.name}: {e.error}' for e in invalid)[:200]})")
    if wasted_extra:
        parts.append(f"{wasted_extra} to bindings not needed ({', '.join(sorted(extra))})")
    if wasted_other:
        parts.append(f"{wasted_other} with wrong arguments after the right call")
    if repeats:
        parts.append(f"{repeats} repeated")
    if refused:
        parts.append(f"{len(refused)} past the round limit")
    return RewardScore(round(value, 6), "; ".join(parts))


# --- skill selection -------------------------------------------------------------------------------------------


def skill_selection(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                    ) -> RewardScore:
    """1 when the reference's reply skill(s) were loaded and no other reply skill, else 0."""
    unknown = [sid for sid in reference.loaded_skills() if manifest.skill(sid) is None]
    if unknown:
        raise ValueError(f"the reference loads {', '.join(unknown)}, which this harness does not have: relabel it "
                         "into the rollout's harness (training_jobs.hsa.operators.relabel_target)")
    kinds = {s.id: s.kind for s in manifest.skills}
    wanted = [sid for sid in reference.loaded_skills() if kinds.get(sid) == "reply"]
    loaded = [sid for sid in result.loaded_skills if kinds.get(sid) == "reply"]
    missing = missing_skills(wanted, loaded)
    others = [sid for sid in loaded if sid not in wanted]
    if missing or others:
        why = []
        if missing:
            why.append(f"did not load {', '.join(missing)}")
        if others:
            why.append(f"loaded other reply skill(s) {', '.join(others)}")
        return RewardScore(0.0, "; ".join(why))
    return RewardScore(1.0, f"loaded {', '.join(wanted) or 'no reply skill, as the reference'}")


# --- one rollout --------------------------------------------------------------------------------------------------


def score_rollout(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                  ) -> dict[str, RewardScore]:
    """The four rewards of one rollout, keyed by :data:`REWARDS`. ``room``: the room the turn ran in (its
    products' compliance notes and coupon codes are read, nothing else)."""
    return {name: fn(result, manifest, room, reference)
            for name, fn in (("accuracy", accuracy), ("effectiveness", effectiveness),
                             ("tool_rationality", tool_rationality), ("skill_selection", skill_selection))}


# --- internal reasoning ---------------------------------------------------------------------------------------------


def reasoning_text(result: TurnResult) -> str:
    """The model's internal reasoning in this turn: reasoning-channel tokens (a server's reasoning parser) and
    ``<think>`` blocks left in the content of each model request, in order."""
    parts: list[str] = []
    content: list[str] = []

    def flush() -> None:
        if content:
            _, thought = strip_think("".join(content))
            if thought:
                parts.append(thought)
            content.clear()

    for e in result.events:
        if e.type == "model_request":
            flush()
        elif e.type == "token":
            if e.channel == "reasoning":
                parts.append(e.delta)
            else:
                content.append(e.delta)
    flush()
    return "".join(parts)


def reasoning_length_penalty(length: float, budget: float, coef: float) -> float:
    """A non-positive price for internal reasoning over ``budget`` (characters or tokens, as ``length``):
    0 within budget, then ``-coef`` times the excess as a share of the budget, capped at ``-coef`` (reached at
    twice the budget) so a runaway reasoning never outweighs the rewards themselves."""
    if not (math.isfinite(length) and length >= 0):
        raise ValueError(f"length must be a non-negative number, not {length!r}")
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number, not {budget!r}")
    if not (math.isfinite(coef) and coef >= 0):
        raise ValueError(f"coef must be a non-negative number, not {coef!r}")
    excess = max(0.0, length - budget)
    return -coef * min(1.0, excess / budget)


# --- advantages -------------------------------------------------------------------------------------------------


def _value(score: RewardScore | float) -> float:
    v = score.value if isinstance(score, RewardScore) else float(score)
    if not math.isfinite(v):
        raise ValueError(f"a reward must be finite, not {v!r}")
    return v


def normalise(values: Sequence[float], eps: float = 1e-6) -> list[float]:
    """``(v - mean) / (std + eps)`` within one group (population std); all zero when the group has no spread
    (every rollout equally good: nothing to learn from this reward here)."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    if std < 1e-12:
        return [0.0] * n
    return [(v - mean) / (std + eps) for v in values]


def combine(groups: Sequence[Sequence[Mapping[str, RewardScore | float]]],
            weights: Mapping[str, float] = DEFAULT_WEIGHTS, *,
            length_penalties: Sequence[Sequence[float]] | None = None, eps: float = 1e-6) -> list[float]:
    """Advantages of every rollout, group after group (a group: the rollouts of one prompt under one harness
    state). Each weighted reward is normalised within its group *before* the weighted sum, so a group that
    differs only in accuracy and one that differs only in effectiveness keep their own signal (summing first
    would give both the same advantages). ``length_penalties`` (same shape, from
    :func:`reasoning_length_penalty`) are added centred within the group but not scaled: each rollout pays the
    configured price relative to its siblings, and a tiny spread is not inflated to a full standard deviation."""
    if not weights:
        raise ValueError("no reward weights")
    for name, w in weights.items():
        if not math.isfinite(w):
            raise ValueError(f"weight of {name!r} must be finite, not {w!r}")
    if length_penalties is not None and [len(g) for g in length_penalties] != [len(g) for g in groups]:
        raise ValueError("length_penalties must have the shape of groups")
    out: list[float] = []
    for gi, group in enumerate(groups):
        totals = [0.0] * len(group)
        for name, w in weights.items():
            if w == 0:
                continue
            try:
                values = [_value(rollout[name]) for rollout in group]
            except KeyError:
                raise ValueError(f"a rollout of group {gi} has no {name!r} reward") from None
            for i, v in enumerate(normalise(values, eps)):
                totals[i] += w * v
        if length_penalties is not None:
            penalties = [float(p) for p in length_penalties[gi]]
            mean = sum(penalties) / len(penalties) if penalties else 0.0
            totals = [t + p - mean for t, p in zip(totals, penalties)]
        out.extend(totals)
    return out
