"""Reads of live sessions: sessions, ingest tokens by their secret, the reply queue as the handling rules see it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet

from streams.live.handling import Queued
from streams.models import LiveComment, LiveSession, LiveToken


def live_session_list(*, status: str | None = None) -> QuerySet[LiveSession]:
    qs = LiveSession.objects.select_related("room", "deployment", "started_by", "ended_by", "version_in_force__harness")
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-started_at")


def live_session_get(*, session_id) -> LiveSession:
    """LiveSession.DoesNotExist for a missing one (and for an id that is not a UUID)."""
    try:
        return live_session_list().get(pk=session_id)
    except (ValueError, TypeError, ValidationError):
        raise LiveSession.DoesNotExist(f"no live session {session_id!r}") from None


def live_comment_counts(*, session_id) -> dict[str, int]:
    """Comments of a session per status (queued, answering, answered, skipped, filtered, rate_limited, expired)."""
    rows = LiveComment.objects.filter(session_id=session_id).values("status").annotate(n=Count("id"))
    out = {s: 0 for s in LiveComment.Status.values}
    out.update({r["status"]: r["n"] for r in rows})
    return out


def live_token_by_secret(secret: str) -> LiveToken | None:
    """The token a bearer secret belongs to (revoked ones too: the caller says why it refuses), or None."""
    if not secret or len(secret) > 200:
        return None
    return LiveToken.objects.select_related("session").filter(digest=LiveToken.digest_of(secret)).first()


def live_tokens_of(*, session_id) -> QuerySet[LiveToken]:
    return LiveToken.objects.filter(session_id=session_id).select_related("created_by").order_by("-created_at")


def live_comment_queue(*, session_id) -> list[Queued]:
    """The session's queued comments as :func:`streams.live.handling.next_batch` takes them."""
    rows = (LiveComment.objects.filter(session_id=session_id, status=LiveComment.Status.QUEUED)
            .values_list("id", "priority", "received_at"))
    return [Queued(id=pk, priority=priority, at=at.timestamp()) for pk, priority, at in rows]


def live_comments_by_id(*, session_id, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Comments as a turn takes them (``{"viewer", "viewer_id", "text"}`` plus their ids), in the order given."""
    wanted = list(ids)
    rows = {c["id"]: c for c in LiveComment.objects.filter(session_id=session_id, pk__in=wanted)
            .values("id", "external_id", "viewer", "viewer_id", "text", "priority", "status", "received_at")}
    return [rows[i] for i in wanted if i in rows]
