"""Heartbeats of long work on the Celery workers, and how stale one may get.

A worker that is killed (OOM, a deploy, a crashed host) cannot say that it stopped, so a running job records
that it is alive instead: :class:`Heartbeat` touches one timestamp column of the job's row from a daemon thread
every ``HEARTBEAT_EVERY_S`` while the job runs in this process. The thread dies with the process; the one sweep of
every job kind (:func:`console.jobs.jobs_sweep_stalled`, a periodic task in ``CELERY_BEAT_SCHEDULE``) then finds rows
whose heartbeat is older than ``HEARTBEAT_STALE_S`` and marks them failed with that cause. (A scenario run beats
from its clock's ticks instead: it has no long task.) A thread, not the job's progress callback: a job
can be busy for a long time between progress reports (collecting samples, saving a checkpoint).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

logger = logging.getLogger(__name__)


def stale_before(now: datetime | None = None, seconds: float | None = None) -> datetime:
    """The time before which a heartbeat means the worker is gone."""
    return (now or timezone.now()) - timedelta(seconds=settings.HEARTBEAT_STALE_S if seconds is None else seconds)


class Heartbeat:
    """``with Heartbeat(Model, pk):`` keeps ``Model.<field>`` of that row at "now" (written at once, then every
    ``every_s``) until the block ends."""

    def __init__(self, model: Any, pk: Any, *, field: str = "heartbeat_at", every_s: float | None = None):
        self.model, self.pk, self.field = model, pk, field
        self.every_s = settings.HEARTBEAT_EVERY_S if every_s is None else every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        self.model.objects.filter(pk=self.pk).update(**{self.field: timezone.now()})

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                try:
                    close_old_connections()
                    self.beat()
                except Exception:  # a database blip: the next beat tries again; the sweep allows several misses
                    logger.warning("heartbeat of %s %s failed", self.model.__name__, self.pk, exc_info=True)
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.pk}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every_s + 5)
