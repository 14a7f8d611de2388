"""Reproduction runs (writes): start, cancel, and the worker's call of ``reproduce()``.

A run is a job (:mod:`console.jobs`) on the ``gpu`` queue, beside training jobs and evaluations: hours of batch
work that never waits in front of an interactive turn. The worker (:func:`reproduction_execute`) calls
:func:`training_jobs.reproduce.run.reproduce` (the same plain-Python core as ``manage.py reproduce_hat``) with a
log callback that keeps the last lines, sets the stage and the progress (four arms trained, five models evaluated,
the table written) and honours a cancel between log lines. When it succeeds the run keeps run.json's commit, wall
times and provenance and results.json's claims.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import deque
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from console import roles
from console.errors import ValidationFailed
from console.jobs import JobCancelled, JobReporter, job_cancel, job_enqueue, job_run
from console.services import audit_record
from training_jobs.reproduce.arms import ARMS
from training_jobs.reproduce_models import LOG_LINES_KEPT, ReproductionRun
from training_jobs.services.access import require, require_manager

logger = logging.getLogger(__name__)

ARM_NAMES = ARMS  # the arms reproduce() trains, in its order (one list: training_jobs.reproduce.arms)
MODEL_NAMES = ("base", *ARM_NAMES)
PROGRESS_TOTAL = len(ARM_NAMES) + len(MODEL_NAMES) + 1  # arms trained, models evaluated, the table written
LOG_FLUSH_EVERY_S = 5.0
PROVENANCE_KEYS = ("command", "base", "budget", "seed", "data", "arms", "models")


def reproductions_root() -> Path:
    """Where the console's runs write (one folder per run, by its id)."""
    return Path(settings.ENV.data_dir) / "reproduce" / "runs"


def validate_reproduction(base: Any, budget: Any, seed: Any) -> tuple[str, str, int]:
    """(base, budget, seed) as a run stores them; ValidationFailed with every problem at its path (``base``,
    ``budget``, ``seed``): an unknown name, a seed out of range, a base that is not built (the path of its folder,
    from :func:`training_jobs.reproduce.run.base_model_dir`)."""
    from training_jobs.hat.config import MAX_SEED
    from training_jobs.reproduce.budgets import BASE_NAMES, BUDGET_NAMES
    from training_jobs.reproduce.run import BaseNotBuilt, base_model_dir

    errors: list[dict[str, str]] = []
    if base not in BASE_NAMES:
        errors.append({"path": "base", "message": f"one of {', '.join(BASE_NAMES)}"})
    else:
        try:
            base_model_dir(base)
        except BaseNotBuilt as exc:
            errors.append({"path": "base", "message": str(exc)})
    if budget not in BUDGET_NAMES:
        errors.append({"path": "budget", "message": f"one of {', '.join(BUDGET_NAMES)}"})
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        errors.append({"path": "seed", "message": f"a whole number from 0 to {MAX_SEED}"})
    if errors:
        raise ValidationFailed("the reproduction run is not valid", errors=errors)
    return base, budget, seed


def reproduction_start(*, user, base: Any, budget: Any, seed: Any = 0, enqueue: bool = True) -> ReproductionRun:
    """Queue a reproduction run (on commit, ``gpu`` queue; ``enqueue=False``: only create it). NotAllowed for
    roles that may not train (ML staff and ML leads may); ValidationFailed with located errors (nothing saved)."""
    require(user, roles.RUN_TRAINING, "start reproduction runs")
    base, budget, seed = validate_reproduction(base, budget, seed)
    with transaction.atomic():
        run = ReproductionRun(base=base, budget=budget, seed=seed, created_by=user, progress_total=PROGRESS_TOTAL)
        run.out_dir = str(reproductions_root() / str(run.pk))
        run.save()
        audit_record(actor=user, action="reproduction.queued", scope=run.audit_scope(), target=run.audit_target(),
                     to_state=ReproductionRun.Status.QUEUED,
                     data={"base": base, "budget": budget, "seed": seed, "out_dir": run.out_dir})
        if enqueue:
            job_enqueue(run)
    return run


def reproduction_cancel(*, user, run: ReproductionRun) -> ReproductionRun:
    """The one cancel (console.jobs): queued → cancelled now; running → cancelling, stops at its next log line.
    Only the person who started it or an ML lead."""
    require(user, roles.RUN_TRAINING, "cancel reproduction runs")
    require_manager(user, run.created_by, "cancel this run")
    return job_cancel(run, user=user)


# --- the worker --------------------------------------------------------------------------------------------------

_STAGE = re.compile(r"^(?P<arm>\w+): (?P<stage>sft|distill|rl) from ")
_ARM_DONE = re.compile(r"^(?P<arm>\w+): done in ")
_EVALUATING = re.compile(r"^evaluating (?P<name>\w+) \(")
_EVALUATED = re.compile(r"^(?P<name>\w+): T1 ")


def stage_of(line: str) -> tuple[str | None, bool]:
    """What a log line of ``reproduce()`` says: the new stage (or None) and whether a milestone was reached (an
    arm trained, a model evaluated, the table written)."""
    if line.startswith("data:"):
        return "training", False
    if m := _STAGE.match(line):
        return f"training {m['arm']}: {m['stage']}", False
    if (m := _ARM_DONE.match(line)) and m["arm"] in ARM_NAMES:
        return None, True
    if m := _EVALUATING.match(line):
        return f"evaluating {m['name']}", False
    if (m := _EVALUATED.match(line)) and m["name"] in MODEL_NAMES:
        return None, True
    if line.startswith("reproduce_hat: done"):
        return "table written", True
    return None, False


class _Log:
    """``reproduce()``'s log callback: keeps the last lines (stored every few seconds and at the end), sets the
    stage and progress, and stops the run (JobCancelled) at the first line after a cancel request."""

    def __init__(self, run: ReproductionRun, reporter: JobReporter):
        self.run, self.reporter = run, reporter
        self.lines: deque[str] = deque(maxlen=LOG_LINES_KEPT)
        self.done, self.last_flush = 0, time.monotonic()

    def __call__(self, line: Any) -> None:
        for part in str(line).splitlines() or [""]:
            self.lines.append(part[:2000])
        stage, milestone = stage_of(str(line))
        if stage:
            self.reporter.stage(stage)
        if milestone:
            self.done = min(self.done + 1, PROGRESS_TOTAL)
            self.reporter.progress(self.done, PROGRESS_TOTAL, force=True)
        if time.monotonic() - self.last_flush >= LOG_FLUSH_EVERY_S:
            self.flush()
        if self.reporter.cancel_requested():
            raise JobCancelled()

    def flush(self) -> None:
        self.last_flush = time.monotonic()
        ReproductionRun.objects.filter(pk=self.run.pk).update(log="\n".join(self.lines))


def summary_fields(run_json: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """What a succeeded run keeps of run.json and results.json (its page shows them when the folder is gone)."""
    claims: list[Any] = []
    results_path = Path((run_json.get("tables") or {}).get("results") or out_dir / "results.json")
    try:
        claims = json.loads(results_path.read_text(encoding="utf-8")).get("claims") or []
    except (OSError, ValueError, AttributeError):
        logger.warning("reproduction in %s: results.json unreadable, no claims stored", out_dir, exc_info=True)
    return {"git_commit": str(run_json.get("git_commit") or "")[:64], "wall_s": run_json.get("wall_s") or {},
            "claims": claims, "provenance": {k: run_json.get(k) for k in PROVENANCE_KEYS if k in run_json}}


def _reproduce(run: ReproductionRun, reporter: JobReporter) -> dict[str, Any]:
    from training_jobs.reproduce import run as core

    log = _Log(run, reporter)
    reporter.progress(0, PROGRESS_TOTAL, force=True)
    try:
        run_json = core.reproduce(base=run.base, budget=run.budget, out_dir=run.path, seed=run.seed, log=log)
    finally:
        log.flush()
    return {**summary_fields(run_json, run.path), "progress_done": PROGRESS_TOTAL, "progress_total": PROGRESS_TOTAL}


def reproduction_execute(*, run_id, task_id: str | None = None) -> ReproductionRun:
    """The worker's service: claim the run, reproduce, store the summary. Never raises for a failed run (the
    failure is stored; start a new run: a reproduction is reproduced from the start, not resumed)."""
    run = ReproductionRun.objects.get(pk=run_id)
    return job_run(ReproductionRun, run.pk, lambda job: _reproduce(run, JobReporter(job)), task_id=task_id,
                   stage="starting")
