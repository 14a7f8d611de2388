import os

from celery import Celery
from celery.signals import worker_init, worker_ready

from console.latency_tuning import (
    freeze_startup_heap,
    log_gc_pauses,
    prefer_latency,
    space_full_collections,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# How every worker is started (Makefile, deploy/systemd/, the tests that play a deployment). Without gossip:
# with kombu 5.7.0 on Redis, a lost broker connection kills a worker that runs gossip ("Unrecoverable error:
# AttributeError: 'NoneType' object has no attribute 'hostname'", celery/kombu#582): gossip's auto-delete queue
# cannot be deleted on the dead connection, which leaves the consumer's channel half-closed, and closing it again
# restores the unacknowledged messages through a transport already detached from its connection. Mingle and the
# event heartbeat serve monitoring tools the console does not use. The prefork pool: the worker's main process
# answers control pings (/health/ready) while a task runs in a pool process.
WORKER_POOL = "prefork"
WORKER_OPTIONS = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


def _guard_detached_redis_channel() -> None:
    """Workaround for kombu 5.7.0 (latest; no release fixes it): a worker whose Redis connection drops may die
    with ``Unrecoverable error: AttributeError("'NoneType' object has no attribute 'hostname'")``.

    On a lost connection the consumer first collects the connection: closing its channel reads the pending
    BRPOP reply (kombu#1733) or deletes gossip's auto-delete queue, which raises on the dead socket, so the
    channel stays half-closed while the transport is detached (``transport.client = None``). The consumer then
    closes the connection again (celery 5.7 ``on_connection_error_after_connected``); that close restores the
    unacknowledged messages through ``Channel._connparams``, which reads ``transport.client.hostname``
    (celery/kombu#582). Here a detached channel raises the transport's own connection error instead, which the
    consumer ignores before it reconnects; the messages stay in Redis's unacked set, redelivered after the
    visibility timeout (lost clock ticks are re-sent sooner by the scheduler)."""
    try:
        from kombu.transport import redis as kombu_redis
    except ImportError:  # pragma: no cover - redis is a dependency
        return
    channel_cls = kombu_redis.Channel
    if kombu_redis.redis is None or getattr(channel_cls._connparams, "guards_detached", False):
        return
    connparams = channel_cls._connparams

    def _connparams(self, asynchronous=False):
        if self.connection is None or self.connection.client is None:
            raise kombu_redis.redis.exceptions.ConnectionError("the broker connection of this channel is closed")
        return connparams(self, asynchronous=asynchronous)

    _connparams.guards_detached = True
    channel_cls._connparams = _connparams


_guard_detached_redis_channel()


_latency_worker = [False]  # set by worker_init for a thread pool, read by worker_ready


@worker_init.connect
def _prefer_latency_in_thread_workers(sender=None, **_kwargs) -> None:
    """The interactive worker (threads pool: session runners, preview turns, the event publisher thread) hands each
    token from a runner thread to the publisher thread: with CPython's 5 ms GIL switch interval that hand-off can
    wait behind a busy thread for that long (console.config gil_switch_s). Batch workers (prefork) keep the default."""
    from django.conf import settings

    pool = getattr(sender, "pool_cls", None)
    pool_name = pool if isinstance(pool, str) else f"{getattr(pool, '__module__', '')}.{getattr(pool, '__name__', '')}"
    if "thread" in pool_name:
        prefer_latency(gil_switch_s=settings.ENV.gil_switch_s)
        _latency_worker[0] = True
        if os.environ.get("HAT_GC_PAUSE_LOG"):  # benchmarks: bench/live_bench.py reports the pauses
            log_gc_pauses(os.environ["HAT_GC_PAUSE_LOG"])


@worker_ready.connect
def _freeze_thread_worker_heap(sender=None, **_kwargs) -> None:
    """Once a thread-pool worker has imported its tasks and started its pool, its start-up heap is left out of later
    full collections (console.config gc_freeze): they paused every session it runs for 125-158 ms."""
    from django.conf import settings

    if not _latency_worker[0]:
        return
    if settings.ENV.gc_freeze:
        freeze_startup_heap()
    space_full_collections(settings.ENV.gc_full_every)
