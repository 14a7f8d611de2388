"""Training configs that were accepted and then failed in the worker are refused where they enter, at their path:
a seed past numpy's 2**32 - 1, LoRA module names with path characters, unbounded step counts, budgets and
sample limits, unknown or non-finite reward weights. Through the API (nothing queued, nothing saved) and on the
config models themselves (every stage)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from rest_framework.test import APIClient

from training_jobs.hat.config import MAX_SEED, PipelineConfig, RLStageConfig
from training_jobs.models import TrainingJob
from tests.training_jobs.test_training_views import CONFIG, base, hsa, queued_jobs  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("change, path", [
    ({"seed": 10**30}, "config.seed"),
    ({"seed": MAX_SEED + 1}, "config.seed"),
    ({"seed": -1}, "config.seed"),
    ({"save_steps": 10**9}, "config.save_steps"),
    ({"logging_steps": 10**12}, "config.logging_steps"),
    ({"max_samples": 10**12}, "config.max_samples"),
    ({"lora": {"target_modules": ["q_proj", "../../etc/passwd"]}}, "config.lora.target_modules[1]"),
    ({"lora": {"target_modules": ["q proj"]}}, "config.lora.target_modules[0]"),
    ({"lora": {"target_modules": ["x" * 200]}}, "config.lora.target_modules[0]"),
])
def test_api_refuses_out_of_range_configs_at_their_path(ml_staff, hsa, base, queued_jobs, change, path):  # noqa: F811
    client = APIClient()
    client.force_login(ml_staff)
    body = {"kind": "sft", "dataset": str(hsa.pk), "base_model": str(base.pk), "config": {**CONFIG, **change}}
    response = client.post("/api/training-jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert [e["path"] for e in response.json()["errors"]] == [path], response.json()
    assert not TrainingJob.objects.exists() and queued_jobs == []


def test_the_largest_accepted_values_are_accepted(ml_staff, hsa, base, queued_jobs):  # noqa: F811
    client = APIClient()
    client.force_login(ml_staff)
    config = {**CONFIG, "seed": MAX_SEED, "logging_steps": 1_000_000,
              "lora": {"target_modules": ["model.layers.0.self_attn.q_proj", "all-linear", "_x-1"]}}
    response = client.post("/api/training-jobs/", {"kind": "sft", "dataset": str(hsa.pk), "base_model": str(base.pk),
                                                   "config": config}, format="json")
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("rl, loc", [
    ({"reward_weights": {"accuracy": 1e9}}, ("rl", "reward_weights", "accuracy")),
    ({"reward_weights": {"accuracy": float("nan")}}, ("rl", "reward_weights", "accuracy")),
    ({"reward_weights": {"accuracy": float("inf")}}, ("rl", "reward_weights", "accuracy")),
    ({"reward_weights": {"accurracy": 1.0}}, ("rl", "reward_weights")),
    ({"reasoning_budget": 10**9}, ("rl", "reasoning_budget")),
    ({"seed": 10**30}, ("rl", "seed")),
])
def test_every_stage_is_bounded(rl, loc):
    with pytest.raises(ValidationError) as caught:
        PipelineConfig.model_validate({"rl": rl})
    assert [e["loc"] for e in caught.value.errors()] == [loc]


def test_reward_weight_names_are_the_rl_stages():
    from training_jobs.hat import config, rl

    assert config.REWARD_WEIGHT_NAMES == (*rl.REWARD_NAMES, "reasoning_length")
    assert RLStageConfig().reward_weights.keys() <= set(config.REWARD_WEIGHT_NAMES)


@pytest.mark.parametrize("field, value", [("tiny_gold_seed", 2**32), ("max_samples", 10**12)])
def test_dataset_sources_are_bounded(field, value):
    from training_jobs.schemas import Sources

    with pytest.raises(ValidationError) as caught:
        Sources.model_validate({"scenarios": [], field: value})
    assert [e["loc"] for e in caught.value.errors()] == [(field,)]
