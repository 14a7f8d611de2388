"""A live session's WebSockets. Only translate: stored events out (:mod:`streams.event_feed`, the preview room's
one implementation: backlog after ``?after=<seq>``, then live runs from ``streams.events.live_group``, nothing
lost or repeated). Controls are not sent here: the operator's page posts them (htmx forms, one service call each,
see :mod:`streams.live_views`), so these sockets are read-only.

- ``ws/live/<uuid>/?after=<seq>``: signed-in users with VIEW_LIVE (operators and everyone watching). Close codes:
  4401 not signed in, 4403 no VIEW_LIVE, 4404 no such session.
- ``ws/live/<uuid>/overlay/?token=<overlay token>[&after=<seq>]``: the subtitle overlay (streaming software, no
  login): a token of scope ``overlay`` for this session, not revoked (else 4403; checked again every
  ``ACCESS_CHECK_S`` seconds, so a revoked token stops the overlay); 4404 no such session. It gets only what
  the overlay shows, stripped of everything else (no comments, viewers, tool results or hook details): the reply
  as spoken (``reply_spoken``: text that passed the before-reply hooks, the turn's own or an operator's edit or
  takeover; a reply withheld because the avatar was muted, pending approval, or rejected never is) and clears
  (muted, session ended). Never a turn's streamed tokens: they are a draft the hooks may still refuse (a sentence
  the relevance rule refused reached the subtitles before its fallback line); overlay.js types the spoken reply
  out word by word instead. Without ``after`` it starts at the turn being spoken now (or at the end).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from console import roles
from streams import live_page_selectors as pages
from streams.event_feed import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, StoredEventsConsumer
from streams.events import live_group
from streams.models import LiveSession

ACCESS_CHECK_S = 3.0  # a revoked overlay token's socket is closed within this


def _session_state(session_id) -> dict[str, Any] | None:
    return (LiveSession.objects.filter(pk=session_id).values("pk", "approve_before_speak", "muted", "status")
            .first())


class LiveConsumer(StoredEventsConsumer):
    """Operators and watchers: every event of the session."""

    async def authorize(self) -> str | None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return None
        if not await database_sync_to_async(user.has_perm)(roles.VIEW_LIVE):
            await self.close(code=CLOSE_FORBIDDEN)
            return None
        state = await database_sync_to_async(_session_state)(self.scope["url_route"]["kwargs"]["session_id"])
        if state is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return None
        self.session_id = state["pk"]
        return live_group(self.session_id)

    def list_events(self, *, after: int, up_to: int | None, limit: int) -> list[dict[str, Any]]:
        return pages.live_event_list(session_id=self.session_id, after=after, up_to=up_to, limit=limit)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        await self.send_json({"type": "error", "message": "this socket only streams the session: controls are "
                                                          "posted from the operator's page"})


# what the overlay gets of each event type (None: nothing). Only judged words: a token is the model's draft,
# which a before-reply hook may refuse after it streamed (the operator's page shows it, marked unjudged).
def _strip(kind: str, p: dict[str, Any]) -> dict[str, Any] | None:
    if kind == "reply_spoken":  # passed the hooks; the words said (the engine's own reply may be withheld: muted)
        return {"text": p.get("text", "")}
    if kind in ("muted", "session_ended"):
        return {}  # the line clears
    return None


class OverlayConsumer(StoredEventsConsumer):
    """The subtitle overlay: read-only, a token instead of a login, only what the overlay shows."""

    FILTERS = True

    async def authorize(self) -> str | None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.secret = (query.get("token") or [""])[0]
        state = await database_sync_to_async(_session_state)(self.scope["url_route"]["kwargs"]["session_id"])
        if state is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return None
        self.session_id = state["pk"]
        if not await self._token_ok():
            await self.close(code=CLOSE_FORBIDDEN)
            return None
        return live_group(self.session_id)

    async def _token_ok(self) -> bool:
        token = await database_sync_to_async(pages.live_overlay_token)(session_id=self.session_id,
                                                                       secret=self.secret)
        return token is not None

    async def start_after(self, after: int | None) -> int:
        if after is None:
            after = await database_sync_to_async(pages.live_overlay_start)(session_id=self.session_id)
        return max(after, 0)

    def list_events(self, *, after: int, up_to: int | None, limit: int) -> list[dict[str, Any]]:
        return pages.live_event_list(session_id=self.session_id, after=after, up_to=up_to, limit=limit)

    def shown(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for e in events:
            kind = e["type"]
            payload = _strip(kind, e.get("payload") or {})
            if payload is not None:
                out.append({"seq": e["seq"], "turn_id": e["turn_id"], "type": kind, "payload": payload,
                            "at": e.get("at")})
        return out

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(ACCESS_CHECK_S)
            with contextlib.suppress(Exception):  # a database hiccup is not a revocation; try again next time
                if not await self._token_ok():
                    await self.close(code=CLOSE_FORBIDDEN)
                    return

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        await self.send_json({"type": "error", "message": "the overlay socket is read-only"})
