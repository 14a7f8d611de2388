"""Server-side SVG geometry for the evaluation pages: bars with 95 % error bars, and a heatmap.

Plain Python, no Django: each function returns numbers and labels (coordinates, fills) that a template draws as
inline SVG (``templates/training_jobs/evals/runs/_bars.html`` and ``_heatmap.html``), so labels are escaped by the
template and no script or external library is needed (the console's CSP allows neither inline script nor a CDN).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Bar:
    label: str  # the series (a run), shown in the bar's tooltip
    value: float | None  # None: no figure (the bar is left out, the slot stays)
    low: float | None = None  # the interval's ends (error bar); None: no interval
    high: float | None = None
    series: int = 0  # colour index (training.css .series-N)
    text: str = ""  # the value as the page shows it


@dataclass
class BarGroup:
    label: str  # the metric (accuracy, pass^k, ...)
    bars: list[Bar] = field(default_factory=list)


def _fmt(value: float, scale: float) -> str:
    return f"{value * scale:.0f}" if scale == 100 else f"{value:g}"


def bar_chart(groups: Sequence[BarGroup], *, y_max: float = 1.0, width: int = 640, height: int = 240,
              scale: float = 100.0, unit: str = "%") -> dict[str, Any]:
    """Grouped vertical bars on one axis from 0 to ``y_max`` (values outside are clipped), each with its error bar
    (``low``–``high``). ``scale``/``unit`` only label the axis (fractions shown as percent). Returns the frame
    (left, right, top, bottom, ticks) and, per group, its label position and bars (x, y, w, h and the error bar's
    x, y_low, y_high)."""
    left, right, top, bottom = 44, width - 8, 10, height - 28
    plot_h = bottom - top
    n_groups = max(1, len(groups))
    slot = (right - left) / n_groups
    per_group = max((len(g.bars) for g in groups), default=1) or 1
    gap = min(18.0, slot * 0.2)
    bar_w = max(3.0, (slot - gap) / per_group)

    def y_of(v: float) -> float:
        v = min(max(v, 0.0), y_max)
        return bottom - plot_h * (v / y_max if y_max else 0.0)

    out_groups = []
    for gi, g in enumerate(groups):
        x0 = left + gi * slot + gap / 2
        bars = []
        for bi, b in enumerate(g.bars):
            if b.value is None:
                continue
            x = x0 + bi * bar_w
            y = y_of(b.value)
            bar = {"x": round(x + 1, 1), "y": round(y, 1), "w": round(bar_w - 2, 1), "h": round(bottom - y, 1),
                   "series": b.series, "label": b.label, "text": b.text, "cx": round(x + bar_w / 2, 1)}
            if b.low is not None and b.high is not None:
                bar.update(err=True, y_low=round(y_of(b.low), 1), y_high=round(y_of(b.high), 1),
                           cap_l=round(x + bar_w / 2 - min(5, bar_w / 3), 1),
                           cap_r=round(x + bar_w / 2 + min(5, bar_w / 3), 1))
            bars.append(bar)
        out_groups.append({"label": g.label, "x": round(left + gi * slot + slot / 2, 1), "bars": bars})
    ticks = [{"y": round(y_of(y_max * i / 4), 1), "text": _fmt(y_max * i / 4, scale) + (unit if i == 4 else "")}
             for i in range(5)]
    return {"width": width, "height": height, "left": left, "right": right, "top": top, "bottom": bottom,
            "label_y": bottom + 18, "ticks": ticks, "groups": out_groups}


def heat_fill(value: float | None) -> str:
    """A cell's colour: red (0) → amber → green (1); grey when there is no figure."""
    if value is None:
        return "#eef0f3"
    v = min(max(value, 0.0), 1.0)
    return f"hsl({round(120 * v)}, 62%, {round(88 - 30 * v)}%)"


def heatmap(rows: Sequence[str], columns: Sequence[str], cells: Mapping[tuple[int, int], tuple[float, int]],
            *, cell_w: int = 86, cell_h: int = 30, label_w: int = 330) -> dict[str, Any]:
    """A grid of ``rows`` × ``columns``; ``cells[(row, column)] = (value 0..1, n)``. Returns the frame and each
    cell's rectangle, fill and text ("83 %" and the count for its tooltip)."""
    top = 22
    width = label_w + cell_w * max(1, len(columns)) + 4
    height = top + cell_h * max(1, len(rows)) + 4
    out_cells = []
    for ri in range(len(rows)):
        for ci in range(len(columns)):
            value, n = cells.get((ri, ci), (None, 0))
            x, y = label_w + ci * cell_w, top + ri * cell_h
            out_cells.append({"x": x + 1, "y": y + 1, "w": cell_w - 2, "h": cell_h - 2, "fill": heat_fill(value),
                              "tx": x + cell_w / 2, "ty": y + cell_h / 2 + 4, "n": n, "value": value,
                              "text": "—" if value is None else f"{100 * value:.0f} %",
                              "row": rows[ri], "column": columns[ci]})
    return {"width": width, "height": height, "top": top, "label_w": label_w,
            "rows": [{"label": r, "y": top + i * cell_h + cell_h / 2 + 4} for i, r in enumerate(rows)],
            "columns": [{"label": c, "x": label_w + i * cell_w + cell_w / 2} for i, c in enumerate(columns)],
            "cells": out_cells}
