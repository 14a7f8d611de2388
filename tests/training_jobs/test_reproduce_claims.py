"""The report's claims judged from the reproduction's table (training_jobs.reproduce.claims): each comparison's
verdict from two cells and their intervals, a claim as strong as its weakest comparison, the live-room claims on
effectiveness (a model that only falls back is accurate, never effective), and the section in table.md and
results.json. Plain Python."""

from __future__ import annotations

import json

import pytest

from training_jobs.reproduce.claims import (
    CLAIMS,
    DIRECTION_ONLY,
    NOT_REPRODUCED,
    REPRODUCED,
    claims_markdown,
    judge_claims,
)
from training_jobs.reproduce.table import COLUMNS, ROWS, write_table


def _cell(mean: float, half: float = 0.05) -> dict:
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": 20}


def _cells(**overrides) -> dict:
    """Every row and column at 0.5 ± 0.05; ``overrides``: ``row__column=(mean, half)``."""
    cells = {row: {c.key: _cell(0.5) for c in COLUMNS} for row, _ in ROWS}
    for key, (mean, half) in overrides.items():
        row, column = key.split("__")
        cells[row][column] = _cell(mean, half)
    return cells


def _verdicts(cells) -> dict[str, dict]:
    return {v["claim"]: v for v in judge_claims(cells)}


def test_a_clear_difference_in_the_claimed_direction_is_reproduced():
    v = _verdicts(_cells(hsa_sft__t2_effectiveness=(0.8, 0.05), fixed_sft__t2_effectiveness=(0.3, 0.05)))["a"]
    assert v["verdict"] == REPRODUCED
    assert v["comparisons"][0]["difference_pts"] == 50.0


@pytest.mark.parametrize("hsa, fixed, verdict", [
    ((0.55, 0.1), (0.5, 0.1), DIRECTION_ONLY),  # right sign, overlapping intervals
    ((0.5, 0.05), (0.5, 0.05), NOT_REPRODUCED),  # no difference
    ((0.3, 0.05), (0.8, 0.05), NOT_REPRODUCED),  # the other sign, however clear
])
def test_overlap_or_the_other_sign_is_not_called_reproduced(hsa, fixed, verdict):
    cells = _cells(hsa_sft__t2_effectiveness=hsa, fixed_sft__t2_effectiveness=fixed)
    assert _verdicts(cells)["a"]["verdict"] == verdict


def test_claim_a_is_judged_on_effectiveness_not_on_the_accuracy_a_fallback_earns():
    # the HSA arm only falls back: accurate everywhere, effective nowhere
    cells = _cells(hsa_sft__t2_accuracy=(1.0, 0.0), fixed_sft__t2_accuracy=(0.4, 0.05),
                   hsa_sft__t2_effectiveness=(0.0, 0.0), fixed_sft__t2_effectiveness=(0.3, 0.05))
    assert _verdicts(cells)["a"]["verdict"] == NOT_REPRODUCED


def test_claim_b_needs_the_cost_and_the_restoration_and_holds_as_its_weakest_part():
    cost = dict(base__ifeval_prompt_strict=(0.6, 0.05), fixed_sft__ifeval_prompt_strict=(0.3, 0.05))
    restored = dict(hsa_sft__ifeval_prompt_strict=(0.3, 0.05), hsa_sft_distill__ifeval_prompt_strict=(0.6, 0.05))
    assert _verdicts(_cells(**cost, **restored))["b"]["verdict"] == REPRODUCED
    half = _verdicts(_cells(**cost))["b"]  # distillation restored nothing
    assert half["verdict"] == NOT_REPRODUCED
    assert [c["verdict"] for c in half["comparisons"]] == [REPRODUCED, NOT_REPRODUCED]


def test_claim_c_compares_rl_with_distillation_in_and_out_of_distribution():
    cells = _cells(hsa_sft_distill_rl__t1_effectiveness=(0.7, 0.05), hsa_sft_distill_rl__t2_effectiveness=(0.56, 0.1))
    v = _verdicts(cells)["c"]
    assert [c["verdict"] for c in v["comparisons"]] == [REPRODUCED, DIRECTION_ONLY]
    assert v["verdict"] == DIRECTION_ONLY


def test_every_claim_of_the_report_is_judged_with_its_numbers_in_the_table(tmp_path):
    from tests.training_jobs.test_reproduce_table import _model

    results = {"budget": {"name": "smoke"}, "seed": 0, "k": 1, "serving": "inprocess", "sampling": {},
               "models": {row: _model(i) for i, (row, _) in enumerate(ROWS)}}
    paths = write_table(results, tmp_path)
    stored = json.loads(paths["results"].read_text())
    assert [c["claim"] for c in stored["claims"]] == [c.key for c in CLAIMS] == ["a", "b", "c"]
    text = paths["table_md"].read_text()
    assert "## The claims" in text
    for v in stored["claims"]:
        assert f"**({v['claim']}) {v['verdict']}.**" in text
    assert claims_markdown(stored["claims"])[-1] == ""
