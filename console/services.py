from __future__ import annotations

from console.models import AuditEvent


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
    return AuditEvent.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        action=action,
        scope=scope,
        target=target,
        from_state=from_state,
        to_state=to_state,
        comment=comment,
        data=data or {},
    )
