"""Curves of a training run (pure functions, no ORM): the progress points of a job merged across its resumes,
the server-drawn SVG (axes with ticks and gridlines: what a page shows without script), the JSON the interactive
charts draw (static/training_jobs/charts.js), the latest numbers, and a model's final metrics as labelled rows.

A job's points (``TrainingJob.metrics``) are appended by every run of the job (console.jobs: a resume queues the
same row again). A resumed run starts again at its checkpoint's step, so a step lower than the one before marks a
new segment; :func:`run_points` merges the segments by step, the later segment winning from its first step on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CURVE_WIDTH, CURVE_HEIGHT = 480, 180
CURVE_PAD = (58, 12, 10, 24)  # left (y labels), right, top, bottom (x labels) in SVG units
SERIES_COLOURS = 6  # training.css .series-0 … .series-5 (charts.js uses the same palette)
DASHES = 4  # 0 = solid; 1 … 3: the dash patterns an overlapping line gets (training.css .dash-n, charts.js)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _short(value: float) -> str:
    return f"{value:.3g}" if value and (abs(value) < 1e-3 or abs(value) >= 1e5) else f"{value:.4g}"


# --- one run across its resumes ---------------------------------------------------------------------------------


def run_segments(points: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The stored points cut into the runs that wrote them, oldest first: a step lower than the previous point's
    starts a new segment (a resumed run restarts at its checkpoint). Points without a finite step are left out."""
    segments: list[list[Mapping[str, Any]]] = []
    previous = None
    for p in points:
        step = p.get("step")
        if not _finite(step):
            continue
        if previous is None or step < previous:
            segments.append([])
        segments[-1].append(p)
        previous = step
    return segments


def run_points(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One point per step for the whole run, in step order, each with ``segment`` (0 for the first run, 1 after
    the first resume, …). A later segment replaces what earlier ones logged from its first step on (those steps
    were trained again from the checkpoint); points of one step within a segment are merged, later keys winning
    (a logged step and the trainer's summary point)."""
    merged: dict[float, dict[str, Any]] = {}
    for number, segment in enumerate(run_segments(points)):
        start = segment[0]["step"]
        for step in [s for s in merged if s >= start]:
            del merged[step]
        for p in segment:
            merged.setdefault(float(p["step"]), {}).update(p)
            merged[float(p["step"])]["segment"] = number
    return [merged[s] for s in sorted(merged)]


def resumed_at(points: Sequence[Mapping[str, Any]]) -> list[float]:
    """The steps the later segments of a run started from (where a chart marks "resumed"): of stored points, or
    of merged ones (:func:`run_points`: where ``segment`` changes)."""
    if points and "segment" in points[0]:
        return [b["step"] for a, b in zip(points, points[1:]) if b.get("segment") != a.get("segment")]
    return [seg[0]["step"] for seg in run_segments(points)[1:]]


# --- the SVG (no script) ----------------------------------------------------------------------------------------


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values between ``lo`` and ``hi`` (1, 2 or 5 times a power of ten apart), about ``count`` of them."""
    if not (_finite(lo) and _finite(hi)) or hi <= lo:
        return [lo] if _finite(lo) else []
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * 0.7)  # the nearest round step
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [round(i * step, 12) + 0.0 for i in range(first, last + 1)]  # + 0.0: no "-0"


@dataclass(frozen=True)
class Curve:
    """One metric against the step, in SVG coordinates (y grows downwards), ready for ``<polyline points>``,
    with the ticks of its box (``(position, label)``; y ticks at a y position, x ticks at an x position)."""

    key: str
    points: str  # "x,y x,y ..."
    count: int
    last_x: float
    last_y: float
    last_value: float
    x_max: int
    y_min: float
    y_max: float
    width: int = CURVE_WIDTH
    height: int = CURVE_HEIGHT
    left: int = CURVE_PAD[0]
    right: int = CURVE_WIDTH - CURVE_PAD[1]
    top: int = CURVE_PAD[2]
    bottom: int = CURVE_HEIGHT - CURVE_PAD[3]
    y_ticks: tuple[tuple[float, str], ...] = ()
    x_ticks: tuple[tuple[float, str], ...] = ()

    @property
    def y_min_label(self) -> str:
        return _short(self.y_min)

    @property
    def y_max_label(self) -> str:
        return _short(self.y_max)

    @property
    def last_label(self) -> str:
        return _short(self.last_value)


def metric_curve(points: Sequence[Mapping[str, Any]], key: str, *, x_max: int = 0, width: int = CURVE_WIDTH,
                 height: int = CURVE_HEIGHT, pad: tuple[int, int, int, int] = CURVE_PAD,
                 y_range: tuple[float, float] | None = None) -> Curve | None:
    """The ``key`` values of progress points (``{"step": 3, "loss": 1.2, ...}``) as a curve in a ``width`` ×
    ``height`` box: x from step 0 to ``max(x_max, last step)`` (pass the schedule's length so a live curve grows
    across the box), y from the smallest to the largest value (a flat line sits in the middle, or on the floor at
    0), or over ``y_range`` (curves drawn in one box share it). Points without a finite number for ``key`` are
    skipped (the trainer's summary point has no ``loss``); when a step appears twice the later point wins (a
    resumed job re-runs the steps after its last checkpoint). None without any point."""
    by_step: dict[float, float] = {}
    for p in points:
        step, value = p.get("step"), p.get(key)
        if _finite(step) and _finite(value):
            by_step[float(step)] = float(value)
    if not by_step:
        return None
    steps = sorted(by_step)
    values = [by_step[s] for s in steps]
    x_hi = max(steps[-1], float(x_max or 0), 1.0)
    lo, hi = y_range or (min(values), max(values))
    if hi == lo:  # a flat line: a band around it, never below 0 for a metric that is not (a learning rate of 0)
        spread = abs(lo) * 0.1 or 1.0
        lo, hi = (max(lo - spread, 0.0) if lo >= 0 else lo - spread), hi + spread
    left, right, top, bottom = pad[0], width - pad[1], pad[2], height - pad[3]

    def x_of(step: float) -> float:
        return round(left + (step / x_hi) * (right - left), 1)

    def y_of(value: float) -> float:
        return round(top + (1 - (value - lo) / (hi - lo)) * (bottom - top), 1)

    coords = [(x_of(s), y_of(v)) for s, v in zip(steps, values)]
    y_ticks = tuple((y_of(v), _short(v)) for v in nice_ticks(lo, hi, 4))
    x_ticks = tuple((x_of(s), f"{s:g}") for s in nice_ticks(0.0, x_hi, 5) if s == int(s))
    return Curve(key=key, points=" ".join(f"{x:g},{y:g}" for x, y in coords), count=len(coords),
                 last_x=coords[-1][0], last_y=coords[-1][1], last_value=values[-1], x_max=int(math.ceil(x_hi)),
                 y_min=lo, y_max=hi, width=width, height=height, left=left, right=right, top=top, bottom=bottom,
                 y_ticks=y_ticks, x_ticks=x_ticks)


def overlaid_curves(series: Sequence[Sequence[Mapping[str, Any]]], key: str, *, x_max: int = 0
                    ) -> list[Curve | None]:
    """One curve per series of progress points, all on the same axes (x to the longest schedule, y over every
    series' values) so they can be drawn in one box and compared; None for a series without a ``key`` value."""
    values = [float(p[key]) for points in series for p in points if _finite(p.get(key)) and _finite(p.get("step"))]
    if not values:
        return [None for _ in series]
    x_hi = max([x_max, *(int(p["step"]) for points in series for p in points if _finite(p.get("step")))])
    return [metric_curve(points, key, x_max=x_hi, y_range=(min(values), max(values))) for points in series]


# --- the interactive chart's data ----------------------------------------------------------------------------------


def _values(points: Sequence[Mapping[str, Any]], key: str) -> dict[float, float]:
    return {float(p["step"]): float(p[key]) for p in points if _finite(p.get("step")) and _finite(p.get(key))}


def _same_line(a: Mapping[float, float], b: Mapping[float, float]) -> bool:
    """Whether two lines would hide each other: the same values (to 1e-9, relative) on every step they share,
    and they share most of the shorter one's steps."""
    shared = a.keys() & b.keys()
    if not shared or len(shared) * 2 < min(len(a), len(b)):
        return False
    return all(math.isclose(a[s], b[s], rel_tol=1e-9, abs_tol=1e-12) for s in shared)


def chart(key: str, title: str, runs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], *, x_max: int = 0,
          testid: str = "") -> dict[str, Any] | None:
    """One metric of one or more runs on shared axes: the SVG curves (``series[i]["curve"]``) and the JSON the
    interactive chart draws (``data``). ``runs``: ``(name, points)``, points as :func:`run_points` gives them.
    Each run keeps its colour (``n``, its position in ``runs``); a run whose line would hide under an earlier
    one's (two runs with the same seed) gets a dash pattern (``dash`` 1…3) and ``same_as`` that run's name.
    ``log`` says whether a log scale is possible (every value above 0). None when no run has a ``key`` value."""
    curves = overlaid_curves([points for _, points in runs], key, x_max=x_max) if len(runs) > 1 else \
        [metric_curve(runs[0][1], key, x_max=x_max)] if runs else []
    lines = [_values(points, key) for _, points in runs]
    series: list[dict[str, Any]] = []
    for n, ((name, points), curve) in enumerate(zip(runs, curves)):
        if curve is None:
            continue
        same = [s for s in series if _same_line(lines[s["n"]], lines[n])]
        series.append({"n": n, "colour": n % SERIES_COLOURS, "name": name, "curve": curve,
                       "dash": min(len(same), DASHES - 1), "same_as": same[0]["name"] if same else "",
                       "resumed_at": resumed_at(points)})
    if not series:
        return None
    frame = series[0]["curve"]
    data = {"key": key, "title": title, "x_max": frame.x_max,
            "log": all(v > 0 for s in series for v in lines[s["n"]].values()),
            "series": [{"name": s["name"], "colour": s["colour"], "dash": s["dash"], "same_as": s["same_as"],
                        "resumed_at": s["resumed_at"], "steps": sorted(lines[s["n"]]),
                        "values": [lines[s["n"]][k] for k in sorted(lines[s["n"]])]} for s in series]}
    return {"key": key, "title": title, "testid": testid or f"chart-{key}", "frame": frame, "series": series,
            "data": data, "log": data["log"]}


# --- the numbers ----------------------------------------------------------------------------------------------------

LATEST_NUMBERS = (  # key, label, format
    ("loss", "Loss", "{:.4f}"),
    ("learning_rate", "Learning rate", "{:.3g}"),
    ("grad_norm", "Gradient norm", "{:.3f}"),
    ("tokens_per_s", "Tokens/s", "{:,.0f}"),
    ("samples_per_s", "Samples/s", "{:.2f}"),
)


REWARD_CURVES = (("reward", "Reward (combined)"), ("rewards/accuracy/mean", "Accuracy"),
                 ("rewards/effectiveness/mean", "Effectiveness"), ("rewards/tool_rationality/mean", "Tool rationality"),
                 ("rewards/skill_selection/mean", "Skill selection"))


def reward_curves(points: Sequence[Mapping[str, Any]], *, x_max: int = 0, name: str = "") -> list[dict[str, Any]]:
    """The RL stage's reward curves (the combined reward and each of the four, as GRPO logs them), for the
    ones that have points: ``[{"key", "title", "curve", "testid", "chart"}]``."""
    out = []
    for key, title in REWARD_CURVES:
        curve = metric_curve(points, key, x_max=x_max)
        if curve is not None:
            testid = "reward-curve-" + key.split("/")[1 if "/" in key else 0]
            out.append({"key": key, "title": title, "curve": curve, "testid": testid,
                        "chart": chart(key, title, [(name or title, points)], x_max=x_max, testid=testid)})
    return out


def latest_numbers(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The latest value of each headline metric (each from the last point that has it: the trainer's final
    summary point has no loss), as ``{"key", "label", "value", "text", "step"}``; metrics never reported are
    left out."""
    out = []
    for key, label, fmt in LATEST_NUMBERS:
        point = next((p for p in reversed(points) if _finite(p.get(key))), None)
        if point is not None:
            out.append({"key": key, "label": label, "value": point[key], "text": fmt.format(point[key]),
                        "step": point.get("step")})
    return out


def duration_text(seconds: float | None) -> str:
    """``95`` → ``"1 min 35 s"``; ``""`` for None."""
    if not _finite(seconds):
        return ""
    s = max(0, int(round(seconds)))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


# --- a model's metrics as labelled rows ---------------------------------------------------------------------------

# what a stage writes (training_jobs.hat.stage): key → (label, how it is shown); the trainer's figures cover the
# run that finished the stage only, so a resumed stage shows them as "last run" beside the whole run's
MODEL_METRICS = {
    "final_loss": ("Final loss", "{:.4f}"),
    "train_loss": ("Mean training loss", "{:.4f}"),
    "steps_this_run": ("Steps", "{:,.0f}"),
    "wall_s": ("Training time", "duration"),
    "samples_per_s": ("Throughput", "{:.2f} samples/s"),
}
LAST_RUN_ONLY = {"train_loss", "steps_this_run", "wall_s", "samples_per_s"}
MODEL_TABLES = {"heldout": "Held-out turns by harness (shares of the cases)", "t4": "IFEval (T4)",
                "t1": "T1 tool use"}


def _humanised(key: str) -> str:
    text = key.replace("/", " ").replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def _shown(value: Any, fmt: str = "") -> str:
    if _finite(value):
        if fmt == "duration":
            return duration_text(value)
        if fmt:
            return fmt.format(value)
        return f"{value:,}" if isinstance(value, int) else _short(float(value))
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_shown(v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{_humanised(str(k))} {_shown(v)}" for k, v in value.items())
    return str(value)


def stage_points(points: Sequence[Mapping[str, Any]], stage: str) -> list[Mapping[str, Any]]:
    """The stored points of one stage of a job (all of them when the points name no stage: a one-stage job)."""
    if not any(p.get("stage") for p in points):
        return list(points)
    return [p for p in points if p.get("stage") == stage]


def _is_estimate(value: Any) -> bool:
    """A measured share with its 95 % interval (``{"mean", "ci_low", "ci_high", "n"}``, as the eval sets write)."""
    return isinstance(value, Mapping) and {"mean", "ci_low", "ci_high"} <= set(value)


def _is_score_set(value: Any) -> bool:
    """One eval set's scores (e.g. a base model's measured T1/T4): estimates beside counts (n, of, k)."""
    return isinstance(value, Mapping) and any(_is_estimate(v) for v in value.values())


def _is_table(value: Any) -> bool:
    """A metric that is one set of figures per group (per harness, per eval set), or one eval set's scores with
    their intervals: a table, not a row."""
    if _is_score_set(value):
        return True
    return isinstance(value, Mapping) and bool(value) and all(isinstance(v, Mapping) for v in value.values())


def _percent(value: Any) -> str:
    return f"{100 * value:.1f} %" if _finite(value) else "—"


def _interval(estimate: Mapping[str, Any]) -> str:
    low, high = estimate.get("ci_low"), estimate.get("ci_high")
    if not (_finite(low) and _finite(high)):
        return "—"  # an empty estimate (pass^k of a set with no complete case)
    return f"[{100 * low:.1f}, {100 * high:.1f} %]"


def _score_table(key: str, scores: Mapping[str, Any]) -> dict[str, Any]:
    """One eval set's scores as a table: a row per estimate (score, 95 % interval, cases); the set's counts (cases
    of how many, k samples) go in the label."""
    label = MODEL_TABLES.get(key) or _humanised(key)
    n, of, k = scores.get("n"), scores.get("of"), scores.get("k")
    if _finite(n):
        label += f": {n:,} of {of:,} cases" if _finite(of) else f": {n:,} cases"
        label += f", k = {k}" if _finite(k) else ""
    rows = [{"key": f, "label": _humanised(f),
             "cells": [_percent(e["mean"]), _interval(e), _shown(e.get("n"))]}
            for f, e in scores.items() if _is_estimate(e)]
    return {"key": key, "label": label, "columns": ["score", "95 % interval", "cases"], "rows": rows}


def model_metric_rows(metrics: Mapping[str, Any] | None, points: Sequence[Mapping[str, Any]] = ()
                      ) -> list[dict[str, Any]]:
    """A model's final metrics (``TrainedModel.metrics``) as ``{"key", "label", "text", "note", "num"}`` rows, with
    units and rounding, the known ones first (``num``: a figure, kept on one line; text wraps). ``points``: the
    stored progress points of the stage that made it; when the stage was resumed, the trainer's figures are marked
    "last run only" and the whole run's come first (the steps it reached, its runs, its final and mean logged loss).
    Per-group figures are left to :func:`model_metric_tables`."""
    metrics = {k: v for k, v in (metrics or {}).items() if not _is_table(v)}
    rows: list[dict[str, Any]] = []
    runs = len(run_segments(points)) if points else 0
    merged = run_points(points) if points else []
    if runs > 1:
        losses = [p["loss"] for p in merged if _finite(p.get("loss"))]
        last_step = max((p.get("stage_step", p["step"]) for p in merged), default=None)
        resumes = resumed_at(merged)
        rows.append({"key": "runs", "label": "Runs", "text": f"{runs}",
                     "note": "resumed at step " + ", ".join(f"{s:g}" for s in resumes) if resumes else ""})
        if _finite(last_step):
            rows.append({"key": "steps", "label": "Steps (whole run)", "text": f"{last_step:,.0f}", "note": ""})
        if losses and "final_loss" not in metrics:
            rows.append({"key": "run_final_loss", "label": "Final loss (whole run)", "text": f"{losses[-1]:.4f}",
                         "note": "the last logged step"})
        if losses:
            rows.append({"key": "run_mean_loss", "label": "Mean logged loss (whole run)",
                         "text": f"{sum(losses) / len(losses):.4f}", "note": f"over {len(losses)} logged steps"})
    for key, (label, fmt) in MODEL_METRICS.items():
        if key in metrics:
            last_only = runs > 1 and key in LAST_RUN_ONLY
            rows.append({"key": key, "label": label + (" (last run)" if last_only else ""),
                         "text": _shown(metrics.pop(key), fmt),
                         "note": "the trainer counts only the run that finished the stage" if last_only else ""})
    for row in rows:
        row["num"] = True  # the trainer's figures and the whole run's, all numbers
    for key in sorted(metrics):
        rows.append({"key": key, "label": _humanised(key), "text": _shown(metrics[key]), "note": "",
                     "num": _finite(metrics[key])})
    return rows


def model_metric_tables(metrics: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A model's per-group figures (a metric whose value maps each group, e.g. each harness, to its figures) as
    tables: ``{"key", "label", "columns": [group…], "rows": [{"key", "label", "cells": [text…]}]}``, one row per
    figure in the order first met, "—" where a group lacks it. One eval set's scores (a base model's measured T1/T4)
    are a table of their estimates: score, 95 % interval, cases."""
    tables = []
    for key, value in (metrics or {}).items():
        if _is_score_set(value):
            tables.append(_score_table(key, value))
            continue
        if not _is_table(value):
            continue
        columns = [str(group) for group in value]
        figures: list[str] = []
        for group_figures in value.values():
            figures += [f for f in group_figures if f not in figures]
        rows = [{"key": f, "label": _humanised(str(f)),
                 "cells": [_shown(value[g].get(f)) for g in value]} for f in figures]
        tables.append({"key": key, "label": MODEL_TABLES.get(key) or _humanised(key), "columns": columns,
                       "rows": rows})
    return tables
