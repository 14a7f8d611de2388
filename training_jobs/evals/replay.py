"""Latency replay: complete-agent turns of an eval set played against an endpoint at several concurrency levels.

Each turn is one harness case (T1–T3) played through the one turn engine (:func:`streams.engine.turn.run_turn`)
with the endpoint's stream measured by :class:`training_jobs.evals.runner.MeteredBackend` — the same turn and the
same meter an evaluation run uses, without the judging (a replay measures time, not quality). At concurrency
``c``, ``c`` threads each play turns one after another with their own chat client (independent viewers of
independent rooms), so ``c`` turns are in flight at once until the level's turns run out.

Every level plays the same turns in the same order (:func:`turn_order`: the set's cases shuffled with the seed,
cycled), turn ``i`` sent with seed ``seed + i``, so levels differ only in how many turns share the endpoint.

Per level (:func:`level_summary`): P50 / P95 of the whole turn, the share under 15 s, time to first token
(request → first streamed delta of the turn's first model call, as evaluation runs report it), decode tokens/s,
wall time, turns/s, the most turns seen in flight at once, fallbacks and errors; and a histogram of turn times on
bins shared by every level (:func:`replay_summary`). The report's figures (:data:`REFERENCE`) are shown beside
as the target.

Plain Python, no Django: the worker's service, ``manage.py latency_replay`` and the tests call it.
"""

from __future__ import annotations

import copy
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from training_jobs.evals.runner import UNDER_S, MeteredBackend, decode_tokens_per_s, percentile

DEFAULT_CONCURRENCY = (1, 4, 8, 16)
MAX_CONCURRENCY = 64
MAX_LEVELS = 8
HISTOGRAM_BINS = 12  # at most this many bins (a "nice" width: 0.1 s, 0.25 s, 0.5 s, 1 s, 2 s, ...)
NICE_WIDTHS = (0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0,
               120.0, 300.0, 600.0)

# What the report measured per reply on one H20 GPU with MTP speculative decoding: the figures a deployment
# aims at (shown beside every replay; not a pass/fail line).
REFERENCE = {"p50_s": 3.407, "p95_s": 8.114, "label": "HAT report: one H20 GPU, MTP speculative decoding"}


@dataclass
class TurnTiming:
    """One replayed turn as the clock saw it."""

    index: int  # the turn's place in the level (its case is turn_order()[index])
    case_id: str
    started_s: float  # since the level started
    turn_s: float
    ttft_s: float | None  # the turn's first model call: request sent → first delta
    decode_tps: float | None
    model_calls: int
    reason: str  # the turn's end reason (ok, deadline_exceeded, model_error, ...; "internal_error": it raised)
    fallback: bool
    error: str = ""

    @property
    def ended_s(self) -> float:
        return self.started_s + self.turn_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def turn_order(case_count: int, turns: int, seed: int) -> list[int]:
    """Which case each of ``turns`` turns plays: the cases shuffled with ``seed``, then shuffled again each time
    they run out (every case once before any twice)."""
    if case_count <= 0:
        return []
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < turns:
        cycle = list(range(case_count))
        rng.shuffle(cycle)
        order += cycle
    return order[:turns]


def play_turn(case: Any, index: int, *, manifest: Any, backend: Any, sampling: Mapping[str, Any] | None = None,
              seed: int | None = None, deadline_s: float | None = None, level_t0: float = 0.0,
              tools: Any = None) -> TurnTiming:
    """Play one case once through the turn engine and time it. Never raises: an exception is a timing with
    ``error`` (counted apart, left out of the percentiles)."""
    from streams.engine.faults import ToolFault
    from streams.engine.turn import run_turn

    metered = MeteredBackend(backend)
    params = dict(sampling or {})
    if seed is not None:
        params["seed"] = seed
    t0 = time.perf_counter()
    try:
        faults = {key: ToolFault.model_validate(value if isinstance(value, Mapping) else {"kind": value})
                  for key, value in (getattr(case, "tool_faults", None) or {}).items()}
        result = run_turn(manifest=manifest, room=copy.deepcopy(dict(case.room)),
                          comments=[dict(c) for c in case.comments], backend=metered, faults=faults,
                          sampling=params, deadline_s=deadline_s, tools=tools)
    except Exception as exc:  # an engine bug or a bad case: this turn is an error, the replay goes on
        calls = metered.take()
        return TurnTiming(index=index, case_id=case.id, started_s=t0 - level_t0, turn_s=time.perf_counter() - t0,
                          ttft_s=None, decode_tps=None, model_calls=len(calls), reason="internal_error",
                          fallback=True, error=f"{type(exc).__name__}: {exc}"[:500])
    turn_s = time.perf_counter() - t0
    calls = metered.take()
    return TurnTiming(index=index, case_id=case.id, started_s=t0 - level_t0, turn_s=turn_s,
                      ttft_s=next((c.ttft_s for c in calls if c.ttft_s is not None), None),
                      decode_tps=decode_tokens_per_s(calls), model_calls=len(calls), reason=result.reason,
                      fallback=result.fallback)


@dataclass
class LevelRun:
    concurrency: int
    planned: int
    timings: list[TurnTiming]
    wall_s: float
    stopped: bool  # asked to stop before every planned turn was played


def run_level(turns: Sequence[tuple[Any, Any]], *, concurrency: int, make_backend: Callable[[], Any],
              sampling: Mapping[str, Any] | None = None, seed: int = 0, deadline_s: float | None = None,
              should_stop: Callable[[], bool] | None = None,
              on_progress: Callable[[int, int], None] | None = None, poll_s: float = 0.1,
              tools: Any = None) -> LevelRun:
    """Play ``turns`` (``(case, manifest)`` in order; turn ``i`` with seed ``seed + i``) with ``concurrency``
    threads, each with its own backend from ``make_backend`` (closed at the end when it has ``close``).

    ``should_stop`` and ``on_progress(done, planned)`` are called from the calling thread only (every
    ``poll_s`` and when a turn ends), so they may use its database connection; the threads touch nothing but
    the endpoint. A stop is honoured between turns: turns in flight finish, none starts after it."""
    planned = len(turns)
    timings: list[TurnTiming] = []
    lock = threading.Lock()
    next_index = [0]
    stop = threading.Event()
    changed = threading.Event()
    failures: list[BaseException] = []
    t0 = time.perf_counter()

    def worker() -> None:
        backend = None
        try:
            backend = make_backend()
            while not stop.is_set():
                with lock:
                    i = next_index[0]
                    if i >= planned:
                        return
                    next_index[0] = i + 1
                case, manifest = turns[i]
                timing = play_turn(case, i, manifest=manifest, backend=backend, sampling=sampling, seed=seed + i,
                                   deadline_s=deadline_s, level_t0=t0, tools=tools)
                with lock:
                    timings.append(timing)
                changed.set()
        except BaseException as exc:  # make_backend failed (the endpoint config): the level stops
            failures.append(exc)
            stop.set()
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()
            changed.set()

    threads = [threading.Thread(target=worker, name=f"latency-replay-{concurrency}-{n}", daemon=True)
               for n in range(max(1, min(concurrency, planned or 1)))]
    try:
        for t in threads:
            t.start()
        reported = -1
        while any(t.is_alive() for t in threads):
            changed.wait(poll_s)
            changed.clear()
            with lock:
                done = len(timings)
            if on_progress is not None and done != reported:
                on_progress(done, planned)
                reported = done
            if not stop.is_set() and should_stop is not None and should_stop():
                stop.set()
    finally:
        stop.set()  # an exception here (a soft time limit): no new turn starts; those in flight end on their own
        for t in threads:
            t.join(timeout=1.0 if failures else None)
    if failures:
        raise failures[0]
    wall_s = time.perf_counter() - t0
    timings.sort(key=lambda t: t.index)
    if on_progress is not None:
        on_progress(len(timings), planned)
    return LevelRun(concurrency=concurrency, planned=planned, timings=timings, wall_s=wall_s,
                    stopped=len(timings) < planned)


def in_flight_max(timings: Sequence[TurnTiming]) -> int:
    """The most turns that were running at the same moment."""
    edges = sorted([(t.started_s, 1) for t in timings] + [(t.ended_s, -1) for t in timings],
                   key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def level_summary(level: LevelRun) -> dict[str, Any]:
    """A level's figures as stored and shown (seconds; ``turn_s`` keeps every timed turn for the histogram)."""
    ok = [t for t in level.timings if not t.error]
    turns = [t.turn_s for t in ok]
    ttft = [t.ttft_s for t in ok if t.ttft_s is not None]
    tps = [t.decode_tps for t in ok if t.decode_tps is not None]
    reasons: dict[str, int] = {}
    for t in level.timings:
        reasons[t.reason] = reasons.get(t.reason, 0) + 1
    return {
        "concurrency": level.concurrency, "planned": level.planned, "turns": len(turns),
        "complete": not level.stopped,
        "p50_s": _round(percentile(turns, 50)), "p95_s": _round(percentile(turns, 95)),
        "under_15s": _round(sum(t < UNDER_S for t in turns) / len(turns)) if turns else None,
        "ttft_p50_s": _round(percentile(ttft, 50)), "ttft_p95_s": _round(percentile(ttft, 95)),
        "decode_tps_p50": _round(percentile(tps, 50), 2),
        "wall_s": _round(level.wall_s, 3),
        "turns_per_s": _round(len(level.timings) / level.wall_s, 3) if level.wall_s > 0 else None,
        "in_flight_max": in_flight_max(level.timings),
        "model_calls_p50": _round(percentile([float(t.model_calls) for t in ok], 50), 1),
        "fallbacks": sum(t.fallback for t in level.timings if not t.error),
        "errors": sum(bool(t.error) for t in level.timings),
        "first_error": next((t.error for t in level.timings if t.error), ""),
        "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "turn_s": [round(t, 4) for t in turns],
    }


# --- the histogram ----------------------------------------------------------------------------------------------


def histogram_edges(values: Sequence[float], bins: int = HISTOGRAM_BINS) -> list[float]:
    """Bin edges from 0 with the smallest "nice" width that covers ``values`` in at most ``bins`` bins."""
    top = max((v for v in values if v is not None and math.isfinite(v)), default=0.0)
    if top <= 0:
        return [0.0, NICE_WIDTHS[0]]
    width = next((w for w in NICE_WIDTHS if math.ceil(top / w - 1e-9) <= bins), None)
    if width is None:
        width = math.ceil(top / bins)
    count = max(1, math.ceil(top / width - 1e-9))
    if count * width < top:  # float rounding: the last edge must hold the largest value
        count += 1
    return [round(i * width, 6) for i in range(count + 1)]


def histogram(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Counts per bin [edge_i, edge_i+1); the last bin also holds its upper edge (and anything beyond)."""
    counts = [0] * (len(edges) - 1)
    if not counts:
        return counts
    for v in values:
        if v is None or not math.isfinite(v):
            continue
        i = 0
        while i < len(counts) - 1 and v >= edges[i + 1]:
            i += 1
        counts[i] += 1
    return counts


def replay_summary(levels: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stored summary of a replay from its level summaries: histograms recomputed on bins shared by every
    level (so the levels compare at a glance), the reference figures beside."""
    out = [dict(level) for level in levels]
    edges = histogram_edges([t for level in out for t in level.get("turn_s") or []])
    for level in out:
        level["histogram"] = histogram(level.get("turn_s") or [], edges)
    return {"levels": out, "histogram_edges": edges, "reference": dict(REFERENCE), "under_s": UNDER_S}


def ascii_histogram(edges: Sequence[float], counts: Sequence[int], *, width: int = 40) -> list[str]:
    """The histogram as text lines: ``  0.50–1.00 s | ######   12``."""
    most = max(counts, default=0) or 1
    digits = 2 if any(e != round(e, 1) for e in edges) else 1
    lines = []
    for i, n in enumerate(counts):
        label = f"{edges[i]:.{digits}f}–{edges[i + 1]:.{digits}f} s"
        lines.append(f"  {label:>14} | {'#' * math.ceil(width * n / most) if n else '':<{width}} {n:>5}")
    return lines


def histogram_chart(edges: Sequence[float], counts: Sequence[int], *,
                    markers: Sequence[tuple[str, float, str]] = (), width: int = 420, height: int = 170,
                    max_count: int | None = None) -> dict[str, Any]:
    """The geometry of a histogram drawn as inline SVG: one bar per bin on a seconds axis from ``edges[0]`` to
    ``edges[-1]``, count ticks, x labels at no more than 7 edges, and ``markers`` (``(label, seconds, kind)``:
    P50, P95, 15 s, the reference) as vertical lines where they fall on the axis (those beyond it are returned
    in ``beyond``). ``max_count``: the y scale (shared by the levels of a replay)."""
    left, right, top, bottom = 34, width - 10, 14, height - 30
    span = (edges[-1] - edges[0]) if len(edges) > 1 else 1.0
    most = max(max_count or 0, max(counts, default=0), 1)

    def x_of(seconds: float) -> float:
        return round(left + (right - left) * (seconds - edges[0]) / span, 2)

    def y_of(count: float) -> float:
        return round(bottom - (bottom - top) * count / most, 2)

    bars = []
    for i, n in enumerate(counts):
        x0, x1 = x_of(edges[i]), x_of(edges[i + 1])
        bars.append({"x": x0 + 0.5, "w": max(0.5, round(x1 - x0 - 1, 2)), "y": y_of(n),
                     "h": round(bottom - y_of(n), 2), "count": n,
                     "label": f"{edges[i]:g}–{edges[i + 1]:g} s: {n} turn{'s' if n != 1 else ''}"})
    step = max(1, math.ceil((len(edges) - 1) / 6))
    x_ticks = [{"x": x_of(e), "text": f"{e:g}"} for e in edges[::step]]
    if edges[-1] not in edges[::step]:
        x_ticks.append({"x": x_of(edges[-1]), "text": f"{edges[-1]:g}"})
    shown, beyond = [], []
    for label, seconds, kind in markers:
        if seconds is None or not math.isfinite(seconds):
            continue
        if edges[0] <= seconds <= edges[-1]:
            shown.append({"x": x_of(seconds), "label": label, "kind": kind, "seconds": seconds})
        else:
            beyond.append({"label": label, "kind": kind, "seconds": seconds})
    return {"width": width, "height": height, "left": left, "right": right, "top": top, "bottom": bottom,
            "bars": bars, "x_ticks": x_ticks, "y_max": most, "y_max_at": y_of(most), "markers": shown,
            "beyond": beyond, "label_y": bottom + 16, "unit_y": height - 2}
