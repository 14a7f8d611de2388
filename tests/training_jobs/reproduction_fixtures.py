"""Fixtures of the reproduction-run tests: a result folder written with ``write_table`` from synthetic results (as
``reproduce()`` writes one, with a made-up run.json), built bases, the tasks sent instead of sending them, and a
succeeded run whose folder is such a fixture. No training, no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training_jobs.reproduce.table import LEVELS, ROWS, write_table

WEIGHTS_SHA = "ab12" * 16
FIXED_SHA, HSA_SHA = "f1" * 32, "c3" * 32


def score(mean: float, half: float = 0.05) -> dict:
    return {"mean": mean, "ci_low": max(0.0, mean - half), "ci_high": min(1.0, mean + half), "n": 8}


def model_results(i: int) -> dict:
    t1, t2 = 0.5 + 0.05 * i, 0.3 + 0.1 * i
    return {"t1": {"accuracy": score(t1), "effectiveness": score(t1 / 2, 0.01)},
            "t2": {"accuracy": score(t2), "effectiveness": score(t2 / 2, 0.01)},
            "gap": {"mean": t1 - t2, "ci_low": t1 - t2 - 0.1, "ci_high": t1 - t2 + 0.1, "n": 8, "paired": True},
            "t3": {lv: {"accuracy": score(0.6 - 0.1 * j)} for j, lv in enumerate(LEVELS)},
            "t4": {m: score(0.2 + 0.01 * i) for m in ("prompt_strict", "instruction_strict", "prompt_loose",
                                                      "instruction_loose")}}


def synthetic_results() -> dict:
    return {"budget": {"name": "smoke"}, "seed": 0, "k": 2, "serving": "inprocess",
            "sampling": {"temperature": 0.7}, "command": "manage.py reproduce_hat --base tiny --budget smoke",
            "sets": {"t1": {"cases": ["a", "b"], "sha256": "ab" * 32}},
            "models": {row: model_results(i) for i, (row, _) in enumerate(ROWS)}}


def run_json(out_dir: Path, tables: dict[str, Path]) -> dict:
    arms = {name: {"arm": name, "stages": stages, "steps": 8 * len(stages), "wall_s": 12.5,
                   "train_data_sha256": f"{i}" * 64, "model_dir": str(out_dir / name), "data": {}, "config": {}}
            for i, (name, stages) in enumerate((("fixed_sft", ["sft"]), ("hsa_sft", ["sft"]),
                                                ("hsa_sft_distill", ["sft", "distill"]),
                                                ("hsa_sft_distill_rl", ["sft", "distill", "rl"])))}
    return {"command": f"HF_HUB_OFFLINE=1 .venv/bin/python manage.py reproduce_hat --base tiny --budget smoke "
                       f"--seed 0 --out {out_dir}",
            "argv": ["manage.py"], "base": {"name": "tiny", "dir": "models/demo-tiny", "weights_sha256": WEIGHTS_SHA},
            "budget": {"name": "smoke", "sft_steps": 8, "distill_steps": 3, "rl_steps": 2, "dtype": "float32",
                       "device": "cpu"},
            "seed": 0, "git_commit": "1867fa9deadbeef", "arms": arms,
            "data": {"seed": 0, "fixed": {"file": "data/fixed/rows.jsonl", "rows": 16, "sha256": FIXED_SHA},
                     "hsa": {"file": "data/hsa/rows.jsonl", "rows": 16, "sha256": HSA_SHA}, "wall_s": 1.5},
            "models": {}, "tables": {k: str(v) for k, v in tables.items()},
            "wall_s": {"data": 1.5, "training": 50.0, "evaluation": 30.0, "total": 81.5}}


def write_fixture_folder(out_dir: Path) -> dict:
    """A result folder as reproduce() leaves it; returns run.json's content."""
    out_dir = Path(out_dir)
    tables = write_table(synthetic_results(), out_dir)
    run = run_json(out_dir, tables)
    (out_dir / "run.json").write_text(json.dumps(run, indent=2), encoding="utf-8")
    return run


@pytest.fixture
def bases(monkeypatch, tmp_path):
    """Both bases built (a config.json each, in tmp_path)."""
    from training_jobs.reproduce import run as core

    for name in ("tiny", "smol"):
        folder = tmp_path / "bases" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        monkeypatch.setitem(core.BASE_DIRS, name, folder)
    return core.BASE_DIRS


@pytest.fixture
def smol_not_built(monkeypatch, bases):
    """The smol base points at a folder of the repository that does not exist: the error names it."""
    from training_jobs.reproduce import run as core

    monkeypatch.setitem(core.BASE_DIRS, "smol", core.REPO / "models" / "not-built-for-tests")


@pytest.fixture
def runs_root(monkeypatch, tmp_path):
    root = tmp_path / "runs"
    monkeypatch.setattr("training_jobs.reproduce_services.reproductions_root", lambda: root)
    return root


@pytest.fixture
def sent(monkeypatch):
    """The reproduction tasks sent (on commit), instead of sending them."""
    out = []
    monkeypatch.setattr("training_jobs.tasks.reproduction_run.apply_async", lambda **kw: out.append(kw))
    return out


@pytest.fixture
def committed(monkeypatch, tmp_path):
    """A committed result folder (results/hat-miniature) written from the fixture."""
    folder = tmp_path / "committed"
    write_fixture_folder(folder)
    monkeypatch.setattr("training_jobs.reproduce_selectors.COMMITTED_DIR", folder)
    return folder


@pytest.fixture
def no_committed(monkeypatch, tmp_path):
    monkeypatch.setattr("training_jobs.reproduce_selectors.COMMITTED_DIR", tmp_path / "none")


@pytest.fixture
def done_run(ml_staff, bases, runs_root, no_committed):
    """A succeeded run whose folder is the fixture, with the summary the worker stores."""
    from console.jobs import Job
    from training_jobs import reproduce_services as S
    from training_jobs.reproduce_models import ReproductionRun

    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", seed=0, enqueue=False)
    data = write_fixture_folder(run.path)
    ReproductionRun.objects.filter(pk=run.pk).update(status=Job.Status.SUCCEEDED, progress_done=S.PROGRESS_TOTAL,
                                                     **S.summary_fields(data, run.path))
    return ReproductionRun.objects.get(pk=run.pk)
