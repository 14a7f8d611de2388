"""``manage.py reproduce_hat`` (training_jobs.reproduce) for real, end to end, at the smoke budget on the tiny base:
the command runs once for the session (conftest.py, shared with test_reproduce_evaluate), uninterrupted (train,
evaluate, write the table), as `.ci/run` runs it. Then: all four arms trained (each model directory loads and its
weights differ from the base), the two SFT arms got the same steps, batch and number of rows of the same tasks in
the same order, the seed reached the data and every stage, every model and the base were evaluated and the table
has every cell (not the values), and no held-out harness state or evaluation text (T1-T4, IFEval included) is in
any arm's training data."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from training_jobs.reproduce import data as D
from training_jobs.reproduce.arms import ARMS, prepare_data, training_prompts
from training_jobs.reproduce.budgets import BASE_NAMES, BUDGET_NAMES, BUDGETS, budget_for
from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

SEED = 3  # the shared run's seed (conftest.py, reproduce_smoke_run)


@pytest.fixture(scope="module")
def budget():
    return budget_for("smoke", "tiny")


@pytest.fixture
def trained(reproduce_smoke_run):
    """The command's own run (tests/training_jobs/conftest.py): its output folder, the arms as run.json records
    them, its stdout lines."""
    return reproduce_smoke_run


def _weights(model_dir):
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


# --- budgets -----------------------------------------------------------------------------------------------------


def test_every_budget_and_base_is_a_valid_budget():
    for name in BUDGET_NAMES:
        for base in BASE_NAMES:
            b = budget_for(name, base)
            assert b.name == name and b.rl_batch_size % b.rl_generations == 0 and b.rl_prompts <= b.train_samples
            assert b.device == ("cuda" if name == "gpu" else "cpu")
            assert json.loads(json.dumps(b.to_dict()))["lora_targets"] == list(b.lora_targets)
    assert budget_for("cpu", "smol").lora and budget_for("cpu", "smol").lora_rank == 16
    assert budget_for("cpu", "smol").lora_targets == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert not budget_for("smoke", "tiny").lora and budget_for("gpu", "smol").dtype == "bfloat16"
    with pytest.raises(ValueError, match="unknown budget 'huge'"):
        budget_for("huge", "tiny")
    with pytest.raises(ValueError, match="unknown base"):
        budget_for("cpu", "llama")
    with pytest.raises(ValueError, match="multiple of rl_generations"):
        replace(BUDGETS["smoke"], rl_batch_size=3)


# --- the arms ----------------------------------------------------------------------------------------------------


def test_every_arm_is_a_trained_checkpoint_that_loads(trained, budget):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, results, lines = trained
    assert tuple(results) == ARMS
    base = _weights(DEMO_MODEL_DIR)
    models = {}
    for arm, r in results.items():
        assert r.model_dir.is_dir() and r.model_dir.is_relative_to(out), arm
        model = AutoModelForCausalLM.from_pretrained(r.model_dir)
        assert model.num_parameters() > 0 and AutoTokenizer.from_pretrained(r.model_dir).eos_token
        w = _weights(r.model_dir)
        assert w.keys() == base.keys()
        assert any(not (w[k] == base[k]).all() for k in base), f"{arm} has the base's weights"
        assert not (r.model_dir.parent / "checkpoints").exists()  # optimizer state removed, the model kept
        models[arm] = w
    # each continued arm moved away from the arm it continues
    for arm, parent in (("hsa_sft_distill", "hsa_sft"), ("hsa_sft_distill_rl", "hsa_sft_distill")):
        assert any(not (models[arm][k] == models[parent][k]).all() for k in base), arm
    assert results["hsa_sft_distill_rl"].stages == ("sft", "distill", "rl")
    assert any("fixed_sft/sft" in line for line in lines) and any("step" in line for line in lines)


def test_both_sft_arms_get_the_same_steps_rows_tasks_and_order(trained, budget):
    out, results, _ = trained
    fixed, hsa = results["fixed_sft"], results["hsa_sft"]
    assert fixed.steps == hsa.steps == budget.sft_steps
    sft_fixed, sft_hsa = fixed.config["stages"][0], hsa.config["stages"][0]
    assert sft_fixed["config"] == sft_hsa["config"]  # same schedule, batch, length, seed, base
    assert sft_fixed["start"] == sft_hsa["start"] == str(DEMO_MODEL_DIR)
    assert sft_fixed["config"]["per_device_batch_size"] == budget.sft_batch_size
    fixed_rows, hsa_rows = D.read_jsonl(fixed.data["sft"]), D.read_jsonl(hsa.data["sft"])
    assert len(fixed_rows) == len(hsa_rows) == budget.train_samples
    assert [r["sample_id"] for r in fixed_rows] == [r["sample_id"] for r in hsa_rows]  # same tasks, same order
    # the fixed arm sees one harness state; the HSA arm sees many, and nearly every row differs
    assert len({r["harness_hash"] for r in fixed_rows}) == 1 and all(not r["operators"] for r in fixed_rows)
    assert len({r["harness_hash"] for r in hsa_rows}) > budget.train_samples // 2
    assert sum(f["tools"] != h["tools"] or f["messages"] != h["messages"]
               for f, h in zip(fixed_rows, hsa_rows)) >= budget.train_samples - 1
    assert fixed.train_data_sha256 != hsa.train_data_sha256
    assert D.file_sha256(fixed.data["sft"]) == sft_fixed["data_sha256"]  # the recorded hash is the file's
    # TRL kept every row: none lost its assistant turn to max_length
    for arm in ("fixed_sft", "hsa_sft"):
        log = json.loads((out / arm / "sft" / "stage.json").read_text())
        assert log["steps"] == budget.sft_steps
    info = json.loads((out / "data" / "data.json").read_text())
    assert info["fixed"]["rows"] == info["hsa"]["rows"] == info["tasks"] == budget.train_samples


def test_later_stages_continue_the_hsa_arm_with_the_budget(trained, budget):
    _, results, _ = trained
    distill, rl = results["hsa_sft_distill"], results["hsa_sft_distill_rl"]
    assert distill.config["stages"][0] == results["hsa_sft"].config["stages"][0]
    d, r = distill.config["stages"][1], rl.config["stages"][2]
    assert d["start"] == str(results["hsa_sft"].model_dir) and r["start"] == str(distill.model_dir)
    assert (d["steps"], r["steps"]) == (budget.distill_steps, budget.rl_steps)
    assert distill.steps == budget.sft_steps + budget.distill_steps
    assert rl.steps == distill.steps + budget.rl_steps
    assert rl.wall_s >= distill.wall_s >= results["hsa_sft"].wall_s > 0
    assert len(D.read_jsonl(distill.data["distill"])) == budget.distill_prompts
    assert len(D.read_jsonl(rl.data["rl"])) == budget.rl_prompts
    assert r["metrics"]["rollouts_rollouts"] == budget.rl_steps * budget.rl_batch_size


def test_the_seed_reaches_the_data_and_every_stage(trained, budget, tmp_path):
    out, results, _ = trained
    for arm, r in results.items():
        assert r.config["seed"] == SEED
        assert all(s["config"]["seed"] == SEED for s in r.config["stages"]), arm
    info = json.loads((out / "data" / "data.json").read_text())
    # the same seed draws the same data; another seed other data
    again = prepare_data(base_dir=DEMO_MODEL_DIR, budget=budget, out_dir=tmp_path / "same", seed=SEED, log=print)
    other = prepare_data(base_dir=DEMO_MODEL_DIR, budget=budget, out_dir=tmp_path / "other", seed=SEED + 1,
                         log=print)
    for part in ("fixed", "hsa", "distill", "rl"):
        assert again[part]["sha256"] == info[part]["sha256"], part
        assert other[part]["sha256"] != info[part]["sha256"], part


# --- leakage --------------------------------------------------------------------------------------------------------


def test_no_held_out_state_or_evaluation_text_is_in_any_training_data(trained):
    from training_jobs.evals.leakage import find_leaks
    from training_jobs.hsa.leaks import heldout_leaks

    _, results, _ = trained
    texts = training_prompts(results)
    files = {(stage, p) for r in results.values() for stage, p in r.data.items()}
    assert len(files) == 4  # fixed rows, HSA rows, distillation prompts, RL tasks
    included = set(texts)
    for stage, path in files:  # every text of every file, once
        rows = D.read_jsonl(path)
        assert {r["prompt"] if stage == "distill" else D.row_text(r) for r in rows} <= included, path
    assert len(texts) == len(included) <= sum(len(D.read_jsonl(p)) for _, p in files)

    evaluation = D.eval_texts()
    assert len(evaluation) > 541  # T1-T3 comments and gold replies, and every IFEval prompt
    assert find_leaks(texts, evaluation) == []
    assert D.heldout_state_leaks(texts) == []
    for r in results.values():
        if "sft" in r.data:
            assert heldout_leaks(D.read_jsonl(r.data["sft"])) == []
    # the checks can fail: an IFEval prompt, a T1 comment and a T2 held-out tool name planted in training text
    from training_jobs.evals.cases import EVAL_SETS
    from training_jobs.evals.ifeval import load_prompts

    ifeval = load_prompts()[7].prompt
    comment = EVAL_SETS["t1-live-stream-qa"].load()[3].comments[0].text
    assert find_leaks([texts[0] + "\n" + ifeval], evaluation)
    assert find_leaks([f"[viewer] {comment} thanks"], evaluation)
    _, terms = D._t2_cases_and_terms()
    name = next(t for t, (kind, _) in terms.items() if kind == "name" and "_" in t)
    assert D.heldout_state_leaks([texts[0].replace('"name": "', f'"name": "{name}", "x": "', 1)])


def test_the_task_draw_leaves_out_tasks_that_leak_into_evaluation(monkeypatch):
    """A task whose comment is an evaluation comment never reaches the rows."""
    from transformers import AutoTokenizer

    from training_jobs.evals.cases import EVAL_SETS

    real_pool = D.task_pool
    comment = EVAL_SETS["t1-live-stream-qa"].load()[0].comments[0].text

    def planted_pool(n, seed):
        pool = real_pool(n, seed)
        first = pool[0]
        pool[0] = type(first)(**{**first.__dict__, "id": "planted", "comments": ({"viewer": "v", "text": comment},)})
        return pool

    monkeypatch.setattr(D, "task_pool", planted_pool)
    tok = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    s1 = D.stage1_data(4, seed=0, tokenizer=tok, max_seq_len=2048)
    assert "planted" not in {t.id for t in s1.tasks} and s1.left_out["leaks_into_evaluation"] >= 1
    assert len(s1.fixed_rows) == len(s1.hsa_rows) == 4


# --- the command ---------------------------------------------------------------------------------------------------


def test_the_command_refuses_a_base_that_is_not_built(monkeypatch, tmp_path):
    from django.core.management import CommandError, call_command

    from training_jobs.reproduce import run as R

    monkeypatch.setitem(R.BASE_DIRS, "smol", tmp_path / "smollm2-135m")
    with pytest.raises(CommandError, match=r"base 'smol' .*smollm2-135m.* not built .*run make install"):
        call_command("reproduce_hat", "--base", "smol", "--budget", "cpu", "--out", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    with pytest.raises(CommandError, match="--seed"):
        call_command("reproduce_hat", "--base", "tiny", "--budget", "smoke", "--seed", "-1")


def test_the_command_trains_evaluates_and_records_the_run(trained, budget):
    """The command's run.json: the config, data hashes, commit and wall times; every model and the base evaluated;
    the table written with every cell."""
    from training_jobs.reproduce.table import COLUMNS, ROWS, table_cells

    out, results, lines = trained
    run = json.loads((out / "run.json").read_text())
    assert set(run["arms"]) == set(ARMS) and set(run["models"]) == {"base", *ARMS}
    assert run["models"]["base"] == str(DEMO_MODEL_DIR) and run["base"]["weights_sha256"]
    assert run["budget"] == budget.to_dict() and run["seed"] == SEED
    assert run["command"].endswith(f"--base tiny --budget smoke --seed {SEED} --out {out} --keep {out / 'kept'}")
    assert run["git_commit"] and run["data"]["fixed"]["sha256"] == D.file_sha256(out / "data/fixed/rows.jsonl")
    for arm in ARMS:
        assert run["arms"][arm]["train_data_sha256"] == results[arm].train_data_sha256
        assert run["wall_s"][arm] == results[arm].wall_s > 0
    assert run["wall_s"]["total"] >= run["wall_s"]["evaluation"] > 0
    evaluation = json.loads((out / "evaluation.json").read_text())
    # over all sittings: every stage once (the RL arm's time holds HSA-SFT's and distillation's), every evaluation
    assert run["wall_s"]["stages_all_sittings"] == pytest.approx(
        results["fixed_sft"].wall_s + results["hsa_sft_distill_rl"].wall_s, abs=0.2)
    assert run["wall_s"]["evaluations_all_sittings"] == pytest.approx(
        sum(m["wall_s"] for m in evaluation["models"].values()), abs=0.2)
    assert set(evaluation["models"]) == {"base", *ARMS}
    assert run["tables"] and all(Path(p).is_file() for p in run["tables"].values())
    cells = table_cells(evaluation)  # TableError on any missing or malformed cell
    assert set(cells) == {row for row, _ in ROWS} == {"base", *ARMS}
    assert all(set(row) == {c.key for c in COLUMNS} for row in cells.values())
    assert [c["claim"] for c in json.loads((out / "results.json").read_text())["claims"]] == ["a", "b", "c"]
    assert any("done in" in line for line in lines)


def test_a_second_run_with_the_same_keep_dir_takes_every_part_and_writes_the_same_table(trained, tmp_path):
    """--keep: the first run kept each stage (the tiny base is fully fine-tuned: its model files) and each model's
    evaluation; a second run with the same keep directory trains and plays nothing, rebuilds the same weights and
    writes the same table. A part whose file changed is not used."""
    import io

    from django.core.management import call_command

    from training_jobs.reproduce.evaluate import model_checksum
    from training_jobs.reproduce.parts import Parts
    from training_jobs.reproduce.table import table_cells

    out, results, _ = trained
    kept = Parts(out / "kept")
    records = {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text())
               for p in kept.root.glob("*/*/part.json")}
    assert set(records) == {"fixed_sft/sft", "hsa_sft/sft", "hsa_sft_distill/distill", "hsa_sft_distill_rl/rl",
                            *(f"eval/{m}" for m in ("base", *ARMS))}
    assert all(r["kind"] == "model" and "model.safetensors" in r["files"] for k, r in records.items()
               if not k.startswith("eval/"))
    again, stdout = tmp_path / "again", io.StringIO()
    call_command("reproduce_hat", "--base", "tiny", "--budget", "smoke", "--seed", str(SEED), "--out", str(again),
                 "--keep", str(kept.root), stdout=stdout)
    lines = stdout.getvalue().splitlines()
    assert sum("taken from the kept part" in line for line in lines) == len(ARMS) + 1 + len(ARMS)
    assert not any("] step " in line for line in lines)  # no stage trained
    assert not any(line.rstrip().endswith(" samples") for line in lines)  # no case played
    run = json.loads((again / "run.json").read_text())
    for arm in ARMS:
        assert model_checksum(run["arms"][arm]["model_dir"]) == model_checksum(results[arm].model_dir), arm
        last_stage = run["arms"][arm]["config"]["stages"][-1]
        assert last_stage["kept_part"] == str(kept.stage_dir(arm, results[arm].stages[-1]))
    first, second = (json.loads((d / "evaluation.json").read_text()) for d in (out, again))
    assert table_cells(first) == table_cells(second)
    assert sorted(p.name for p in (again / "samples" / "base").iterdir()) == \
        sorted(p.name for p in (out / "samples" / "base").iterdir())
    # a kept file that changed: the part is not used
    record = kept.find_eval("base", records["eval/base"]["key"])
    assert record is not None and kept.find_eval("base", "another key") is None
    sample = next(n for n in record["files"] if n.startswith("samples/"))
    (kept.eval_dir("base") / sample).write_text("{}\n")
    assert kept.find_eval("base", records["eval/base"]["key"]) is None


def test_a_base_whose_template_hides_the_tools_is_refused_before_training(tmp_path, budget):
    import shutil

    base = tmp_path / "base"
    shutil.copytree(DEMO_MODEL_DIR, base)
    (base / "chat_template.jinja").write_text(  # ChatML that drops tools and tool calls (as SmolLM2's own does)
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ValueError, match="does not render the tools .*generation"):
        prepare_data(base_dir=base, budget=budget, out_dir=tmp_path / "out", seed=0, log=print)
    assert not (tmp_path / "out" / "data").exists()
