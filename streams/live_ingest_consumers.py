"""The ingest WebSocket of a live session: ``ws/live/<uuid>/ingest/``, for a platform that streams comments.

Authenticated by a live token of scope ``ingest`` for this session (``Authorization: Bearer <token>`` or
``?token=<token>``), not by a console sign-in, so it is routed outside the origin check and the session-cookie
stack (see :func:`streams.live_routing.with_token_ingest`). Close codes: 4401 no token or an unknown one, 4403 a
revoked one, one of another scope or session, 4404 no such session, 4409 the session ended.

Each frame is one comment or a batch (``{"comments": [...]}``), as the REST ingest takes them. After the comments
are stored the socket answers one ``{"type": "ack", "index", "external_id", "comment_id", "status", "reason",
"priority"}`` per comment, in order; a bad frame gets ``{"type": "error", "message", "errors": [{"path",
"message"}]}``, nothing of it is stored, and the socket stays open. A frame past the token's or the session's limit of
new comments a minute gets ``{"type": "refused", "message", "code": "rate_limited", "limit", "retry_after_s",
"errors": []}``: nothing of it is stored, send it again after ``retry_after_s``; so does a frame the database could not
take now (``code: database_busy``, no ``limit``; console.db_busy), and a connection it could not admit closes with
1013. A token revoked while connected is refused at its next frame (4403), a session that ended closes with 4409.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from console.db_busy import BUSY_CODE, database_busy, retry_after_s
from console.errors import DomainError
from console.parsing import SafeJsonWebsocketConsumer
from streams import live_selectors as selectors
from streams.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from streams.live.schemas import IngestInvalid, parse_ingest
from streams.models import LiveSession, LiveToken
from streams.services import live_ingest_guards as guards
from streams.services import live_sessions as services

logger = logging.getLogger(__name__)

CLOSE_ENDED = 4409
CLOSE_TRY_AGAIN = 1013  # RFC 6455 "Try Again Later": the database was busy


def _secret(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers") or []:
        if name.lower() == b"authorization":
            parts = value.decode("latin1").split()
            if len(parts) == 2 and parts[0].lower() == "bearer":
                return parts[1]
            return ""
    query = parse_qs((scope.get("query_string") or b"").decode("latin1"))
    return (query.get("token") or [""])[0]


def _admit(secret: str, session_id) -> tuple[int | None, LiveSession | None, LiveToken | None]:
    """(close code or None, session, token)."""
    token = selectors.live_token_by_secret(secret) if secret else None
    if token is None:
        return CLOSE_UNAUTHENTICATED, None, None
    try:
        session = selectors.live_session_get(session_id=session_id)
    except LiveSession.DoesNotExist:
        return CLOSE_NOT_FOUND, None, None
    try:
        services.live_token_check(token, session_id=session.pk, scope=LiveToken.Scope.INGEST)
    except services.TokenRefused:
        return CLOSE_FORBIDDEN, None, None
    if session.status != LiveSession.Status.LIVE:
        return CLOSE_ENDED, None, None
    return None, session, token


def _ingest(token_id, session: LiveSession, comments) -> tuple[int | None, list[dict[str, Any]] | dict | str]:
    """(close code or None, the acks, a refusal frame or an error message). The token is read again: one revoked
    meanwhile is refused from its next frame on."""
    try:
        token = LiveToken.objects.filter(pk=token_id).first()
        if token is None or token.revoked_at is not None:
            return CLOSE_FORBIDDEN, "this token was revoked"
        return None, services.live_comments_ingest(session=session, comments=comments, source="ws", token=token)
    except guards.IngestLimited as exc:
        return None, {"type": "refused", "message": exc.message, "code": exc.code, "limit": exc.limit,
                      "retry_after_s": round(exc.retry_after_s, 3), "errors": []}
    except DomainError as exc:
        return (CLOSE_ENDED if exc.status_code == 409 else None), exc.message
    except Exception as exc:  # the database is away: nothing was stored or acknowledged, the platform sends it again
        if database_busy(exc):  # the pool or a lock timed out: a refusal the platform knows to send again
            wait = retry_after_s()
            return None, {"type": "refused", "message": f"the database is busy; nothing was stored: send the "
                          f"comments again in {wait} s", "code": BUSY_CODE, "retry_after_s": wait, "errors": []}
        logger.exception("live session %s: storing comments from the ingest socket failed", session.pk)
        return None, "the comments could not be stored just now; none was acknowledged: send them again"


class LiveIngestConsumer(SafeJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.session = self.token_id = None
        try:
            code, session, token = await database_sync_to_async(_admit)(
                _secret(self.scope), self.scope["url_route"]["kwargs"]["session_id"])
        except Exception as exc:
            if not database_busy(exc):
                raise
            await self.close(code=CLOSE_TRY_AGAIN)  # busy: connect again later
            return
        if code is not None:
            await self.close(code=code)
            return
        self.session, self.token_id = session, token.pk
        await self.accept()

    async def receive_json(self, content: Any, **kwargs) -> None:
        if self.session is None:
            return
        try:
            comments = parse_ingest(content)
        except IngestInvalid as exc:
            await self.send_json({"type": "error", "message": "the comments are invalid; none was stored",
                                  "errors": [{"path": e.path, "message": e.message} for e in exc.errors]})
            return
        code, out = await database_sync_to_async(_ingest)(self.token_id, self.session, comments)
        if isinstance(out, dict):  # past the token's or the session's limit: nothing stored, the socket stays open
            await self.send_json(out)
            return
        if isinstance(out, str):
            await self.send_json({"type": "error", "message": out, "errors": []})
            if code is not None:
                await self.close(code=code)
            return
        for result in out:
            await self.send_json({"type": "ack", **result})
