"""A run's finished parts, kept where a later run picks them up (``reproduce_hat --keep DIR``), so that a run
longer than one sitting (the CPU budget on SmolLM2: hours of training and evaluation on 2 cores) is done over
several: every stage that finishes keeps what it trained, every model evaluated keeps its result, and a run with
the same ``--keep`` redoes only what is not there. Plain Python, no Django.

Layout under the keep directory::

    <arm>/<stage>/part.json          the key, what was kept, the stage's record (steps, wall time, metrics)
    <arm>/<stage>/adapter_*          the LoRA adapter (the merged model is rebuilt from it: a few MB, not 540)
    <arm>/<stage>/<model files>      or the whole model, for a fully fine-tuned stage (the tiny base)
    eval/<model>/part.json           the key and the model's evaluation result
    eval/<model>/samples/*.jsonl     its samples, as the run writes them

A part is used only when its key matches: for a stage, what it started from (the base's weights, or the key of
the stage before it), its config and its data's sha256; for an evaluation, the model's weights and how it was
evaluated (cases, sampling, k, seed, serving). Each file's sha256 is recorded and checked, and a part is written
beside its place and renamed, so an interrupted run leaves no half part.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PART_RECORD = "part.json"
EVAL = "eval"


def key_of(what: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of ``what``: a part's key."""
    return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Parts:
    """The keep directory of a run (``root``)."""

    root: Path

    def stage_dir(self, arm: str, stage: str) -> Path:
        return self.root / arm / stage

    def eval_dir(self, model: str) -> Path:
        return self.root / EVAL / model

    # --- reading ---------------------------------------------------------------------------------------------

    def find(self, where: Path, key: str) -> dict[str, Any] | None:
        """The record of the part at ``where`` when its key is ``key`` and every file it lists is there unchanged;
        None otherwise (no part, another key, a file missing or changed)."""
        try:
            record = json.loads((where / PART_RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("key") != key:
            return None
        for name, digest in (record.get("files") or {}).items():
            path = where / name
            if not path.is_file() or _sha256(path) != digest:
                return None
        return record

    def find_stage(self, arm: str, stage: str, key: str) -> dict[str, Any] | None:
        return self.find(self.stage_dir(arm, stage), key)

    def find_eval(self, model: str, key: str) -> dict[str, Any] | None:
        return self.find(self.eval_dir(model), key)

    # --- writing ---------------------------------------------------------------------------------------------

    def keep(self, where: Path, key: str, files: Iterable[tuple[Path, str]], record: Mapping[str, Any]) -> Path:
        """Keep a part at ``where``: ``files`` (source path, name in the part) copied, ``record`` with the key and
        each file's sha256 written as part.json. Built beside ``where`` and renamed over it."""
        tmp = where.with_name(where.name + ".keeping")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        digests = {}
        for source, name in files:
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            digests[name] = _sha256(target)
        (tmp / PART_RECORD).write_text(json.dumps({**record, "key": key, "files": digests}, indent=2, default=str)
                                       + "\n", encoding="utf-8")
        shutil.rmtree(where, ignore_errors=True)
        tmp.rename(where)
        return where

    def keep_stage(self, arm: str, stage: str, key: str, model_dir: Path, *, adapter: bool,
                   record: Mapping[str, Any]) -> Path:
        """Keep a finished stage: its adapter files (``adapter``: a LoRA stage, kept unmerged) or every file of
        its model directory."""
        from training_jobs.hat.stage import ADAPTER_FILES

        names = ADAPTER_FILES if adapter else sorted(p.name for p in model_dir.iterdir() if p.is_file())
        return self.keep(self.stage_dir(arm, stage), key, ((model_dir / n, n) for n in names),
                         {**record, "kind": "adapter" if adapter else "model"})

    def keep_eval(self, model: str, key: str, result: Mapping[str, Any], samples_dir: Path) -> Path:
        samples = sorted(samples_dir.glob("*.jsonl")) if samples_dir.is_dir() else []
        return self.keep(self.eval_dir(model), key, ((p, f"samples/{p.name}") for p in samples),
                         {"model": model, "result": result})

    def restore_samples(self, model: str, record: Mapping[str, Any], samples_dir: Path) -> None:
        """Copy a kept evaluation's samples back into the run's ``samples/<model>/``."""
        samples_dir.mkdir(parents=True, exist_ok=True)
        for name in record.get("files") or {}:
            if name.startswith("samples/"):
                shutil.copyfile(self.eval_dir(model) / name, samples_dir / name.split("/", 1)[1])
