"""Latency replays (writes): start, cancel, resume, and the worker's replay at each concurrency level.

A replay is a job (:mod:`console.jobs`) on the ``gpu`` queue, like an evaluation run: it loads the endpoint the
way users' batch work does and never waits in front of preview turns. The worker
(:func:`latency_replay_execute`) plays the eval set's harness cases through the one turn engine at each
concurrency level (:func:`training_jobs.evals.replay.run_level`: a thread per turn in flight, each with its own
chat client), stores each level's figures as it ends, and honours a cancel between turns (turns in flight
finish; the level cut short is kept for display and played again whole on resume).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

from console import roles
from console.errors import ValidationFailed
from console.jobs import (
    JobCancelled,
    JobReporter,
    job_cancel,
    job_enqueue,
    job_resume,
    job_run,
)
from console.services import audit_record
from training_jobs.eval_models import EvalSetVersion
from training_jobs.evals.replay import MAX_CONCURRENCY, MAX_LEVELS
from training_jobs.latency_models import LatencyReplay
from training_jobs.services.access import require, require_manager

logger = logging.getLogger(__name__)

MAX_TURNS_PER_LEVEL = 2000


def parse_concurrency(value: Any, *, path: str = "concurrency") -> list[int]:
    """The levels as stored: a list (or a "1,4,8,16" string) of distinct whole numbers from 1 to
    MAX_CONCURRENCY, at most MAX_LEVELS of them; ValidationFailed with located errors otherwise."""
    if value is None or value == "":
        from training_jobs.evals.replay import DEFAULT_CONCURRENCY

        return list(DEFAULT_CONCURRENCY)
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        value = [int(p) if p.isdigit() else p for p in parts]
    if not isinstance(value, (list, tuple)):
        raise ValidationFailed("the concurrency levels are not valid",
                               errors=[{"path": path, "message": "a list of whole numbers, e.g. [1, 4, 8, 16]"}])
    errors: list[dict[str, str]] = []
    if not value:
        errors.append({"path": path, "message": "at least one level"})
    if len(value) > MAX_LEVELS:
        errors.append({"path": path, "message": f"at most {MAX_LEVELS} levels"})
    out: list[int] = []
    for i, level in enumerate(value):
        if isinstance(level, bool) or not isinstance(level, int) or not (1 <= level <= MAX_CONCURRENCY):
            errors.append({"path": f"{path}[{i}]", "message": f"a whole number from 1 to {MAX_CONCURRENCY}"})
        elif level in out:
            errors.append({"path": f"{path}[{i}]", "message": f"level {level} is listed twice"})
        else:
            out.append(level)
    if errors:
        raise ValidationFailed("the concurrency levels are not valid", errors=errors)
    return out


def _bounded_int(value: Any, path: str, lo: int, hi: int, errors: list[dict[str, str]]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (lo <= value <= hi):
        errors.append({"path": path, "message": f"a whole number from {lo} to {hi}"})
        return lo
    return value


def latency_replay_start(*, user, eval_set_version: EvalSetVersion, harness_version, endpoint,
                         concurrency: Any = None, turns_per_level: int = 32, seed: int = 0, sampling: Any = None,
                         deadline_s: float | None = None, name: str = "", enqueue: bool = True) -> LatencyReplay:
    """Queue a latency replay (on commit, ``gpu`` queue; ``enqueue=False``: only create it, for
    :func:`latency_replay_execute` in this process — ``manage.py latency_replay``). The set must hold harness
    cases (T1–T3). NotAllowed for roles that may not evaluate; ValidationFailed with located errors for a bad
    request or an endpoint that may not be used (nothing saved)."""
    from streams.engine.outbound import OutboundRefused
    from streams.sampling import validate_sampling

    require(user, roles.RUN_EVAL, "launch latency replays")
    errors: list[dict[str, str]] = []
    if eval_set_version.eval_set.kind == "t4":
        errors.append({"path": "eval_set_version", "message": "IFEval (T4) prompts are not agent turns: pick a "
                                                              "T1, T2 or T3 set"})
    elif not eval_set_version.case_count:
        errors.append({"path": "eval_set_version", "message": "this version has no cases"})
    if harness_version is None:
        errors.append({"path": "harness_version", "message": "the harness version the turns run under"})
    try:
        levels = parse_concurrency(concurrency)
    except ValidationFailed as exc:
        errors += exc.errors
        levels = []
    turns_per_level = _bounded_int(turns_per_level, "turns_per_level", 1, MAX_TURNS_PER_LEVEL, errors)
    seed = _bounded_int(seed, "seed", 0, 2**31 - 1, errors)
    if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                   or not (0 < deadline_s <= 600)):
        errors.append({"path": "deadline_s", "message": "seconds, more than 0 and at most 600"})
    try:
        parsed_sampling = validate_sampling(sampling)
    except ValidationFailed as exc:
        errors += exc.errors
    try:
        endpoint.check_usable()
    except OutboundRefused as exc:
        errors.append({"path": "endpoint", "message": str(exc)})
    if errors:
        raise ValidationFailed("the latency replay is not valid", errors=errors)
    name = (name or "").strip()[:120] or (
        f"{eval_set_version.eval_set.name} v{eval_set_version.number} · {harness_version.harness.slug} "
        f"v{harness_version.number} · {endpoint.name} · c={'/'.join(map(str, levels))}")[:120]
    with transaction.atomic():
        replay = LatencyReplay.objects.create(
            name=name, eval_set_version=eval_set_version, harness_version=harness_version, endpoint=endpoint,
            concurrency=levels, turns_per_level=turns_per_level, seed=seed, sampling=parsed_sampling,
            deadline_s=float(deadline_s) if deadline_s is not None else None, created_by=user,
            progress_total=turns_per_level * len(levels))
        audit_record(actor=user, action="latency_replay.queued", scope=replay.audit_scope(),
                     target=replay.audit_target(), to_state=LatencyReplay.Status.QUEUED,
                     data={"eval_set": eval_set_version.eval_set.name, "set_version": eval_set_version.number,
                           "harness_version": str(harness_version.pk), "endpoint": endpoint.name,
                           "concurrency": levels, "turns_per_level": turns_per_level, "seed": seed,
                           "sampling": parsed_sampling})
        if enqueue:
            job_enqueue(replay)
    return replay


def latency_replay_cancel(*, user, replay: LatencyReplay) -> LatencyReplay:
    """The one cancel (console.jobs): queued → cancelled now; running → cancelling, stops between turns."""
    require(user, roles.RUN_EVAL, "cancel latency replays")
    require_manager(user, replay.created_by, "cancel this replay")
    return job_cancel(replay, user=user)


def latency_replay_resume(*, user, replay: LatencyReplay) -> LatencyReplay:
    """Queue a cancelled or failed replay again: it plays the levels it did not finish."""
    require(user, roles.RUN_EVAL, "resume latency replays")
    require_manager(user, replay.created_by, "resume this replay")
    return job_resume(replay, user=user)


# --- the worker --------------------------------------------------------------------------------------------------


def replay_turns(replay: LatencyReplay) -> tuple[list[tuple[Any, Any]], list[str]]:
    """The playable ``(case, manifest)`` pairs of the replay's set, in set order (T2 / T3: the case's variant
    of the replay's harness), and why the others cannot be played."""
    from training_jobs.eval_run_services import case_manifest
    from training_jobs.evals.cases import parse_case

    base = replay.harness_version.manifest
    playable, skipped = [], []
    for raw in replay.eval_set_version.cases.order_by("position").values_list("case_json", flat=True):
        case = parse_case(json.loads(raw))
        try:
            playable.append((case, case_manifest(case, base)))
        except Exception as exc:  # a variant that does not apply to this harness: the case is left out
            skipped.append(f"{case.id}: {type(exc).__name__}: {exc}"[:300])
    return playable, skipped


def _ordered(replay: LatencyReplay, levels: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    return [levels[c] for c in replay.concurrency if c in levels]


def _replay(replay: LatencyReplay, reporter: JobReporter, *, backend_factory: Callable[[], Any] | None,
            on_progress: Callable[[int, int, int], None] | None) -> dict[str, Any]:
    from streams.engine.client import OpenAIChatClient
    from streams.services.tool_runtime import tool_runtime_for
    from training_jobs.evals.replay import (
        level_summary,
        replay_summary,
        run_level,
        turn_order,
    )

    reporter.stage("preparing turns")
    playable, skipped = replay_turns(replay)
    if not playable:
        raise ValueError(f"no case of {replay.eval_set_version} can be played under this harness"
                         + (f" ({skipped[0]})" if skipped else ""))
    order = turn_order(len(playable), replay.turns_per_level, replay.seed)
    turns = [playable[i] for i in order]
    if backend_factory is None:
        config = replay.endpoint.as_config()  # read here, in the worker (it may hold the API key)

        def backend_factory():
            return OpenAIChatClient(config)

    finished = replay.finished_levels()
    levels = {lv["concurrency"]: lv for lv in replay.levels if lv["concurrency"] in finished}
    per_level, total = replay.turns_per_level, replay.turns_per_level * len(replay.concurrency)
    extra = {"cases": len(playable), "skipped_cases": len(skipped), "skipped": skipped[:20]}

    def summary() -> dict[str, Any]:
        return {**replay_summary(_ordered(replay, levels)), **extra}

    done_before = per_level * sum(1 for c in replay.concurrency if c in finished)
    reporter.progress(done_before, total, force=True)
    for concurrency in replay.concurrency:
        if concurrency in finished:
            continue
        if reporter.cancel_requested(force=True):
            raise JobCancelled(summary=summary())
        reporter.stage(f"concurrency {concurrency}")
        base_done = done_before

        def progress(done: int, planned: int, base_done: int = base_done, concurrency: int = concurrency) -> None:
            reporter.progress(base_done + done, total)
            if on_progress is not None:
                on_progress(base_done + done, total, concurrency)

        level = run_level(turns, concurrency=concurrency, make_backend=backend_factory, sampling=replay.sampling,
                          seed=replay.seed, deadline_s=replay.deadline_s, should_stop=reporter.cancel_requested,
                          on_progress=progress, tools=tool_runtime_for())
        levels[concurrency] = level_summary(level)
        LatencyReplay.objects.filter(pk=replay.pk).update(summary=summary())
        if level.stopped:
            raise JobCancelled(summary=summary())
        done_before += per_level
    return {"summary": summary(), "progress_done": total, "progress_total": total}


def latency_replay_execute(*, replay_id, task_id: str | None = None,
                           backend_factory: Callable[[], Any] | None = None,
                           on_progress: Callable[[int, int, int], None] | None = None) -> LatencyReplay:
    """The worker's service: claim the replay, play the levels it has not finished, store each level's figures.
    Never raises for a failed replay (the failure is stored; it can be resumed). ``backend_factory`` makes each
    thread's chat backend instead of a client of the endpoint (a few tests); ``on_progress(done, total,
    concurrency)`` is called from this thread as turns end (the CLI's progress bar)."""
    replay = LatencyReplay.objects.select_related("eval_set_version__eval_set", "harness_version__harness",
                                                  "endpoint").get(pk=replay_id)
    return job_run(LatencyReplay, replay.pk,
                   lambda job: _replay(replay, JobReporter(job), backend_factory=backend_factory,
                                       on_progress=on_progress),
                   task_id=task_id, stage="starting")
