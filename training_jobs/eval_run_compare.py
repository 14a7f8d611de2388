"""Evaluation runs side by side (reads): scores with their 95 % intervals and the deltas against the first
(baseline) run, the cases that flipped (regressions first), a robustness grid (eval set × perturbation level ×
model, from the results joined with the set's case rows) and the lineage of the runs' registered models
(base → HSA-SFT → distillation → RL beside the fixed-harness baseline) with each model's latest score on the same
set and harness. The compare page and its JSON API show these same numbers (:func:`comparison`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Avg, F, FloatField, IntegerField
from django.db.models.functions import Cast

from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_run_selectors import (FAULTS, IFEVAL_KEYS, LEVELS, RUN_RELATED, SCORE_KEYS, case_group,
                                              case_index, latest_run_for, run_summary)
from training_jobs.evals import charts, runner

COMPARE_MAX = 8
LATENCY_KEYS = (("p50_s", "Turn time P50", "s"), ("p95_s", "Turn time P95", "s"),
                ("under_15s", "Share under 15 s", "%"), ("ttft_p50_s", "TTFT P50", "s"),
                ("decode_tps_p50", "Decode tokens/s P50", "tok/s"))
LOWER_IS_BETTER = {"p50_s", "p95_s", "ttft_p50_s"}
HEAT_METRICS = ("accuracy", "effectiveness", "solved")
FLIPPED_SHOWN = 200


def _mean_of(field: str) -> Avg:
    """The mean of a result column per group (a boolean counts 1 / 0: PostgreSQL casts it through an integer)."""
    expr = Cast(field, IntegerField()) if field == "solved" else F(field)
    return Avg(expr, output_field=FloatField())


def compared_runs(run_ids: Sequence[str]) -> list[EvalRun]:
    """The runs in the order asked (the first is the baseline); EvalRun.DoesNotExist names a missing id."""
    runs = {str(r.pk): r for r in EvalRun.objects.select_related(*RUN_RELATED).filter(pk__in=list(run_ids))}
    missing = [i for i in run_ids if str(i) not in runs]
    if missing:
        raise EvalRun.DoesNotExist(f"no evaluation run {missing[0]}")
    return [runs[str(i)] for i in run_ids]


def run_label(run: EvalRun) -> str:
    """What the grid and the charts call a run: set version · harness version · model (or endpoint)."""
    v = run.eval_set_version
    harness = f" · {run.harness_version.harness.slug} v{run.harness_version.number}" if run.harness_version else ""
    model = run.model.name if run.model_id else run.endpoint.name
    return f"{v.eval_set.name} v{v.number}{harness} · {model}"


def _delta(value: float | None, base: float | None, scale: float) -> float | None:
    if value is None or base is None:
        return None
    return (value - base) * scale


def _apart(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two 95 % intervals do not overlap (a conservative sign that the difference is real)."""
    if not a or not b or None in (a.get("ci_low"), a.get("ci_high"), b.get("ci_low"), b.get("ci_high")):
        return False
    return a["ci_high"] < b["ci_low"] or b["ci_high"] < a["ci_low"]


def score_rows(runs: Sequence[EvalRun], summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per metric, one cell per run: mean, interval (fractions), delta against the first run in percentage
    points (latency: in its unit), whether it is better, and whether the intervals are apart."""
    rows: list[dict[str, Any]] = []
    base = summaries[0]
    for key, label in SCORE_KEYS:
        if not any(s.get(key) for s in summaries):
            continue
        cells = []
        for i, s in enumerate(summaries):
            score = s.get(key) or {}
            delta = _delta(score.get("mean"), (base.get(key) or {}).get("mean"), 100.0) if i else None
            cells.append({"mean": score.get("mean"), "ci_low": score.get("ci_low"), "ci_high": score.get("ci_high"),
                          "n": score.get("n"), "delta": delta, "better": None if not delta else delta > 0,
                          "apart": bool(i) and _apart(score, base.get(key))})
        rows.append({"key": key, "label": label, "kind": "score", "cells": cells})
    if any((s.get("ifeval") or {}).get("0") for s in summaries):
        for key, label in IFEVAL_KEYS:
            cells = []
            base_v = ((base.get("ifeval") or {}).get("0") or {}).get(key)
            for i, s in enumerate(summaries):
                value = ((s.get("ifeval") or {}).get("0") or {}).get(key)
                frac = value / 100.0 if value is not None else None
                delta = _delta(value, base_v, 1.0) if i else None
                cells.append({"mean": frac, "ci_low": None, "ci_high": None,
                              "n": ((s.get("ifeval") or {}).get("0") or {}).get("prompts"), "delta": delta,
                              "better": None if not delta else delta > 0, "apart": False})
            rows.append({"key": key, "label": label, "kind": "ifeval", "cells": cells})
    for key, label, unit in LATENCY_KEYS:
        values = [(s.get("latency") or {}).get(key) for s in summaries]
        if all(v is None for v in values):
            continue
        scale = 100.0 if unit == "%" else 1.0
        cells = []
        for i, v in enumerate(values):
            delta = _delta(v, values[0], scale) if i else None
            better = None if not delta else ((delta < 0) if key in LOWER_IS_BETTER else (delta > 0))
            cells.append({"mean": v, "delta": delta, "better": better})
        rows.append({"key": key, "label": label, "kind": "latency", "unit": unit, "cells": cells})
    return rows


def solve_rates(run: EvalRun) -> dict[str, float]:
    """Each case's share of solved samples in this run."""
    return {case_id: rate for case_id, rate in run.results.order_by().values("case_id")
            .annotate(rate=_mean_of("solved")).values_list("case_id", "rate")}


def flipped_cases(runs: Sequence[EvalRun], rates: Sequence[dict[str, float]]) -> list[dict[str, Any]]:
    """For each run after the first: the cases it lost against the baseline (regressions) and those it gained
    (fixes), on the cases both ran (runner.flipped: solve rate across one half)."""
    out = []
    base_run, base = runs[0], rates[0]
    for run, r in zip(runs[1:], rates[1:]):
        flips = runner.flipped(base, r)
        out.append({"run": run, "baseline": base_run, "common": len(set(base) & set(r)),
                    "regressions": [{"case_id": c, "a": base[c], "b": r[c]} for c in flips["regressions"]],
                    "fixes": [{"case_id": c, "a": base[c], "b": r[c]} for c in flips["fixes"]]})
    return out


def _group_order(group: str) -> tuple[int, str]:
    if group in LEVELS:
        return (LEVELS.index(group), group)
    if group.startswith("fault:") and group[6:] in FAULTS:
        return (len(LEVELS) + FAULTS.index(group[6:]), group)
    return (99, group)


def robustness(runs: Sequence[EvalRun], *, metric: str = "accuracy") -> dict[str, Any]:
    """The grid: one row per run (eval set × model), one column per perturbation level and tool fault its cases
    carry (T3) plus "all"; each cell the mean over those cases of the case's mean ``metric``, with the count.
    Cases with a tool fault count in their fault's column only, so "clean" is no perturbation and no fault."""
    metric = metric if metric in HEAT_METRICS else "accuracy"
    per_run: list[dict[str, tuple[float, int]]] = []
    groups: set[str] = set()
    indexes: dict[int, dict[str, Any]] = {}
    for run in runs:
        version = run.eval_set_version
        index = indexes.setdefault(version.pk, case_index(version))
        sums: dict[str, list[float]] = {}
        for case_id, value in (run.results.order_by().values("case_id").annotate(v=_mean_of(metric))
                               .values_list("case_id", "v")):
            group = case_group(index.get(case_id))
            sums.setdefault("all", []).append(float(value))
            if group:
                sums.setdefault(group, []).append(float(value))
                groups.add(group)
        per_run.append({g: (sum(v) / len(v), len(v)) for g, v in sums.items()})
    columns = ["all", *sorted(groups, key=_group_order)]
    cells = {(ri, ci): row[col] for ri, row in enumerate(per_run) for ci, col in enumerate(columns) if col in row}
    rows = [f"{r.name} — {run_label(r)}" for r in runs]
    return {"metric": metric, "columns": columns, "rows": rows, "has_levels": bool(groups),
            "chart": charts.heatmap(rows, [c.replace("fault:", "fault ") for c in columns], cells),
            "cells": [[({"value": row[c][0], "n": row[c][1]} if c in row else None) for c in columns]
                      for row in per_run]}


def _figure(run: EvalRun | None) -> dict[str, Any] | None:
    """A run's headline score for the lineage: accuracy with its interval (T4: prompt-level strict)."""
    if run is None:
        return None
    s = run.summary or {}
    if run.eval_set_version.eval_set.kind == "t4":
        value = ((s.get("ifeval") or {}).get("0") or {}).get("prompt_strict")
        return {"metric": "prompt-level strict", "mean": value / 100.0 if value is not None else None,
                "ci_low": None, "ci_high": None}
    acc = s.get("accuracy") or {}
    return {"metric": "accuracy", "mean": acc.get("mean"), "ci_low": acc.get("ci_low"), "ci_high": acc.get("ci_high")}


def lineage(runs: Sequence[EvalRun]) -> list[dict[str, Any]]:
    """Per (set version, harness version) of the runs that name a registered model: the models of their lineages
    in training order (base → HSA-SFT → distillation → RL), and beside them each base's fixed-harness SFT
    baselines, each with its latest succeeded run on that set and harness and that run's headline score."""
    from training_jobs.models import TrainedModel

    groups: dict[tuple[int, Any], dict[str, Any]] = {}
    for run in runs:
        if run.model is None:
            continue
        key = (run.eval_set_version_id, run.harness_version_id)
        g = groups.setdefault(key, {"set_version": run.eval_set_version, "harness_version": run.harness_version,
                                    "models": []})
        for m in run.model.lineage():
            if m.pk not in {x.pk for x in g["models"]}:
                g["models"].append(m)
    out = []
    for g in groups.values():
        chain = [m for m in g["models"] if m.kind != TrainedModel.Kind.BASELINE_SFT]
        bases = [m.pk for m in chain if m.kind == TrainedModel.Kind.BASE]
        baselines = [m for m in g["models"] if m.kind == TrainedModel.Kind.BASELINE_SFT]
        baselines += [m for m in TrainedModel.objects.filter(kind=TrainedModel.Kind.BASELINE_SFT, parent_id__in=bases)
                      .order_by("created_at") if m.pk not in {b.pk for b in baselines}]

        def step(m):
            run = latest_run_for(m, g["set_version"], g["harness_version"])
            return {"model": m, "run": run, "figure": _figure(run)}

        steps, beside = [step(m) for m in chain], [step(m) for m in baselines]
        bars = [charts.BarGroup(label=s["model"].get_kind_display(), bars=[charts.Bar(
            label=s["model"].name, value=s["figure"]["mean"], low=s["figure"]["ci_low"], high=s["figure"]["ci_high"],
            series=i, text=_pct(s["figure"]["mean"]))]) for i, s in enumerate(steps + beside) if s["figure"]]
        out.append({"set_version": g["set_version"], "harness_version": g["harness_version"], "steps": steps,
                    "baselines": beside, "chart": charts.bar_chart(bars, width=max(320, 110 * len(bars)))
                    if bars else None})
    return out


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def score_chart(runs: Sequence[EvalRun], rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Bars of the score rows (fractions), one colour per run, with their intervals."""
    groups = []
    for row in rows:
        if row["kind"] not in ("score", "ifeval"):
            continue
        groups.append(charts.BarGroup(label=row["label"].split(" (")[0], bars=[
            charts.Bar(label=run.name, value=c["mean"], low=c.get("ci_low"), high=c.get("ci_high"), series=i % 6,
                       text=_pct(c["mean"])) for i, (run, c) in enumerate(zip(runs, row["cells"]))]))
    return charts.bar_chart(groups, width=max(480, 70 * len(groups) * max(2, len(runs)))) if groups else None


def comparison(runs: Sequence[EvalRun], *, metric: str = "accuracy") -> dict[str, Any]:
    """Everything the compare page shows, for 2 to COMPARE_MAX runs (the first is the baseline)."""
    summaries = [run_summary(r) for r in runs]
    rows = score_rows(runs, summaries)
    rates = [solve_rates(r) for r in runs]
    return {"runs": runs, "labels": [run_label(r) for r in runs], "summaries": summaries, "rows": rows,
            "chart": score_chart(runs, rows), "flipped": flipped_cases(runs, rates),
            "robustness": robustness(runs, metric=metric), "lineage": lineage(runs)}
