"""Celery tasks of the console: the one sweep of every job kind (console.jobs)."""

from __future__ import annotations

from celery import shared_task

from console import jobs


@shared_task(name="console.jobs_sweep_stalled", ignore_result=True, time_limit=60)
def jobs_sweep_stalled() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): revoke overdue cancels, end the jobs whose worker died."""
    return jobs.jobs_sweep_stalled()
