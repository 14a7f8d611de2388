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
