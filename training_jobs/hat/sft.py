"""Stage 1, HSA-SFT: ``trl.SFTTrainer`` on a dataset the HSA builder wrote (TRL's conversational format:
``messages`` with tool calls whose arguments are JSON strings, ``tools`` as a JSON string), loss on the
assistant's tokens only. The same function trains the fixed-harness baseline on a fixed-harness dataset."""

from __future__ import annotations

from pathlib import Path

from training_jobs.hat.config import SFTStageConfig
from training_jobs.hat.progress import ProgressCallback, StageReporter
from training_jobs.hat.stage import (
    StageResult,
    load_model,
    peft_config,
    reporter_or_null,
    train_and_finish,
    trainer_arguments,
)


def load_sft_dataset(dataset_dir: str | Path, max_samples: int | None = None):
    """The rows of a dataset folder (``datasets.save_to_disk``) as SFTTrainer reads them: messages + tools."""
    from datasets import load_from_disk

    ds = load_from_disk(str(dataset_dir))
    missing = {"messages", "tools"} - set(ds.column_names)
    if missing:
        raise ValueError(f"{dataset_dir} is not a conversational dataset: no {', '.join(sorted(missing))} column")
    ds = ds.select_columns(["messages", "tools"])
    if max_samples is not None and len(ds) > max_samples:
        ds = ds.select(range(max_samples))
    if len(ds) == 0:
        raise ValueError(f"{dataset_dir} has no rows")
    return ds


def run_sft(config: SFTStageConfig, *, model_dir: str | Path, dataset_dir: str | Path, out_dir: str | Path,
            reporter: StageReporter | None = None, resume: bool = True,
            init_adapter: str | Path | None = None) -> StageResult:
    """Train ``model_dir`` on ``dataset_dir`` into ``out_dir`` (see :mod:`training_jobs.hat.stage` for the
    layout). ``resume``: continue from the latest checkpoint in ``out_dir`` when there is one. ``init_adapter``:
    start the LoRA from that saved adapter of ``model_dir`` (its weights; a fresh optimizer and schedule) instead
    of from zero, to train a kept adapter further on new rows; ``config.lora`` must match its rank."""
    from trl import SFTConfig, SFTTrainer

    reporter = reporter_or_null(reporter)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dataset = load_sft_dataset(dataset_dir, config.max_samples)
    model, tokenizer = load_model(model_dir, config)
    peft = peft_config(config)
    if init_adapter is not None:
        model, peft = _warm_started(model, Path(init_adapter), config), None
    progress = ProgressCallback(reporter)
    args = SFTConfig(**trainer_arguments(config, out), max_length=config.max_length,
                     assistant_only_loss=config.assistant_only_loss, packing=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft, callbacks=[progress])
    kept = len(trainer.train_dataset)
    if kept == 0:  # TRL drops rows whose assistant tokens were all cut off by max_length
        raise ValueError(f"no row of {dataset_dir} keeps an assistant token within max_length={config.max_length}: "
                         f"raise max_length")
    cut = f" ({len(dataset) - kept} had no assistant token within max_length)" if kept < len(dataset) else ""
    reporter.log(f"SFT: {kept} of {len(dataset)} rows from {dataset_dir}{cut}, {config.max_steps} steps on "
                 f"{config.device}")
    if config.lora is not None and not config.lora.merge:
        wide = f"; above 16, only servers started with --max-lora-rank >= {config.lora.r} load it" \
            if config.lora.r > 16 else ""
        reporter.log(f"LoRA r={config.lora.r} kept apart: the result is an adapter of {model_dir}{wide}")
    return train_and_finish("sft", trainer, tokenizer, config, model_dir=model_dir, out_dir=out, progress=progress,
                            resume=resume)


def _warm_started(model, adapter_dir: Path, config: SFTStageConfig):
    """``model`` with the saved LoRA adapter loaded trainable; an adapter of another shape is a clear error, not
    a silently different run."""
    from peft import PeftConfig, PeftModel

    if config.lora is None or config.lora.merge:
        raise ValueError("init_adapter trains an adapter further: it needs lora settings with merge=False")
    saved = PeftConfig.from_pretrained(str(adapter_dir))
    want = (config.lora.r, config.lora.alpha, sorted(config.lora.target_modules))
    have = (saved.r, saved.lora_alpha, sorted(saved.target_modules))
    if want != have:
        raise ValueError(f"{adapter_dir}: LoRA r={have[0]} alpha={have[1]} on {have[2]}, but this stage asks for "
                         f"r={want[0]} alpha={want[1]} on {want[2]}")
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
