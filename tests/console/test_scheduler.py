"""The scheduler runs the periodic sweeps in its own process: a dataset build whose worker was killed is failed
even though no worker is alive (before, the sweeps ran inside the worker, ``celery worker -B``, and died with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings

from console import jobs
from console.scheduler import Scheduler, entries_from
from tests.conftest import dataset_build_on, start_worker, stop_worker
from training_jobs.models import Dataset

ROOT = Path(__file__).resolve().parents[2]
needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")


def start_scheduler(env_extra: dict | None = None, log_name: str = "scheduler.log"):
    """``manage.py run_scheduler`` as `make run` starts it, on the test database."""
    db = settings.DATABASES["default"]
    env = dict(os.environ, **(env_extra or {}))
    env["DATABASE_URL"] = (f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                           f"{db['PORT'] or 5432}/{db['NAME']}")
    log = open(Path(settings.ENV.data_dir) / log_name, "w")
    # --skip-checks: this test is about the sweeps, not about the system checks of other apps
    proc = subprocess.Popen([sys.executable, "manage.py", "run_scheduler", "--skip-checks"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, log


def stop_process(proc, log) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    log.close()
    return rc


def test_every_scheduled_sweep_is_a_known_task_at_a_fixed_interval():
    entries = entries_from(settings.CELERY_BEAT_SCHEDULE)
    # one sweep for every job kind (console.jobs), the one re-sending lost clock ticks, the one sending live sessions
    # whose runner died a new runner, and the model servers' check
    assert {e.task for e in entries} == {"console.jobs_sweep_stalled", "streams.preview_play_sweep_stalled",
                                         "streams.live_runners_sweep", "streams.servers_check"}
    assert all(e.every_s == settings.ENV.sweep_every_s for e in entries)
    # a stale job is failed at most this long after its last beat: within a minute
    assert settings.HEARTBEAT_STALE_S + settings.ENV.sweep_every_s <= 60
    # a live session whose runner died has a new one sent at most this long after the runner's last beat
    from streams.services.live_turns import RUNNER_STALE_S

    assert RUNNER_STALE_S + settings.ENV.sweep_every_s < 60
    with pytest.raises(ValueError, match="fixed intervals"):
        entries_from({"x": {"task": "console.jobs_sweep_stalled", "schedule": "every day"}})
    with pytest.raises(ValueError, match="unknown tasks: nope"):
        Scheduler({"x": {"task": "nope", "schedule": 1}})


@pytest.mark.django_db(transaction=True)  # the scheduler closes stale connections between sweeps, as it runs
def test_due_sweeps_run_and_a_failing_one_does_not_stop_the_others(ml_staff, monkeypatch):
    now = [100.0]
    sched = Scheduler({"jobs": {"task": "console.jobs_sweep_stalled", "schedule": 10},
                       "plays": {"task": "streams.preview_play_sweep_stalled", "schedule": 30}},
                      clock=lambda: now[0])
    stale = Dataset.objects.create(name="d", kind="hsa", status="running", created_by=ml_staff,
                                   started_at=None, heartbeat_at=None)
    Dataset.objects.filter(pk=stale.pk).update(
        started_at=stale.created_at - timedelta(seconds=settings.HEARTBEAT_STALE_S + 5))
    ran = sched.run_due()
    assert [(name, ok) for name, ok, _ in ran] == [("jobs", True), ("plays", True)]
    assert ran[0][2] == [str(stale.pk)] and Dataset.objects.get(pk=stale.pk).status == "failed"
    now[0] += 10  # only the 10 s sweep is due
    assert [name for name, _, _ in sched.run_due()] == ["jobs"]

    def broken(**kw):
        raise RuntimeError("database went away")

    monkeypatch.setattr(jobs, "jobs_sweep_stalled", broken)
    now[0] += 30
    ran = sched.run_due()
    assert [(name, ok) for name, ok, _ in ran] == [("jobs", False), ("plays", True)]
    assert "database went away" in str(ran[0][2])


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_scheduler_fails_a_build_whose_worker_was_killed_with_no_worker_alive(ml_staff):
    stale_s = 8.0  # heartbeats every 0.3 s: generous on a busy machine, short for a test
    env = {"HAT_HEARTBEAT_EVERY_S": "0.3", "HAT_HEARTBEAT_STALE_S": str(stale_s), "HAT_SWEEP_EVERY_S": "0.5"}
    proc, log = start_worker("scheduler-test", log_name="scheduler-test-worker.log", env_extra=env)
    sched, sched_log = start_scheduler(env)
    try:
        d = dataset_build_on("scheduler-test", user=ml_staff, recipe={"variants_per_sample": 8},
                             sources={"scenarios": [], "tiny_gold": 6000})
        deadline = time.monotonic() + 120
        while True:  # building, and beating from the worker
            d.refresh_from_db()
            if d.status == "running" and d.heartbeat_at and d.heartbeat_at > d.started_at:
                break
            assert d.status in ("queued", "running") and time.monotonic() < deadline, (d.status, d.error)
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)  # the whole worker: no worker is left alive
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        d.refresh_from_db()
        assert d.status == "running"
        while d.status == "running":
            assert time.monotonic() - killed_at < stale_s + 20, "the scheduler did not fail the build"
            assert sched.poll() is None, "the scheduler died"
            time.sleep(0.2)
            d.refresh_from_db()
        took = time.monotonic() - killed_at
        assert d.status == "failed" and "WorkerLost" in d.error
        assert took >= stale_s - 1.0  # not before it went stale (its last beat was at most 0.3 s before)
        assert took <= stale_s + 10
        print(f"build failed by the scheduler {took:.1f} s after its worker was killed (stale after {stale_s:g} s)")
    finally:
        rc = stop_process(sched, sched_log)
        stop_worker(proc, log)
    assert rc == 0  # SIGTERM: a clean stop
    assert "jobs-sweep-stalled: ['" in (Path(settings.ENV.data_dir) / "scheduler.log").read_text()
