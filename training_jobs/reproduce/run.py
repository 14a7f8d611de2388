"""One reproduction run: train the four arms, evaluate them and the base, write the table and ``run.json``.

``run.json`` records what makes the run reproducible and comparable: the command, the base (directory and
weights' sha256), the budget, the seed, every arm's stages, data hashes, steps and wall time, the evaluation's
wall time, the files the table was written to and the git commit. Plain Python (the command and the worker run it).

Without Django (a GPU host has none; :mod:`training_jobs.reproduce.gpu_bundle`), the same run::

    python -m training_jobs.reproduce.run --base smol --budget gpu --seed 0 --out DIR

takes the management command's arguments and refuses the same things (an unknown base or budget, a seed out of
range, a base that is not built); ``--out`` defaults to ``$HAT_DATA_DIR/reproduce/<base>-<budget>-seed<N>``
(``var/`` in the repository when ``HAT_DATA_DIR`` is unset, as the console's settings default).
"""

from __future__ import annotations

import argparse
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


def _bundle_record(base_dir: Path) -> dict[str, Any]:
    """What :mod:`training_jobs.reproduce.gpu_bundle` recorded when it unpacked the base here (the bfloat16 copy a
    GPU host trains from, and the float32 build it was cast from); nothing for a base built in place."""
    path = Path(base_dir) / "gpu_bundle.json"
    try:
        return {"gpu_bundle": json.loads(path.read_text(encoding="utf-8"))}
    except (OSError, ValueError):
        return {}


def _compute_s(arms: dict[str, Any], results: dict[str, Any]) -> dict[str, float]:
    """What the run cost over all its sittings (``training``/``evaluation``/``total`` are this sitting's, which with
    ``--keep`` may have taken kept parts): every stage once, and every model's evaluation (summed: two may have run at
    once)."""
    stages = {(s["stage"], s["start"], s["data_sha256"]): s["wall_s"]
              for arm in arms.values() for s in arm.config["stages"]}
    evaluations = [m.get("wall_s") or 0 for m in (results.get("models") or {}).values()]
    return {"stages_all_sittings": round(sum(stages.values()), 1),
            "evaluations_all_sittings": round(sum(evaluations), 1)}


def _keep_arg(keep_dir: Path | None) -> str:
    return f" --keep {keep_dir}" if keep_dir else ""


def command_line(base: str, budget: str, out_dir: Path, seed: int, keep_dir: Path | None = None) -> str:
    return f"HF_HUB_OFFLINE=1 .venv/bin/python manage.py reproduce_hat --base {base} --budget {budget} " \
           f"--seed {seed} --out {out_dir}{_keep_arg(keep_dir)}"


def reproduce(*, base: str, budget: str, out_dir: Path, seed: int = 0, log: Callable[[str], None] = print,
              command: str | None = None, keep_dir: Path | None = None) -> dict[str, Any]:
    """Train every arm of :data:`training_jobs.reproduce.arms.ARMS` from ``base`` with the budget ``budget`` and
    ``seed``, evaluate them and the base (T1, T2, T3 by level, T4; ``k`` samples per case), write the table and
    ``out_dir/run.json``. Returns run.json's content. ``command``: the command line run.json records (default: the
    management command's, :func:`command_line`). ``keep_dir``: keep every finished stage and evaluation there and
    take from there what an earlier run kept with the same key (:mod:`training_jobs.reproduce.parts`)."""
    from training_jobs.reproduce.evaluate import evaluate_models
    from training_jobs.reproduce.parts import Parts
    from training_jobs.reproduce.table import write_table

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    base_dir = base_model_dir(base)
    b = budget_for(budget, base)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log(f"reproduce_hat: base {base} ({base_dir}), budget {budget}, seed {seed}, out {out_dir}")
    parts = Parts(Path(keep_dir)) if keep_dir else None
    if parts is not None:
        log(f"keeping finished stages and evaluations in {parts.root}")
    arms = train_arms(base_dir=base_dir, budget=b, out_dir=out_dir, seed=seed, log=log, parts=parts)
    train_wall = time.perf_counter() - t0
    models = {"base": base_dir, **{name: arms[name].model_dir for name in ARMS}}
    t1 = time.perf_counter()
    results = evaluate_models(models=models, budget=b, out_dir=out_dir, seed=seed, log=log, parts=parts)
    eval_wall = time.perf_counter() - t1
    tables = write_table(results, out_dir)
    data = json.loads((out_dir / "data" / "data.json").read_text(encoding="utf-8"))
    run = {
        "command": command or command_line(base, budget, out_dir, seed, keep_dir),
        "keep_dir": str(keep_dir) if keep_dir else None,
        "argv": sys.argv,
        "base": {"name": base, "dir": str(base_dir), "weights_sha256": weights_sha256(base_dir),
                 **_bundle_record(base_dir)},
        "budget": b.to_dict(),
        "seed": seed,
        # a copy of the tree without .git (a GPU host) records the commit it was sent from, if the caller says it
        "git_commit": git_commit() or os.environ.get("HAT_GIT_COMMIT") or None,
        "data": data,
        "arms": {name: r.to_dict() for name, r in arms.items()},
        "models": {name: str(path) for name, path in models.items()},
        "tables": {name: str(path) for name, path in tables.items()},
        "wall_s": {"data": data.get("wall_s"), **{name: arms[name].wall_s for name in ARMS},
                   "training": round(train_wall, 1), "evaluation": round(eval_wall, 1),
                   "total": round(time.perf_counter() - t0, 1), **_compute_s(arms, results)},
    }
    (out_dir / "run.json").write_text(json.dumps(run, indent=2, default=str) + "\n", encoding="utf-8")
    log(f"reproduce_hat: done in {run['wall_s']['total']} s; table: "
        + ", ".join(str(p) for p in tables.values()))
    return run


def default_out_dir(base: str, budget: str, seed: int) -> Path:
    """Where a run writes when no ``--out`` is given: ``<data dir>/reproduce/<base>-<budget>-seed<N>``, the data
    dir being ``HAT_DATA_DIR`` or ``var/`` in the repository (the console settings' default), as the command."""
    data_dir = Path(os.environ.get("HAT_DATA_DIR") or REPO / "var")
    return data_dir / "reproduce" / f"{base}-{budget}-seed{seed}"


def plain_command_line(base: str, budget: str, out_dir: Path, seed: int, keep_dir: Path | None = None) -> str:
    return f"HF_HUB_OFFLINE=1 python -m training_jobs.reproduce.run --base {base} --budget {budget} " \
           f"--seed {seed} --out {out_dir}{_keep_arg(keep_dir)}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``manage.py reproduce_hat`` and of :func:`main` (one list for both)."""
    from training_jobs.reproduce.budgets import BUDGET_NAMES

    parser.add_argument("--base", required=True, choices=BASE_NAMES,
                        help="tiny: models/demo-tiny; smol: models/smollm2-135m (built by make install)")
    parser.add_argument("--budget", required=True, choices=BUDGET_NAMES,
                        help="smoke: minutes on CPU (CI); cpu: hours on 2 cores (see --keep); gpu: bfloat16")
    parser.add_argument("--out", default=None,
                        help="output folder (default: <HAT_DATA_DIR or var>/reproduce/<base>-<budget>-seed<N>)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data draw and of every stage")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="keep every finished stage (a LoRA stage's adapter, a few MB) and every model's "
                             "evaluation in DIR, and take from DIR what an earlier run kept with the same start, "
                             "config and data: a run longer than one sitting, done over several")


def main(argv: list[str] | None = None) -> int:
    """``python -m training_jobs.reproduce.run``: ``manage.py reproduce_hat`` without Django. Exit status 2 for a bad
    argument (argparse), 1 when the base is not built, 0 when the run wrote its table."""
    parser = argparse.ArgumentParser(
        prog="python -m training_jobs.reproduce.run",
        description="Train the four HAT arms from one base and budget, evaluate them and the base, write the table "
                    "(manage.py reproduce_hat without Django).")
    add_arguments(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from training_jobs.hat.config import MAX_SEED

    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed: 0 to {MAX_SEED}")
    try:
        base_model_dir(args.base)
    except BaseNotBuilt as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else default_out_dir(args.base, args.budget, args.seed)
    keep = Path(args.keep) if args.keep else None
    run = reproduce(base=args.base, budget=args.budget, out_dir=out, seed=args.seed, log=lambda line: print(
        line, flush=True), command=plain_command_line(args.base, args.budget, out, args.seed, keep), keep_dir=keep)
    print(f"done in {run['wall_s']['total']} s: {out / 'run.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
