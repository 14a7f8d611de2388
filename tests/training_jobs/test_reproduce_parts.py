"""reproduce_hat --keep (training_jobs.reproduce.parts) on LoRA stages: each finished stage keeps only its adapter,
and a later run rebuilds every arm from the kept adapters (merged into the model the stage started from) with the
same weights, training nothing. The fully fine-tuned path and kept evaluations run in test_reproduce_arms (the
command's own run)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from training_jobs.reproduce.arms import ARMS, stage_configs, train_arms
from training_jobs.reproduce.budgets import budget_for
from training_jobs.reproduce.evaluate import model_checksum
from training_jobs.reproduce.parts import Parts, key_of
from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR


@pytest.fixture(scope="module")
def lora_budget():
    return replace(budget_for("smoke", "tiny"), lora=True, lora_rank=4, lora_alpha=8, sft_steps=2, distill_steps=1,
                   rl_steps=1)


def test_lora_stages_keep_their_adapters_and_a_later_run_rebuilds_the_same_arms(lora_budget, tmp_path):
    parts = Parts(tmp_path / "kept")
    first_lines: list[str] = []
    first = train_arms(base_dir=DEMO_MODEL_DIR, budget=lora_budget, out_dir=tmp_path / "one", seed=1,
                       log=first_lines.append, parts=parts)
    for arm, result in first.items():
        stage = result.stages[-1]
        record = json.loads((parts.stage_dir(arm, stage) / "part.json").read_text())
        assert record["kind"] == "adapter" and set(record["files"]) == {"adapter_config.json",
                                                                       "adapter_model.safetensors"}, arm
        assert record["steps"] == stage_configs(lora_budget, 1)[stage].max_steps
        assert result.model_dir.name == "model" and (result.model_dir / "model.safetensors").is_file()
    second_lines: list[str] = []
    second = train_arms(base_dir=DEMO_MODEL_DIR, budget=lora_budget, out_dir=tmp_path / "two", seed=1,
                        log=second_lines.append, parts=parts)
    assert sum("taken from the kept part" in line for line in second_lines) == len(ARMS)
    assert not any("] step " in line for line in second_lines)
    for arm in ARMS:
        assert model_checksum(second[arm].model_dir) == model_checksum(first[arm].model_dir), arm
        assert second[arm].steps == first[arm].steps and second[arm].stages == first[arm].stages


def test_a_part_is_used_only_for_the_same_start_config_and_data(lora_budget, tmp_path):
    """The stage key covers what the stage started from, its config and its data; a part under another key, or
    with a changed or missing file, is not found."""
    from training_jobs.reproduce.arms import _stage_key

    config = stage_configs(lora_budget, 1)["sft"]
    key = _stage_key("start", "sft", config, "data")
    assert key != _stage_key("other start", "sft", config, "data")
    assert key != _stage_key("start", "sft", config.model_copy(update={"learning_rate": 1e-5}), "data")
    assert key != _stage_key("start", "sft", config, "other data")
    assert key_of({"a": 1, "b": [1, 2]}) == key_of({"b": [1, 2], "a": 1})  # canonical JSON

    parts = Parts(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    (source / "adapter_config.json").write_text("{}")
    (source / "adapter_model.safetensors").write_bytes(b"weights")
    where = parts.keep_stage("hsa_sft", "sft", key, source, adapter=True, record={"steps": 2, "wall_s": 1.0})
    assert not where.with_name("sft.keeping").exists()
    assert parts.find_stage("hsa_sft", "sft", key)["kind"] == "adapter"
    assert parts.find_stage("hsa_sft", "sft", "another key") is None
    (where / "adapter_model.safetensors").write_bytes(b"changed")
    assert parts.find_stage("hsa_sft", "sft", key) is None
    (where / "adapter_model.safetensors").unlink()
    assert parts.find_stage("hsa_sft", "sft", key) is None
    assert parts.find_stage("fixed_sft", "sft", key) is None  # never kept
