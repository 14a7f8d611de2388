"""Stored events to WebSocket viewers, resumable by seq: the one implementation behind the preview room's socket
and a live session's (operators and watchers, the subtitle overlay).

An owner (a preview room, a live session) stores events with seqs 1, 2, 3, ... and publishes each committed run
to its channel-layer group (:mod:`streams.events`). :class:`StoredEventsConsumer` sends a viewer the events after
the seq it asked for (``?after=<seq>``), then the live ones, each exactly once and in order:

- One membership of the group per process and owner (:class:`RoomFeed`), not one per viewer: a run published to
  the group costs one channel-layer message per daphne process, which hands it to each of its viewers in memory
  (with the Redis layer, a message per viewer meant a Redis round trip and a decode per viewer in this process,
  one after the other: the 50th viewer waited for the 49 before it).
- The consumer joins the feed (which is in the group) before reading the backlog and remembers the last seq it
  sent. A live run that continues it goes out as the publisher serialised it (no database query, no JSON encoding
  per viewer); one at or below it is skipped. One that leaves a gap is held for up to ``REORDER_WAIT_S``: a live
  session's events are stored and published by more than one process (the runner's tokens, the ingest API's
  comments), so runs often arrive a few milliseconds out of order, and the missing one then comes from the layer
  and both go out from memory. Only a gap still open after the wait (a run dropped by a full channel or a layer
  blip) or an overlap with what was sent is read from the database, where it is already stored (under load, a
  read there took 180 ms p50 for 5 % of the first tokens of 10 sessions x 1 comment/s: bench/live_bench.py). A client that reconnects with ``?after=<last seq>`` gets exactly the events it has not seen.
- With the in-memory channel layer (the embedded default: the worker is another process and cannot reach this
  one's memory) the consumer also polls the database every ``POLL_S`` seconds, through the same dedup.

A subclass says who may connect and what it watches (:meth:`StoredEventsConsumer.authorize`), reads stored events
(:meth:`StoredEventsConsumer.list_events`) and may show only some of them (:meth:`StoredEventsConsumer.shown`,
for a viewer that must not see everything: the overlay).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer

from console.parsing import SafeJsonWebsocketConsumer  # a bad frame: an error frame, not 1011
from streams.events import EVENT_MESSAGE_TYPE, events_frame

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
BACKLOG_BATCH = 500
POLL_S = 0.25  # in-memory channel layer only
REORDER_WAIT_S = 0.05  # how long a run after a gap waits for the run before it before the database fills the gap


class RoomFeed:
    """This process's membership of one group: receives each published run once and queues it for every local
    consumer of the group (:meth:`StoredEventsConsumer.deliver`). Made by the first consumer of the group in this
    process, ended by the last one leaving."""

    _feeds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # channel layer -> {group: RoomFeed}
    RETRY_S = 1.0

    def __init__(self, layer, group: str):
        self.layer, self.group = layer, group
        self.consumers: set[StoredEventsConsumer] = set()
        self.channel: str | None = None
        self.joined = asyncio.Event()
        self.failed: BaseException | None = None
        self.task: asyncio.Task | None = None

    @classmethod
    async def join(cls, layer, group: str, consumer: StoredEventsConsumer) -> RoomFeed:
        """Returns once the feed is in the group: from then on nothing published to the group is missed.
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

    async def leave(self, consumer: StoredEventsConsumer) -> None:
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
                logger.warning("event feed %s: joining the group failed", self.group, exc_info=True)

    async def _run(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer is down: runs missed meanwhile are read from the database (gap)
                logger.warning("event feed %s: receiving failed", self.group, exc_info=True)
                await self._resubscribe()
                continue
            if message.get("type") == EVENT_MESSAGE_TYPE:
                for consumer in self.consumers:
                    consumer.deliver(message)


class StoredEventsConsumer(SafeJsonWebsocketConsumer):
    """Backlog after ``?after=<seq>`` from the database, then live runs from the group; nothing lost or repeated.

    Subclasses implement :meth:`authorize` (close and return None, or return the group to watch), :meth:`list_events`
    and optionally :meth:`shown`, :meth:`start_after`, :meth:`watch` (a task that may close the socket later)."""

    async def authorize(self) -> str | None:
        raise NotImplementedError  # abstract: each feed says who may watch which group

    def list_events(self, *, after: int, up_to: int | None, limit: int) -> list[dict[str, Any]]:
        """Stored events with ``after < seq (<= up_to)``, oldest first, at most ``limit`` (sync: a worker thread)."""
        raise NotImplementedError  # abstract: each feed reads its own table

    def shown(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What of a run of events this viewer gets (all of it, unless a subclass says otherwise)."""
        return events

    FILTERS = False  # True when shown() may drop or change events: live runs are decoded rather than passed on

    async def start_after(self, after: int | None) -> int:
        """The seq the backlog starts after: the client's ``?after=`` (0 without one)."""
        return max(after or 0, 0)

    async def watch(self) -> None:
        """Runs while the socket is open (a subclass may check access again and close)."""

    async def connect(self) -> None:
        self.last_seq = 0
        self.group = None
        self._poller = self._pump = self._watcher = self._gap_timer = None
        self._held: dict[int, dict[str, Any]] = {}  # first seq -> a live run waiting for the one before it
        self._feed: RoomFeed | None = None
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._send_lock = asyncio.Lock()  # backlog, gap fill, live and polled events never interleave
        group = await self.authorize()
        if group is None:
            return
        try:
            raw = (parse_qs(self.scope.get("query_string", b"").decode()).get("after") or [None])[0]
            after = int(raw) if raw is not None else None
        except ValueError:
            after = None
        self.group = group
        # in the group before the backlog is read: nothing falls between (live runs wait in the inbox)
        self._feed = await RoomFeed.join(self.channel_layer, self.group, self)
        self.last_seq = await self.start_after(after)
        await self.accept()
        async with self._send_lock:
            await self._send_stored(up_to=None)
        self._pump = asyncio.create_task(self._deliver_queued())
        self._watcher = asyncio.create_task(self.watch())
        if isinstance(self.channel_layer, InMemoryChannelLayer):
            self._poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        if self._feed is not None:
            await self._feed.leave(self)
        for task in (self._poller, self._pump, self._watcher, self._gap_timer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def deliver(self, message: dict[str, Any]) -> None:
        """A published run from the group's feed: queued, so that one slow viewer never holds up the others."""
        self._inbox.put_nowait(message)

    async def _deliver_queued(self) -> None:
        while True:
            await self.preview_event(await self._inbox.get())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            async with self._send_lock:
                await self._send_stored(up_to=None)

    async def _send_events(self, events: list[dict[str, Any]]) -> None:
        shown = self.shown(events) if self.FILTERS else events
        if shown:
            await self.send(text_data=events_frame(shown))

    async def _send_stored(self, up_to: int | None) -> None:
        while True:
            batch = await database_sync_to_async(self.list_events)(after=self.last_seq, up_to=up_to,
                                                                    limit=BACKLOG_BATCH)
            if batch:
                await self._send_events(batch)
                self.last_seq = batch[-1]["seq"]
            if len(batch) < BACKLOG_BATCH:
                return

    async def preview_event(self, message: dict[str, Any]) -> None:
        """A published run of events ``first`` .. ``last`` (streams.events)."""
        async with self._send_lock:
            if message["last"] <= self.last_seq:
                return  # already sent (backlog, gap fill or poll)
            if message["first"] > self.last_seq + 1:  # a gap before it: wait a little for the run that fills it
                self._held[message["first"]] = message
                if self._gap_timer is None:
                    self._gap_timer = asyncio.create_task(self._fill_gap_after_wait())
                return
            await self._send_run(message)
            await self._send_held()

    async def _send_run(self, message: dict[str, Any]) -> None:
        """One live run that starts at or before the next seq (under the send lock)."""
        first, last, text = message["first"], message["last"], message["text"]
        if first != self.last_seq + 1:
            await self._send_stored(up_to=last)  # an overlap with what was sent: all of it is stored
            return
        if self.FILTERS:
            await self._send_events(json.loads(text)["events"])
        else:
            if message.get("traced"):  # the frame ends with its trace object: add this stage's stamp
                text = f'{text[:-2]},"consumer":{time.time()}}}}}'
            await self.send(text_data=text)
        self.last_seq = last

    async def _send_held(self) -> None:
        """Held runs that follow on now, in order (under the send lock); the gap timer stops when none is left."""
        while self._held:
            first = min(self._held)
            if first > self.last_seq + 1:
                return  # still a gap: the timer fills it
            message = self._held.pop(first)
            if message["last"] > self.last_seq:
                await self._send_run(message)
        if self._gap_timer is not None:
            self._gap_timer.cancel()  # never the running task: the timer sends under the lock, never through here
            self._gap_timer = None

    async def _fill_gap_after_wait(self) -> None:
        await asyncio.sleep(REORDER_WAIT_S)
        async with self._send_lock:
            self._gap_timer = None
            if self._held:  # the run before them never came (dropped, or the layer blinked): all of it is stored
                up_to = max(m["last"] for m in self._held.values())
                self._held.clear()
                await self._send_stored(up_to=up_to)
