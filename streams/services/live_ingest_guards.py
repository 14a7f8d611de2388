"""What the comment ingest refuses before it stores anything (called by
:func:`streams.services.live_sessions.live_comments_ingest` under the session's row lock, so concurrent ingests of
a session see each other):

- :func:`webhook_receipt_take` — a signed webhook request is taken once. Its signature is kept until its timestamp
  leaves the signature window (300 s), so the same bytes sent again anywhere inside it are a 409
  (:class:`WebhookReplayed`), never stored or answered twice. Why a 409 and not the first answer again: that
  answer names the stored comments and their outcomes, which whoever captured the request has no business reading,
  and keeping answers would mean storing them; a platform retrying a request whose answer it lost re-signs it (a
  new timestamp) and gets ``duplicate`` for each comment it had delivered. Kept in PostgreSQL in the ingest's own
  transaction: the receipt exists exactly when the comments were stored (a request refused or failed leaves none,
  so the same bytes may be sent again), and every web process sees it.
- :func:`ingest_limit_check` — the per-token and per-session limits (``CommentHandling.per_token_per_minute``,
  ``per_session_per_minute``): new comments of the last 60 s plus this request's new ones (duplicates are free).
  A request past a limit is refused whole (:class:`IngestLimited`, 429 with a retry-after), and
  :func:`ingest_refused_count` adds its comments to ``LiveSession.comments_refused`` for the operator's page.
"""

from __future__ import annotations

import math
from datetime import datetime
from datetime import timezone as dt_timezone

from django.db import transaction
from django.db.models import F

from console.errors import DomainError
from streams.live import handling as rules
from streams.live.schemas import CommentHandling
from streams.models import LiveComment, LiveSession, LiveToken, LiveWebhookReceipt

WINDOW_S = 60.0  # the limits are per sliding minute, as the per-viewer one
LIMITED_SOURCES = ("api", "ws", "webhook")  # the replay feed is the operator's own, paced by its speed


class WebhookReplayed(DomainError):
    """The same signed webhook request came again inside its signature window: 409, nothing stored."""

    status_code = 409
    code = "replayed"


class IngestLimited(DomainError):
    """More comments than the token's or the session's limit allows this minute: 429, nothing stored."""

    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, limit: str, retry_after_s: float, comments: int):
        super().__init__(message)
        self.limit = limit  # "token" or "session"
        self.retry_after_s = retry_after_s
        self.comments = comments  # how many this request brought (all refused)

    @property
    def retry_after_header(self) -> str:
        """``Retry-After`` in whole seconds, rounded up (at least 1)."""
        return str(max(1, math.ceil(self.retry_after_s)))


def webhook_receipt_take(*, session: LiveSession, signature: str, sent_at: int, window_s: int, now: float) -> None:
    """Record a signed request as taken (inside the ingest's transaction), or raise :class:`WebhookReplayed`.
    Receipts whose timestamp left the window are dropped here: the signature check refuses those requests anyway."""
    LiveWebhookReceipt.objects.filter(session=session,
                                      expires_at__lt=datetime.fromtimestamp(now, tz=dt_timezone.utc)).delete()
    if LiveWebhookReceipt.objects.filter(session=session, signature=signature).exists():
        raise WebhookReplayed("this signed request was already received and its comments stored: a request is "
                              "taken once (sign a retry again, with a new X-Hat-Timestamp)")
    expires = datetime.fromtimestamp(sent_at + window_s, tz=dt_timezone.utc)
    LiveWebhookReceipt.objects.create(session=session, signature=signature, expires_at=expires)


def _recent(qs, now: float) -> list[float]:
    since = datetime.fromtimestamp(now - WINDOW_S, tz=dt_timezone.utc)
    return [at.timestamp() for at in qs.filter(received_at__gt=since).values_list("received_at", flat=True)]


def ingest_limit_check(*, session: LiveSession, token: LiveToken | None, handling: CommentHandling, wanted: int,
                       now: float, source: str) -> None:
    """Raise :class:`IngestLimited` when ``wanted`` new comments would take the token or the session past its
    limit for the last minute."""
    if wanted <= 0 or source not in LIMITED_SOURCES:
        return
    checks = [("session", handling.per_session_per_minute, LiveComment.objects.filter(session=session),
               "this live session")]
    if token is not None:
        checks.insert(0, ("token", handling.per_token_per_minute, LiveComment.objects.filter(token=token),
                          f"ingest token {token.prefix}…"))
    for limit, per_minute, qs, what in checks:
        decision = rules.rate_limit(_recent(qs, now), now, per_minute, wanted)
        if not decision.allowed:
            wait = max(decision.retry_after_s, 0.001)
            raise IngestLimited(
                f"{what} takes at most {per_minute} new comments a minute: none of these {wanted} was stored; "
                f"send them again in {math.ceil(wait)} s", limit=limit, retry_after_s=wait, comments=wanted)


def ingest_refused_count(*, session_id, comments: int) -> None:
    """Add refused comments to the session's count (one UPDATE, committed with the caller's transaction if any)."""
    if comments > 0:
        with transaction.atomic():
            LiveSession.objects.filter(pk=session_id).update(comments_refused=F("comments_refused") + comments)


def refusal_message(exc: IngestLimited) -> dict:
    """The error body of a refusal (the API's shape plus where and when to retry)."""
    return {"detail": exc.message, "code": exc.code, "errors": [], "limit": exc.limit,
            "retry_after_s": round(exc.retry_after_s, 3)}
