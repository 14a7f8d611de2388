"""The evaluation half of reproduce_hat (training_jobs.reproduce.evaluate) at the smoke budget's sizes, in the
command's own run (conftest.py ``reproduce_smoke_run``: the base and four trained arms): every cell of the table is
filled, every interval holds its figure, k samples of every case, the same cases and seeds for every model; and on
two copies of the committed demo-tiny model, the same weights give the same replies. T2 under held-out harness
states only. Real turn engine, real rules, real IFEval scorer; no database."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from training_jobs.reproduce.evaluate import (
    T3_LEVELS,
    EvalBudget,
    evaluate_models,
    select_cases,
    t3_level,
)
from training_jobs.reproduce.table import ROWS, table_cells, write_table

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "models" / "demo-tiny"


@dataclass(frozen=True)
class SmokeSizes:
    """The smoke budget's evaluation sizes (training_jobs.reproduce.budgets: k=2, 3 + 3 + 1 per level + 4)."""

    name: str = "smoke"
    k: int = 2
    n_t1: int = 3
    n_t2: int = 3
    n_t3_per_level: int = 1
    n_t4: int = 4
    max_seq_len: int = 2048
    dtype: str = "float32"
    threads: int = 2
    eval_max_new_tokens: int = 48


@pytest.fixture
def evaluated(reproduce_smoke_run):
    """The run's evaluation (five models at the smoke budget's sizes, seed 3): results, its folder, its log."""
    out, _, lines = reproduce_smoke_run
    return json.loads((out / "evaluation.json").read_text()), out, lines


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """Two copies of one model, evaluated on fewer cases with the smoke budget's k and seed."""
    out = tmp_path_factory.mktemp("reproduce-copies")
    results = evaluate_models(models={"base": DEMO, "fixed_sft": DEMO}, out_dir=out, seed=3, log=lambda line: None,
                              budget=SmokeSizes(n_t1=1, n_t2=1, n_t3_per_level=1))
    return results, out


def _scores(node, path=""):
    """Every {mean, ci_low, ci_high} in the results, with its path."""
    if isinstance(node, dict):
        if {"mean", "ci_low", "ci_high"} <= set(node):
            yield path, node
        for key, value in node.items():
            yield from _scores(value, f"{path}.{key}" if path else key)


def test_every_cell_is_filled_and_every_interval_holds_its_figure(evaluated, tmp_path):
    results, out, lines = evaluated
    cells = table_cells(results)  # raises on any missing cell
    assert set(cells) == {row for row, _ in ROWS}
    paths = write_table(results, tmp_path)
    assert all(p.is_file() for p in paths.values())
    found = list(_scores(results["models"]))
    assert len(found) >= len(ROWS) * (3 + len(T3_LEVELS) + 4)
    for path, s in found:
        if s["mean"] is None:  # only pass^k of a case set can be empty; the table's cells never are
            assert path.endswith("pass_k"), path
            continue
        assert s["ci_low"] <= s["mean"] <= s["ci_high"], (path, s)
    assert set(results["models"]) == {row for row, _ in ROWS}
    assert any("evaluating 5 model(s) on T1 3, T2 3, T3 5 (5 levels), IFEval 4 cases, k=2" in line for line in lines)


def _samples(out, row, name):
    return [json.loads(line) for line in (out / "samples" / row / f"{name}.jsonl").read_text().splitlines()]


def test_k_samples_of_the_same_cases_with_the_same_seeds_for_every_model(evaluated):
    results, out, _ = evaluated
    sets = results["sets"]
    assert [len(sets[s]["cases"]) for s in ("t1", "t2", "t4")] == [3, 3, 4]
    assert all(len(sets[f"t3.{lv}"]["cases"]) == 1 for lv in T3_LEVELS)
    for row, _ in ROWS:
        model = results["models"][row]
        assert model["t1"]["samples"] == 3 * 2 and model["t1"]["k"] == 2 and model["t1"]["complete"] == 3
        assert model["t4"]["prompts"] == 4 and set(model["t4"]["per_sample"]) == {"0", "1"}
        assert model["gap"]["paired"] is True  # T2 holds exactly the T1 tasks
        for name in ("t1", "t2", *(f"t3.{lv}" for lv in T3_LEVELS), "t4"):
            rows = _samples(out, row, name)
            per_case = Counter(r["case_id"] for r in rows)
            assert set(per_case) == set(sets[name]["cases"]) and set(per_case.values()) == {2}, (row, name)
            assert all(sorted(r["sample"] for r in rows if r["case_id"] == c) == [0, 1] for c in per_case)
            assert not [r["error"] for r in rows if r["error"]], (row, name)
            if name != "t4":  # played through the turn engine: its events are kept for drill-down
                assert all(any(e["type"] == "model_request" for e in r["events"]) for r in rows), (row, name)


def test_the_same_weights_give_the_same_replies_and_two_samples_are_two_draws(copies):
    results, out = copies
    names = ("t1", "t2", *(f"t3.{lv}" for lv in T3_LEVELS), "t4")
    replies = {row: {name: [(r["case_id"], r["sample"], r["reply"]) for r in _samples(out, row, name)]
                     for name in names} for row in results["models"]}
    assert set(replies) == {"base", "fixed_sft"}
    # two copies of one model, the same seeds: the same replies (the path is the same for every model)
    assert replies["fixed_sft"] == replies["base"]
    # two samples of one case are two draws, not one reply twice
    assert any(a[2] != b[2] for a, b in zip(replies["base"]["t4"][::2], replies["base"]["t4"][1::2]))


def test_the_selection_is_seeded_t2_is_held_out_and_t3_has_every_level():
    sizes = SmokeSizes()
    a, b = select_cases(sizes, 3), select_cases(sizes, 3)
    assert a.describe() == b.describe() and select_cases(sizes, 4).describe() != a.describe()
    assert [c.parent for c in a.t2] == [c.id for c in a.t1]
    assert all(c.kind == "t2" and c.harness_variant.kind == "heldout" for c in a.t2)
    assert {lv: [t3_level(c) for c in cs] for lv, cs in a.t3.items()} == {lv: [lv] for lv in T3_LEVELS}
    assert all(not c.tool_faults for cs in a.t3.values() for c in cs)
    big = select_cases(SmokeSizes(n_t1=10_000, n_t2=10_000, n_t3_per_level=10_000, n_t4=10_000), 0)
    assert (len(big.t1), len(big.t2), len(big.t4)) == (256, 256, 541) and len(big.t3["heavy"]) == 50
    with pytest.raises(ValueError, match="budget.n_t4 must be a whole number of at least 1"):
        select_cases(SmokeSizes(n_t4=0), 0)


def test_the_training_half_budget_has_what_evaluation_reads():
    budgets = pytest.importorskip("training_jobs.reproduce.budgets")
    names = {f.name for f in fields(budgets.Budget)}
    assert set(EvalBudget.__annotations__) | {"eval_max_new_tokens"} <= names
    for name in budgets.BUDGET_NAMES:
        b = budgets.budget_for(name, "tiny")
        select_cases(b, 0)  # every budget's sizes are valid


def test_the_evaluation_half_imports_no_orm():
    code = ("import sys, training_jobs.reproduce.evaluate, training_jobs.reproduce.table, "
            "training_jobs.reproduce.eval_serving; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'channels', "
            "'celery', 'console'}); print(bad); sys.exit(bool(bad))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_real_endpoint_serves_the_same_evaluation(tmp_path):
    """The same evaluation through the local OpenAI-compatible server (transformers serve on loopback, what
    ``manage.py serve_local_model`` runs) instead of in-process generation: every cell filled, the server stopped."""
    lines: list[str] = []
    sizes = SmokeSizes(k=1, n_t1=1, n_t2=1, n_t3_per_level=1, n_t4=1)
    results = evaluate_models(models={"base": DEMO}, budget=sizes, out_dir=tmp_path, seed=0, log=lines.append,
                              serving="local")
    model = results["models"]["base"]
    assert results["serving"] == model["serving"] == "local" and model["ready_s"] > 0
    for path, s in _scores(model):
        assert s["mean"] is None or s["ci_low"] <= s["mean"] <= s["ci_high"], path
    assert model["t1"]["samples"] == 1 and model["t4"]["prompts"] == 1 and model["t4"]["errors"] == 0
    rows = [json.loads(line) for line in (tmp_path / "samples" / "base" / "t1.jsonl").read_text().splitlines()]
    assert rows[0]["error"] == "" and rows[0]["ttft_s"] is not None  # streamed over HTTP, timed by the runner
