"""Notifications derived from the audit timeline (console.services): who is told of what, in-app and by e-mail
(queued to a worker after commit only, never for a change that rolled back, never failing or holding the request),
the bell's unread count, the notifications page (newest first, open, mark one/all read, the e-mail choice) and its
refusals per role. The mail task's retries, and a real worker sending to a real SMTP server:
test_notification_mail.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core import mail
from django.db import transaction
from django.urls import reverse

from console import selectors, services
from console.models import AuditEvent, Notification, NotificationPreference
from harness_editor import services as registry
from tests.console.smtp_server import HungServer

REPO = Path(__file__).resolve().parents[2]


def _texts(user) -> list[str]:
    return list(Notification.objects.filter(recipient=user).order_by("-id").values_list("text", flat=True))


@pytest.fixture
def draft(manager, demo_manifest):
    return registry.harness_create(user=manager, slug="glow-gadget", name="Glow & Gadget live room",
                                   manifest=demo_manifest("skincare_v1"))


# --- who is told -----------------------------------------------------------------------------------------------

def test_a_submitted_version_asks_every_reviewer_but_not_the_author(draft, manager, reviewer, reviewer2, ml_staff,
                                                                   operator, settings, mail_queue,
                                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        registry.version_submit(user=manager, version=draft)
    assert _texts(reviewer) == ["cm_alice submitted glow-gadget v1 for review"]
    assert _texts(reviewer2) == ["cm_alice submitted glow-gadget v1 for review"]
    assert _texts(manager) == [] and _texts(ml_staff) == [] and _texts(operator) == []
    # one task for the event, with the notifications' ids, on the batch (default) queue, not the interactive one
    ids = sorted(Notification.objects.values_list("pk", flat=True))
    assert mail_queue == [{"args": [ids], "queue": settings.CELERY_TASK_DEFAULT_QUEUE}]
    assert settings.CELERY_TASK_DEFAULT_QUEUE != settings.INTERACTIVE_QUEUE
    assert mail.outbox == []  # the request sent nothing itself
    mail_queue.run()
    n = Notification.objects.get(recipient=reviewer)
    assert n.url == reverse("harness_editor:version", args=["glow-gadget", 1]) and n.kind == "version.submitted"
    assert n.event.action == "version.submitted" and n.read_at is None and n.emailed_at is not None
    assert sorted(m.to[0] for m in mail.outbox) == ["cr_carol@example.test", "cr_dave@example.test"]
    message = mail.outbox[0]
    assert message.subject == "[hat-console] cm_alice submitted glow-gadget v1 for review"
    assert "http://localhost:8000/harnesses/glow-gadget/v1/" in message.body


def test_a_reviewer_who_authored_the_version_is_not_asked_to_review_it(db, django_user_model, reviewer,
                                                                         demo_manifest):
    from django.contrib.auth.models import Group

    from console import roles

    both = django_user_model.objects.create_user(username="both_hank", password="x", email="hank@example.test")
    both.groups.add(Group.objects.get(name=roles.CAMPAIGN_MANAGER), Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    v1 = registry.harness_create(user=both, slug="mixed", name="Mixed", manifest=demo_manifest("skincare_v1"))
    registry.version_submit(user=both, version=v1)
    assert _texts(both) == [] and _texts(reviewer) == ["both_hank submitted mixed v1 for review"]


def test_approval_and_rejection_tell_the_author_not_the_reviewers(draft, manager, reviewer, reviewer2, mail_queue,
                                                                  demo_manifest, django_capture_on_commit_callbacks):
    registry.version_submit(user=manager, version=draft)
    with django_capture_on_commit_callbacks(execute=True):
        registry.version_approve(user=reviewer, version=draft, comment="claims checked")
    mail_queue.run()
    assert _texts(manager) == ["cr_carol approved glow-gadget v1"]
    assert [m.to for m in mail.outbox] == [["cm_alice@example.test"]]
    assert "Comment: claims checked" in mail.outbox[0].body
    v2 = registry.version_create_draft(user=manager, harness=draft.harness, manifest=demo_manifest("skincare_v2"),
                                       parent=draft)
    registry.version_submit(user=manager, version=v2)
    registry.version_reject(user=reviewer2, version=v2, comment="the coupon wording promises too much")
    assert _texts(manager) == ["cr_dave rejected glow-gadget v2", "cr_carol approved glow-gadget v1"]
    # the reviewers were told of the submissions only, never of each other's decisions
    assert all("submitted" in t for t in _texts(reviewer) + _texts(reviewer2))


def test_a_label_move_tells_authors_and_reviewers_of_the_harness_not_bystanders(
        harness_with_history, manager, manager2, reviewer, reviewer2, demo_manifest):
    harness = harness_with_history["harness"]
    # reviewer2 comments on v2 (a review comment is on the timeline); manager2 wrote nothing here
    services.audit_record(actor=reviewer2, action="review.commented", scope="harness:glow-gadget",
                          target="version:2", comment="why the new bundle skill?")
    v2 = registry.version_approve(user=reviewer, version=harness_with_history["v2"])
    before = Notification.objects.count()
    registry.label_move(user=reviewer, harness=harness, name="production", version=v2, comment="go live")
    moved = Notification.objects.filter(kind="label.moved", event__to_state="v2")
    assert Notification.objects.count() - before == moved.count() == 2
    assert {n.recipient.username for n in moved} == {"cm_alice", "cr_dave"}  # not the mover, not cm_bob
    assert _texts(manager)[0] == "cr_carol moved glow-gadget production to v2 (was v1)"
    assert moved.first().url == reverse("harness_editor:detail", args=["glow-gadget"])


def test_other_actions_notify_nobody(harness_with_history, manager):
    before = Notification.objects.count()
    services.audit_record(actor=manager, action="dataset.queued", scope="dataset:1", target="dataset:x")
    services.audit_record(actor=manager, action="version.created", scope="harness:glow-gadget", target="version:9")
    assert Notification.objects.count() == before


def test_inactive_people_are_not_notified(draft, manager, reviewer, reviewer2):
    reviewer2.is_active = False
    reviewer2.save()
    registry.version_submit(user=manager, version=draft)
    assert _texts(reviewer) and not _texts(reviewer2)


# --- e-mail: after commit, to those with an address who did not opt out ----------------------------------------

def test_no_email_address_or_opted_out_means_in_app_only(draft, manager, reviewer, reviewer2, mail_queue,
                                                          django_capture_on_commit_callbacks):
    reviewer.email = ""
    reviewer.save()
    services.notification_preference_set(user=reviewer2, email=False)
    with django_capture_on_commit_callbacks(execute=True):
        registry.version_submit(user=manager, version=draft)
    assert [r.result for r in mail_queue.run()] == [0]
    assert _texts(reviewer) and _texts(reviewer2)  # in-app for both
    assert mail.outbox == []
    assert not Notification.objects.filter(emailed_at__isnull=False).exists()


def test_nothing_is_written_or_sent_for_a_change_that_rolls_back(draft, manager, reviewer, mail_queue,
                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            registry.version_submit(user=manager, version=draft)
            assert _texts(reviewer)  # written in the change's transaction ...
            raise RuntimeError("the request failed after the submit")
    assert callbacks == [] and mail_queue == [] and mail.outbox == []  # ... and gone with it; no e-mail queued
    assert not Notification.objects.exists() and not AuditEvent.objects.filter(action="version.submitted").exists()


def test_email_waits_for_the_commit(draft, manager, reviewer, mail_queue, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        registry.version_submit(user=manager, version=draft)
    assert mail.outbox == [] and mail_queue == [] and len(callbacks) == 1  # nothing queued inside the transaction
    callbacks[0]()
    sends = list(mail_queue)
    mail_queue.run()
    assert [m.to for m in mail.outbox] == [["cr_carol@example.test"]]
    mail_queue.extend(sends)  # the same task delivered twice (a redelivery): each notification is mailed once
    assert [r.result for r in mail_queue.run()] == [0]
    assert len(mail.outbox) == 1


def test_a_hung_mail_server_neither_holds_nor_fails_the_request(draft, manager, reviewer, settings, client,
                                                                 mail_queue, django_capture_on_commit_callbacks):
    """The real SMTP backend pointed at a server that never answers: the request (the submit page, its after-commit
    work included) returns at once; the worker's try waits for the server until its timeout (retries:
    test_notification_mail.py; here none, so that it ends)."""
    settings.HAT_EMAIL_RETRIES = 0
    with HungServer() as hung:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", hung.port, 5
        client.force_login(manager)
        started = time.monotonic()
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(reverse("harness_editor:submit", args=["glow-gadget", 1]))
        took = time.monotonic() - started
        assert response.status_code == 302 and took < 3.5, f"the request took {took:.1f} s"  # mail's timeout: 5 s
        draft.refresh_from_db()
        assert draft.status == "submitted" and len(mail_queue) == 1
        started = time.monotonic()
        [result] = mail_queue.run()  # the worker's try: waits for the greeting until the timeout, then gives up
        assert result.state == "SUCCESS" and result.result == 0 and time.monotonic() - started >= 4.5
    assert Notification.objects.get(recipient=reviewer).emailed_at is None  # not sent, and says so


def test_email_settings_come_from_the_environment():
    code = "import console.settings as s; print(s.EMAIL_BACKEND, s.DEFAULT_FROM_EMAIL, s.HAT_CONSOLE_URL)"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAT_EMAIL", "HAT_DEFAULT_FROM", "HAT_CONSOLE"))}
    env.setdefault("HAT_SECRET_KEY", "k" * 40)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "django.core.mail.backends.console.EmailBackend"
    env.update(HAT_EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", HAT_DEFAULT_FROM_EMAIL="hat@ops.test",
               HAT_CONSOLE_URL="https://console.ops.test")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["django.core.mail.backends.smtp.EmailBackend", "hat@ops.test",
                                  "https://console.ops.test"], out.stderr[-2000:]
    env["HAT_EMAIL_PORT"] = "twenty-five"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "email_port" in out.stderr and "valid integer" in out.stderr


# --- the bell --------------------------------------------------------------------------------------------------

def test_the_unread_count_is_one_query_and_stops_counting_at_the_cap(harness_with_history, reviewer,
                                                                     django_assert_num_queries):
    with django_assert_num_queries(1):
        assert selectors.notification_unread_count(user=reviewer) == 2  # v1 and v2 were submitted to them
    others = AuditEvent.objects.bulk_create([AuditEvent(action="x", scope="s", target=f"t{i}") for i in range(120)])
    Notification.objects.bulk_create([Notification(recipient=reviewer, event=e, kind="x", text="x") for e in others])
    assert selectors.notification_unread_count(user=reviewer) == selectors.UNREAD_CAP + 1


def test_the_header_bell_shows_the_unread_count(client, harness_with_history, reviewer, manager):
    client.force_login(reviewer)
    body = client.get(reverse("home")).content.decode()
    assert 'data-testid="bell"' in body and 'hx-trigger="every 30s"' in body
    assert 'data-testid="bell-count">2<' in body  # v1 and v2 submitted
    assert "<script>" not in body.split('data-testid="bell"')[1].split("</a>")[0]
    client.force_login(manager)  # told of v1's approval and of production moving to it
    assert 'data-testid="bell-count">2<' in client.get(reverse("home")).content.decode()
    services.notification_mark_all_read(user=manager)
    assert 'data-testid="bell-count"' not in client.get(reverse("home")).content.decode()


def test_the_bell_fragment_for_htmx_polling(client, harness_with_history, reviewer, outsider,
                                            django_assert_max_num_queries):
    url = reverse("notification_bell")
    assert client.get(url, headers={"HX-Request": "true"}).status_code == 286  # signed out: stop polling
    assert client.get(url).status_code == 302
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    client.force_login(reviewer)
    with django_assert_max_num_queries(5):  # session, user, its permissions, the count: the poll stays cheap
        response = client.get(url, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body and body.strip().startswith('<a id="bell"')
    assert 'data-testid="bell-count">2<' in body and "<link" not in body
    services.notification_mark_all_read(user=reviewer)
    assert "bell-count" not in client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert client.post(url).status_code == 405


def test_people_without_a_role_get_no_bell(client, outsider):
    client.force_login(outsider)
    response = client.get(reverse("home"))
    assert response.status_code == 403 and b'data-testid="bell"' not in response.content


# --- the notifications page ------------------------------------------------------------------------------------

def test_the_page_lists_newest_first_with_links(client, harness_with_history, manager, reviewer):
    harness, v2 = harness_with_history["harness"], harness_with_history["v2"]
    registry.version_reject(user=reviewer, version=v2, comment="needs evidence")
    client.force_login(manager)
    body = client.get(reverse("notifications")).content.decode()
    first, second = body.index("cr_carol rejected glow-gadget v2"), body.index("cr_carol approved glow-gadget v1")
    assert first < second and "needs evidence" in body
    n = Notification.objects.filter(recipient=manager).first()
    assert reverse("notification_open", args=[n.pk]) in body and reverse("notifications_read_all") in body
    assert harness.slug in body


@pytest.mark.parametrize("name,args,method", [
    ("notifications", [], "get"), ("notifications_read_all", [], "post"), ("notification_email", [], "post"),
    ("notification_read", [1], "post"), ("notification_open", [1], "post"),
])
def test_refusals(client, outsider, name, args, method):
    url = reverse(name, args=args)
    response = getattr(client, method)(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    client.force_login(outsider)
    assert getattr(client, method)(url).status_code == 403


@pytest.mark.parametrize("name,args", [("notifications_read_all", []), ("notification_email", []),
                                       ("notification_read", [1]), ("notification_open", [1])])
def test_changes_are_post_only(client, manager, name, args):
    client.force_login(manager)
    assert client.get(reverse(name, args=args)).status_code == 405


def test_notifications_page_refuses_post(client, manager):
    client.force_login(manager)
    assert client.post(reverse("notifications")).status_code == 405


def test_open_marks_read_and_goes_to_the_object(client, harness_with_history, manager):
    n = Notification.objects.get(recipient=manager, kind="version.approved")
    client.force_login(manager)
    response = client.post(reverse("notification_open", args=[n.pk]))
    assert response.status_code == 302 and response["Location"] == "/harnesses/glow-gadget/v1/"
    n.refresh_from_db()
    assert n.read_at is not None
    assert selectors.notification_unread_count(user=manager) == 1  # the label move is still unread


def test_mark_one_read_then_all(client, harness_with_history, manager, reviewer):
    registry.version_reject(user=reviewer, version=harness_with_history["v2"], comment="no")
    first, second, third = Notification.objects.filter(recipient=manager).order_by("id")
    client.force_login(manager)
    response = client.post(reverse("notification_read", args=[first.pk]), {"next": "https://evil.test/"})
    assert response.status_code == 302 and response["Location"] == reverse("notifications")  # no open redirect
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.read_at and second.read_at is None
    response = client.post(reverse("notifications_read_all"), {"next": "/timeline/"}, follow=True)
    assert response.redirect_chain[-1][0] == "/timeline/" and b"2 notifications marked read." in response.content
    assert third.pk > second.pk
    assert selectors.notification_unread_count(user=manager) == 0


def test_someone_elses_notification_is_not_found(client, harness_with_history, manager, reviewer):
    theirs = Notification.objects.filter(recipient=manager).first()
    client.force_login(reviewer)
    assert client.post(reverse("notification_read", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("notification_open", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("notification_read", args=[999999])).status_code == 404
    theirs.refresh_from_db()
    assert theirs.read_at is None


def test_the_email_choice(client, manager, reviewer, draft, mail_queue, django_capture_on_commit_callbacks):
    client.force_login(reviewer)
    assert b"also e-mailed to cr_carol@example.test" in client.get(reverse("notifications")).content
    assert client.post(reverse("notification_email"), {"email": "maybe"}).status_code == 400
    assert not NotificationPreference.objects.exists()  # nothing half-saved
    response = client.post(reverse("notification_email"), {"email": "off"}, follow=True)
    assert b"no longer be e-mailed" in response.content and b"not e-mailed to you" in response.content
    with django_capture_on_commit_callbacks(execute=True):
        registry.version_submit(user=manager, version=draft)
    mail_queue.run()
    assert mail.outbox == [] and _texts(reviewer)
    client.post(reverse("notification_email"), {"email": "on"})
    assert selectors.notification_email_enabled(user=reviewer)
    reviewer.email = ""
    reviewer.save()
    assert b"no e-mail address" in client.get(reverse("notifications")).content
