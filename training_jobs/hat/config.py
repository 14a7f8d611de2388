"""One typed config per HAT stage (TRL style: every field documented, safe defaults that run on a CPU).

The same config runs a stage on a CPU worker with the project's tiny model (tests, CI, the embedded default)
and on a GPU worker with a real base model: only the values differ (``device``, ``bf16``, batch sizes, steps).
Configs are stored with each job (a snapshot) and validated with path-precise errors before a job is queued.

Every number has bounds and every name a pattern, so a config that is accepted also runs: a seed past
``MAX_SEED`` (numpy's limit, reached through ``transformers.set_seed``), a LoRA module name with path characters,
an unbounded step count or budget, NaN or infinity failed only in the worker, after the job was queued.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_SEED = 2**32 - 1  # numpy.random.seed's limit (transformers.set_seed seeds numpy, torch and random)
MAX_STEPS = 1_000_000
# A module name peft can match (``q_proj``, ``model.layers.0.mlp.down_proj``, ``all-linear``): no path characters.
MODULE_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}"
# The rewards of stage 3 (training_jobs.hat.rl.REWARD_NAMES) and the reasoning-length penalty.
REWARD_WEIGHT_NAMES = ("accuracy", "effectiveness", "tool_rationality", "skill_selection", "reasoning_length")


def _module_name(value: str) -> str:
    if not re.fullmatch(MODULE_NAME_PATTERN, value):
        raise ValueError(f"{value!r} is not a module name: a letter or '_' first, then letters, digits, '_', '.' "
                         f"or '-' (at most 128 characters; no '/', spaces or other path characters)")
    return value


class LoraSettings(BaseModel):
    """Optional LoRA adapters (peft) instead of full fine-tuning."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(16, ge=1, le=512, description="Adapter rank.")
    alpha: int = Field(32, ge=1, le=4096, description="LoRA alpha (scaling = alpha / r).")
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the adapter inputs.")
    target_modules: list[Annotated[str, AfterValidator(_module_name)]] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, max_length=64,
        description="Module names the adapters wrap (letters, digits, '_', '.', '-'; at most 128 characters).")
    merge: bool = Field(True, description=(
        "Merge the adapters into the weights at the end: one model directory any server loads as it is. False "
        "keeps the adapter apart (adapter_config.json + adapter_model.safetensors, a few hundred kB): registered "
        "as an adapter of the model the stage started from, loaded into a running vLLM at run time "
        "(--enable-lora; r must be at most the server's --max-lora-rank, 16 unless the profile says otherwise). "
        "Only the last stage of a pipeline may keep it apart: the next stage trains a full model."))


class StageConfig(BaseModel):
    """What every stage shares: the optimisation schedule, checkpoints, logging and the device."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(40, ge=1, le=MAX_STEPS, description="Optimizer steps of this stage.")
    per_device_batch_size: int = Field(4, ge=1, le=1024, description="Samples per device per step.")
    gradient_accumulation_steps: int = Field(1, ge=1, le=1024, description="Micro-batches per optimizer step.")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="Peak learning rate.")
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        "cosine", description="Learning-rate schedule after warm-up.")
    warmup_ratio: float = Field(0.05, ge=0, lt=1, description="Share of the steps spent warming up.")
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, le=1000, description="Gradient clipping.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of data order, sampling and initialisation of new "
                                                          "weights (0 to 2**32 - 1).")
    save_steps: int = Field(20, ge=1, le=MAX_STEPS, description="Save a checkpoint every this many steps (also on "
                                                                "cancel and at the end); a job resumes from the "
                                                                "latest one.")
    save_total_limit: int = Field(2, ge=1, le=100, description="Checkpoints kept on disk.")
    logging_steps: int = Field(1, ge=1, le=MAX_STEPS, description="Report loss, learning rate and speed every "
                                                                  "this many steps.")
    device: Literal["cpu", "cuda"] = Field("cpu", description="Where to train: 'cpu' (tiny models, CI) or "
                                                              "'cuda' (a GPU worker).")
    bf16: bool = Field(False, description="bfloat16 mixed precision (GPU only).")
    threads: int = Field(2, ge=1, le=256, description="CPU threads for torch (device 'cpu').")
    num_processes: int = Field(1, ge=1, le=64, description="Processes on this host, one per GPU: more than 1 "
                                                           "launches the stage with `accelerate launch` (data "
                                                           "parallel; on device 'cpu' over gloo, `threads` each).")
    lora: LoraSettings | None = Field(None, description="Train LoRA adapters instead of every weight.")

    @model_validator(mode="after")
    def _device_flags(self) -> StageConfig:
        if self.device == "cpu" and self.bf16:
            raise ValueError("bf16 needs device 'cuda'")
        return self


class SFTStageConfig(StageConfig):
    """Stage 1, HSA-SFT (``trl.SFTTrainer``): supervised fine-tuning on an HSA dataset (or, for the baseline,
    on a fixed-harness dataset) in TRL's conversational format, tools in the chat template, loss on the
    assistant turns only."""

    max_length: int = Field(2048, ge=32, le=131_072, description="Tokens per sample (longer ones are cut); at most "
                                                                 "the model's context (max_position_embeddings).")
    assistant_only_loss: bool = Field(True, description="Loss on the assistant's tokens only (tool calls and "
                                                        "replies), not on the prompt, skills or tool results.")
    max_samples: int | None = Field(None, ge=1, le=100_000_000, description="Train on at most this many rows "
                                                                           "of the dataset.")


class DistillStageConfig(StageConfig):
    """Stage 2, general on-policy distillation (``trl.DistillationTrainer``): every batch is sampled by the
    student, the frozen pre-SFT base model is the teacher, reverse KL, on general instruction prompts."""

    learning_rate: float = Field(5e-4, gt=0, le=1, description="Peak learning rate.")
    beta: float = Field(1.0, ge=0, le=1, description="Generalised JSD interpolation: 1.0 is the reverse KL.")
    temperature: float = Field(0.9, gt=0, le=2, description="Sampling temperature of the student.")
    max_new_tokens: int = Field(64, ge=1, le=8192, description="Tokens the student samples per prompt.")
    general_prompts: int = Field(200, ge=1, le=100_000, description=(
        "General instruction prompts to use (verifiable-instruction prompts written for the project and the "
        "built everyday set; disjoint from every evaluation set)."))


class RLStageConfig(StageConfig):
    """Stage 3, HSA agentic RL (``trl.GRPOTrainer``): rollouts act in the live-room simulator through the turn
    engine under original and HSA-augmented harness states; four rewards normalised per group."""

    learning_rate: float = Field(2e-4, gt=0, le=1, description="Peak learning rate.")
    num_generations: int = Field(4, ge=2, le=64, description="Rollouts per prompt (the group).")
    max_completion_length: int = Field(96, ge=8, le=16_384, description="Tokens per model call of a rollout.")
    temperature: float = Field(0.9, gt=0, le=2, description="Sampling temperature of rollouts.")
    augment_probability: float = Field(0.5, ge=0, le=1, description="Share of rollouts under an HSA-augmented "
                                                                    "harness state (the rest: the original).")
    reward_weights: dict[str, Annotated[float, Field(ge=0, le=100)]] = Field(
        default_factory=lambda: {"accuracy": 1.0, "effectiveness": 1.0, "tool_rationality": 1.0,
                                 "skill_selection": 0.5},
        description="Weight (0 to 100) of each reward after normalisation within its group: "
                    + ", ".join(REWARD_WEIGHT_NAMES) + " (a reward left out weighs 1).")
    reasoning_budget: int = Field(64, ge=0, le=16_384, description="Reasoning tokens allowed before the length "
                                                                   "penalty.")
    reasoning_penalty: float = Field(0.01, ge=0, le=1, description="Penalty per reasoning token over budget.")
    prompts: int = Field(64, ge=1, le=1_000_000, description="Simulator prompts (comments in their rooms).")


    @field_validator("reward_weights")
    @classmethod
    def _known_rewards(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(REWARD_WEIGHT_NAMES))
        if unknown:
            raise ValueError(f"unknown rewards {unknown}; known: {', '.join(REWARD_WEIGHT_NAMES)}")
        return value


class PipelineConfig(BaseModel):
    """Stages 1 → 2 → 3, each starting from the previous stage's final checkpoint."""

    model_config = ConfigDict(extra="forbid")

    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    distill: DistillStageConfig | None = Field(default_factory=DistillStageConfig,
                                               description="None skips stage 2.")
    rl: RLStageConfig | None = Field(default_factory=RLStageConfig, description="None skips stage 3.")

    @model_validator(mode="after")
    def _adapter_last(self) -> PipelineConfig:
        stages = [(name, c) for name, c in (("sft", self.sft), ("distill", self.distill), ("rl", self.rl))
                  if c is not None]
        for name, stage in stages[:-1]:
            if stage.lora is not None and not stage.lora.merge:
                raise ValueError(f"{name}.lora.merge: only the last stage may keep its LoRA adapter apart (the "
                                 f"next stage starts from a full model)")
        return self
