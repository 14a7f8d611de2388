"""What every HAT stage does around its TRL trainer: load the model it starts from, turn the stage config into
TRL arguments, resume from the latest checkpoint, stop cooperatively, and save a final model directory that
the local server (or vLLM) can serve as it is.

Layout of a stage's output directory::

    out_dir/checkpoints/checkpoint-<step>/   full checkpoints (weights, optimizer, scheduler, RNG): resumable
    out_dir/final/                           the trained model (merged when LoRA was used, unless lora.merge
                                             is off: then the adapter alone) + tokenizer
    out_dir/stage.json                       the config, the result and the metrics of the last run
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training_jobs.hat.config import StageConfig
from training_jobs.hat.progress import NullReporter, ProgressCallback, StageReporter

REPO = Path(__file__).resolve().parents[2]

# Files of a model directory that are not weights but belong with them (the tiny model's build spec, the chat
# template a server applies, generation defaults).
BESIDE_WEIGHTS = ("generation_config.json", "tiny_model_spec.json", "chat_template.jinja")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # what peft saves for a LoRA adapter
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


@dataclass
class StageResult:
    """``final_dir`` is None when the stage stopped on request (resume from ``checkpoint_dir``)."""

    stage: str
    final_dir: Path | None
    checkpoint_dir: Path | None
    steps: int
    max_steps: int
    stopped: bool
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["final_dir"] = str(self.final_dir) if self.final_dir else None
        d["checkpoint_dir"] = str(self.checkpoint_dir) if self.checkpoint_dir else None
        return d


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a stage (the one with the highest step), or None."""
    root = Path(out_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))
             and (p / "trainer_state.json").exists()]
    return max(found)[1] if found else None


def load_model(model_dir: str | Path, config: StageConfig):
    """The model and tokenizer a stage starts from. The weights are always float32: with ``bf16`` the trainer runs
    the forward and backward passes under bfloat16 autocast (``TrainingArguments.bf16``) and keeps these as the
    master weights. Loaded in bfloat16 instead, an Adam step at a fine-tuning learning rate (a 0.1-0.3 % change)
    is about bfloat16's rounding step, and most updates would be rounded away."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if config.device == "cpu":
        torch.set_num_threads(config.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return model, tokenizer


def trainer_arguments(config: StageConfig, out_dir: Path) -> dict[str, Any]:
    """The ``transformers.TrainingArguments`` fields every stage shares (TRL's configs extend them)."""
    return dict(
        output_dir=str(out_dir / "checkpoints"),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=max(0, math.ceil(config.warmup_ratio * config.max_steps)),
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        seed=config.seed,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        save_only_model=False,  # optimizer, scheduler and RNG too: a resumed run continues the same schedule
        logging_steps=config.logging_steps,
        logging_first_step=True,
        use_cpu=config.device == "cpu",
        bf16=config.bf16,
        fp16=False,
        gradient_checkpointing=False,
        ddp_find_unused_parameters=False,  # every trained weight is used in each forward pass
        report_to="none",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def peft_config(config: StageConfig):
    if config.lora is None:
        return None
    from peft import LoraConfig

    lo = config.lora
    return LoraConfig(r=lo.r, lora_alpha=lo.alpha, lora_dropout=lo.dropout, target_modules=list(lo.target_modules),
                      task_type="CAUSAL_LM")


def train_and_finish(stage: str, trainer: Any, tokenizer: Any, config: StageConfig, *, model_dir: str | Path,
                     out_dir: Path, progress: ProgressCallback, resume: bool) -> StageResult:
    """Train (from the latest checkpoint when ``resume``), then save ``out_dir/final`` unless stopped on
    request. Writes ``out_dir/stage.json``."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the stage reports through ProgressCallback, not print()
    checkpoint = latest_checkpoint(out_dir) if resume else None
    if checkpoint is not None and trainer.args.world_size > 1 and trainer.args.device.type == "cpu":
        _load_onto_numbered_cpus()
    if checkpoint is not None:
        progress.reporter.log(f"resuming from {checkpoint.name}")
    t0 = time.perf_counter()
    output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    wall = time.perf_counter() - t0
    state = trainer.state
    losses = [h["loss"] for h in state.log_history if isinstance(h.get("loss"), (int, float))]
    metrics: dict[str, Any] = {
        "train_loss": output.training_loss, "final_loss": losses[-1] if losses else None, "wall_s": round(wall, 2),
        "steps_this_run": state.global_step - (int(checkpoint.name.split("-")[1]) if checkpoint else 0),
    }
    if metrics["steps_this_run"] and wall > 0:
        batch = config.per_device_batch_size * config.gradient_accumulation_steps * config.num_processes
        metrics["samples_per_s"] = round(metrics["steps_this_run"] * batch / wall, 3)
    main = trainer.accelerator.is_main_process  # under accelerate launch the main process alone writes
    final = None if progress.stopped else out_dir / "final"
    if final is not None and main:
        if final.exists():
            shutil.rmtree(final)
        model = trainer.accelerator.unwrap_model(trainer.model)
        if config.lora is not None and config.lora.merge:  # one directory a server loads as it is
            model = model.merge_and_unload()
        # a PeftModel (lora.merge off) writes only adapter_config.json + adapter_model.safetensors: an adapter
        # vLLM loads at run time on top of model_dir (the tokenizer and chat template stay beside it for peft)
        model.save_pretrained(str(final))
        tokenizer.save_pretrained(str(final))
        for name in BESIDE_WEIGHTS:
            src = Path(model_dir) / name
            if src.exists() and not (final / name).exists():
                shutil.copy(src, final / name)
    result = StageResult(stage, final, latest_checkpoint(out_dir), state.global_step, state.max_steps,
                         progress.stopped, metrics)
    if main:
        (out_dir / "stage.json").write_text(json.dumps({"config": config.model_dump(mode="json"),
                                                        **result.to_dict()}, indent=2, default=str) + "\n",
                                            encoding="utf-8")
    trainer.accelerator.wait_for_everyone()
    return result


def _load_onto_numbered_cpus() -> None:
    """Several CPU processes resume with ``map_location`` 'cpu:<rank>' (transformers passes each process's
    device), which torch cannot restore onto; a storage saved on the CPU stays where it is. GPUs are unaffected."""
    import torch

    def restore(storage: Any, location: str) -> Any:
        return storage if re.fullmatch(r"cpu:\d+", location) else None

    torch.serialization.register_package(11, lambda storage: None, restore)


def launch_command(stage: str, config: StageConfig, stage_args: list[str], *, python: str = sys.executable,
                   port: int | None = None) -> list[str]:
    """The command that runs a stage through :mod:`training_jobs.hat.cli` (``stage_args``: its ``--config``,
    ``--model``, ``--out``, ... options): plainly for one process; with ``accelerate launch`` and
    ``num_processes`` data-parallel processes when more than 1 (one per GPU, bf16 when the config asks; on
    device 'cpu' the same launcher over gloo, as the trainer is told to use the CPU). ``port``: the processes'
    rendezvous port (default: a free one, so two jobs on one host do not meet)."""
    module = ["-m", "training_jobs.hat.cli", stage, *stage_args]
    if config.num_processes <= 1:
        return [python, *module]
    return [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(config.num_processes),
            "--num_machines", "1", "--main_process_port", str(port or free_port()),
            "--mixed_precision", "bf16" if config.bf16 else "no", "--dynamo_backend", "no",
            *(["--num_cpu_threads_per_process", str(config.threads)] if config.device == "cpu" else []), *module]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reporter_or_null(reporter: StageReporter | None) -> StageReporter:
    return reporter if reporter is not None else NullReporter()


def run_launched(command: list[str], reporter: StageReporter, *, stop_grace_s: float = 600.0) -> StageResult:
    """Run a stage as a separate process (``launch_command``: the CLI, or ``accelerate launch`` over several
    GPUs) and follow its JSON lines: progress and log lines go to ``reporter``. When the reporter says stop, a
    stop file appears that every process of the stage checks at each step's end (a signal to the launcher would
    tear its processes down instead): they save a checkpoint and end. Returns the stage's final result; raises
    RuntimeError with the tail of its error output when it ends without one."""
    import subprocess
    import tempfile
    import threading

    stderr = tempfile.TemporaryFile(mode="w+")
    scratch = tempfile.TemporaryDirectory(prefix="hat-stage-")
    stop_file = Path(scratch.name) / "stop"
    proc = subprocess.Popen([*command, "--stop-file", str(stop_file)], stdout=subprocess.PIPE, stderr=stderr,
                            text=True, cwd=REPO, preexec_fn=_stop_with_parent)
    result: dict[str, Any] | None = None
    ended = threading.Event()

    def watch_stop() -> None:
        while proc.poll() is None and not ended.is_set():
            if reporter.should_stop():
                stop_file.touch()
                return
            time.sleep(1.0)

    watcher = threading.Thread(target=watch_stop, daemon=True)
    watcher.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.pop("event", None)
            if kind == "progress":
                reporter.report(event)
            elif kind == "log":
                reporter.log(str(event.get("line", "")))
            elif kind == "result":
                result = event
        proc.wait(timeout=stop_grace_s)
    finally:
        ended.set()
        if proc.poll() is None:
            proc.kill()
        watcher.join(timeout=5)
        scratch.cleanup()
    if result is None:
        stderr.seek(0)
        raise RuntimeError(f"the stage process ended ({proc.returncode}) without a result: "
                           f"{error_excerpt(stderr.read())}")
    return StageResult(stage=result["stage"], final_dir=Path(result["final_dir"]) if result.get("final_dir") else None,
                       checkpoint_dir=Path(result["checkpoint_dir"]) if result.get("checkpoint_dir") else None,
                       steps=result["steps"], max_steps=result["max_steps"], stopped=result["stopped"],
                       metrics=result.get("metrics") or {})


def _stop_with_parent() -> None:
    """In the stage process before it starts (Linux): SIGTERM it when the worker process that launched it dies,
    as when a cancel that was not honoured in time revokes the worker's task; SIGTERM is a cooperative stop."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def error_excerpt(text: str, limit: int = 2000) -> str:
    """What to show of a stage process's error output: its first traceback (under ``accelerate launch`` the
    launcher's own summary comes last and says only that a process failed), then the last lines."""
    first = text.find("Traceback (most recent call last)")
    if first < 0 or len(text) - first <= limit:
        return text[-limit:] if first < 0 else text[first:]
    return text[first:first + limit * 3 // 4] + "\n…\n" + text[-limit // 4:]
