"""Writes of the console: the audit timeline, and the notifications derived from it.

Notifications are derived here, from the one place every change already passes through, rather than in each
app: ``audit_record`` runs inside the transaction of the change, so a notification exists exactly when its change
does, and its e-mail leaves only after that transaction commits (never on its failure path).

Who is told (NOTIFY_RULES; the actor is never told of their own action):

- ``version.submitted`` → every active compliance reviewer (whoever may review versions), except the author;
- ``version.approved`` / ``version.rejected`` → the version's author, and whoever submitted it;
- ``label.moved`` → everyone who wrote a version of the harness, or approved, rejected or commented on one.
"""

from __future__ import annotations

import logging
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


NOTIFY_RULES: dict[str, Callable[[AuditEvent], set[int]]] = {
    "version.submitted": _recipients_submitted,
    "version.approved": _recipients_decided,
    "version.rejected": _recipients_decided,
    "label.moved": _recipients_label_moved,
}

_VERBS = {"version.submitted": "submitted {obj} for review", "version.approved": "approved {obj}",
          "version.rejected": "rejected {obj}", "label.moved": "moved {obj}"}


def notification_text(event: AuditEvent) -> str:
    """"cr_carol approved glow-gadget v2", "cm_alice moved glow-gadget production to v3"."""
    obj = selectors.audit_object(event)
    who = event.actor.get_username() if event.actor_id else "system"
    text = f"{who} {_VERBS.get(event.action, event.action + ' {obj}').format(obj=obj.label)}"
    if event.action == "label.moved" and event.to_state:
        text += f" to {event.to_state}" + (f" (was {event.from_state})" if event.from_state else "")
    return text[:300]


def notifications_from_event(event: AuditEvent) -> list[Notification]:
    """Write the notifications an audit event calls for (NOTIFY_RULES), in the caller's transaction; e-mail them
    once it commits."""
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
    transaction.on_commit(lambda: _email_after_commit(ids), robust=True)
    return created


def _email_after_commit(ids: list[int]) -> None:
    # a mail server that is down is logged, never turned into an error of the change that committed; the
    # notifications stay in-app with emailed_at empty
    try:
        notifications_email(ids)
    except Exception:
        log.exception("notification e-mail failed (notifications %s stay in-app only)", ids)


def notifications_email(ids: Iterable[int]) -> int:
    """E-mail these notifications to recipients with an address who did not opt out; mark each sent. Runs after
    the change committed (never inside its transaction). Returns how many messages were sent."""
    pending = list(selectors.notifications_to_email(list(ids)))
    if not pending:
        return 0
    base = settings.HAT_CONSOLE_URL.rstrip("/")
    messages = []
    for n in pending:
        event = n.event
        lines = [n.text + "."]
        if event.comment:
            lines += ["", f"Comment: {event.comment}"]
        if n.url:
            lines += ["", f"Open: {base}{n.url}"]
        lines += ["", f"All your notifications: {base}{reverse('notifications')}",
                  "You get these because of your role or your work on this harness; "
                  "turn e-mail off on the notifications page."]
        messages.append(mail.EmailMessage(subject=f"[hat-console] {n.text}"[:200], body="\n".join(lines),
                                          to=[n.recipient.email]))
    with mail.get_connection() as connection:
        sent = connection.send_messages(messages) or 0
    Notification.objects.filter(pk__in=[n.pk for n in pending]).update(emailed_at=timezone.now())
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
