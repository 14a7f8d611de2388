"""Notification e-mail leaves from a Celery task (console.tasks.notifications_email), never from the request: the
opt-out read when the mail is sent, retries with growing waits on a mail server that is down or refuses for now,
nothing sent twice after a failure part-way, a recipient refused for good skipped without a retry, and a real
worker on the batch queue delivering to a real SMTP server after it first refused."""

from __future__ import annotations

import logging
import time

import pytest
from django.conf import settings as django_settings
from django.core import mail
from django.urls import reverse

from console import services, tasks
from console.models import Notification
from harness_editor import services as registry
from tests.conftest import start_worker, stop_worker
from tests.console.smtp_server import Behaviour, SMTPTestServer

needs_shared_db = pytest.mark.skipif(not django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the Celery worker needs the PostgreSQL test database")


@pytest.fixture
def draft(manager, demo_manifest):
    return registry.harness_create(user=manager, slug="glow-gadget", name="Glow & Gadget live room",
                                   manifest=demo_manifest("skincare_v1"))


@pytest.fixture
def smtp(settings):
    """A real SMTP server on loopback, and Django's SMTP backend pointed at it."""
    with SMTPTestServer() as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.port, 5
        yield server


@pytest.fixture
def waits(monkeypatch) -> list[int]:
    """The retries the task asked for (by retry number); Celery's ``apply`` runs them at once, without the wait."""
    asked: list[int] = []
    countdown = tasks.email_retry_countdown
    monkeypatch.setattr(tasks, "email_retry_countdown", lambda retries: asked.append(retries) or countdown(retries))
    return asked


def _submit(manager, draft, capture) -> None:
    with capture(execute=True):
        registry.version_submit(user=manager, version=draft)


# --- when the mail is sent, and to whom ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_an_opt_out_made_after_the_change_is_honoured_when_the_mail_is_sent(
        draft, manager, reviewer, reviewer2, mail_queue, django_capture_on_commit_callbacks):
    _submit(manager, draft, django_capture_on_commit_callbacks)
    assert len(mail_queue) == 1 and mail.outbox == []  # queued, not sent
    services.notification_preference_set(user=reviewer2, email=False)  # while the task waits in the queue
    [result] = mail_queue.run()
    assert result.result == 1 and [m.to for m in mail.outbox] == [["cr_carol@example.test"]]
    assert Notification.objects.get(recipient=reviewer2).emailed_at is None


@pytest.mark.django_db
def test_a_deactivated_or_addressless_recipient_gets_nothing_at_send_time(
        draft, manager, reviewer, reviewer2, mail_queue, django_capture_on_commit_callbacks):
    _submit(manager, draft, django_capture_on_commit_callbacks)
    reviewer.email = ""
    reviewer.save()
    reviewer2.is_active = False
    reviewer2.save()
    assert [r.result for r in mail_queue.run()] == [0] and mail.outbox == []


# --- retries ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,value,field", [("HAT_EMAIL_RETRY_S", "0", "email_retry_s"),
                                              ("HAT_EMAIL_RETRIES", "-1", "email_retries"),
                                              ("HAT_EMAIL_RETRIES", "many", "email_retries")])
def test_retry_settings_are_checked_at_start_up(monkeypatch, name, value, field):
    from console.config import load_settings

    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=field):
        load_settings()


def test_the_wait_between_tries_doubles_within_bounds_up_to_a_cap():
    for retries in range(12):
        wait = min(tasks.EMAIL_RETRY_MAX_S, 30 * 2 ** retries)
        for _ in range(20):
            assert wait / 2 <= tasks.email_retry_countdown(retries, first_s=30) <= wait
    assert tasks.email_retry_countdown(10_000, first_s=30) <= tasks.EMAIL_RETRY_MAX_S


@pytest.mark.django_db
def test_a_server_that_refuses_for_now_is_tried_again_until_it_takes_the_mail(
        draft, manager, reviewer, reviewer2, smtp, mail_queue, waits, django_capture_on_commit_callbacks):
    smtp.behaviour.refuse_connections = 2  # "421 try again later" twice
    _submit(manager, draft, django_capture_on_commit_callbacks)
    [result] = mail_queue.run()
    assert result.state == "SUCCESS" and result.result == 2
    assert waits == [0, 1] and smtp.behaviour.connections == 3
    assert sorted(r.to[0] for r in smtp.received) == ["cr_carol@example.test", "cr_dave@example.test"]
    assert smtp.received[0].subject == "[hat-console] cm_alice submitted glow-gadget v1 for review"
    assert not Notification.objects.filter(emailed_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_server_that_stays_down_is_given_up_after_the_retries(draft, manager, reviewer, settings, mail_queue, waits,
                                                                caplog, django_capture_on_commit_callbacks):
    with SMTPTestServer() as closed:  # a port that was a mail server a moment ago: connection refused
        port = closed.port
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.HAT_EMAIL_RETRIES = "127.0.0.1", port, 3
    _submit(manager, draft, django_capture_on_commit_callbacks)
    with caplog.at_level(logging.WARNING, logger="console.tasks"):
        [result] = mail_queue.run()
    assert result.state == "SUCCESS" and result.result == 0 and waits == [0, 1, 2]
    assert "notification e-mail given up after 4 tries" in caplog.text
    assert Notification.objects.get(recipient=reviewer).emailed_at is None  # in-app only, and says so


@pytest.mark.django_db
def test_a_failure_part_way_retries_only_what_was_not_sent(draft, manager, reviewer, reviewer2, smtp, mail_queue,
                                                           waits, django_capture_on_commit_callbacks):
    smtp.behaviour.drop_after = 1  # each connection drops after one message
    _submit(manager, draft, django_capture_on_commit_callbacks)
    [result] = mail_queue.run()
    assert result.state == "SUCCESS" and waits == [0]
    assert sorted(r.to[0] for r in smtp.received) == ["cr_carol@example.test", "cr_dave@example.test"]  # once each
    assert not Notification.objects.filter(emailed_at__isnull=True).exists()


@pytest.mark.django_db
def test_a_recipient_refused_for_good_is_skipped_without_a_retry(draft, manager, reviewer, reviewer2, smtp, mail_queue,
                                                                 waits, caplog, django_capture_on_commit_callbacks):
    smtp.behaviour.refused_for_good = {"cr_carol@example.test"}
    _submit(manager, draft, django_capture_on_commit_callbacks)
    with caplog.at_level(logging.WARNING, logger="console.services"):
        [result] = mail_queue.run()
    assert result.state == "SUCCESS" and result.result == 1 and waits == []
    assert [r.to for r in smtp.received] == [["cr_dave@example.test"]]
    assert "refused its e-mail to cr_carol@example.test for good" in caplog.text
    assert Notification.objects.get(recipient=reviewer).emailed_at is None
    assert Notification.objects.get(recipient=reviewer2).emailed_at is not None


@pytest.mark.django_db
def test_a_broker_that_refuses_the_task_never_fails_the_change(draft, manager, reviewer, client, monkeypatch, caplog,
                                                               django_capture_on_commit_callbacks):
    def refuse(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.notifications_email, "apply_async", refuse)
    client.force_login(manager)
    with caplog.at_level(logging.ERROR, logger="console.services"), django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("harness_editor:submit", args=["glow-gadget", 1]))
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.status == "submitted" and Notification.objects.get(recipient=reviewer).emailed_at is None
    assert "notification e-mail could not be queued" in caplog.text


# --- a real worker, a real SMTP server ----------------------------------------------------------------------------

@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_worker_sends_the_mail_after_the_request_and_retries_a_refusing_server(
        draft, manager, reviewer, client, settings):
    """The submit page, as a browser posts it; the task goes to the default (batch) queue, here a queue of the test's
    own worker (a session worker elsewhere has other mail settings); the server refuses the first try, the worker
    retries after the wait and the reviewer's mail arrives."""
    queue = f"mail-{settings.DATABASES['default']['NAME']}"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    with SMTPTestServer(Behaviour(refuse_connections=1)) as smtp:
        proc, log = start_worker(queue, log_name="test-worker-mail.log", env_extra={
            "HAT_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend", "HAT_EMAIL_HOST": "127.0.0.1",
            "HAT_EMAIL_PORT": str(smtp.port), "HAT_EMAIL_RETRY_S": "1", "HAT_CONSOLE_URL": "https://console.test"})
        try:
            client.force_login(manager)
            started = time.monotonic()
            response = client.post(reverse("harness_editor:submit", args=["glow-gadget", 1]))
            assert response.status_code == 302 and time.monotonic() - started < 5
            deadline = time.monotonic() + 60
            while Notification.objects.get(recipient=reviewer).emailed_at is None:
                assert time.monotonic() < deadline, open(log.name, encoding="utf-8").read()[-3000:]
                time.sleep(0.2)
        finally:
            stop_worker(proc, log)
        worker_log = open(log.name, encoding="utf-8").read()
    [received] = smtp.received
    assert received.to == ["cr_carol@example.test"] and smtp.behaviour.connections == 2
    assert received.subject == "[hat-console] cm_alice submitted glow-gadget v1 for review"
    assert "https://console.test/harnesses/glow-gadget/v1/" in received.message.get_payload()
    assert "notification e-mail failed (try 1), retrying in" in worker_log
