"""A Redis outage does not kill the worker: a real Celery worker reaches Redis through a TCP proxy while a
preview room plays; the proxy is cut (connections closed, new ones refused) for ``HAT_TEST_REDIS_CUT_S``
seconds and restored; the worker must still be running and the room's clock must go on, turns answered.

Before the fix (kombu 5.7.0 defaults) this killed the worker: ``Restoring N unacknowledged message(s)`` then
``Unrecoverable error: AttributeError("'NoneType' object has no attribute 'hostname'")``."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import yaml
from django.conf import settings

from streams import services, tasks
from streams.models import PreviewEvent, PreviewRoom
from console.celery import WORKER_OPTIONS, WORKER_POOL
from tests.console.test_scheduler import start_scheduler, stop_process
from tests.conftest import start_worker, stop_worker
from tests.streams.preview_helpers import scripted_model, wait_for  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import scripted_endpoint  # noqa: F401  (fixture)
from tests.tcp_proxy import TcpProxy

CUT_S = float(os.environ.get("HAT_TEST_REDIS_CUT_S", "8"))
# The worker's options as deployed; HAT_TEST_WORKER_OPTIONS="" replays the old `make run` worker (with gossip).
WORKER_ARGS = (os.environ["HAT_TEST_WORKER_OPTIONS"].split() if "HAT_TEST_WORKER_OPTIONS" in os.environ
               else WORKER_OPTIONS)
SCENARIOS = settings.BASE_DIR / "streams" / "scenarios"

needs_redis = pytest.mark.skipif(not settings.ENV.redis_url, reason="the outage is a Redis outage")
needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")


def long_scenario_yaml() -> str:
    """An hour of the after-sales demo with a viewer comment every 20 simulated seconds: at x10 a turn every
    2 s, so the worker always has tasks in flight and queued when Redis goes."""
    data = yaml.safe_load((SCENARIOS / "after-sales-faults.yaml").read_text(encoding="utf-8"))
    data.update(id="outage-check", title="Outage check", duration_minutes=60, timeline=[], faults=[])
    comments = [{"at_minute": round(m / 3, 3), "text": f"how much is #101? ({m})", "name": f"v{m % 7}"}
                for m in range(1, 180)]
    data["personas"] = [{"id": "askers", "kind": "price_asker", "names": [f"v{i}" for i in range(7)],
                         "comments": comments}]
    return yaml.safe_dump(data, sort_keys=False)


@needs_redis
def test_a_channel_whose_connection_was_closed_fails_with_a_connection_error():
    """The workaround in console/celery.py: kombu's own failure mode (AttributeError, which kills the worker)
    becomes a connection error, which the worker's consumer ignores before reconnecting."""
    from kombu import Connection

    conn = Connection(settings.ENV.redis_url)
    channel = conn.default_channel
    errors = conn.connection_errors
    conn.collect()  # what the consumer does first when the connection drops: the transport is detached
    with pytest.raises(errors, match="closed"):
        channel._connparams()


@needs_redis
@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_worker_survives_a_redis_cut_and_the_room_plays_on(manager, harness_with_history, scripted_model,
                                                           monkeypatch):
    queue = f"outage-{uuid.uuid4().hex[:8]}"  # this worker's own queue: no other worker takes its tasks
    proxy = TcpProxy.for_url(settings.ENV.redis_url).start()
    url = proxy.url(settings.ENV.redis_url)
    env = {"REDIS_URL": url, "CELERY_BROKER_URL": url, "HAT_CELERY_DEFAULT_QUEUE": queue, "HAT_INTERACTIVE_QUEUE": queue,
           "HAT_SWEEP_EVERY_S": "1"}
    proc, log = start_worker(queue, log_name="redis-outage-worker.log", pool=WORKER_POOL, options=WORKER_ARGS,
                             env_extra=env)
    sched, sched_log = start_scheduler(env, log_name="redis-outage-scheduler.log")  # as `make run` has it
    try:
        scenario = services.scenario_import(yaml_text=long_scenario_yaml(), user=manager)
        room = services.preview_open(user=manager, version=harness_with_history["v1"], scenario=scenario,
                                     endpoint=scripted_model)
        send = tasks.preview_clock_tick.apply_async
        monkeypatch.setattr(tasks.preview_clock_tick, "apply_async",  # the first tick, to that worker's queue
                            lambda args, **kw: send(args, queue=queue, **kw))
        services.preview_play(user=manager, room=room, speed=10)

        def minute() -> float:
            return PreviewRoom.objects.get(pk=room.pk).scenario_minute

        def replies() -> int:
            return PreviewEvent.objects.filter(room_id=room.pk, type="reply").count()

        assert wait_for(lambda: replies() >= 2, timeout=30), "the room did not play before the cut"
        proxy.cut()
        cut_at = time.monotonic()
        while time.monotonic() - cut_at < CUT_S:
            assert proc.poll() is None, f"worker died {time.monotonic() - cut_at:.1f} s into the outage; see {log.name}"
            time.sleep(0.2)
        proxy.restore()
        restored_at = time.monotonic()
        before_minute, before_replies = minute(), replies()
        assert wait_for(lambda: minute() > before_minute + 0.5 and replies() > before_replies + 1, timeout=45), \
            f"the room did not play on after Redis came back; see {log.name}"
        print(f"outage {CUT_S:g} s: worker alive; room playing again {time.monotonic() - restored_at:.1f} s "
              f"after Redis came back")
        assert proc.poll() is None, f"worker died after the outage; see {log.name}"
    finally:
        proxy.stop()
        stop_process(sched, sched_log)
        stop_worker(proc, log)
