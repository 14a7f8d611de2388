"""The notification-mail task in tests that have no worker: its sends are recorded instead of reaching the broker
(where another test's worker could take them), and ``run()`` runs them here with the task's own code (Celery's
``apply``: retries and all, on the test's mail backend, locmem unless a test sets another)."""

from __future__ import annotations

import pytest


class MailQueue(list):
    """The sends of ``console.tasks.notifications_email``: {"args": ..., "queue": ...} each, oldest first."""

    def run(self) -> list:
        """Run every recorded send as a worker would (once each), and forget them; returns the EagerResults."""
        from console import tasks

        sends, self[:] = list(self), []
        return [tasks.notifications_email.apply(args=s["args"]) for s in sends]


@pytest.fixture
def mail_queue(monkeypatch) -> MailQueue:
    from console import tasks

    sent = MailQueue()
    monkeypatch.setattr(tasks.notifications_email, "apply_async",
                        lambda args, queue=None, **kw: sent.append({"args": list(args), "queue": queue}))
    return sent
