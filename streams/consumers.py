"""The preview room's WebSocket: ``ws/preview/<uuid>/?after=<seq>``.

Only translates: stored events out (the backlog from the database, then live ones from the room's group),
the user's actions in (each one service call in a worker thread). Authentication comes from the ASGI stack
(session cookie); the role and the room's access rule (:func:`streams.selectors.preview_room_access`: owner and
invited members; anyone with the role for a scenario run) are checked here, each action again by its service.
Close codes: 4401 not signed in, 4403 no permission (or no longer invited), 4404 no such room (or one the user
may not see: the same answer). An invited member's access is checked again every ``ACCESS_CHECK_S`` seconds, so
someone the owner removes stops receiving the room.

Frames: ``{"type": "events", "events": [...]}`` with consecutive seqs, oldest first (the backlog, and live
runs as published, see :mod:`streams.events`); ``ack`` and ``error`` answer the user's actions.

Sending stored events, resumable by seq with nothing lost or repeated, is :mod:`streams.event_feed` (one
implementation for preview rooms and live sessions): this module says who may watch a room and what a user's
actions do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from channels.db import database_sync_to_async

from console import roles
from console.errors import DomainError
from streams import selectors, services
from streams.event_feed import (  # noqa: F401  (RoomFeed and the close codes: imported from here too)
    BACKLOG_BATCH,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
    POLL_S,
    RoomFeed,
    StoredEventsConsumer,
)
from streams.events import preview_group
from streams.models import PreviewRoom

logger = logging.getLogger(__name__)

ACCESS_CHECK_S = 3.0  # a removed member's socket is closed within this


def _room_or_none(user, room_id) -> PreviewRoom | None:
    """The room if the user may see it (None for a missing room and a hidden one alike)."""
    try:
        return selectors.preview_room_get_for(user=user, room_id=room_id)
    except (PreviewRoom.DoesNotExist, ValueError):
        return None


def _may_still_see(user, room_id) -> bool:
    return _room_or_none(user, room_id) is not None


def _act(user, room_id, content: dict[str, Any]) -> dict[str, Any] | None:
    """One user action → one service call (runs in a worker thread)."""
    room = selectors.preview_room_get(room_id=room_id)
    kind = content.get("type")
    if kind == "comment":
        turn_id = services.preview_comment_post(user=user, room=room, text=str(content.get("text") or ""),
                                                viewer=str(content.get("viewer") or ""))
        return {"type": "ack", "action": kind, "turn_id": turn_id}
    if kind == "step":
        out = services.preview_clock_step(user=user, room=room, minutes=content.get("minutes", 1))
        return {"type": "ack", "action": kind, "minute": out["minute"], "turn_ids": out["turn_ids"]}
    if kind == "pause":
        services.preview_pause(user=user, room=room)
    elif kind == "resume":
        services.preview_resume(user=user, room=room)
    elif kind == "switch_version":
        from harness_editor.models import HarnessVersion

        try:
            version = HarnessVersion.objects.select_related("harness").get(
                pk=int(content.get("version_id")), harness_id=room.harness_version.harness_id)
        except (HarnessVersion.DoesNotExist, TypeError, ValueError):
            return {"type": "error", "action": kind, "message": "no such version of this harness"}
        services.preview_version_switch(user=user, room=room, version=version)
    else:
        return {"type": "error", "action": kind, "message": f"unknown action {kind!r}"}
    return {"type": "ack", "action": kind}


class PreviewConsumer(StoredEventsConsumer):
    async def authorize(self) -> str | None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return None
        if not await database_sync_to_async(user.has_perm)(roles.USE_PREVIEW):
            await self.close(code=CLOSE_FORBIDDEN)
            return None
        room = await database_sync_to_async(_room_or_none)(user, self.scope["url_route"]["kwargs"]["room_id"])
        if room is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return None
        self.room_id, self.access = room.pk, room.access
        return preview_group(self.room_id)

    def list_events(self, *, after: int, up_to: int | None, limit: int) -> list[dict[str, Any]]:
        return selectors.preview_event_list(room_id=self.room_id, after=after, up_to=up_to, limit=limit)

    async def watch(self) -> None:
        """The owner removed this user (or the room went away): stop sending them the room. The owner stays, and a
        run stays readable: only a member can be removed."""
        if self.access != selectors.MEMBER:
            return
        user = self.scope["user"]
        while True:
            await asyncio.sleep(ACCESS_CHECK_S)
            with contextlib.suppress(Exception):  # a database hiccup is not a revocation; try again next time
                if not await database_sync_to_async(_may_still_see)(user, self.room_id):
                    await self.close(code=CLOSE_FORBIDDEN)
                    return

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            await self.send_json({"type": "error", "message": "send a JSON object"})
            return
        try:
            reply = await database_sync_to_async(_act)(self.scope["user"], self.room_id, content)
        except DomainError as exc:
            reply = {"type": "error", "action": content.get("type"), "message": exc.message, "errors": exc.errors}
        if reply:
            await self.send_json(reply)
