"""The reproduction's table (training_jobs.reproduce.table): every column the report has, for every arm, each cell
with its interval, the report's figures with their sources, four standalone SVG plots; a missing or malformed cell
is an error naming its path, and nothing is written then. Plain Python, no database, no model."""

from __future__ import annotations

import copy
import csv
import xml.etree.ElementTree as ET

import pytest

from training_jobs.reproduce.table import COLUMNS, LEVELS, REFERENCE, ROWS, TableError, table_cells, write_table


def _score(mean: float, half: float = 0.05) -> dict:
    return {"mean": mean, "ci_low": max(0.0, mean - half), "ci_high": min(1.0, mean + half), "n": 8}


def _model(i: int) -> dict:
    t1, t2 = 0.5 + 0.05 * i, 0.3 + 0.1 * i
    return {"t1": {"accuracy": _score(t1), "effectiveness": _score(t1 / 2)},
            "t2": {"accuracy": _score(t2), "effectiveness": _score(t2 / 2)},
            "gap": {"mean": t1 - t2, "ci_low": t1 - t2 - 0.1, "ci_high": t1 - t2 + 0.1, "n": 8, "paired": True},
            "t3": {lv: {"accuracy": _score(0.6 - 0.1 * j)} for j, lv in enumerate(LEVELS)},
            "t4": {m: _score(0.2 + 0.01 * i) for m in ("prompt_strict", "instruction_strict", "prompt_loose",
                                                       "instruction_loose")}}


@pytest.fixture
def results() -> dict:
    return {"budget": {"name": "smoke"}, "seed": 0, "k": 2, "serving": "inprocess",
            "sampling": {"temperature": 0.7}, "command": "manage.py reproduce_hat --base tiny --budget smoke",
            "sets": {"t1": {"cases": ["a", "b"], "sha256": "ab" * 32}},
            "models": {row: _model(i) for i, (row, _) in enumerate(ROWS)}}


def test_every_arm_and_every_column_is_written_with_its_interval(results, tmp_path):
    paths = write_table(results, tmp_path)
    assert set(paths) == {"results", "table_md", "table_csv", "plot_accuracy", "plot_gap", "plot_ifeval",
                          "plot_robustness"} and all(p.is_file() for p in paths.values())
    with paths["table_csv"].open() as f:
        rows = list(csv.DictReader(f))
    measured = [r for r in rows if r["kind"] == "measured"]
    assert [r["model"] for r in measured] == [row for row, _ in ROWS]
    for r in measured:
        for c in COLUMNS:
            v, lo, hi = (float(r[c.key + s]) for s in ("", "_ci_low", "_ci_high"))
            assert lo <= v <= hi, (r["model"], c.key)
    hsa = next(r for r in measured if r["model"] == "hsa_sft")
    assert float(hsa["t1_accuracy"]) == 60.0 and float(hsa["gap_ci_high"]) == pytest.approx(10.0 + 10.0)
    # the report's figures, with their sources, beside ours
    report = {r["model"]: r for r in rows if r["kind"] == "report"}
    assert report["report:base"]["t2_accuracy"] == "75.4" and report["report:hsa_sft"]["t2_accuracy"] == "94.6"
    assert report["report:fixed_sft"]["ifeval_prompt_strict"] == "-7.7"
    assert report["report:hsa_sft_distill"]["ifeval_prompt_strict"] == "+8.5"
    assert "issue 15" in report["report:base"]["sources"] and report["report:base"]["t3_heavy"] == ""

    md = paths["table_md"].read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Model"))
    assert all(c.title in header for c in COLUMNS)
    assert "| HSA-SFT | 60.0 [55.0, 65.0] | 50.0 [45.0, 55.0] | +10.0 [" in md
    assert "*report: Base (no training)* | 80.3 (" in md and "Δ -7.7" in md and "n/s" in md
    assert "reproduce_hat --base tiny" in md and "which IFEval metric is not stated" in md
    stored = __import__("json").loads(paths["results"].read_text())
    assert stored["models"] == results["models"] and set(stored["table"]["cells"]) == {row for row, _ in ROWS}
    assert stored["table"]["reference"]["hsa_sft_distill_rl"]["t1_accuracy"]["value"] == 94.8
    for key in ("plot_accuracy", "plot_gap", "plot_ifeval", "plot_robustness"):
        svg = ET.parse(paths[key]).getroot()  # well-formed, standalone
        assert svg.tag.endswith("svg") and len(svg.findall(".//{http://www.w3.org/2000/svg}rect")) > 5


def test_the_reference_figures_are_the_ones_our_sources_give():
    figures = {(row, key): (r.value, r.delta) for row, refs in REFERENCE.items() for key, r in refs.items()}
    assert figures[("base", "t1_accuracy")] == (80.3, False) and figures[("base", "t2_accuracy")] == (75.4, False)
    assert figures[("hsa_sft", "t2_accuracy")] == (94.6, False)
    assert figures[("fixed_sft", "ifeval_prompt_strict")] == (-7.7, True)
    assert figures[("hsa_sft_distill", "ifeval_prompt_strict")] == (8.5, True)
    assert figures[("hsa_sft_distill_rl", "t1_accuracy")] == (94.8, False)
    assert not any(key.startswith("t3_") for refs in REFERENCE.values() for key in refs)  # no source: no figure


@pytest.mark.parametrize("damage, path", [
    (lambda r: r["models"]["hsa_sft"]["t2"].pop("accuracy"), "models.hsa_sft.t2.accuracy: missing"),
    (lambda r: r["models"]["base"]["t3"].pop("heavy"), "models.base.t3.heavy.accuracy: missing"),
    (lambda r: r["models"]["fixed_sft"]["t4"]["prompt_loose"].update(ci_low=None),
     "models.fixed_sft.t4.prompt_loose.ci_low: missing"),
    (lambda r: r["models"]["fixed_sft"]["gap"].update(mean=float("nan")), "models.fixed_sft.gap.mean: not a number"),
    (lambda r: r["models"]["base"]["t1"]["accuracy"].update(ci_high=0.1),
     "models.base.t1.accuracy: the interval [0.45, 0.1] does not hold the figure 0.5"),
    (lambda r: r["models"].pop("hsa_sft_distill_rl"), "models.hsa_sft_distill_rl: missing (every arm is a row"),
])
def test_a_missing_or_malformed_cell_is_an_error_at_its_path_and_nothing_is_written(results, tmp_path, damage, path):
    broken = copy.deepcopy(results)
    damage(broken)
    with pytest.raises(TableError) as err:
        write_table(broken, tmp_path / "out")
    assert path in str(err.value) and len(err.value.problems) == 1
    assert not (tmp_path / "out").exists()


def test_every_problem_is_listed_at_once(results):
    del results["models"]["base"]["t2"]
    results["models"]["hsa_sft"]["t4"] = {}
    with pytest.raises(TableError) as err:
        table_cells(results)
    assert len(err.value.problems) == 2 + 4  # T2 accuracy and effectiveness, four IFEval figures
    with pytest.raises(TableError, match="models: missing"):
        table_cells({})
