"""Run one HAT stage from the command line (and under ``accelerate launch`` for several GPUs):

    python -m training_jobs.hat.cli sft --config sft.json --model models/demo-tiny \\
        --dataset var/datasets/<id>/dataset --out var/runs/sft-1
    python -m training_jobs.hat.cli distill --config distill.json --model var/runs/sft-1/final \\
        --teacher models/demo-tiny --out var/runs/distill-1
    python -m training_jobs.hat.cli rl --config rl.json --model var/runs/distill-1/final \\
        --samples var/runs/rl-1/samples.jsonl --out var/runs/rl-1

Progress goes to stdout as JSON lines (``{"event": "progress", ...}``, ``{"event": "log", "line": ...}``, and a
last ``{"event": "result", ...}``) so a worker that launched it can follow it. SIGTERM or SIGINT (or the file
``--stop-file`` names appearing) stops the stage cooperatively: a checkpoint is saved and a later run with the
same ``--out`` resumes from it.
Under ``accelerate launch`` only the main process prints.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


class JsonLinesReporter:
    def __init__(self, out=sys.stdout, main_process: bool = True, stop_file: str | None = None):
        self.out, self.main, self.stop_requested = out, main_process, False
        self.stop_file = Path(stop_file) if stop_file else None

    def _emit(self, data: dict[str, Any]) -> None:
        if self.main:
            self.out.write(json.dumps(data, default=str) + "\n")
            self.out.flush()

    def report(self, point: dict[str, Any]) -> None:
        self._emit({"event": "progress", **point})

    def log(self, line: str) -> None:
        self._emit({"event": "log", "line": line})

    def should_stop(self) -> bool:
        if not self.stop_requested and self.stop_file is not None and self.stop_file.exists():
            self.stop_requested = True
        return self.stop_requested

    def result(self, result: Any) -> None:
        self._emit({"event": "result", **result.to_dict()})


STAGES = ("sft", "distill", "rl")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--config", required=True, help="the stage config as JSON (training_jobs.hat.config)")
    ap.add_argument("--model", required=True, help="model directory the stage starts from")
    ap.add_argument("--dataset", help="sft: dataset folder (datasets.save_to_disk)")
    ap.add_argument("--teacher", help="distill: the frozen teacher's model directory (the pre-SFT base)")
    ap.add_argument("--samples", help="rl: canonical samples as JSON lines (training_jobs.hsa.samples."
                                      "write_samples_jsonl)")
    ap.add_argument("--out", required=True, help="output directory (checkpoints/, final/, stage.json)")
    ap.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    ap.add_argument("--stop-file", help="stop cooperatively once this file exists (how a launching worker asks "
                                        "every process of an `accelerate launch` at once)")
    a = ap.parse_args(argv)

    from pydantic import ValidationError

    from training_jobs.hat.config import DistillStageConfig, RLStageConfig, SFTStageConfig

    needs = {"sft": ("dataset", SFTStageConfig), "distill": ("teacher", DistillStageConfig),
             "rl": ("samples", RLStageConfig)}
    option, config_class = needs[a.stage]
    if not getattr(a, option):
        print(f"{a.stage} needs --{option}", file=sys.stderr)
        return 2
    try:
        config = config_class.model_validate_json(Path(a.config).read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        print(f"invalid config {a.config}: {exc}", file=sys.stderr)
        return 2
    # stdout carries the JSON lines only: whatever libraries print goes to stderr
    reporter = JsonLinesReporter(out=sys.stdout, main_process=int(os.environ.get("RANK", "0")) == 0,
                                 stop_file=a.stop_file)
    sys.stdout = sys.stderr

    def stop(signum, frame):  # cooperative: the trainer saves a checkpoint at the end of this step
        reporter.stop_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    common = dict(model_dir=a.model, out_dir=a.out, reporter=reporter, resume=not a.no_resume)
    if a.stage == "sft":
        from training_jobs.hat.sft import run_sft

        result = run_sft(config, dataset_dir=a.dataset, **common)
    elif a.stage == "distill":
        from training_jobs.hat.distill import run_distill

        result = run_distill(config, teacher_dir=a.teacher, **common)
    else:
        from training_jobs.hat.rl import run_rl
        from training_jobs.hsa.samples import read_samples_jsonl

        result = run_rl(config, samples=read_samples_jsonl(a.samples), **common)
    reporter.result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
