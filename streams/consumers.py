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

One membership of the room's group per process and room (:class:`RoomFeed`), not one per viewer: a run
published to the room costs one channel-layer message per daphne process, which hands it to each of its
viewers of the room in memory (with the Redis layer, a message per viewer meant a Redis round trip and a
decode per viewer in this process, one after the other: the 50th viewer waited for the 49 before it).

No loss, no duplication: the consumer joins the room's feed (which is in the group) before reading the
backlog and remembers the last seq it sent. A live run that continues it goes out as the publisher
serialised it (no database query, no JSON encoding per viewer); one at or below it is skipped; one that
leaves a gap (published out of order by two workers, or dropped by a full channel) or overlaps what was
sent is read from the database instead, where it is already stored. A client that reconnects with
``?after=<last seq>`` gets exactly the events it has not seen.

With the in-memory channel layer (the embedded default: the worker is another process and cannot reach this
one's memory) the consumer also polls the database every ``POLL_S`` seconds, through the same dedup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer

from console import roles
from console.parsing import SafeJsonWebsocketConsumer  # a bad frame: an error frame, not 1011
from console.errors import DomainError
from streams import selectors, services
from streams.events import EVENT_MESSAGE_TYPE, events_frame, preview_group
from streams.models import PreviewRoom

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
BACKLOG_BATCH = 500
POLL_S = 0.25  # in-memory channel layer only
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


class RoomFeed:
    """This process's membership of one room's group: receives each published run once and queues it for
    every local consumer of the room (:meth:`PreviewConsumer.deliver`). Made by the first consumer of the room
    in this process, ended by the last one leaving."""

    _feeds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # channel layer -> {group: RoomFeed}
    RETRY_S = 1.0

    def __init__(self, layer, group: str):
        self.layer, self.group = layer, group
        self.consumers: set[PreviewConsumer] = set()
        self.channel: str | None = None
        self.joined = asyncio.Event()
        self.failed: BaseException | None = None
        self.task: asyncio.Task | None = None

    @classmethod
    async def join(cls, layer, group: str, consumer: PreviewConsumer) -> RoomFeed:
        """Returns once the feed is in the group: from then on nothing published to the room is missed.
        Raises what the layer raised if it could not join (as joining the group directly would)."""
        feeds = cls._feeds.setdefault(layer, {})
        feed = feeds.get(group)
        if feed is None:
            feed = feeds[group] = cls(layer, group)
            try:
                await feed._subscribe()
            except BaseException as exc:
                del feeds[group]
                feed.failed = exc
                raise
            finally:
                feed.joined.set()
            feed.task = asyncio.create_task(feed._run())
        else:
            await feed.joined.wait()
            if feed.failed is not None:
                raise feed.failed
        feed.consumers.add(consumer)
        return feed

    async def leave(self, consumer: PreviewConsumer) -> None:
        self.consumers.discard(consumer)
        feeds = self._feeds.get(self.layer, {})
        if self.consumers or feeds.get(self.group) is not self:
            return
        del feeds[self.group]  # before any await: a consumer arriving from now on makes a new feed
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        with contextlib.suppress(Exception):
            await self.layer.group_discard(self.group, self.channel)

    async def _subscribe(self) -> None:
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, self.channel)

    async def _resubscribe(self) -> None:
        while True:
            await asyncio.sleep(self.RETRY_S)
            try:
                await self._subscribe()
                return
            except Exception:
                logger.warning("preview feed %s: joining the group failed", self.group, exc_info=True)

    async def _run(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer is down: runs missed meanwhile are read from the database (gap)
                logger.warning("preview feed %s: receiving failed", self.group, exc_info=True)
                await self._resubscribe()
                continue
            if message.get("type") == EVENT_MESSAGE_TYPE:
                for consumer in self.consumers:
                    consumer.deliver(message)


class PreviewConsumer(SafeJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.last_seq = 0
        self.group = None
        self._poller = None
        self._feed: RoomFeed | None = None
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._pump = None
        self._access = None
        self._send_lock = asyncio.Lock()  # backlog, gap fill, live and polled events never interleave
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(roles.USE_PREVIEW):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        room_id = self.scope["url_route"]["kwargs"]["room_id"]
        room = await database_sync_to_async(_room_or_none)(user, room_id)
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
        # in the group before the backlog is read: nothing falls between (live runs wait in the inbox)
        self._feed = await RoomFeed.join(self.channel_layer, self.group, self)
        await self.accept()
        async with self._send_lock:
            await self._send_stored(up_to=None)
        self._pump = asyncio.create_task(self._deliver_queued())
        if room.access == selectors.MEMBER:  # the owner stays, and a run stays readable: only a member can be removed
            self._access = asyncio.create_task(self._watch_access(user))
        if isinstance(self.channel_layer, InMemoryChannelLayer):
            self._poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        if self._feed is not None:
            await self._feed.leave(self)
        for task in (self._poller, self._pump, self._access):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def deliver(self, message: dict[str, Any]) -> None:
        """A published run from the room's feed: queued, so that one slow viewer never holds up the others."""
        self._inbox.put_nowait(message)

    async def _deliver_queued(self) -> None:
        while True:
            await self.preview_event(await self._inbox.get())

    async def _watch_access(self, user) -> None:
        """The owner removed this user (or the room went away): stop sending them the room."""
        while True:
            await asyncio.sleep(ACCESS_CHECK_S)
            with contextlib.suppress(Exception):  # a database hiccup is not a revocation; try again next time
                if not await database_sync_to_async(_may_still_see)(user, self.room_id):
                    await self.close(code=CLOSE_FORBIDDEN)
                    return

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            async with self._send_lock:
                await self._send_stored(up_to=None)

    async def _send_stored(self, up_to: int | None) -> None:
        while True:
            batch = await database_sync_to_async(selectors.preview_event_list)(
                room_id=self.room_id, after=self.last_seq, up_to=up_to, limit=BACKLOG_BATCH)
            if batch:
                await self.send(text_data=events_frame(batch))
                self.last_seq = batch[-1]["seq"]
            if len(batch) < BACKLOG_BATCH:
                return

    async def preview_event(self, message: dict[str, Any]) -> None:
        """A published run of events ``first`` .. ``last`` (streams.events)."""
        first, last, text = message["first"], message["last"], message["text"]
        async with self._send_lock:
            if last <= self.last_seq:
                return  # already sent (backlog, gap fill or poll)
            if first != self.last_seq + 1:
                await self._send_stored(up_to=last)  # a gap before it, or an overlap: all of it is stored
                return
            if message.get("traced"):  # the frame ends with its trace object: add this stage's stamp
                text = f'{text[:-2]},"consumer":{time.time()}}}}}'
            await self.send(text_data=text)
            self.last_seq = last

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
