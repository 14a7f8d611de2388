"""The scheduler: runs the periodic sweeps of ``CELERY_BEAT_SCHEDULE`` in its own process.

The sweeps find work whose worker died (one sweep over every job kind, console.jobs.jobs_sweep_stalled: a dataset
build, training job or scenario run that stopped beating; it also revokes cancels not honoured in time) and clocks
that lost their tick with the broker. Run inside a worker (``celery worker -B``)
they die with it, so a dead worker was never noticed. Here each entry's task function runs in this process
(``Task.apply``: no broker, no worker), every ``schedule`` seconds; one failing sweep is logged and the others go
on. Run exactly one (``manage.py run_scheduler``); a second is harmless, the sweeps are idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db import close_old_connections

logger = logging.getLogger("console.scheduler")


@dataclass
class Entry:
    name: str
    task: str
    every_s: float
    due_at: float = 0.0  # monotonic; 0: at once


def entries_from(schedule: dict) -> list[Entry]:
    """The beat schedule's entries; only fixed intervals (seconds or a timedelta), which is all the console
    uses: anything else is refused at start-up rather than silently never run."""
    out = []
    for name, spec in schedule.items():
        every = spec["schedule"]
        if isinstance(every, timedelta):
            every = every.total_seconds()
        if not isinstance(every, int | float) or every <= 0:
            raise ValueError(f"CELERY_BEAT_SCHEDULE[{name!r}]: the scheduler runs fixed intervals in seconds, "
                             f"got {spec['schedule']!r}")
        out.append(Entry(name=name, task=spec["task"], every_s=float(every)))
    return out


def _load_tasks(names: list[str]) -> dict[str, Callable]:
    from console.celery import app

    app.loader.import_default_modules()  # every installed app's tasks module
    missing = [n for n in names if n not in app.tasks]
    if missing:
        raise ValueError(f"CELERY_BEAT_SCHEDULE names unknown tasks: {', '.join(missing)}")
    return {n: app.tasks[n] for n in names}


class Scheduler:
    def __init__(self, schedule: dict, *, clock: Callable[[], float] = time.monotonic):
        self.entries = entries_from(schedule)
        self.tasks = _load_tasks([e.task for e in self.entries])
        self.clock = clock
        self.stop = threading.Event()

    def run_entry(self, entry: Entry) -> tuple[bool, object]:
        """Run one sweep here and now; returns (ok, its result or the error)."""
        close_old_connections()
        try:
            result = self.tasks[entry.task].apply()
            if result.failed():
                logger.error("sweep %s failed: %r\n%s", entry.name, result.result, result.traceback)
                return False, result.result
            if result.result:
                logger.warning("sweep %s: %s", entry.name, result.result)
            return True, result.result
        except Exception as exc:  # never let one sweep stop the others
            logger.exception("sweep %s failed", entry.name)
            return False, exc
        finally:
            close_old_connections()

    def run_due(self) -> list[tuple[str, bool, object]]:
        now = self.clock()
        ran = []
        for entry in self.entries:
            if now >= entry.due_at:
                entry.due_at = now + entry.every_s
                ran.append((entry.name, *self.run_entry(entry)))
        return ran

    def run_forever(self) -> None:
        logger.warning("scheduler: %s", ", ".join(f"{e.name} every {e.every_s:g} s" for e in self.entries))
        while not self.stop.is_set():
            self.run_due()
            wait = min(e.due_at for e in self.entries) - self.clock()
            self.stop.wait(max(wait, 0.05))
        logger.warning("scheduler stopped")
