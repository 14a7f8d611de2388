"""No build stays "running" forever: a running build's worker beats (console.heartbeat), and the periodic
sweep fails the builds whose heartbeat stopped — tested on rows, and end to end with a real Celery worker
killed (SIGKILL) in the middle of a build."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from console.heartbeat import Heartbeat
from console.jobs import job_models, jobs_sweep_stalled
from console.models import AuditEvent
from tests.conftest import dataset_build_on, start_worker, stop_worker
from training_jobs import services
from training_jobs.models import Dataset

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")


def _dataset(user, status="running", **kw) -> Dataset:
    return Dataset.objects.create(name="d", kind="hsa", status=status, created_by=user,
                                  started_at=kw.pop("started_at", timezone.now()), **kw)


@pytest.mark.django_db(transaction=True)
def test_heartbeat_keeps_the_row_fresh_from_a_thread(ml_staff):
    d = _dataset(ml_staff, heartbeat_at=None)
    with Heartbeat(Dataset, d.pk, every_s=0.05):
        first = Dataset.objects.get(pk=d.pk).heartbeat_at
        assert first is not None  # written at once
        time.sleep(0.3)
        assert Dataset.objects.get(pk=d.pk).heartbeat_at > first
    stopped = Dataset.objects.get(pk=d.pk).heartbeat_at
    time.sleep(0.15)
    assert Dataset.objects.get(pk=d.pk).heartbeat_at == stopped  # no beats after the block


@pytest.mark.django_db
def test_sweep_fails_builds_whose_worker_went_silent(ml_staff):
    now = timezone.now()
    old = now - timedelta(seconds=settings.HEARTBEAT_STALE_S + 5)
    dead = _dataset(ml_staff, heartbeat_at=old)
    never_beat = _dataset(ml_staff, heartbeat_at=None, started_at=old)
    cancelling = _dataset(ml_staff, heartbeat_at=old, cancel_requested=True)
    alive = _dataset(ml_staff, heartbeat_at=now - timedelta(seconds=5))
    queued = _dataset(ml_staff, status="queued", started_at=None)
    tmp = services.datasets_dir() / f".tmp-{dead.pk}-abcd1234"
    tmp.mkdir(parents=True)
    assert sorted(jobs_sweep_stalled(now=now)) == sorted([str(dead.pk), str(never_beat.pk),
                                                                      str(cancelling.pk)])
    dead.refresh_from_db()
    assert dead.status == "failed" and dead.error.startswith("WorkerLost: the worker running this build stopped")
    assert dead.finished_at is not None and not tmp.exists()
    assert Dataset.objects.get(pk=never_beat.pk).status == "failed"
    assert Dataset.objects.get(pk=cancelling.pk).status == "cancelled"
    assert Dataset.objects.get(pk=alive.pk).status == "running"
    assert Dataset.objects.get(pk=queued.pk).status == "queued"
    assert AuditEvent.objects.filter(scope=f"dataset:{dead.pk}", action="dataset.failed").exists()
    assert jobs_sweep_stalled(now=now) == []  # nothing twice


def test_the_sweep_is_scheduled():
    import streams.tasks  # noqa: F401  (a worker imports every app's tasks; this process may not have yet)
    import console.tasks  # noqa: F401
    from console.celery import app

    tasks_scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "console.jobs_sweep_stalled" in tasks_scheduled  # one sweep for every job kind
    assert tasks_scheduled <= set(app.tasks)
    assert Dataset in job_models()


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_is_detected_and_its_build_failed(ml_staff, settings):
    proc, log = start_worker("heartbeat-test", log_name="heartbeat-worker.log",
                             env_extra={"HAT_HEARTBEAT_EVERY_S": "0.3"})
    try:
        d = dataset_build_on("heartbeat-test", user=ml_staff, recipe={"variants_per_sample": 8},
                             sources={"scenarios": [], "tiny_gold": 6000})
        deadline = time.monotonic() + 120
        while True:  # building rows, and beating from the worker
            d.refresh_from_db()
            if d.status == "running" and d.progress_done > 0 and d.heartbeat_at > d.started_at:
                break
            assert d.status in ("queued", "running") and time.monotonic() < deadline, (d.status, d.error)
            time.sleep(0.1)
        first = d.heartbeat_at
        while d.heartbeat_at == first:  # it beats while it builds
            assert time.monotonic() < deadline
            time.sleep(0.1)
            d.refresh_from_db()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        d.refresh_from_db()
        last = d.heartbeat_at
        time.sleep(1.0)
        d.refresh_from_db()
        assert d.heartbeat_at == last and d.status == "running"  # dead: no more beats, and nobody said so
        settings.HEARTBEAT_STALE_S = 2.0
        assert jobs_sweep_stalled(now=last + timedelta(seconds=1.5)) == []  # not yet stale then
        while timezone.now() < last + timedelta(seconds=2.2):
            time.sleep(0.1)
        assert jobs_sweep_stalled() == [str(d.pk)]
        d.refresh_from_db()
        assert d.status == "failed" and "WorkerLost" in d.error and not d.artifact_path  # killed before it finished
    finally:
        stop_worker(proc, log)
