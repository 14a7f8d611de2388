"""The SVG geometry of the evaluation pages (training_jobs.evals.charts, plain Python): bars stand on the axis with
heights in proportion, error bars span their interval, values outside the axis are clipped, missing values leave
their slot empty; heatmap cells are coloured from red (0) to green (1) and grey without a figure."""

from __future__ import annotations

from training_jobs.evals import charts


def test_bars_are_in_proportion_with_their_intervals():
    chart = charts.bar_chart([charts.BarGroup("Accuracy", [charts.Bar("a", 0.5, 0.25, 0.75),
                                                           charts.Bar("b", 1.0, series=1)]),
                              charts.BarGroup("pass^k", [charts.Bar("a", None), charts.Bar("b", 1.7)])],
                             width=400, height=200)
    bottom, top = chart["bottom"], chart["top"]
    half, full = chart["groups"][0]["bars"]
    assert half["y"] + half["h"] == bottom and full["y"] + full["h"] == bottom
    assert abs(half["h"] - (bottom - top) / 2) < 0.2 and abs(full["h"] - (bottom - top)) < 0.2
    assert half["err"] and half["y_high"] < half["y"] < half["y_low"] and "err" not in full
    assert abs((bottom - half["y_low"]) - (bottom - top) / 4) < 0.2
    (clipped,) = chart["groups"][1]["bars"]  # None left out, 1.7 clipped to the top
    assert clipped["y"] == top and clipped["series"] == 0
    assert [t["text"] for t in chart["ticks"]] == ["0", "25", "50", "75", "100%"]
    assert chart["groups"][0]["x"] < chart["groups"][1]["x"]


def test_heatmap_cells_and_colours():
    h = charts.heatmap(["run a", "run b"], ["all", "heavy"], {(0, 0): (1.0, 10), (0, 1): (0.0, 4), (1, 0): (0.5, 10)})
    cells = {(c["row"], c["column"]): c for c in h["cells"]}
    assert len(cells) == 4 and cells[("run a", "all")]["text"] == "100 %" and cells[("run a", "heavy")]["n"] == 4
    assert cells[("run b", "heavy")]["text"] == "—" and cells[("run b", "heavy")]["fill"] == "#eef0f3"
    assert charts.heat_fill(1.0).startswith("hsl(120,") and charts.heat_fill(0.0).startswith("hsl(0,")
    assert charts.heat_fill(2.0) == charts.heat_fill(1.0)
