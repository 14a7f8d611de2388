"""Celery tasks of the console: the one sweep of every job kind (console.jobs), and notification e-mail."""

from __future__ import annotations

import logging
import random

from celery import shared_task
from django.conf import settings

from console import jobs, services

log = logging.getLogger(__name__)

EMAIL_RETRY_MAX_S = 1800.0  # the longest wait between two tries of notification mail


@shared_task(name="console.jobs_sweep_stalled", ignore_result=True, time_limit=60)
def jobs_sweep_stalled() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): revoke overdue cancels, end the jobs whose worker died."""
    return jobs.jobs_sweep_stalled()


def email_retry_countdown(retries: int, *, first_s: float | None = None) -> float:
    """Seconds before try ``retries + 2`` of notification mail: HAT_EMAIL_RETRY_S doubled at each retry, up to
    EMAIL_RETRY_MAX_S, between half and all of that (several tasks that failed together do not retry together)."""
    first_s = settings.HAT_EMAIL_RETRY_S if first_s is None else first_s
    wait = min(EMAIL_RETRY_MAX_S, first_s * 2 ** min(retries, 30))
    return wait / 2 + random.uniform(0, wait / 2)


# On the default queue (console.services.notifications_email_enqueue), where batch work goes. Sending is bounded by
# EMAIL_TIMEOUT per socket operation; time_limit ends a server that trickles forever.
@shared_task(name="console.notifications_email", bind=True, ignore_result=True, time_limit=300)
def notifications_email(self, notification_ids: list[int]) -> int:
    """E-mail these notifications (console.services.notifications_email). A mail server that is down, slow past
    EMAIL_TIMEOUT or refusing for now: retried after growing waits (email_retry_countdown), HAT_EMAIL_RETRIES times,
    then given up and logged; the notifications stay in-app, their ``emailed_at`` empty."""
    try:
        return services.notifications_email(notification_ids)
    except OSError as exc:  # smtplib's errors, refused connections and timeouts are all OSErrors
        if self.request.retries >= settings.HAT_EMAIL_RETRIES:
            log.error("notification e-mail given up after %d tries (notifications %s stay in-app only): %s",
                      self.request.retries + 1, notification_ids, exc)
            return 0
        countdown = email_retry_countdown(self.request.retries)
        log.warning("notification e-mail failed (try %d), retrying in %.0f s: %s", self.request.retries + 1,
                    countdown, exc)
        raise self.retry(exc=exc, countdown=countdown, max_retries=settings.HAT_EMAIL_RETRIES) from exc
