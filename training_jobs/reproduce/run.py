"""One reproduction run: train the four arms, evaluate them and the base, write the table and ``run.json``.

``run.json`` records what makes the run reproducible and comparable: the command, the base (directory and
weights' sha256), the budget, the seed, every arm's stages, data hashes, steps and wall time, the evaluation's
wall time, the files the table was written to and the git commit. Plain Python (the command and the worker run it).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training_jobs.provenance import git_commit
from training_jobs.reproduce.arms import ARMS, train_arms
from training_jobs.reproduce.budgets import BASE_NAMES, budget_for

REPO = Path(__file__).resolve().parents[2]
BASE_DIRS: dict[str, Path] = {"tiny": REPO / "models" / "demo-tiny", "smol": REPO / "models" / "smollm2-135m"}


class BaseNotBuilt(FileNotFoundError):
    pass


def base_model_dir(base: str) -> Path:
    """The directory of a base model by name; :class:`BaseNotBuilt` naming the directory when it is missing."""
    if base not in BASE_DIRS:
        raise ValueError(f"unknown base {base!r}: one of {', '.join(BASE_NAMES)}")
    path = BASE_DIRS[base]
    if not (path / "config.json").is_file():
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        raise BaseNotBuilt(f"the base {base!r} ({shown}) is not built (no config.json): run make install")
    return path


def weights_sha256(model_dir: Path) -> str:
    """sha256 over the model's weight files (safetensors), in name order."""
    digest = hashlib.sha256()
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def command_line(base: str, budget: str, out_dir: Path, seed: int) -> str:
    return f"HF_HUB_OFFLINE=1 .venv/bin/python manage.py reproduce_hat --base {base} --budget {budget} " \
           f"--seed {seed} --out {out_dir}"


def reproduce(*, base: str, budget: str, out_dir: Path, seed: int = 0, log: Callable[[str], None] = print
              ) -> dict[str, Any]:
    """Train every arm of :data:`training_jobs.reproduce.arms.ARMS` from ``base`` with the budget ``budget`` and
    ``seed``, evaluate them and the base (T1, T2, T3 by level, T4; ``k`` samples per case), write the table and
    ``out_dir/run.json``. Returns run.json's content."""
    from training_jobs.reproduce.evaluate import evaluate_models
    from training_jobs.reproduce.table import write_table

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    base_dir = base_model_dir(base)
    b = budget_for(budget, base)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log(f"reproduce_hat: base {base} ({base_dir}), budget {budget}, seed {seed}, out {out_dir}")
    arms = train_arms(base_dir=base_dir, budget=b, out_dir=out_dir, seed=seed, log=log)
    train_wall = time.perf_counter() - t0
    models = {"base": base_dir, **{name: arms[name].model_dir for name in ARMS}}
    t1 = time.perf_counter()
    results = evaluate_models(models=models, budget=b, out_dir=out_dir, seed=seed, log=log)
    eval_wall = time.perf_counter() - t1
    tables = write_table(results, out_dir)
    data = json.loads((out_dir / "data" / "data.json").read_text(encoding="utf-8"))
    run = {
        "command": command_line(base, budget, out_dir, seed),
        "argv": sys.argv,
        "base": {"name": base, "dir": str(base_dir), "weights_sha256": weights_sha256(base_dir)},
        "budget": b.to_dict(),
        "seed": seed,
        "git_commit": git_commit(),
        "data": data,
        "arms": {name: r.to_dict() for name, r in arms.items()},
        "models": {name: str(path) for name, path in models.items()},
        "tables": {name: str(path) for name, path in tables.items()},
        "wall_s": {"data": data.get("wall_s"), **{name: arms[name].wall_s for name in ARMS},
                   "training": round(train_wall, 1), "evaluation": round(eval_wall, 1),
                   "total": round(time.perf_counter() - t0, 1)},
    }
    (out_dir / "run.json").write_text(json.dumps(run, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"reproduce_hat: done in {run['wall_s']['total']} s; table: "
        + ", ".join(str(p) for p in tables.values()))
    return run
