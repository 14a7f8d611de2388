"""Writes of the console: the audit timeline, and the notifications derived from it.

Notifications are derived here, from the one place every change already passes through, rather than in each
app: ``audit_record`` runs inside the transaction of the change, so a notification exists exactly when its change
does. Their e-mail is handed to a Celery task (``console.tasks.notifications_email``, ids only, the default batch
queue) once that transaction commits, never on its failure path: the request never talks to a mail server.

Who is told (NOTIFY_RULES; the actor is never told of their own action):

- ``version.submitted`` → every active compliance reviewer (whoever may review versions), except the author;
- ``version.approved`` / ``version.rejected`` → the version's author, and whoever submitted it;
- ``label.moved`` → everyone who wrote a version of the harness, or approved, rejected or commented on one;
- ``deployment.create`` / ``deployment.propose`` (a revision waits for review) → everyone who may review deployment
  changes (four eyes, as versions);
- ``deployment.approve`` / ``deployment.reject`` → whoever proposed the revision.
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Callable, Iterable

from django.conf import settings
from django.core import mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from console import selectors
from console.models import AuditEvent, Notification, NotificationPreference

log = logging.getLogger(__name__)


def audit_record(
    *,
    actor,
    action: str,
    scope: str,
    target: str,
    from_state: str = "",
    to_state: str = "",
    comment: str = "",
    data: dict | None = None,
) -> AuditEvent:
    """Append one event to the timeline. Call inside the transaction of the change it records."""
    event = AuditEvent.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        action=action,
        scope=scope,
        target=target,
        from_state=from_state,
        to_state=to_state,
        comment=comment,
        data=data or {},
    )
    if event.action in NOTIFY_RULES:
        notifications_from_event(event)
    return event


# --- notifications ---------------------------------------------------------------------------------------------

def _version_id(event: AuditEvent) -> int | None:
    value = event.data.get("version_id")
    return value if isinstance(value, int) else None


def _recipients_submitted(event: AuditEvent) -> set[int]:
    return set(selectors.version_reviewer_ids()) - {selectors.version_author_id(_version_id(event))}


def _recipients_decided(event: AuditEvent) -> set[int]:
    return {selectors.version_author_id(_version_id(event)), selectors.version_submitter_id(event)}


def _recipients_label_moved(event: AuditEvent) -> set[int]:
    return set(selectors.harness_participant_ids(event.scope.removeprefix("harness:")))


def _recipients_deployment_review(event: AuditEvent) -> set[int]:
    return set(selectors.deployment_reviewer_ids())


def _recipients_deployment_decided(event: AuditEvent) -> set[int]:
    return {selectors.deployment_proposer_id(event)}


NOTIFY_RULES: dict[str, Callable[[AuditEvent], set[int]]] = {
    "version.submitted": _recipients_submitted,
    "version.approved": _recipients_decided,
    "version.rejected": _recipients_decided,
    "label.moved": _recipients_label_moved,
    "deployment.create": _recipients_deployment_review,  # revision 1 is proposed with the deployment
    "deployment.propose": _recipients_deployment_review,
    "deployment.approve": _recipients_deployment_decided,
    "deployment.reject": _recipients_deployment_decided,
}

_VERBS = {"version.submitted": "submitted {obj} for review", "version.approved": "approved {obj}",
          "version.rejected": "rejected {obj}", "label.moved": "moved {obj}",
          "deployment.create": "proposed {obj} for review", "deployment.propose": "proposed {obj} for review",
          "deployment.approve": "approved {obj}", "deployment.reject": "rejected {obj}"}


def notification_text(event: AuditEvent) -> str:
    """"cr_carol approved glow-gadget v2", "cm_alice moved glow-gadget production to v3",
    "ml_erin proposed deployment tiny-live r2 for review"."""
    obj = selectors.audit_object(event)
    who = event.actor.get_username() if event.actor_id else "system"
    text = f"{who} {_VERBS.get(event.action, event.action + ' {obj}').format(obj=obj.label)}"
    if event.action == "label.moved" and event.to_state:
        text += f" to {event.to_state}" + (f" (was {event.from_state})" if event.from_state else "")
    return text[:300]


def notifications_from_event(event: AuditEvent) -> list[Notification]:
    """Write the notifications an audit event calls for (NOTIFY_RULES), in the caller's transaction; their e-mail
    is queued once it commits (nothing is queued for a change that rolls back)."""
    recipients = {uid for uid in NOTIFY_RULES[event.action](event) if uid} - {event.actor_id}
    recipients &= set(selectors.active_user_ids(recipients))
    if not recipients:
        return []
    obj = selectors.audit_object(event)
    text = notification_text(event)
    created = Notification.objects.bulk_create(
        [Notification(recipient_id=uid, event=event, kind=event.action, text=text, url=obj.url or "")
         for uid in sorted(recipients)])
    ids = [n.pk for n in created]
    transaction.on_commit(lambda: notifications_email_enqueue(ids))
    return created


def notifications_email_enqueue(ids: list[int]) -> None:
    """Send the e-mail of these notifications from a worker (console.tasks.notifications_email) on the default
    queue, where batch work goes (not the interactive one: mail must never wait in front of a viewer's turn). A
    broker that refuses the task is logged, never an error of the change that committed; the notifications stay
    in-app with ``emailed_at`` empty."""
    from console.tasks import notifications_email  # the tasks module imports these services

    try:
        notifications_email.apply_async(args=(list(ids),), queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    except Exception:
        log.exception("notification e-mail could not be queued (notifications %s stay in-app only)", ids)


def _refused_for_good(exc: smtplib.SMTPException) -> bool:
    """The server refused this one message permanently (a 5xx reply: unknown recipient, rejected content): sending
    it again would be refused again. Anything else (4xx, a dropped connection, a timeout) is worth a retry."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return bool(exc.recipients) and all(code >= 500 for code, _ in exc.recipients.values())
    return isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 500


def _message(n: Notification, base: str) -> mail.EmailMessage:
    lines = [n.text + "."]
    if n.event.comment:
        lines += ["", f"Comment: {n.event.comment}"]
    if n.url:
        lines += ["", f"Open: {base}{n.url}"]
    lines += ["", f"All your notifications: {base}{reverse('notifications')}",
              "You get these because of your role or your work on this harness or deployment; "
              "turn e-mail off on the notifications page."]
    return mail.EmailMessage(subject=f"[hat-console] {n.text}"[:200], body="\n".join(lines), to=[n.recipient.email])


def notifications_email(ids: Iterable[int]) -> int:
    """E-mail these notifications to recipients with an address who have not opted out (read now, when the mail
    is sent, not when the change was made), each marked sent as soon as the server took it, so a retry after a
    failure part-way sends only the rest. A message refused for good is logged and left unsent; a server that is
    down or refuses for now raises (``OSError``: smtplib's errors are ones) for the task to retry. Runs in a worker,
    never inside the change's transaction. Returns how many messages were sent."""
    pending = list(selectors.notifications_to_email(list(ids)))
    if not pending:
        return 0
    base = settings.HAT_CONSOLE_URL.rstrip("/")
    sent = 0
    with mail.get_connection() as connection:
        for n in pending:
            try:
                connection.send_messages([_message(n, base)])
            except smtplib.SMTPException as exc:
                if not _refused_for_good(exc):
                    raise
                log.warning("notification %s: the mail server refused its e-mail to %s for good: %s", n.pk,
                            n.recipient.email, exc)
                continue
            Notification.objects.filter(pk=n.pk).update(emailed_at=timezone.now())
            sent += 1
    return sent


def notification_mark_read(*, user, notification_id: int) -> Notification:
    """Mark one of the user's notifications read (someone else's is 'not found', never touched)."""
    notification = Notification.objects.get(pk=notification_id, recipient=user)
    if notification.read_at is None:
        notification.read_at = timezone.now()
        notification.save(update_fields=["read_at"])
    return notification


def notification_mark_all_read(*, user) -> int:
    return Notification.objects.filter(recipient=user, read_at__isnull=True).update(read_at=timezone.now())


def notification_preference_set(*, user, email: bool) -> NotificationPreference:
    preference, _ = NotificationPreference.objects.update_or_create(user=user, defaults={"email": email})
    return preference
