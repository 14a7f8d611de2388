"""Running eval cases through the one turn engine, and the numbers a run reports.

An evaluation run is (model endpoint, harness version, eval set version, sampling, k, seed): each case is played
``k`` times through :func:`streams.engine.turn.run_turn` — the same renderer, bindings, hooks and retries the
preview room and live sessions use — and each sample is judged by the one set of reply rules (the ``judge``
callable; the Django side passes the rules of :mod:`streams.engine.rules`). T4 (IFEval) cases are plain chat
completions without a harness, scored at the end by :mod:`training_jobs.evals.ifeval`.

What is reported (:func:`aggregate`):

- ``accuracy`` and ``effectiveness``: the mean over cases of each case's mean over its samples, with a 95 %
  bootstrap confidence interval that resamples *cases* (samples of one case are not independent);
- ``pass_k``: the share of cases solved in all k samples (tau-bench's pass^k); solved = accurate and fully
  effective (1.0); ``pass_1`` is the mean per-sample solve rate, for comparison;
- latency per turn: P50 / P95 of the whole turn, the share under 15 s, time to first token, decode tokens/s
  (measured around the endpoint's stream by :class:`MeteredBackend`, so every endpoint is measured the same way).

Plain Python, no Django: the worker's task and ``manage.py run_eval`` both call :func:`run_case`.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

UNDER_S = 15.0  # the share of turns under this many seconds (the report's live-room budget)
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


class Judgement(Protocol):
    accuracy: float
    effectiveness: float
    problems: Sequence[Any]


Judge = Callable[..., Judgement]


@dataclass
class CallMeter:
    """One model call as the endpoint streamed it."""

    ttft_s: float | None = None  # request sent → first content, reasoning or tool-call delta
    total_s: float = 0.0
    tokens: int = 0  # completion tokens: the endpoint's usage when it reports one, else the deltas counted


class MeteredBackend:
    """Wraps a chat backend (``stream_chat``) and records every call's time to first token, duration and
    completion tokens, so a turn's decode speed is measured the same way on every endpoint."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.calls: list[CallMeter] = []

    def stream_chat(self, messages: list[dict[str, Any]], tools: Any = None, **sampling: Any) -> Iterator[Any]:
        meter = CallMeter()
        self.calls.append(meter)
        t0 = time.perf_counter()
        deltas = 0
        usage_tokens: int | None = None
        try:
            for delta in self.backend.stream_chat(messages, tools, **sampling):
                if getattr(delta, "content", "") or getattr(delta, "reasoning", "") or getattr(delta, "tool_calls", ()):
                    deltas += 1
                    if meter.ttft_s is None:
                        meter.ttft_s = time.perf_counter() - t0
                usage = getattr(delta, "usage", None)
                if isinstance(usage, Mapping) and isinstance(usage.get("completion_tokens"), int):
                    usage_tokens = usage["completion_tokens"]
                yield delta
        finally:
            meter.total_s = time.perf_counter() - t0
            meter.tokens = usage_tokens if usage_tokens is not None else deltas

    def take(self) -> list[CallMeter]:
        calls, self.calls = self.calls, []
        return calls


def decode_tokens_per_s(calls: Sequence[CallMeter]) -> float | None:
    """Tokens after the first over the time after the first token, summed over a turn's model calls."""
    tokens = sum(max(0, c.tokens - 1) for c in calls if c.ttft_s is not None)
    seconds = sum(c.total_s - c.ttft_s for c in calls if c.ttft_s is not None)
    return tokens / seconds if tokens > 0 and seconds > 0 else None


@dataclass
class SampleOutcome:
    """One sample of one case: what the model did and how it was judged."""

    case_id: str
    sample: int
    reply: str
    reason: str  # the turn's end reason ("ok", "blocked:<hook>", "model_error", ...; "ifeval" for T4)
    fallback: bool
    accuracy: float
    effectiveness: float
    problems: list[dict[str, Any]] = field(default_factory=list)
    turn_s: float = 0.0
    ttft_s: float | None = None
    decode_tps: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)  # the turn's engine events, for drill-down
    error: str = ""  # the case could not be run (bad manifest, internal error): judged 0

    @property
    def solved(self) -> bool:
        return self.accuracy >= 1.0 and self.effectiveness >= 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _problem(p: Any) -> dict[str, Any]:
    if isinstance(p, Mapping):
        return dict(p)
    if hasattr(p, "to_dict"):
        return p.to_dict()
    if hasattr(p, "__dataclass_fields__"):
        return asdict(p)
    return {"message": str(p)}


def run_case(case: Any, sample: int, *, manifest: Any, backend: Any, judge: Judge,
             sampling: Mapping[str, Any] | None = None, seed: int | None = None,
             deadline_s: float | None = None, emit: Callable[[Any], None] | None = None,
             tools: Any = None) -> SampleOutcome:
    """Play one sample of a harness case (T1–T3) through the turn engine and judge it. ``manifest`` is the
    harness state the case runs under (the version's, or its T2/T3 variant). ``case.room`` is copied: tools may
    change the room, the case never does. ``seed`` (per sample) goes to the endpoint with the sampling. ``tools``:
    what the tool bindings may reach (:class:`streams.tool_bindings.ToolRuntime`; default: built-in and fixture
    bindings only)."""
    from streams.engine.faults import ToolFault
    from streams.engine.turn import run_turn

    metered = MeteredBackend(backend)
    room_before = copy.deepcopy(dict(case.room))
    room = copy.deepcopy(room_before)
    events: list[dict[str, Any]] = []

    def record(event: Any) -> None:
        events.append(event.model_dump(mode="json"))
        if emit is not None:
            emit(event)

    faults = {key: value if isinstance(value, ToolFault) else ToolFault.model_validate(value)
              for key, value in (getattr(case, "tool_faults", None) or {}).items()}
    params = dict(sampling or {})
    if seed is not None:
        params["seed"] = seed
    t0 = time.perf_counter()
    result = run_turn(manifest=manifest, room=room, comments=[dict(c) for c in case.comments], backend=metered,
                      emit=record, faults=faults, sampling=params, deadline_s=deadline_s, tools=tools)
    turn_s = time.perf_counter() - t0
    calls = metered.take()
    verdict = judge(result=result, manifest=manifest, room=room_before, case=case)
    first = next((c.ttft_s for c in calls if c.ttft_s is not None), None)
    return SampleOutcome(case_id=case.id, sample=sample, reply=result.reply, reason=result.reason,
                         fallback=result.fallback, accuracy=float(verdict.accuracy),
                         effectiveness=float(verdict.effectiveness),
                         problems=[_problem(p) for p in verdict.problems], turn_s=turn_s, ttft_s=first,
                         decode_tps=decode_tokens_per_s(calls), events=events)


def run_instruction_case(case: Any, sample: int, *, backend: Any, sampling: Mapping[str, Any] | None = None,
                         seed: int | None = None) -> SampleOutcome:
    """One sample of a T4 (IFEval) case: the prompt as the only user message, no harness, no tools. Judged
    later, all responses together (:func:`training_jobs.evals.ifeval.score_responses`)."""
    metered = MeteredBackend(backend)
    params = {"max_tokens": 1024, **dict(sampling or {})}
    if seed is not None:
        params["seed"] = seed
    t0 = time.perf_counter()
    text = "".join(d.content for d in metered.stream_chat([{"role": "user", "content": case.prompt}], None,
                                                            **params))
    calls = metered.take()
    first = next((c.ttft_s for c in calls if c.ttft_s is not None), None)
    return SampleOutcome(case_id=case.id, sample=sample, reply=text, reason="ifeval", fallback=False,
                         accuracy=0.0, effectiveness=0.0, turn_s=time.perf_counter() - t0, ttft_s=first,
                         decode_tps=decode_tokens_per_s(calls))


# --- aggregates --------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None when empty."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def bootstrap_ci(values: Sequence[float], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                 confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of ``values`` (one value per case)."""
    n = len(values)
    if n == 0:
        return None
    if n == 1 or min(values) == max(values):
        return (float(values[0]), float(values[0])) if n == 1 else (float(min(values)), float(min(values)))
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    alpha = (1.0 - confidence) / 2
    return means[int(alpha * (resamples - 1))], means[int((1 - alpha) * (resamples - 1))]


def _per_case(outcomes: Sequence[SampleOutcome]) -> dict[str, list[SampleOutcome]]:
    by_case: dict[str, list[SampleOutcome]] = {}
    for o in outcomes:
        by_case.setdefault(o.case_id, []).append(o)
    return by_case


def score(values: Sequence[float], *, seed: int) -> dict[str, Any]:
    """Mean with its 95 % bootstrap interval, in the shape the pages and the JSON output use."""
    ci = bootstrap_ci(values, seed=seed)
    return {"mean": (sum(values) / len(values)) if values else None, "ci_low": ci[0] if ci else None,
            "ci_high": ci[1] if ci else None, "n": len(values)}


def latency(outcomes: Sequence[SampleOutcome]) -> dict[str, Any]:
    turns = [o.turn_s for o in outcomes if not o.error]
    ttft = [o.ttft_s for o in outcomes if o.ttft_s is not None]
    tps = [o.decode_tps for o in outcomes if o.decode_tps is not None]
    return {"turns": len(turns), "p50_s": percentile(turns, 50), "p95_s": percentile(turns, 95),
            "under_15s": (sum(t < UNDER_S for t in turns) / len(turns)) if turns else None,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
            "decode_tps_p50": percentile(tps, 50)}


def aggregate(outcomes: Sequence[SampleOutcome], *, k: int, seed: int = 0) -> dict[str, Any]:
    """The run's scores from its samples (harness cases). Cases with fewer than ``k`` samples (a cancelled
    run) count with the samples they have; ``complete`` says how many have all k."""
    by_case = _per_case(outcomes)
    acc = [sum(o.accuracy for o in os) / len(os) for os in by_case.values()]
    eff = [sum(o.effectiveness for o in os) / len(os) for os in by_case.values()]
    solved_all = [float(all(o.solved for o in os)) for os in by_case.values() if len(os) >= k]
    pass_1 = [sum(o.solved for o in os) / len(os) for os in by_case.values()]
    problems: dict[str, int] = {}
    for o in outcomes:
        for p in o.problems:
            rule = str(p.get("rule") or p.get("id") or "other")
            problems[rule] = problems.get(rule, 0) + 1
    return {"cases": len(by_case), "samples": len(outcomes), "k": k, "complete": len(solved_all),
            "accuracy": score(acc, seed=seed), "effectiveness": score(eff, seed=seed + 1),
            "pass_k": score(solved_all, seed=seed + 2), "pass_1": score(pass_1, seed=seed + 3),
            "fallbacks": sum(o.fallback for o in outcomes), "errors": sum(bool(o.error) for o in outcomes),
            "problems": dict(sorted(problems.items(), key=lambda kv: -kv[1])), "latency": latency(outcomes)}


def flipped(a: Mapping[str, float], b: Mapping[str, float], *, threshold: float = 0.5) -> dict[str, list[str]]:
    """Cases whose solve rate crossed ``threshold`` between run A and run B (per-case solve rates by case id,
    on the cases both ran): ``regressions`` were solved in A and not in B, ``fixes`` the other way."""
    common = sorted(set(a) & set(b))
    return {"regressions": [c for c in common if a[c] >= threshold > b[c]],
            "fixes": [c for c in common if b[c] >= threshold > a[c]]}


def solve_rates(outcomes: Sequence[SampleOutcome]) -> dict[str, float]:
    return {case: sum(o.solved for o in os) / len(os) for case, os in _per_case(outcomes).items()}


def mean_or_none(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None
