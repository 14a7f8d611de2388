"""Fixtures shared by the reproduce_hat tests (training_jobs.reproduce)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

REPRODUCE_SEED = 3


@pytest.fixture(scope="session")
def reproduce_smoke_run(tmp_path_factory):
    """``manage.py reproduce_hat`` run once for the session, as `.ci/run` runs it: the tiny base at the smoke budget,
    seed 3, keeping its parts. ``(out, arms, stdout lines)``: arms as run.json records them. The arms' tests and the
    evaluation's tests read the same run (it trains four arms and plays five models: minutes)."""
    from django.core.management import call_command

    from training_jobs.reproduce.arms import ArmResult

    out = tmp_path_factory.mktemp("reproduce")
    stdout = io.StringIO()
    call_command("reproduce_hat", "--base", "tiny", "--budget", "smoke", "--seed", str(REPRODUCE_SEED),
                 "--out", str(out), "--keep", str(out / "kept"), stdout=stdout)
    run = json.loads((out / "run.json").read_text())
    results = {name: ArmResult(arm=a["arm"], model_dir=Path(a["model_dir"]), stages=tuple(a["stages"]),
                               steps=a["steps"], wall_s=a["wall_s"], train_data_sha256=a["train_data_sha256"],
                               data={k: Path(v) for k, v in a["data"].items()}, config=a["config"])
               for name, a in run["arms"].items()}
    return out, results, stdout.getvalue().splitlines()
