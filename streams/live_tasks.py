"""Celery tasks of live: take ids, call one service (imported by streams.tasks, which Celery discovers)."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_shutting_down

from streams.events import publish_flush


# The session runner: one long-lived task per live session on the interactive queue (settings.CELERY_TASK_ROUTES;
# live_runner_ensure names the queue), running until the session ends. No time limit: it lives as long as the
# broadcast. At most once (acks_late off): a runner lost with its worker is replaced by the sweep, which finds its
# lease stale, not by a redelivery.
@shared_task(name="streams.live_session_run", bind=True, acks_late=False, ignore_result=True)
def live_session_run(self, session_id: str) -> dict:
    from streams.live.runner import live_session_run as run

    try:
        return run(session_id, task_id=self.request.id)
    finally:
        publish_flush(timeout=5)


@shared_task(name="streams.live_runners_sweep", ignore_result=True, time_limit=60)
def live_runners_sweep() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): a runner for every live session whose runner stopped renewing its lease."""
    from streams.services.live_controls import live_runners_sweep as sweep

    return sweep()


@worker_shutting_down.connect
def _runners_hand_over(**_kwargs) -> None:
    """A worker stopping (warm shutdown) would wait for its runners, which run as long as their broadcasts: each
    stops after its turn in flight and its session goes to a runner on another (or the restarted) worker."""
    from streams.live.runner import runners_stop_all

    runners_stop_all()
