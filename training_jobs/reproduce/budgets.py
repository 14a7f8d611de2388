"""How much `manage.py reproduce_hat` trains and evaluates: one :class:`Budget` per (budget, base).

Every arm of a run gets the same budget: the same base, steps, batch sizes, sequence length, data volume and
seed, so the arms differ only in what the comparison is about (fixed harness vs HSA, then the stages added).

Figures behind the CPU budget (STACK.md, "A real pretrained small model, offline"; 2 threads, fp32): one LoRA
r=16 step of SmolLM2-135M at 1 x 1,100 tokens takes 7.1 s, at 4 x 512 tokens 11.9 s. The training harness
(skincare_v1, T1's own harness) renders a training row to about 1,100 tokens with the tiny tokenizer and to 1,800-2,200
with SmolLM2's (HSA states with decoy tools and distractor skills up to about 2,700; measured with a ChatML template
that renders tools), so an SFT step at batch 2 costs about 25 s: 2 x 60 SFT steps, 20 distillation steps and 6 RL
steps take about an hour. Evaluation is in-process, one thread per model and two models at a time
(``eval_workers=2``: one per core). A turn of the base on T1 (it falls back: every retry is another model call of
up to 96 tokens over a ~2,000-token sequence) took 35-42 s reading the whole sequence at every call and 21-27 s with
the prefix cache (``training_jobs.hat.rl.PrefixCache``; ``bench/reproduce_eval_cache.py``: 1.58x over three cases,
the same replies, beside a training run). In the committed run, two models at a time, 12 T1 + 12 T2 + 15 T3 turns
and 20 IFEval answers took 21-28 minutes a model (1,237-1,696 s) and the five 74 minutes (results/hat-miniature).

Figures behind the GPU budget (one H200, bfloat16; :func:`training_jobs.reproduce.gpu_preflight.estimate`, planning
figures that the bundle's ``preflight`` replaces by measurements on the host before the run): a device command
may run 10 minutes and a session has 15 minutes of device time in all, transfers of the base included, so the
run must end within about 9 minutes (the script stops it at 540 s). The GPU is not what limits it: generation
is in process, one sequence at a time (evaluation and RL rollouts), bound by Python and kernel launches at about
20 ms per token for SmolLM2's 30 layers, whatever the GPU. A harness turn (about 150 tokens) then takes about
3 s and an IFEval answer about 2 s, so the evaluation sizes the first GPU budget had (256 + 256 + 250 harness
cases and 541 IFEval prompts, k = 4, five models) would take about 19 hours. The GPU budget therefore evaluates
what the CPU budget evaluates (the same seeded cases at the same seed, 128 tokens a call, not 96), five
models in five processes (``eval_workers``: about 160 s of decoding per model, about 230 s for all at 70 %
parallel efficiency), and spends the rest on training: full fine-tuning of every weight in bfloat16, an SFT step
at batch 8 of about 2,200 tokens taking about 0.3 s, so 80 steps over 640 rows (5x the CPU budget's rows) per SFT
arm, 16 distillation and 4 RL steps: about 130 s, about 430 s with loading, data and the table. Plain Python.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

BudgetName = Literal["smoke", "cpu", "gpu"]
BaseName = Literal["tiny", "smol"]
BUDGET_NAMES: tuple[str, ...] = ("smoke", "cpu", "gpu")
BASE_NAMES: tuple[str, ...] = ("tiny", "smol")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Budget:
    """The training and evaluation budget of one reproduction run (the same for every arm).

    Training (stage 1 is SFT, on the fixed harness or on HSA states; 2 on-policy distillation; 3 agentic RL):

    - ``sft_steps``, ``distill_steps``, ``rl_steps``: optimizer steps of each stage;
    - ``sft_batch_size``, ``distill_batch_size``, ``rl_batch_size``: samples per optimizer step (one device);
    - ``rl_generations``: rollouts per RL prompt (GRPO's group; ``rl_batch_size`` is a multiple of it);
    - ``max_seq_len``: tokens per SFT row (prompt, tools and the assistant turn; rows longer than this on the
      base's tokenizer are left out of *every* arm, so no arm loses rows to truncation);
    - ``train_samples``: canonical tasks of stage 1, the same number of rows for the fixed-harness and the HSA
      arm (the same tasks: one row each, under the original harness or under one HSA state); RL rolls out the
      first ``rl_prompts`` of them;
    - ``distill_prompts``, ``distill_max_new_tokens``: general instruction prompts of stage 2 and the tokens the
      student samples for each;
    - ``rl_prompts``, ``rl_max_completion_length``: RL tasks and the tokens per model call of a rollout;
    - ``sft_lr``, ``distill_lr``, ``rl_lr``: peak learning rates;
    - ``lora``, ``lora_rank``, ``lora_alpha``, ``lora_targets``: LoRA adapters (peft, merged after each stage so
      every arm is one plain checkpoint) instead of full fine-tuning;
    - ``dtype``: "float32" (CPU) or "bfloat16" (GPU, on device "cuda"); ``threads``: torch CPU threads.

    Evaluation (the evaluation half reads these):

    - ``k``: samples per evaluation case; ``n_t1``, ``n_t2``: T1 / T2 cases; ``n_t3_per_level``: T3 cases at
      each perturbation level; ``n_t4``: IFEval prompts; ``eval_max_new_tokens``: tokens per model call;
      ``eval_workers``: models evaluated at once, one process each (the same cases and seeds, so the same
      results as one after the other; GPU budgets, where one process leaves the GPU mostly idle).
    """

    name: BudgetName
    sft_steps: int
    distill_steps: int
    rl_steps: int
    sft_batch_size: int
    distill_batch_size: int
    rl_batch_size: int
    rl_generations: int
    max_seq_len: int
    train_samples: int
    distill_prompts: int
    distill_max_new_tokens: int
    rl_prompts: int
    rl_max_completion_length: int
    sft_lr: float
    distill_lr: float
    rl_lr: float
    lora: bool
    lora_rank: int
    lora_alpha: int
    lora_targets: tuple[str, ...]
    dtype: Literal["float32", "bfloat16"]
    threads: int
    k: int
    n_t1: int
    n_t2: int
    n_t3_per_level: int
    n_t4: int
    eval_max_new_tokens: int
    eval_workers: int = 1

    def __post_init__(self) -> None:
        problems = [f"{n} must be at least 1" for n in (
            "sft_steps", "distill_steps", "rl_steps", "sft_batch_size", "distill_batch_size", "rl_batch_size",
            "train_samples", "distill_prompts", "rl_prompts", "k", "threads", "eval_workers") if getattr(self, n) < 1]
        if self.rl_generations < 2 or self.rl_batch_size % self.rl_generations:
            problems.append("rl_batch_size must be a multiple of rl_generations (at least 2)")
        if self.rl_prompts > self.train_samples:
            problems.append("rl_prompts must be at most train_samples (RL rolls out training tasks)")
        if self.dtype not in ("float32", "bfloat16"):
            problems.append("dtype must be 'float32' or 'bfloat16'")
        if problems:
            raise ValueError(f"budget {self.name!r}: " + "; ".join(problems))

    @property
    def device(self) -> str:
        """bfloat16 budgets train on a GPU ('cuda'); float32 budgets on the CPU."""
        return "cuda" if self.dtype == "bfloat16" else "cpu"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        d["device"] = self.device
        return d


# The smoke budget: the tiny base, a few minutes of CPU in CI for training and evaluation together. It proves
# the machinery (every arm trained, every cell of the table filled), not the claims.
_SMOKE = Budget(
    name="smoke", sft_steps=8, distill_steps=3, rl_steps=2, sft_batch_size=2, distill_batch_size=2,
    rl_batch_size=2, rl_generations=2, max_seq_len=2048, train_samples=16, distill_prompts=8,
    distill_max_new_tokens=16, rl_prompts=4, rl_max_completion_length=32, sft_lr=1e-3, distill_lr=5e-4,
    rl_lr=2e-4, lora=False, lora_rank=16, lora_alpha=32, lora_targets=ATTENTION, dtype="float32", threads=2,
    k=2, n_t1=3, n_t2=3, n_t3_per_level=1, n_t4=4, eval_max_new_tokens=48)

# The CPU budget: SmolLM2-135M with LoRA r=16 on the attention projections. Measured here (2 cores): an SFT step of
# 2 rows of ~2,300 tokens took 41 s in a quiet probe and 50-110 s in the committed run (the arms took 65 and 67 min,
# distillation 2 min, RL 6 steps of 3-5 min); with five evaluations, more than a 3-hour sitting: run it with --keep
# (training_jobs.reproduce.parts). One SFT epoch over the tasks (60 steps x 2 = 120 rows).
_CPU = Budget(
    name="cpu", sft_steps=60, distill_steps=20, rl_steps=6, sft_batch_size=2, distill_batch_size=2,
    rl_batch_size=2, rl_generations=2, max_seq_len=3072, train_samples=120, distill_prompts=40,
    distill_max_new_tokens=48, rl_prompts=12, rl_max_completion_length=96, sft_lr=4e-4, distill_lr=2e-4,
    rl_lr=1e-4, lora=True, lora_rank=16, lora_alpha=32, lora_targets=ATTENTION, dtype="float32", threads=2,
    k=1, n_t1=12, n_t2=12, n_t3_per_level=3, n_t4=20, eval_max_new_tokens=96, eval_workers=2)

# The GPU budget: the same command in bfloat16 on one GPU (an H200 lent for 15 minutes: one command of at most
# 10 minutes, module docstring), full fine-tuning on 5x the CPU budget's rows; evaluated on the CPU budget's cases
# (the same selection at the same seed), the five models in five processes.
_GPU = Budget(
    name="gpu", sft_steps=80, distill_steps=16, rl_steps=4, sft_batch_size=8, distill_batch_size=8,
    rl_batch_size=4, rl_generations=4, max_seq_len=3072, train_samples=640, distill_prompts=128,
    distill_max_new_tokens=64, rl_prompts=16, rl_max_completion_length=96, sft_lr=5e-5, distill_lr=2e-5,
    rl_lr=1e-5, lora=False, lora_rank=16, lora_alpha=32, lora_targets=ATTENTION, dtype="bfloat16", threads=8,
    k=1, n_t1=12, n_t2=12, n_t3_per_level=3, n_t4=20, eval_max_new_tokens=128, eval_workers=5)

BUDGETS: dict[str, Budget] = {b.name: b for b in (_SMOKE, _CPU, _GPU)}

# What changes with the base. The tiny base (4 x 128, 1.5 M parameters, built from scratch on tool-use turns)
# trains every weight at a from-scratch learning rate; its context is 2,048 tokens. SmolLM2-135M on the CPU
# uses LoRA (set in _CPU) at LoRA learning rates; at smoke it keeps LoRA too (full fine-tuning of 135 M
# parameters on CPU is the 9.5 s step STACK.md measured).
_BASE_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("cpu", "tiny"): dict(lora=False, max_seq_len=2048, sft_lr=1e-3, distill_lr=5e-4, rl_lr=2e-4,
                          sft_steps=120, train_samples=240),
    ("gpu", "tiny"): dict(max_seq_len=2048, sft_lr=1e-3, distill_lr=5e-4, rl_lr=2e-4),
    ("smoke", "smol"): dict(lora=True, max_seq_len=3072, sft_lr=4e-4, distill_lr=2e-4, rl_lr=1e-4, sft_steps=4,
                            train_samples=8),
}


def budget_for(name: str, base: str) -> Budget:
    """The budget ``name`` for the base ``base`` ("tiny": models/demo-tiny, "smol": models/smollm2-135m).
    ValueError naming the known values for an unknown one."""
    if name not in BUDGETS:
        raise ValueError(f"unknown budget {name!r}: one of {', '.join(BUDGET_NAMES)}")
    if base not in BASE_NAMES:
        raise ValueError(f"unknown base {base!r}: one of {', '.join(BASE_NAMES)}")
    return replace(BUDGETS[name], **_BASE_OVERRIDES.get((name, base), {}))
