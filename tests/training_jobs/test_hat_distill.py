"""Stage 2 (on-policy distillation) for real with TRL on tiny models: the student samples, the frozen base
model is the teacher; loss finite, the student's weights change and the teacher's do not, the final model
reloads; mismatched tokenizers are refused. General prompts: tests/training_jobs/test_general_prompts.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from training_jobs.hat.config import DistillStageConfig
from training_jobs.hat.distill import run_distill
from training_jobs.hat.general_prompts import general_prompts
from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

FAST = dict(max_steps=3, per_device_batch_size=2, learning_rate=1e-3, save_steps=100, max_new_tokens=8, threads=2)


def _weights(model_dir):
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


class Recorder:
    def __init__(self):
        self.points, self.lines = [], []

    def report(self, point):
        self.points.append(point)

    def log(self, line):
        self.lines.append(line)

    def should_stop(self):
        return False


def _drifted_student(out: Path) -> Path:
    """The demo model with its weights nudged: a student that differs from its teacher (as after SFT)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(DEMO_MODEL_DIR, out)
    model = AutoModelForCausalLM.from_pretrained(out)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(out)
    return out


def test_the_student_learns_from_the_frozen_base_model(tmp_path):
    student = _drifted_student(tmp_path / "student")
    before = _weights(student)
    rec = Recorder()
    result = run_distill(DistillStageConfig(**FAST), model_dir=student, teacher_dir=DEMO_MODEL_DIR,
                         out_dir=tmp_path / "out", reporter=rec, prompts=general_prompts(8, seed=0))
    assert (result.steps, result.stopped) == (3, False)
    losses = [p["loss"] for p in rec.points if "loss" in p]
    # a divergence above 0: the teacher is the base model, not the student itself (TRL's default when unset)
    assert losses and all(math.isfinite(x) and x >= 0 for x in losses) and max(losses) > 0
    after = _weights(result.final_dir)
    assert any(not (before[k] == after[k]).all() for k in before)  # the student changed
    assert any("reverse KL" in line for line in rec.lines)

    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(result.final_dir).num_parameters() > 0


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path):
    from training_jobs.tiny_model.build import TinyModelSpec, build_tiny_model

    other = build_tiny_model(tmp_path / "other", TinyModelSpec(vocab_size=600, hidden_size=32, intermediate_size=64,
                                                               num_hidden_layers=1, num_attention_heads=2,
                                                               num_key_value_heads=1, head_dim=16), gold_samples=20)
    with pytest.raises(ValueError, match="different tokenizers"):
        run_distill(DistillStageConfig(**FAST), model_dir=DEMO_MODEL_DIR, teacher_dir=other, out_dir=tmp_path / "o",
                    prompts=["hello"])
