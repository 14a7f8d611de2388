"""The one append-only audit timeline.

Every version transition and label move (and later: model loads, serve-profile changes) is one row.
Rows are never updated or deleted: a database trigger refuses it (see migrations), not only Python.
Subjects are referenced by type/id strings so the timeline outlives what it describes and spans apps.
"""

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    action = models.CharField(max_length=64, db_index=True)  # e.g. "version.approved", "label.moved"
    scope = models.CharField(max_length=128, db_index=True)  # e.g. "harness:glow-gadget"
    target = models.CharField(max_length=128)  # e.g. "version:3", "label:production"
    from_state = models.CharField(max_length=128, blank=True)
    to_state = models.CharField(max_length=128, blank=True)
    comment = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["scope", "target", "-id"], name="audit_scope_target")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.scope} {self.target}"


class Notification(models.Model):
    """One thing a person should know about, derived from one audit event (console.notifications).

    Written in the transaction of the change (so it exists exactly when the change does); read in-app through
    the header's bell and the notifications page, and e-mailed after commit to people with an address who did
    not opt out. ``text`` and ``url`` are fixed when written: the event they came from never changes.
    """

    recipient = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    event = models.ForeignKey(AuditEvent, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=64)  # the event's action, e.g. "version.submitted"
    text = models.CharField(max_length=300)  # "cr_carol approved glow-gadget v2"
    url = models.CharField(max_length=300, blank=True)  # the object's page ('' = none)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["recipient", "event"], name="notification_once_per_event")]
        indexes = [
            models.Index(fields=["recipient", "-id"], name="notification_inbox"),
            # the bell counts these on every page: only the unread rows are in this index
            models.Index(fields=["recipient"], condition=models.Q(read_at__isnull=True), name="notification_unread"),
        ]

    def __str__(self) -> str:
        return f"{self.recipient_id}: {self.text}"


class NotificationPreference(models.Model):
    """A person's choice about e-mail; no row = the default (e-mail on, when they have an address)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                related_name="notification_preference")
    email = models.BooleanField(default=True, help_text="also send notifications by e-mail")
