"""Stage 2, general on-policy distillation: ``trl.DistillationTrainer``. The student (the HSA-SFT model) samples
answers to general instruction prompts; the frozen *pre-SFT base model* is the teacher, set explicitly (left
unset, TRL would distil the student into itself); ``beta`` 1.0 is the reverse KL (mode-seeking: the student is
pulled towards what the teacher finds likely on the student's own samples)."""

from __future__ import annotations

from pathlib import Path

from training_jobs.hat.config import DistillStageConfig
from training_jobs.hat.general_prompts import general_prompts, prompt_dataset
from training_jobs.hat.progress import ProgressCallback, StageReporter
from training_jobs.hat.stage import (
    StageResult,
    load_model,
    peft_config,
    reporter_or_null,
    train_and_finish,
    trainer_arguments,
)


def run_distill(config: DistillStageConfig, *, model_dir: str | Path, teacher_dir: str | Path,
                out_dir: str | Path, reporter: StageReporter | None = None, resume: bool = True,
                prompts: list[str] | None = None) -> StageResult:
    """Distil the base model (``teacher_dir``) back into the student (``model_dir``) on general prompts
    (default: :func:`general_prompts` with ``config.general_prompts`` and ``config.seed``)."""
    from trl import DistillationConfig, DistillationTrainer

    reporter = reporter_or_null(reporter)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    student, tokenizer = load_model(model_dir, config)
    teacher, teacher_tokenizer = load_model(teacher_dir, config)
    if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"the teacher {teacher_dir} and the student {model_dir} use different tokenizers: "
                         f"distillation compares their token distributions")
    teacher.eval()
    for p in teacher.parameters():  # frozen
        p.requires_grad_(False)
    dataset = prompt_dataset(prompts if prompts is not None else general_prompts(config.general_prompts, config.seed))
    progress = ProgressCallback(reporter)
    args = DistillationConfig(**trainer_arguments(config, out), beta=config.beta, temperature=config.temperature,
                              max_completion_length=config.max_new_tokens, disable_dropout=True)
    trainer = DistillationTrainer(model=student, teacher_model=teacher, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, peft_config=peft_config(config), callbacks=[progress])
    reporter.log(f"on-policy distillation: {len(dataset)} general prompts, teacher {teacher_dir}, "
                 f"beta {config.beta} ({'reverse KL' if config.beta == 1 else 'generalised JSD'}), "
                 f"{config.max_steps} steps on {config.device}")
    return train_and_finish("distill", trainer, tokenizer, config, model_dir=model_dir, out_dir=out,
                            progress=progress, resume=resume)
