"""SFT of the tiny demo model on reference-policy gold turns (TRL ``SFTTrainer``, CPU flags from STACK.md).

Conversational samples (``messages`` + ``tools``), assistant-only loss (TRL swaps in the training variant of
the qwen3 template, which marks assistant spans with ``{% generation %}``), tool-call arguments and tool lists
stored as JSON strings (Arrow would merge dict keys across rows and the template would render ``null``).

Runs as ``python -m training_jobs.tiny_model.train`` (used for the background run) or through
``manage.py train_demo_model``. Checkpoints are saved periodically so a stopped run still leaves a model;
a wall-clock deadline stops training cleanly (the last state is saved).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainSpec:
    """Recipe of the demo checkpoint (STACK.md: 4 x 128 reached copying at ~1,200 steps, batch 8)."""

    max_steps: int = 1200
    batch_size: int = 8
    learning_rate: float = 3e-3
    warmup_fraction: float = 0.05
    weight_decay: float = 0.0
    lr_scheduler_type: str = "cosine"
    train_samples: int = 6000
    seed: int = 0
    # a glow-gadget turn is ~1,100-1,450 tokens with this tokenizer (tiny_room ~420-520): a truncated sample loses
    # its assistant turns, so the limit covers the longest harness
    max_length: int = 1536
    # demo manifests and their shares of the gold data (training_jobs.tiny_model.gold.generate_mix)
    mix: dict[str, float] = field(default_factory=lambda: {"tiny_room": 1.0})
    history_share: float = 0.3
    # batches of similar lengths: a tiny-room sample padded to a glow-gadget one would cost 3x for nothing
    sampling: str = "group_by_length"
    save_steps: int = 200
    logging_steps: int = 10
    deadline_unix: float | None = None  # stop (and save) at this wall-clock time
    stop_after_steps: int | None = None  # stop (and save) here; the lr schedule still spans max_steps
    threads: int = 2
    extra: dict[str, Any] = field(default_factory=dict)


def dataset_rows(n: int, seed: int, mix: dict[str, float] | None = None,
                 history_share: float = 0.3) -> list[dict[str, Any]]:
    from training_jobs.tiny_model.gold import generate_mix

    rows = []
    for t in generate_mix(n, seed=seed, split="train", mix=mix, history_share=history_share):
        rows.append({"messages": json.dumps(t.messages, ensure_ascii=False), "tools": json.dumps(t.tools)})
    return rows


def _hf_dataset(rows: list[dict[str, Any]]):
    from datasets import Dataset

    # messages as real lists (the template needs them), each tool call's arguments already a JSON string;
    # the union of keys across messages (tool_calls / tool_call_id / name) becomes None where absent, which
    # the qwen3 template treats as "not set".
    return Dataset.from_list([{"messages": json.loads(r["messages"]), "tools": r["tools"]} for r in rows])


def train(model_dir: str | Path, out_dir: str | Path, spec: TrainSpec | None = None) -> dict[str, Any]:
    """Train ``model_dir`` (a built tiny model) into ``out_dir``; returns a summary dict."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    spec = spec or TrainSpec()
    torch.set_num_threads(spec.threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    dataset = _hf_dataset(dataset_rows(spec.train_samples, spec.seed, spec.mix, spec.history_share))

    class Deadline(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if (spec.deadline_unix is not None and time.time() >= spec.deadline_unix) or (
                spec.stop_after_steps is not None and state.global_step >= spec.stop_after_steps
            ):
                control.should_training_stop = True
                control.should_save = True
            return control

    config = SFTConfig(
        output_dir=str(out / "checkpoints"),
        max_steps=spec.max_steps,
        per_device_train_batch_size=spec.batch_size,
        learning_rate=spec.learning_rate,
        lr_scheduler_type=spec.lr_scheduler_type,
        warmup_steps=max(1, math.ceil(spec.warmup_fraction * spec.max_steps)),
        weight_decay=spec.weight_decay,
        assistant_only_loss=True,
        max_length=spec.max_length,
        packing=False,
        logging_steps=spec.logging_steps,
        save_steps=spec.save_steps,
        save_total_limit=2,
        save_only_model=True,
        seed=spec.seed,
        train_sampling_strategy=spec.sampling,
        # CPU flags (STACK.md)
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Deadline()],
    )
    t0 = time.time()
    result = trainer.train()
    wall = time.time() - t0
    final = out / "final"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    # keep the generation config and the build spec beside the weights
    for name in ("generation_config.json", "tiny_model_spec.json"):
        src = Path(model_dir) / name
        if src.exists() and not (final / name).exists():
            shutil.copy(src, final / name)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    summary = {
        "steps": trainer.state.global_step,
        "wall_s": round(wall, 1),
        "train_loss": result.training_loss,
        "final_logged_loss": losses[-1] if losses else None,
        "log_history": trainer.state.log_history,
        "spec": asdict(spec),
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model-dir", required=True, help="a built tiny model (build_tiny_model)")
    p.add_argument("--out", required=True)
    p.add_argument("--max-steps", type=int, default=TrainSpec.max_steps)
    p.add_argument("--train-samples", type=int, default=TrainSpec.train_samples)
    p.add_argument("--batch-size", type=int, default=TrainSpec.batch_size)
    p.add_argument("--lr", type=float, default=TrainSpec.learning_rate)
    p.add_argument("--save-steps", type=int, default=TrainSpec.save_steps)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=None, help="unix time at which to stop and save")
    p.add_argument("--stop-after-steps", type=int, default=None)
    p.add_argument("--mix", default="tiny_room=1", help="demo manifests and shares, e.g. tiny_room=0.4,skincare_v1=0.6")
    a = p.parse_args(argv)
    from training_jobs.tiny_model.gold import parse_mix

    spec = TrainSpec(
        max_steps=a.max_steps,
        train_samples=a.train_samples,
        batch_size=a.batch_size,
        learning_rate=a.lr,
        save_steps=a.save_steps,
        seed=a.seed,
        deadline_unix=a.deadline,
        stop_after_steps=a.stop_after_steps,
        mix=parse_mix(a.mix),
    )
    summary = train(a.model_dir, a.out, spec)
    summary.pop("log_history")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
