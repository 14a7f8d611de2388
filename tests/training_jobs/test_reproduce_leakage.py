"""No evaluation prompt of reproduce_hat (T1–T3 comments and gold replies, the 541 IFEval prompts) and no held-out
harness state of T2 is in the data the arms train on — and the check fails when one is planted.

The training data is what the training half writes for a run (training_jobs.reproduce.arms.prepare_data at the
CPU budget: fixed-harness and HSA stage-1 rows, distillation prompts, RL rollout prompts), read back through its
own ``training_prompts`` (the texts of every arm, stage by stage). The checks are the project's: text overlap by
training_jobs.evals.leakage.find_leaks (exact, contained, a shared 8-gram), held-out names, phrasings and settings
by training_jobs.evals.t2.t2_leaks, and the harness states themselves by content hash. The evaluation side is
every case any budget can draw (training_jobs.reproduce.evaluate), not only one budget's subset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training_jobs.eval_leakage import dataset_row_texts
from training_jobs.evals.leakage import find_leaks, tokens
from training_jobs.evals.t2 import set_heldout_terms, t2_leaks
from training_jobs.reproduce.evaluate import evaluation_texts, ifeval_cases, t1_cases, t2_cases

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "models" / "demo-tiny"


@pytest.fixture(scope="module")
def run_data(tmp_path_factory):
    """The training data of a CPU-budget run (the budget the committed table uses), and every arm's texts."""
    from training_jobs.reproduce.arms import ArmResult, prepare_data, training_prompts
    from training_jobs.reproduce.budgets import budget_for

    out = tmp_path_factory.mktemp("reproduce-data")
    budget = budget_for("cpu", "tiny")
    info = prepare_data(base_dir=DEMO, budget=budget, out_dir=out, seed=0, log=lambda line: None)
    files = {stage: Path(info[stage]["file"]) for stage in ("fixed", "hsa", "distill", "rl")}
    stages = {"fixed_sft": {"sft": files["fixed"]}, "hsa_sft": {"sft": files["hsa"]},
              "hsa_sft_distill": {"sft": files["hsa"], "distill": files["distill"]},
              "hsa_sft_distill_rl": {"sft": files["hsa"], "distill": files["distill"], "rl": files["rl"]}}
    arms = {arm: ArmResult(arm=arm, model_dir=out / arm, stages=tuple(data), steps=0, wall_s=0.0,
                           train_data_sha256="", data=data) for arm, data in stages.items()}
    rows = [json.loads(line) for stage in ("fixed", "hsa") for line in files[stage].read_text().splitlines()]
    rl_rows = [json.loads(line) for line in files["rl"].read_text().splitlines()]
    # the arms' texts as the training half gives them (rows as JSON), and the rows' messages as plain text (the
    # console's reading, training_jobs.eval_leakage): in JSON a line break is "\\n", which glues the next line's
    # first word to an "n" for the word tokens the check compares, so a text that starts a line would hide there
    texts = training_prompts(arms) + list(dataset_row_texts([*rows, *rl_rows]))
    return {"texts": texts, "rows": rows, "info": info, "budget": budget}


def _heldout_states_in(rows) -> set[str]:
    """T2's harness states (content hashes) that stage-1 rows are rendered under."""
    return {r["harness_hash"] for r in rows} & {c.harness_variant.harness_hash for c in t2_cases()}


@pytest.fixture(scope="module")
def heldout_terms():
    return set_heldout_terms(t2_cases())


def test_the_run_trains_on_every_stage_and_every_arm_is_read(run_data):
    info, budget, texts = run_data["info"], run_data["budget"], run_data["texts"]
    assert info["fixed"]["rows"] == info["hsa"]["rows"] == budget.train_samples
    assert info["distill"]["rows"] == budget.distill_prompts and info["rl"]["rows"] == budget.rl_prompts
    # every stage-1 row, distillation prompt and RL prompt is a text of the check, twice for rows (JSON and plain)
    assert len(texts) >= 2 * info["hsa"]["rows"] + info["distill"]["rows"] + 2 * info["rl"]["rows"]
    assert sum(r["operators"] != [] for r in run_data["rows"]) >= info["hsa"]["rows"] // 2  # HSA rows vary


def test_no_evaluation_prompt_is_in_the_training_data(run_data):
    evals = evaluation_texts()
    assert len(evals) > 541 + 256  # IFEval, T1 comments and gold replies, T3's fault replies
    leaks = find_leaks(run_data["texts"], evals)
    assert not leaks, "\n".join(leak.describe() for leak in leaks[:10])


def test_no_held_out_harness_state_is_in_the_training_data(run_data, heldout_terms):
    leaks = t2_leaks(t2_cases(), run_data["texts"], terms=heldout_terms)
    assert not leaks, "\n".join(str(leak) for leak in leaks[:10])
    assert len({c.harness_variant.harness_hash for c in t2_cases()}) >= 8
    assert not _heldout_states_in(run_data["rows"])


def test_a_planted_overlap_is_caught(run_data, heldout_terms):
    texts, rows = list(run_data["texts"]), run_data["rows"]
    ifeval_prompt = ifeval_cases()[100].prompt
    comment = next(c.comments[0].text for c in t1_cases() if len(tokens(c.comments[0].text)) >= 8)
    name = next(t for t, (kind, _) in sorted(heldout_terms.items()) if kind == "name" and "_" in t)

    def planted_row(extra: str) -> str:
        row = json.loads(json.dumps(rows[0]))
        user = next(m for m in row["messages"] if m["role"] == "user")
        user["content"] += f"\n{extra}"
        return next(iter(dataset_row_texts([row])))

    planted = texts + [f"Please help. {ifeval_prompt.upper()} Thanks!", planted_row(comment)]
    evals = evaluation_texts()
    found = {(leak.training_index, evals[leak.eval_index]) for leak in find_leaks(planted, evals)}
    assert (len(texts), ifeval_prompt) in found and (len(texts) + 1, comment) in found
    assert {i for i, _ in found} == {len(texts), len(texts) + 1}  # and nothing else

    leaks = t2_leaks(t2_cases(), texts + [planted_row(f"Then call {name}.")], terms=heldout_terms)
    assert [(x.term, x.text_index) for x in leaks] == [(name, len(texts))]
    heldout_state = t2_cases()[0].harness_variant.harness_hash
    assert _heldout_states_in([*rows, {**rows[0], "harness_hash": heldout_state}]) == {heldout_state}


def test_the_consoles_leakage_check_finds_the_run_clean_and_the_plant(run_data, db):
    """manage.py check_eval_leakage's check (training_jobs.eval_leakage) on the same texts, against the eval sets
    as the console seeds them (T1–T4 versions on record)."""
    from training_jobs.eval_leakage import leakage_report
    from training_jobs.eval_services import eval_sets_seed_demo

    versions = eval_sets_seed_demo()
    report = leakage_report(sources=[("reproduce_hat cpu run", run_data["texts"])], versions=versions)
    assert {"t1-live-stream-qa v1", "t2-harness-variant-qa v1", "t4-ifeval v1"} <= set(report.sets)
    assert report.clean, [leak.describe() for leak in report.leaks[:10]]
    plant = run_data["texts"][:5] + [f"Answer this: {ifeval_cases()[3].prompt}"]
    planted = leakage_report(sources=[("planted", plant)], versions=versions)
    assert ("t4-ifeval v1", ifeval_cases()[3].id) in {(leak.eval_set, leak.case_id) for leak in planted.leaks}
