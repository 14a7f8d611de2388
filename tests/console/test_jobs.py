"""The one job lifecycle (console.jobs) on real PostgreSQL: claim (and its race), the one cancel in every state,
the revoke after the grace period, the one sweep over every kind, resume, the throttled reporter, the worker's
skeleton (job_run); and, with a real Celery worker, a running job of each kind (dataset build, training job,
scenario run) cancelled through the one semantic."""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from datetime import timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from console import jobs
from console.errors import InvalidTransition, ValidationFailed
from console.jobs import Job, JobCancelled, JobReporter
from console.models import AuditEvent
from streams.models import ScenarioRun
from training_jobs import services as training_services
from training_jobs import tasks as training_tasks
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from tests.streams.preview_helpers import scripted_model  # noqa: F401  (fixtures)
from tests.streams.scripted_endpoint import scripted_endpoint  # noqa: F401

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")


def _dataset(user, status="queued", **kw) -> Dataset:
    return Dataset.objects.create(name=kw.pop("name", "d"), kind="hsa", status=status, created_by=user, **kw)


def _training(user, status="queued", **kw) -> TrainingJob:
    base = TrainedModel.objects.get_or_create(name="base", kind="base", path="/nowhere")[0]
    return TrainingJob.objects.create(name=kw.pop("name", "t"), kind="sft", status=status, config={},
                                      base_model=base, created_by=user, **kw)


def _actions(job) -> list[tuple[str, str, str]]:
    return [(e.action, e.from_state, e.to_state)
            for e in AuditEvent.objects.filter(scope=job.audit_scope()).order_by("id")]


def test_every_job_kind_is_swept_without_registering():
    assert {Dataset, TrainingJob, ScenarioRun} <= set(jobs.job_models())
    assert all(issubclass(m, Job) and not m._meta.abstract for m in jobs.job_models())
    assert settings.JOB_CANCEL_GRACE_S == settings.TRAINING_CANCEL_GRACE_S  # the former name, kept


# --- claim ------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_claim_takes_a_queued_job_once(ml_staff):
    d = _dataset(ml_staff, task_id="task-1")
    claimed = jobs.job_claim(Dataset, d.pk, stage="collecting", task_id="task-1")
    assert (claimed.status, claimed.stage) == ("running", "collecting")
    assert claimed.worker_host and claimed.started_at and claimed.heartbeat_at == claimed.started_at
    assert jobs.job_claim(Dataset, d.pk, task_id="task-1") is None  # a redelivered task
    assert Dataset.objects.get(pk=d.pk).started_at == claimed.started_at

    stale = _dataset(ml_staff, task_id="task-2")
    assert jobs.job_claim(Dataset, stale.pk, task_id="task-of-an-earlier-run") is None  # not the current task
    assert Dataset.objects.get(pk=stale.pk).status == "queued"
    assert jobs.job_claim(Dataset, stale.pk) is not None  # called directly (no task): claimed
    cancelled = _dataset(ml_staff, status="cancelled")
    assert jobs.job_claim(Dataset, cancelled.pk) is None


@pytest.mark.django_db(transaction=True)
def test_of_many_workers_claiming_at_once_exactly_one_wins(ml_staff):
    job = _training(ml_staff)
    start, won, errors = threading.Barrier(6), [], []

    def worker():
        try:
            start.wait()
            claimed = jobs.job_claim(TrainingJob, job.pk)
            if claimed is not None:
                won.append(claimed.worker_host)
        except Exception as exc:  # pragma: no cover - shown in the assert
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and len(won) == 1
    assert TrainingJob.objects.get(pk=job.pk).status == "running"


# --- cancel ---------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cancel_of_each_state(ml_staff):
    queued = jobs.job_cancel(_dataset(ml_staff), user=ml_staff)
    assert (queued.status, queued.cancel_requested) == ("cancelled", True)
    assert queued.finished_at and queued.cancel_requested_at
    assert _actions(queued) == [("dataset.cancel", "queued", "cancelled")]

    for status in ("running", "cancelling"):
        running = _training(ml_staff, status=status, started_at=timezone.now())
        first = jobs.job_cancel(running, user=ml_staff)
        assert (first.status, first.cancel_requested, first.finished_at) == ("cancelling", True, None)
        again = jobs.job_cancel(first, user=ml_staff)  # idempotent: the first request's time stays
        assert (again.status, again.cancel_requested_at) == ("cancelling", first.cancel_requested_at)
        assert _actions(running) == ([("training.cancel", "running", "cancelling")] if status == "running" else [])

    for status in ("succeeded", "failed", "cancelled"):
        with pytest.raises(InvalidTransition, match=f"this build has {status}: only a queued or running build"):
            jobs.job_cancel(_dataset(ml_staff, status=status), user=ml_staff)


@pytest.mark.django_db
def test_an_overdue_cancel_is_revoked_once_with_sigterm(ml_staff, monkeypatch):
    from console.celery import app

    revoked = []
    monkeypatch.setattr(app.control, "revoke", lambda task_id, **kw: revoked.append((task_id, kw)))
    now = timezone.now()
    grace = timedelta(seconds=settings.JOB_CANCEL_GRACE_S)
    overdue = _training(ml_staff, status="cancelling", task_id="t-overdue", cancel_requested=True,
                        cancel_requested_at=now - grace - timedelta(seconds=5), heartbeat_at=now)
    in_grace = _training(ml_staff, status="cancelling", task_id="t-in-grace", cancel_requested=True,
                         cancel_requested_at=now - grace + timedelta(seconds=5), heartbeat_at=now)
    no_task = _dataset(ml_staff, status="cancelling", cancel_requested=True,
                       cancel_requested_at=now - grace - timedelta(seconds=5), heartbeat_at=now)
    build = _dataset(ml_staff, status="cancelling", task_id="t-build", cancel_requested=True,
                     cancel_requested_at=now - grace - timedelta(seconds=5), heartbeat_at=now)
    assert jobs.jobs_sweep_stalled(now=now) == []  # revoked, but still beating: not ended yet
    assert sorted(revoked) == [("t-build", {"terminate": True, "signal": "SIGTERM"}),
                               ("t-overdue", {"terminate": True, "signal": "SIGTERM"})]
    assert TrainingJob.objects.get(pk=overdue.pk).revoked_at == now
    assert "its task t-overdue was revoked" in TrainingJob.objects.get(pk=overdue.pk).log_tail
    assert ("training.revoked", "cancelling", "cancelling") in _actions(overdue)
    assert Dataset.objects.get(pk=build.pk).revoked_at == now  # builds are revoked too now
    assert TrainingJob.objects.get(pk=in_grace.pk).revoked_at is None
    assert Dataset.objects.get(pk=no_task.pk).revoked_at is None
    assert jobs.jobs_revoke_overdue(now + timedelta(seconds=1)) == []  # once (in_grace is not due yet)
    assert len(revoked) == 2
    # the revoked task's process died: its heartbeat stops and the sweep ends it cancelled
    later = now + timedelta(seconds=settings.HEARTBEAT_STALE_S + 1)
    assert sorted(jobs.jobs_sweep_stalled(now=later)) == sorted(str(j.pk) for j in (overdue, in_grace, no_task,
                                                                                      build))
    assert {TrainingJob.objects.get(pk=overdue.pk).status, Dataset.objects.get(pk=build.pk).status} == {"cancelled"}


# --- the one sweep ------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_one_sweep_ends_stalled_jobs_of_every_kind(ml_staff):
    now = timezone.now()
    old = now - timedelta(seconds=settings.HEARTBEAT_STALE_S + 5)
    dead_build = _dataset(ml_staff, status="running", started_at=old, heartbeat_at=old, worker_host="cpu-1")
    silent_build = _dataset(ml_staff, status="running", started_at=old)  # never beat
    dead_job = _training(ml_staff, status="running", started_at=old, heartbeat_at=old)
    cancelling_job = _training(ml_staff, status="cancelling", started_at=old, heartbeat_at=old, cancel_requested=True)
    alive = _training(ml_staff, status="running", started_at=old, heartbeat_at=now - timedelta(seconds=2))
    queued = _dataset(ml_staff)
    ended = jobs.jobs_sweep_stalled(now=now)
    assert sorted(ended) == sorted(str(j.pk) for j in (dead_build, silent_build, dead_job, cancelling_job))
    dead_build.refresh_from_db()
    assert dead_build.status == "failed" and dead_build.finished_at
    assert dead_build.error.startswith("WorkerLost: the worker running this build stopped answering (on cpu-1;")
    assert dead_build.error.endswith("Nothing was kept; start the build again.")
    dead_job.refresh_from_db()
    assert dead_job.error.endswith("Resume it to continue from its latest checkpoint.") and dead_job.can_resume
    assert TrainingJob.objects.get(pk=cancelling_job.pk).status == "cancelled"
    assert (TrainingJob.objects.get(pk=alive.pk).status, Dataset.objects.get(pk=queued.pk).status) == ("running",
                                                                                                     "queued")
    assert _actions(dead_build) == [("dataset.failed", "running", "failed")]
    assert _actions(cancelling_job) == [("training.cancelled", "cancelling", "cancelled")]
    assert jobs.jobs_sweep_stalled(now=now) == []  # nothing twice
    assert jobs.jobs_sweep_stalled(now=now, models=[Dataset]) == []


# --- resume -----------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_resume_queues_a_cancelled_or_failed_job_again_under_a_new_task(ml_staff, django_capture_on_commit_callbacks,
                                                                        monkeypatch):
    sent = []
    monkeypatch.setattr(training_tasks.training_job, "apply_async",
                        lambda args, queue, task_id: sent.append((args, queue, task_id)))
    for status in ("cancelled", "failed"):
        job = _training(ml_staff, status=status, task_id="old", cancel_requested=status == "cancelled",
                        cancel_requested_at=timezone.now(), error="x", finished_at=timezone.now())
        with django_capture_on_commit_callbacks(execute=True):
            job = jobs.job_resume(job, user=ml_staff)
        assert (job.status, job.resumes, job.cancel_requested, job.cancel_requested_at, job.error,
                job.finished_at) == ("queued", 1, False, None, "", None)
        assert job.task_id not in ("", "old") and TrainingJob.objects.get(pk=job.pk).task_id == job.task_id
        assert sent[-1] == ((str(job.pk),), "gpu", job.task_id)
        assert _actions(job) == [("training.resume", status, "queued")]
    with pytest.raises(InvalidTransition, match="only a cancelled or failed job can be resumed"):
        jobs.job_resume(_training(ml_staff, status="running"), user=ml_staff)
    with pytest.raises(InvalidTransition, match="a build cannot be resumed"):
        jobs.job_resume(_dataset(ml_staff, status="failed"), user=ml_staff)
    assert not _dataset(ml_staff, status="failed").can_resume and _training(ml_staff, status="failed").can_resume


@pytest.mark.django_db
def test_enqueue_sends_on_commit_under_the_stored_task_id(ml_staff, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(training_tasks.dataset_build, "apply_async",
                        lambda args, queue, task_id: sent.append((args, queue, task_id)))
    d = _dataset(ml_staff, revoked_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        task_id = jobs.job_enqueue(d)
    assert sent == [] and len(callbacks) == 1  # nothing before the commit
    callbacks[0]()
    stored = Dataset.objects.get(pk=d.pk)
    assert (stored.task_id, stored.revoked_at) == (task_id, None)
    assert sent == [((str(d.pk),), "gpu", task_id)]  # batch work: never in front of interactive turns
    with django_capture_on_commit_callbacks(execute=True):
        jobs.job_enqueue(d, queue="elsewhere")
    assert sent[-1][1] == "elsewhere" and sent[-1][2] != task_id


# --- the worker's side ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_reporter_writes_at_most_every_so_often(ml_staff, monkeypatch):
    d = _dataset(ml_staff, status="running")
    monkeypatch.setattr(Dataset, "job_progress_every_s", 3600.0)
    monkeypatch.setattr(Dataset, "job_cancel_check_every_s", 3600.0)
    reporter = JobReporter(d)
    assert reporter.progress(1, 10) and not reporter.progress(2, 10)  # the first, then throttled
    assert Dataset.objects.get(pk=d.pk).progress_done == 1
    assert reporter.progress(10, 10)  # the last is always written
    assert Dataset.objects.get(pk=d.pk).progress_done == 10
    assert reporter.progress(3, force=True) and Dataset.objects.get(pk=d.pk).progress_done == 3
    assert reporter.cancel_requested() is False
    Dataset.objects.filter(pk=d.pk).update(cancel_requested=True)
    assert reporter.cancel_requested() is False  # not read again yet
    assert reporter.cancel_requested(force=True) is True
    reporter.stage("writing the artifact")
    assert Dataset.objects.get(pk=d.pk).stage == "writing the artifact"


@pytest.mark.django_db
def test_job_run_claims_beats_and_finishes(ml_staff):
    def work(job):
        assert Dataset.objects.get(pk=job.pk).status == "running"
        return {"row_counts": {"train": 3}, "progress_done": 3, "progress_total": 3}

    done = jobs.job_run(Dataset, _dataset(ml_staff).pk, work)
    assert (done.status, done.row_counts, done.percent, done.stage) == ("succeeded", {"train": 3}, 100, "")
    assert done.heartbeat_at and done.finished_at >= done.started_at
    assert AuditEvent.objects.get(scope=done.audit_scope(), action="dataset.succeeded").data == {"rows": {"train": 3}}

    def stops(job):
        raise JobCancelled(progress_done=2)

    stopped = jobs.job_run(Dataset, _dataset(ml_staff).pk, stops)
    assert (stopped.status, stopped.progress_done, stopped.error) == ("cancelled", 2, "")

    def breaks(job):
        raise ValidationFailed("bad", errors=[{"path": "recipe.teacher", "message": "gone"}])

    failed = jobs.job_run(Dataset, _dataset(ml_staff).pk, breaks)
    assert (failed.status, failed.error) == ("failed", "ValidationFailed: recipe.teacher: gone")

    untouched = _dataset(ml_staff, status="cancelled")
    assert jobs.job_run(Dataset, untouched.pk, lambda job: pytest.fail("ran a cancelled job")).status == "cancelled"
    with pytest.raises(ValueError, match="not 'running'"):
        jobs.job_finish(untouched, status="running")


# --- a real worker: a running job of each kind, cancelled through the one semantic ------------------------------------


def _wait(what, predicate, timeout: float = 120.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if predicate(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(every)


@pytest.fixture
def worker_queue():
    from tests.conftest import start_worker, stop_worker

    queue = f"jobs-{uuid.uuid4().hex[:8]}"  # this test's own queue: the session's worker does not take its tasks
    proc, log = start_worker(queue, log_name="jobs-cancel-worker.log",
                             env_extra={"HAT_HEARTBEAT_EVERY_S": "0.3", "HAT_CELERY_DEFAULT_QUEUE": queue,
                                        "HAT_INTERACTIVE_QUEUE": queue})
    yield queue
    stop_worker(proc, log)


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_running_job_of_each_kind_is_cancelled_on_a_real_worker(worker_queue, ml_staff, manager,
                                                                  harness_with_history, scripted_endpoint,
                                                                  scripted_model, monkeypatch):
    from streams import services as stream_services
    from streams import tasks as stream_tasks
    from tests.conftest import dataset_build_on
    from tests.console.test_redis_outage import long_scenario_yaml
    from tests.streams.scripted_endpoint import reply

    try:
        # a dataset build: cancelled while it builds rows, it stops at its next progress step and keeps nothing
        d = dataset_build_on(worker_queue, user=ml_staff, recipe={"variants_per_sample": 8},
                             sources={"scenarios": [], "tiny_gold": 6000})
        _wait(lambda: Dataset.objects.get(pk=d.pk), lambda x: x.status == "running" and x.progress_done > 0)
        assert training_services.dataset_cancel(user=ml_staff, dataset=d).status == "cancelling"
        d = _wait(lambda: Dataset.objects.get(pk=d.pk), lambda x: x.status != "cancelling", timeout=60)
        assert d.status == "cancelled" and not d.artifact_path and 0 < d.progress_done < d.progress_total
        assert [a for a, _, _ in _actions(d)] == ["dataset.queued", "dataset.cancel", "dataset.cancelled"]

        # a training job: it saves a checkpoint at the end of its step and ends cancelled, resumable
        from tests.training_jobs.test_training_jobs import CONFIG
        from tests.training_jobs.test_training_jobs import _dataset as built_dataset

        hsa, base = built_dataset(ml_staff), training_services.demo_base_model()  # built here, not on the worker
        with mock.patch.object(training_tasks.training_job, "apply_async"):
            job = training_services.training_job_start(user=ml_staff, kind="sft", dataset_id=hsa.pk,
                                                       base_model_id=base.pk,
                                                       config={**CONFIG, "max_steps": 400, "save_steps": 1000})
        training_tasks.training_job.apply_async(args=(str(job.pk),), queue=worker_queue, task_id=job.task_id)
        _wait(lambda: TrainingJob.objects.get(pk=job.pk), lambda x: x.progress_done >= 2, timeout=300, every=0.2)
        assert training_services.training_job_cancel(user=ml_staff, job=job).status == "cancelling"
        job = _wait(lambda: TrainingJob.objects.get(pk=job.pk), lambda x: x.status != "cancelling", timeout=120)
        assert job.status == "cancelled" and job.can_resume and job.revoked_at is None  # honoured: no revoke
        (stage,) = job.result["stages"]
        assert 2 <= stage["steps"] < 400

        # a scenario run: its clock's next tick ends it cancelled and closes its room
        send_tick, send_turn = stream_tasks.preview_clock_tick.apply_async, stream_tasks.preview_turn.apply_async
        monkeypatch.setattr(stream_tasks.preview_clock_tick, "apply_async",
                            lambda args, **kw: send_tick(args, **{**kw, "queue": worker_queue}))
        monkeypatch.setattr(stream_tasks.preview_turn, "delay",
                            lambda *args: send_turn(args, queue=worker_queue))
        scripted_endpoint.add(*[reply(f"Link 101 is $24.90 ({i}).") for i in range(400)])
        for s in scripted_endpoint.queue:
            s.hang_s = 0.2  # a turn takes a moment: the run is still running when it is cancelled
        scenario = stream_services.scenario_import(yaml_text=long_scenario_yaml(), user=manager)
        room = stream_services.scenario_run_start(user=manager, version=harness_with_history["v1"],
                                                  scenario=scenario, endpoint=scripted_model)
        _wait(lambda: ScenarioRun.objects.get(pk=room.pk),
              lambda x: x.status == "running" and x.room.events.filter(type="reply").count() >= 2, timeout=60)
        room = stream_services.scenario_run_cancel(user=manager, room=room)
        assert room.job.status == "cancelling"
        run = _wait(lambda: ScenarioRun.objects.select_related("room").get(pk=room.pk),
                    lambda x: x.status != "cancelling", timeout=30)
        assert (run.status, run.room.status, run.room.playing) == ("cancelled", "closed", False)
        assert 0 < run.progress_done < 3600 and run.summary["replies"] >= 2  # stopped early
        assert run.room.events.order_by("-seq").first().type == "run_cancelled"
        assert [a for a, _, _ in _actions(run)] == ["scenario_run.queued", "scenario_run.cancel",
                                                    "scenario_run.cancelled"]
    finally:
        for ds in Dataset.objects.all():
            shutil.rmtree(training_services.datasets_dir() / str(ds.pk), ignore_errors=True)
        for tj in TrainingJob.objects.all():
            shutil.rmtree(tj.output_dir, ignore_errors=True)
