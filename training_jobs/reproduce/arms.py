"""The four arms of the HAT reproduction, trained from one base with one budget and one seed (plain Python).

    fixed_sft            SFT on the tasks under the one fixed harness state (the original rendering)
    hsa_sft              SFT on the same tasks under HSA states (same steps, batch, rows, order, seed)
    hsa_sft_distill      hsa_sft, then on-policy distillation from the frozen base on general prompts
    hsa_sft_distill_rl   hsa_sft_distill, then agentic RL in the simulator (original and HSA states)

The stages are the console's own (:mod:`training_jobs.hat.sft`, :mod:`~training_jobs.hat.distill`,
:mod:`~training_jobs.hat.rl`), run in this process; the data comes from :mod:`training_jobs.reproduce.data`.
LoRA adapters are merged after every stage, so each arm's model is one plain checkpoint directory; with a keep
directory (:mod:`training_jobs.reproduce.parts`) every finished stage is kept and a later run takes it from there.

Layout under ``out_dir``::

    data/fixed/rows.jsonl, data/fixed/dataset     stage 1 rows of fixed_sft (canonical JSON lines + datasets)
    data/hsa/rows.jsonl, data/hsa/dataset         stage 1 rows of the HSA arms
    data/distill/prompts.jsonl                    stage 2 prompts
    data/rl/samples.jsonl, data/rl/tasks.jsonl    stage 3 tasks (canonical samples; what the policy reads)
    data/data.json                                hashes, counts, what was left out and why
    <arm>/<stage>/final/                          the trained model, or its LoRA adapter (+ stage.json)
    <arm>/<stage>/model/                          a LoRA stage's model: the adapter merged into its start
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training_jobs.reproduce import data as D
from training_jobs.reproduce.budgets import Budget
from training_jobs.reproduce.parts import Parts, key_of

ARMS = ("fixed_sft", "hsa_sft", "hsa_sft_distill", "hsa_sft_distill_rl")
# Each arm: the stages it adds and the arm it continues from (None: the base).
_PLAN: dict[str, tuple[str | None, str]] = {
    "fixed_sft": (None, "sft"),
    "hsa_sft": (None, "sft"),
    "hsa_sft_distill": ("hsa_sft", "distill"),
    "hsa_sft_distill_rl": ("hsa_sft_distill", "rl"),
}
Log = Callable[[str], None]


@dataclass
class ArmResult:
    """One trained arm. ``model_dir``: a plain checkpoint directory (LoRA merged) transformers loads as it is.
    ``steps`` and ``wall_s`` count every stage from the base (a continued arm includes the stages it continues);
    ``train_data_sha256``: sha256 over the sha256 of each stage's data file, in stage order; ``data``: the stage's
    data files (stage -> path); ``config``: the stage configs and data hashes, stage by stage."""

    arm: str
    model_dir: Path
    stages: tuple[str, ...]
    steps: int
    wall_s: float
    train_data_sha256: str
    data: dict[str, Path] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "model_dir": str(self.model_dir), "stages": list(self.stages), "steps": self.steps,
                "wall_s": self.wall_s, "train_data_sha256": self.train_data_sha256,
                "data": {k: str(v) for k, v in self.data.items()}, "config": self.config}


class _Reporter:
    """Stage progress as log lines: the first step, every tenth of the stage and the last; never stops."""

    def __init__(self, log: Log, label: str):
        self.out, self.label, self._next = log, label, 0.0

    def report(self, point: Mapping[str, Any]) -> None:
        step, total = int(point.get("step", 0)), max(int(point.get("max_steps", 1)), 1)
        if step >= self._next or step == total:
            self._next = step + max(total / 10, 1)
            shown = {k: round(point[k], 4) for k in ("loss", "reward", "learning_rate") if k in point}
            self.out(f"[{self.label}] step {step}/{total} " + " ".join(f"{k} {v}" for k, v in shown.items()))

    def log(self, line: str) -> None:
        self.out(f"[{self.label}] {line}")

    def should_stop(self) -> bool:
        return False


# --- stage configs ------------------------------------------------------------------------------------------------


def _common(budget: Budget, steps: int, batch: int, lr: float, seed: int) -> dict[str, Any]:
    from training_jobs.hat.config import LoraSettings

    # the adapter is saved apart and merged by train_arms (merge_adapter: the same bytes as merging in memory), so
    # a kept stage is its few-MB adapter
    lora = LoraSettings(r=budget.lora_rank, alpha=budget.lora_alpha, target_modules=list(budget.lora_targets),
                        merge=False) if budget.lora else None
    # one checkpoint, at the end (removed once the final model is saved): a run is reproduced, not resumed
    return dict(max_steps=steps, per_device_batch_size=batch, learning_rate=lr, seed=seed, save_steps=steps,
                save_total_limit=1, logging_steps=1, device=budget.device, bf16=budget.dtype == "bfloat16",
                threads=budget.threads, lora=lora)


def stage_configs(budget: Budget, seed: int) -> dict[str, Any]:
    """The SFT, distillation and RL configs every arm uses (pydantic models of training_jobs.hat.config)."""
    from training_jobs.hat.config import DistillStageConfig, RLStageConfig, SFTStageConfig

    b = budget
    return {
        "sft": SFTStageConfig(**_common(b, b.sft_steps, b.sft_batch_size, b.sft_lr, seed), max_length=b.max_seq_len,
                              assistant_only_loss=True),
        "distill": DistillStageConfig(**_common(b, b.distill_steps, b.distill_batch_size, b.distill_lr, seed),
                                      max_new_tokens=b.distill_max_new_tokens, general_prompts=b.distill_prompts),
        "rl": RLStageConfig(**_common(b, b.rl_steps, b.rl_batch_size, b.rl_lr, seed),
                            num_generations=b.rl_generations, max_completion_length=b.rl_max_completion_length,
                            prompts=b.rl_prompts, augment_probability=D.RL_AUGMENT_PROBABILITY),
    }


# --- data -------------------------------------------------------------------------------------------------------------


def prepare_data(*, base_dir: Path, budget: Budget, out_dir: Path, seed: int, log: Log = print) -> dict[str, Any]:
    """Write every stage's data under ``out_dir/data`` (see the module docstring); returns ``data.json``'s content:
    per stage its file, sha256 and size, and the tasks left out (by reason)."""
    from transformers import AutoTokenizer

    from training_jobs.hsa.samples import read_samples_jsonl, write_samples_jsonl

    t0 = time.perf_counter()
    root = out_dir / "data"
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    problems = D.template_problems(tokenizer)
    if problems:
        raise ValueError(f"the base {base_dir} cannot be trained on tool-use turns: {'; '.join(problems)} (give it "
                         f"a chat template that renders tools and tool calls, e.g. the ChatML one TRL ships for "
                         f"Qwen, for the base and every arm alike)")
    s1 = D.stage1_data(budget.train_samples, seed=seed, tokenizer=tokenizer, max_seq_len=budget.max_seq_len)
    info: dict[str, Any] = {"seed": seed, "train_harness": D.train_harness_name(), "tasks": len(s1.tasks),
                            "left_out": s1.left_out, "hsa_build": {k: s1.hsa_stats[k] for k in
                                                                   ("rows", "dropped", "harness_variants")}}
    info["fixed"] = {"file": str(root / "fixed" / "rows.jsonl"), "rows": len(s1.fixed_rows),
                     "sha256": D.write_stage1_dataset(s1.fixed_rows, root / "fixed")}
    info["hsa"] = {"file": str(root / "hsa" / "rows.jsonl"), "rows": len(s1.hsa_rows),
                   "sha256": D.write_stage1_dataset(s1.hsa_rows, root / "hsa"),
                   "operators": sorted({op for r in s1.hsa_rows for op in r["operators"]})}
    prompts = D.distill_prompts(budget.distill_prompts, seed)
    info["distill"] = {"file": str(root / "distill" / "prompts.jsonl"), "rows": len(prompts),
                       "sha256": D.write_jsonl(({"prompt": p} for p in prompts), root / "distill" / "prompts.jsonl")}
    (root / "rl").mkdir(parents=True, exist_ok=True)
    write_samples_jsonl(s1.tasks[:budget.rl_prompts], root / "rl" / "samples.jsonl")
    # drawn from the samples as the RL stage reads them back, so these are the prompts it rolls out
    rl_rows = D.rl_task_rows(read_samples_jsonl(root / "rl" / "samples.jsonl"), seed=seed)
    info["rl"] = {"file": str(root / "rl" / "tasks.jsonl"), "rows": len(rl_rows),
                  "samples_sha256": D.file_sha256(root / "rl" / "samples.jsonl"),
                  "sha256": D.write_jsonl(rl_rows, root / "rl" / "tasks.jsonl"),
                  "augmented": sum(r["augmented"] for r in rl_rows)}
    info["wall_s"] = round(time.perf_counter() - t0, 2)
    (root / "data.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    log(f"data: {len(s1.tasks)} tasks (left out {s1.left_out}), fixed {info['fixed']['sha256'][:12]}, "
        f"hsa {info['hsa']['sha256'][:12]}, {len(prompts)} distillation prompts, {len(rl_rows)} RL tasks "
        f"({info['rl']['augmented']} augmented), {info['wall_s']} s")
    return info


# --- training ---------------------------------------------------------------------------------------------------------


def _combined(hashes: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()


def _stage_key(start_key: str, stage: str, config: Any, data_sha256: str) -> str:
    return key_of({"start": start_key, "stage": stage, "config": config.model_dump(mode="json"),
                   "data_sha256": data_sha256})


def _restore(part: dict[str, Any], part_dir: Path, start: Path, stage_out: Path, key: str, log: Log) -> Path:
    """The model of a kept stage, rebuilt under ``stage_out``: its adapter merged into ``start``, or its files."""
    from training_jobs.hat.merge import merge_adapter

    if part.get("kind") == "adapter":
        return merge_adapter(start, part_dir, stage_out / "model", inputs={"part": key}, log=log)
    final = stage_out / "final"
    shutil.rmtree(final, ignore_errors=True)
    final.mkdir(parents=True)
    for name in part["files"]:
        shutil.copyfile(part_dir / name, final / name)
    return final


def train_arms(*, base_dir: Path, budget: Budget, out_dir: Path, seed: int, log: Log = print,
               parts: Parts | None = None) -> dict[str, ArmResult]:
    """Train the four arms (:data:`ARMS`) from ``base_dir`` under ``out_dir`` with ``budget`` and ``seed``.
    ``parts``: keep every finished stage there, and take a stage from there instead of training it when one with
    the same key is kept (:mod:`training_jobs.reproduce.parts`)."""
    from training_jobs.hat.distill import run_distill
    from training_jobs.hat.merge import merge_adapter
    from training_jobs.hat.rl import run_rl
    from training_jobs.hat.sft import run_sft
    from training_jobs.hsa.samples import read_samples_jsonl
    from training_jobs.reproduce.evaluate import model_checksum

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = prepare_data(base_dir=base_dir, budget=budget, out_dir=out_dir, seed=seed, log=log)
    configs = stage_configs(budget, seed)
    root = out_dir / "data"
    stage_data = {"fixed_sft": ("sft", root / "fixed", info["fixed"]["sha256"]),
                  "hsa_sft": ("sft", root / "hsa", info["hsa"]["sha256"]),
                  "hsa_sft_distill": ("distill", root / "distill" / "prompts.jsonl", info["distill"]["sha256"]),
                  "hsa_sft_distill_rl": ("rl", root / "rl" / "tasks.jsonl", info["rl"]["sha256"])}
    results: dict[str, ArmResult] = {}
    keys: dict[str, str] = {}  # arm -> the key of its last stage (what the next stage starts from)
    base_key = model_checksum(base_dir) if parts else ""
    for arm in ARMS:
        parent, stage = _PLAN[arm]
        start = results[parent].model_dir if parent else base_dir
        _, data_path, data_hash = stage_data[arm]
        config = configs[stage]
        stage_out = out_dir / arm / stage
        reporter = _Reporter(log, f"{arm}/{stage}")
        keys[arm] = key = _stage_key(keys[parent] if parent else base_key, stage, config, data_hash)
        data_file = data_path / "rows.jsonl" if stage == "sft" else data_path
        prev = results.get(parent) if parent else None
        kept = parts.find_stage(arm, stage, key) if parts else None
        if kept is not None:
            assert parts is not None
            model_dir = _restore(kept, parts.stage_dir(arm, stage), start, stage_out, key, log)
            steps, wall, metrics = kept["steps"], kept["wall_s"], kept.get("metrics") or {}
            log(f"{arm}: {stage} taken from the kept part {parts.stage_dir(arm, stage)} ({steps} steps, trained "
                f"in {wall:.1f} s) -> {model_dir}")
            results[arm] = _arm_result(arm, stage, start, config, data_file, data_hash, steps, wall, metrics,
                                       model_dir, prev, base_dir, seed, budget,
                                       kept_part=str(parts.stage_dir(arm, stage)))
            continue
        log(f"{arm}: {stage} from {start}, {config.max_steps} steps")
        t0 = time.perf_counter()
        if stage == "sft":
            result = run_sft(config, model_dir=start, dataset_dir=data_path / "dataset", out_dir=stage_out,
                             reporter=reporter, resume=False)
        elif stage == "distill":
            prompts = [r["prompt"] for r in D.read_jsonl(data_path)]
            result = run_distill(config, model_dir=start, teacher_dir=base_dir, out_dir=stage_out, reporter=reporter,
                                 resume=False, prompts=prompts)
        else:
            samples = read_samples_jsonl(root / "rl" / "samples.jsonl")
            result = run_rl(config, model_dir=start, samples=samples, out_dir=stage_out, reporter=reporter,
                            resume=False)
        if result.final_dir is None or result.steps != config.max_steps:
            raise RuntimeError(f"{arm}: the {stage} stage ended at step {result.steps} of {config.max_steps} "
                               f"without a final model")
        model_dir = Path(result.final_dir)
        if config.lora is not None:  # final/ is the adapter: the arm's model is the start with it merged in
            model_dir = merge_adapter(start, result.final_dir, stage_out / "model", inputs={"part": key}, log=log)
        wall = round(time.perf_counter() - t0, 2)  # the whole stage: loading, the trainer's set-up, training, saving
        shutil.rmtree(stage_out / "checkpoints", ignore_errors=True)  # optimizer state: the final model is kept
        results[arm] = _arm_result(arm, stage, start, config, data_file, data_hash, result.steps, wall,
                                   result.metrics, model_dir, prev, base_dir, seed, budget)
        if parts is not None:
            kept_at = parts.keep_stage(arm, stage, key, Path(result.final_dir), adapter=config.lora is not None,
                                       record={"arm": arm, "stage": stage, "steps": result.steps, "wall_s": wall,
                                               "metrics": result.metrics, "data_sha256": data_hash})
            log(f"{arm}: {stage} kept at {kept_at}")
        log(f"{arm}: done in {wall:.1f} s -> {model_dir}")
    return results


def _arm_result(arm: str, stage: str, start: Path, config: Any, data_file: Path, data_hash: str, steps: int,
                wall: float, metrics: Mapping[str, Any], model_dir: Path, prev: ArmResult | None, base_dir: Path,
                seed: int, budget: Budget, kept_part: str | None = None) -> ArmResult:
    """An arm after one more stage (``prev``: the arm it continues, None from the base)."""
    stage_record = {"stage": stage, "start": str(start), "config": config.model_dump(mode="json"),
                    "data_file": str(data_file), "data_sha256": data_hash, "steps": steps, "wall_s": wall,
                    "metrics": dict(metrics), "kept_part": kept_part}
    stages_config = [*(prev.config["stages"] if prev else []), stage_record]
    return ArmResult(
        arm=arm, model_dir=Path(model_dir), stages=(*(prev.stages if prev else ()), stage),
        steps=(prev.steps if prev else 0) + steps, wall_s=round((prev.wall_s if prev else 0.0) + wall, 2),
        train_data_sha256=_combined([s["data_sha256"] for s in stages_config]),
        data={**(prev.data if prev else {}), stage: data_file},
        config={"base": str(base_dir), "seed": seed, "budget": budget.to_dict(), "stages": stages_config})


# --- what the arms were trained on ----------------------------------------------------------------------------------


def _texts_of(stage: str, path: Path) -> Iterator[str]:
    if stage == "distill":
        for r in D.read_jsonl(path):
            yield r["prompt"]
    else:  # sft rows and RL tasks: messages + tools
        for r in D.read_jsonl(path):
            yield D.row_text(r)


def training_prompts(arm_results: Mapping[str, ArmResult]) -> list[str]:
    """Every text any arm was trained on, once each: stage 1 rows (messages and tools), stage 2 prompts, stage 3
    rollout prompts (rendered system and user messages, and tools). For leakage checks against evaluation data."""
    seen: dict[Path, str] = {}
    for result in arm_results.values():
        for stage, path in result.data.items():
            seen.setdefault(Path(path), stage)
    texts: dict[str, None] = {}
    for path, stage in seen.items():
        texts.update(dict.fromkeys(_texts_of(stage, path)))
    return list(texts)
