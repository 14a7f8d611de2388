"""Run one HAT stage from the command line (and under ``accelerate launch`` for several GPUs):

    python -m training_jobs.hat.cli sft --config sft.json --model models/demo-tiny \\
        --dataset var/datasets/<id>/dataset --out var/runs/sft-1

Progress goes to stdout as JSON lines (``{"event": "progress", ...}``, ``{"event": "log", "line": ...}``, and a
last ``{"event": "result", ...}``) so a worker that launched it can follow it. SIGTERM or SIGINT stops the
stage cooperatively: a checkpoint is saved and a later run with the same ``--out`` resumes from it.
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
    def __init__(self, out=sys.stdout, main_process: bool = True):
        self.out, self.main, self.stop_requested = out, main_process, False

    def _emit(self, data: dict[str, Any]) -> None:
        if self.main:
            self.out.write(json.dumps(data, default=str) + "\n")
            self.out.flush()

    def report(self, point: dict[str, Any]) -> None:
        self._emit({"event": "progress", **point})

    def log(self, line: str) -> None:
        self._emit({"event": "log", "line": line})

    def should_stop(self) -> bool:
        return self.stop_requested

    def result(self, result: Any) -> None:
        self._emit({"event": "result", **result.to_dict()})


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["sft"])
    ap.add_argument("--config", required=True, help="the stage config as JSON (training_jobs.hat.config)")
    ap.add_argument("--model", required=True, help="model directory the stage starts from")
    ap.add_argument("--dataset", help="dataset folder (datasets.save_to_disk) for sft")
    ap.add_argument("--out", required=True, help="output directory (checkpoints/, final/, stage.json)")
    ap.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    a = ap.parse_args(argv)

    from pydantic import ValidationError

    from training_jobs.hat.config import SFTStageConfig

    try:
        config = SFTStageConfig.model_validate_json(Path(a.config).read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        print(f"invalid config {a.config}: {exc}", file=sys.stderr)
        return 2
    if not a.dataset:
        print("sft needs --dataset", file=sys.stderr)
        return 2
    # stdout carries the JSON lines only: whatever libraries print goes to stderr
    reporter = JsonLinesReporter(out=sys.stdout, main_process=int(os.environ.get("RANK", "0")) == 0)
    sys.stdout = sys.stderr

    def stop(signum, frame):  # cooperative: the trainer saves a checkpoint at the end of this step
        reporter.stop_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    from training_jobs.hat.sft import run_sft

    result = run_sft(config, model_dir=a.model, dataset_dir=a.dataset, out_dir=a.out, reporter=reporter,
                     resume=not a.no_resume)
    reporter.result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
