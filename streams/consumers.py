"""The preview room's WebSocket: ``ws/preview/<uuid>/?after=<seq>``.

Only translates: stored events out (the backlog from the database, then live ones from the room's group),
the user's actions in (each one service call in a worker thread). Authentication comes from the ASGI stack
(session cookie); the role is checked here. Close codes: 4401 not signed in, 4403 no permission, 4404 no
such room.

No loss, no duplication: the consumer joins the group before reading the backlog and remembers the last seq
it sent. A live event at or below it is skipped; one that leaves a gap (published out of order by two
workers) first pulls the missing seqs from the database. A client that reconnects with ``?after=<last seq>``
gets exactly the events it has not seen.

With the in-memory channel layer (the embedded default: the worker is another process and cannot reach this
one's memory) the consumer also polls the database every ``POLL_S`` seconds, through the same dedup.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer

from console import roles
from console.errors import DomainError
from streams import selectors, services
from streams.events import preview_group
from streams.models import PreviewRoom

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
BACKLOG_BATCH = 500
POLL_S = 0.25  # in-memory channel layer only


def _room_or_none(room_id) -> PreviewRoom | None:
    try:
        return selectors.preview_room_get(room_id=room_id)
    except (PreviewRoom.DoesNotExist, ValueError):
        return None


def _act(user, room_id, content: dict[str, Any]) -> dict[str, Any] | None:
    """One user action → one service call (runs in a worker thread)."""
    room = selectors.preview_room_get(room_id=room_id)
    kind = content.get("type")
    if kind == "comment":
        turn_id = services.preview_comment_post(user=user, room=room, text=str(content.get("text") or ""),
                                                viewer=str(content.get("viewer") or "you"))
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


class PreviewConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.last_seq = 0
        self.group = None
        self._poller = None
        self._send_lock = asyncio.Lock()  # backlog, gap fill, live and polled events never interleave
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(roles.USE_PREVIEW):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        room_id = self.scope["url_route"]["kwargs"]["room_id"]
        room = await database_sync_to_async(_room_or_none)(room_id)
        if room is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.room_id = room.pk
        try:
            after = int((parse_qs(self.scope.get("query_string", b"").decode()).get("after") or ["0"])[0])
        except ValueError:
            after = 0
        self.last_seq = max(after, 0)
        self.group = preview_group(self.room_id)
        await self.channel_layer.group_add(self.group, self.channel_name)  # before the backlog: nothing falls between
        await self.accept()
        async with self._send_lock:
            await self._send_stored(up_to=None)
        if isinstance(self.channel_layer, InMemoryChannelLayer):
            self._poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            async with self._send_lock:
                await self._send_stored(up_to=None)

    async def _send_stored(self, up_to: int | None) -> None:
        while True:
            batch = await database_sync_to_async(selectors.preview_event_list)(
                room_id=self.room_id, after=self.last_seq, up_to=up_to, limit=BACKLOG_BATCH)
            for event in batch:
                await self._send_event(event)
            if len(batch) < BACKLOG_BATCH:
                return

    async def _send_event(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "event", "event": event})
        self.last_seq = event["seq"]

    async def preview_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        seq = event["seq"]
        async with self._send_lock:
            if seq <= self.last_seq:
                return  # already sent (backlog, gap fill or poll)
            if seq > self.last_seq + 1:
                await self._send_stored(up_to=seq - 1)  # fill the gap from the database first
                if seq <= self.last_seq:
                    return
            await self._send_event(event)

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
