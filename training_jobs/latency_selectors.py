"""Latency replays (reads): the list and one replay, and what their pages draw."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from training_jobs.evals.replay import REFERENCE, histogram_chart
from training_jobs.latency_models import LatencyReplay


def latency_replay_list() -> QuerySet[LatencyReplay]:
    return LatencyReplay.objects.select_related("eval_set_version__eval_set", "harness_version__harness", "endpoint",
                                                "created_by").order_by("-created_at")


def latency_replay_get(*, replay_id) -> LatencyReplay:
    return latency_replay_list().get(pk=replay_id)


def level_rows(replay: LatencyReplay) -> list[dict[str, Any]]:
    """The table's rows: each level with its P50 / P95 against the reference's (a ratio: 1.0 = the report's)."""
    ref = (replay.summary or {}).get("reference") or REFERENCE
    rows = []
    for level in replay.levels:
        p50, p95 = level.get("p50_s"), level.get("p95_s")
        rows.append({**level, "p50_vs_ref": p50 / ref["p50_s"] if p50 is not None else None,
                     "p95_vs_ref": p95 / ref["p95_s"] if p95 is not None else None,
                     "under_pct": 100 * level["under_15s"] if level.get("under_15s") is not None else None})
    return rows


def level_charts(replay: LatencyReplay) -> list[dict[str, Any]]:
    """One histogram per level on the replay's shared bins and count scale, with the level's P50 / P95, the 15 s
    line and the reference figures marked where they fall on the axis."""
    summary = replay.summary or {}
    edges = summary.get("histogram_edges") or []
    if len(edges) < 2:
        return []
    ref = summary.get("reference") or REFERENCE
    most = max((max(lv.get("histogram") or [0]) for lv in replay.levels), default=0)
    charts = []
    for level in replay.levels:
        markers = [("P50", level.get("p50_s"), "p50"), ("P95", level.get("p95_s"), "p95"),
                   (f"the {summary.get('under_s', 15):g} s budget", float(summary.get("under_s", 15)), "limit"),
                   ("reference P50", ref["p50_s"], "ref"), ("reference P95", ref["p95_s"], "ref")]
        charts.append({"level": level, "chart": histogram_chart(edges, level.get("histogram") or [],
                                                                markers=markers, max_count=most)})
    return charts
