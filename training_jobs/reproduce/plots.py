"""The reproduction's plots as standalone SVG files (plain Python, no script, no external library).

Bars with 95 % error bars take their geometry from :func:`training_jobs.evals.charts.bar_chart` (the evaluation
pages' bars), drawn here with inline colours and a legend so the file reads on its own; the gap, which can be
negative, gets a diverging chart around zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from xml.sax.saxutils import escape, quoteattr

from training_jobs.evals.charts import Bar, BarGroup, bar_chart

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#af7aa1", "#9c755f")
FAMILY = 'font-family="system-ui, sans-serif"'
FONT = f'{FAMILY} font-size="11"'


def _head(width: int, height: int, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label={quoteattr(title)}>',
            f"<title>{escape(title)}</title>", f'<rect width="{width}" height="{height}" fill="#fff"/>',
            f'<text x="8" y="16" {FAMILY} font-size="13" font-weight="600">{escape(title)}</text>']


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    out = []
    for i, name in enumerate(names):
        yy = y + 15 * i
        out.append(f'<rect x="{x}" y="{yy - 9}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        out.append(f'<text x="{x + 14}" y="{yy}" {FONT}>{escape(name)}</text>')
    return out


def bars_svg(title: str, groups: Sequence[BarGroup], series: Sequence[str], *, y_max: float = 1.0) -> str:
    """Grouped bars (fractions shown as percent) with their 95 % intervals, one colour per series."""
    legend_w = 12 + 7 * max((len(s) for s in series), default=0)
    chart = bar_chart(groups, y_max=y_max, width=max(420, 90 * len(groups) + 80), height=260)
    width, height = chart["width"] + legend_w + 16, chart["height"] + 24
    out = _head(width, height, title)
    out.append('<g transform="translate(0,24)">')
    for t in chart["ticks"]:
        out.append(f'<line x1="{chart["left"]}" x2="{chart["right"]}" y1="{t["y"]}" y2="{t["y"]}" stroke="#e3e6ea"/>')
        out.append(f'<text x="{chart["left"] - 4}" y="{t["y"] + 4}" text-anchor="end" {FONT}>'
                   f'{escape(t["text"])}</text>')
    for g in chart["groups"]:
        out.append(f'<text x="{g["x"]}" y="{chart["label_y"]}" text-anchor="middle" {FONT}>{escape(g["label"])}</text>')
        for b in g["bars"]:
            colour = PALETTE[b["series"] % len(PALETTE)]
            out.append(f'<rect x="{b["x"]}" y="{b["y"]}" width="{b["w"]}" height="{b["h"]}" fill="{colour}">'
                       f'<title>{escape(b["label"])}: {escape(b["text"])}</title></rect>')
            if b.get("err"):
                out.append(f'<path d="M{b["cx"]},{b["y_low"]}V{b["y_high"]}M{b["cap_l"]},{b["y_low"]}H{b["cap_r"]}'
                           f'M{b["cap_l"]},{b["y_high"]}H{b["cap_r"]}" stroke="#222" fill="none"/>')
    out.append(f'<line x1="{chart["left"]}" x2="{chart["right"]}" y1="{chart["bottom"]}" y2="{chart["bottom"]}" '
               'stroke="#555"/>')
    out += _legend(series, chart["width"] + 8, 20)
    out.append("</g></svg>")
    return "\n".join(out) + "\n"


def diverging_svg(title: str, rows: Sequence[tuple[str, float, float, float]], *, unit: str = " pts") -> str:
    """Horizontal bars from zero, one per row ``(label, value, low, high)`` (in points), with their intervals:
    right of the axis the model loses accuracy when the harness changes, left it gains."""
    span = max([abs(v) for _, *vs in rows for v in vs] + [1.0])
    span = math.ceil(span / 5) * 5
    label_w, plot_w, row_h, top = 170, 360, 26, 34
    width, height = label_w + plot_w + 24, top + row_h * len(rows) + 30
    zero = label_w + plot_w / 2

    def x_of(v: float) -> float:
        return round(zero + (plot_w / 2) * max(-1.0, min(1.0, v / span)), 1)

    out = _head(width, height, title)
    for tick in (-span, -span / 2, 0, span / 2, span):
        x = x_of(tick)
        stroke = "#555" if tick == 0 else "#e3e6ea"
        out.append(f'<line x1="{x}" x2="{x}" y1="{top - 6}" y2="{height - 24}" stroke="{stroke}"/>')
        out.append(f'<text x="{x}" y="{height - 10}" text-anchor="middle" {FONT}>{tick:+g}{escape(unit)}</text>')
    for i, (label, value, low, high) in enumerate(rows):
        y = top + i * row_h
        x0, x1 = sorted((zero, x_of(value)))
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" {FONT}>{escape(label)}</text>')
        out.append(f'<rect x="{x0}" y="{y + 4}" width="{max(round(x1 - x0, 1), 1)}" height="{row_h - 8}" '
                   f'fill="{colour}"><title>{escape(label)}: {value:+.1f}{escape(unit)} '
                   f'[{low:+.1f}, {high:+.1f}]</title></rect>')
        yc = y + row_h / 2
        out.append(f'<path d="M{x_of(low)},{yc}H{x_of(high)}M{x_of(low)},{yc - 5}V{yc + 5}M{x_of(high)},{yc - 5}'
                   f'V{yc + 5}" stroke="#222" fill="none"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bar(label: str, cell: dict, series: int) -> Bar:
    """A measured cell ``{mean, ci_low, ci_high}`` (fractions) as a bar."""
    return Bar(label=label, value=cell["mean"], low=cell["ci_low"], high=cell["ci_high"], series=series,
               text=f"{100 * cell['mean']:.1f} % [{100 * cell['ci_low']:.1f}, {100 * cell['ci_high']:.1f}]")
