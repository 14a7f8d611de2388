"""Reads of the audit timeline."""

from __future__ import annotations

from django.db.models import QuerySet

from console.models import AuditEvent


def audit_list(*, scope: str | None = None) -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor").order_by("-id")
    if scope:
        qs = qs.filter(scope=scope)
    return qs
