"""Publishing stored events to whoever watches: one channel-layer group per preview room.

Services store events first and publish them with ``transaction.on_commit`` (:func:`publish_on_commit`), so
a WebSocket client never sees an event the database does not have: a client that reconnects with
``?after=<seq>`` reads the rest from the database and nothing is lost or sent twice.

Publishing never blocks the caller (a turn streaming tokens): messages go, in order, through one
background thread per process that keeps an event loop and its channel-layer connections open. A message
lost there (layer down, process exiting) is still in the database: the consumer fills gaps from it and a
reconnecting client resumes from it. With the in-memory layer (the embedded default) nothing is sent: the
worker is another process, so consumers poll the database instead.

One group message carries a run of events with consecutive seqs (``first`` .. ``last``) and the WebSocket
frame for them, serialised once here rather than once per viewer in the consumer. Events stored in one
transaction go as one message, and runs of one room that queue up while the layer is busy are merged.
:class:`EventBatcher` groups a turn's events into few transactions (and so few messages) without holding
back what a viewer waits for.

``HAT_PREVIEW_TRACE=1`` (bench/preview_ttft.py sets it) adds wall-clock stamps of each stage (store started,
committed, handed to the layer) to the frame; the consumer adds its own before sending it on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

EVENT_MESSAGE_TYPE = "preview.event"  # dispatched to PreviewConsumer.preview_event
TRACE = os.environ.get("HAT_PREVIEW_TRACE", "").lower() in ("1", "true", "yes")
MAX_MERGED_EVENTS = 500  # one frame stays small enough for any client to parse at once
# How long a turn's events may wait to be stored together: a model streams a delta every ~10-20 ms, so about
# three deltas a transaction, while a person reading the stream does not notice 50 ms.
EMIT_WINDOW_S = 0.05


def preview_group(room_id: Any) -> str:
    return f"preview.{room_id}"


def live_group(session_id: Any) -> str:
    """The group of everyone watching a live session (operators, watchers, the overlay)."""
    return f"live.{session_id}"


def events_frame(events: Sequence[dict[str, Any]], trace: dict[str, float] | None = None) -> str:
    """The WebSocket frame (JSON text) for stored events with consecutive seqs, oldest first."""
    frame: dict[str, Any] = {"type": "events", "events": list(events)}
    if trace is not None:
        frame["trace"] = trace  # last key: the consumer appends its own stamp to the text (see consumers)
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


class _Publisher:
    """One daemon thread running an event loop that sends queued messages one after the other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._thread: threading.Thread | None = None

    def _ensure(self) -> None:
        if self._pid == os.getpid() and self._thread is not None and self._thread.is_alive():
            return
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop, self._queue = loop, asyncio.Queue()
            ready.set()
            loop.run_until_complete(self._drain())

        self._pid = os.getpid()  # after a fork, start a new thread (the parent's does not exist here)
        self._thread = threading.Thread(target=run, name="preview-publisher", daemon=True)
        self._thread.start()
        ready.wait()

    async def _drain(self) -> None:
        carry = None  # taken from the queue but not mergeable with the run before it: the next message
        while True:
            group, events, trace = carry if carry is not None else await self._queue.get()
            carry, taken = None, 1
            # runs of this group that queued up meanwhile and continue its seqs go in the same message
            while len(events) < MAX_MERGED_EVENTS and not self._queue.empty():
                nxt = self._queue.get_nowait()
                if nxt[0] != group or nxt[1][0]["seq"] != events[-1]["seq"] + 1:
                    carry = nxt
                    break
                taken += 1
                events = [*events, *nxt[1]]
                trace = trace if trace is not None else nxt[2]  # the oldest's stamps: its latency counts
            try:
                layer = get_channel_layer()
                if layer is not None:
                    if trace is not None:
                        trace = {**trace, "pub": time.time()}
                    await layer.group_send(group, {
                        "type": EVENT_MESSAGE_TYPE, "first": events[0]["seq"], "last": events[-1]["seq"],
                        "text": events_frame(events, trace), "traced": trace is not None})
            except Exception:  # the layer is down: the events are stored, clients recover them from the database
                logger.warning("publishing events %s#%s-%s failed", group, events[0].get("seq"),
                               events[-1].get("seq"), exc_info=True)
            finally:
                for _ in range(taken):
                    self._queue.task_done()

    def submit(self, group: str, events: list[dict[str, Any]], trace: dict[str, float] | None = None) -> None:
        if isinstance(get_channel_layer(), InMemoryChannelLayer):
            return  # per process and bound to one loop: consumers poll the database instead (embedded mode)
        with self._lock:
            self._ensure()
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (group, events, trace))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far was sent (tests, shutdown)."""
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                return True
            loop, queue = self._loop, self._queue
        try:
            asyncio.run_coroutine_threadsafe(queue.join(), loop).result(timeout)
            return True
        except Exception:
            return False


_publisher = _Publisher()


def publish(room_id: Any, events: dict[str, Any] | Sequence[dict[str, Any]],
            trace: dict[str, float] | None = None, *, group: str | None = None) -> None:
    """Send stored events (``PreviewEvent.as_message()``; one, or several with consecutive seqs) to the room's
    group (or ``group``: a live session's) as one message; returns at once."""
    batch = [events] if isinstance(events, dict) else list(events)
    if batch:
        _publisher.submit(group or preview_group(room_id), batch, trace)


def publish_flush(timeout: float = 5.0) -> bool:
    return _publisher.flush(timeout)


def publish_on_commit(room_id: Any, events: dict[str, Any] | Sequence[dict[str, Any]],
                      trace: dict[str, float] | None = None, *, group: str | None = None) -> None:
    if trace is None:
        transaction.on_commit(lambda: publish(room_id, events, group=group))
    else:
        transaction.on_commit(lambda: publish(room_id, events, {**trace, "commit": time.time()}, group=group))


# --- grouping a turn's events ---------------------------------------------------------------------------------


class EventBatcher:
    """Groups events into few ``store(batch)`` calls (one transaction and one published message each),
    in order, without reordering or dropping anything.

    ``add(type, payload, urgent=True)`` stores what is held plus this event at once (what a viewer waits for:
    the first token of a model call, the end of the turn); other events are held at most ``window_s``
    (then a background thread stores them, so a model that stalls mid-stream does not hold text back) or
    until ``max_events`` are held. At 50 viewers every stored message is 50 channel-layer messages and 50
    WebSocket frames, and a model streams tens of deltas a second: grouping them is what keeps the console
    from taking the CPU the model needs.

    ``background=False`` stores only from :meth:`add` and :meth:`close` (when the caller is inside a
    transaction: another thread's connection could not see what it wrote). A failed background store is
    raised by the next :meth:`add` or :meth:`close`; the events of that batch were not stored (their
    transaction rolled back, no seq was used).
    """

    IDLE_EXIT_S = 2.0  # the background thread ends (and closes its connection) when nothing came for this long

    def __init__(self, store: Callable[[list[tuple[str, dict[str, Any]]]], Any], *, window_s: float = EMIT_WINDOW_S,
                 max_events: int = 64, background: bool = True):
        self._store = store
        self.window_s = window_s
        self.max_events = max_events
        self.background = background
        self._held: list[tuple[str, dict[str, Any]]] = []
        self._since: float | None = None  # monotonic time the oldest held event came
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False

    def add(self, type: str, payload: dict[str, Any], *, urgent: bool = False) -> None:
        with self._cond:
            self._raise_error()
            self._held.append((type, payload))
            now = time.monotonic()
            if self._since is None:
                self._since = now
            if urgent or len(self._held) >= self.max_events or now - self._since >= self.window_s:
                self._flush()
            elif self.background:
                self._wake()

    def close(self) -> None:
        """Store what is held and stop the background thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._raise_error()
            self._flush()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _flush(self) -> None:  # with self._cond held
        batch, self._held, self._since = self._held, [], None
        if batch:
            self._store(batch)

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _wait_and_store(self) -> None:  # with self._cond held (wait() releases it meanwhile)
        idle_since = time.monotonic()
        while not self._closed and self._error is None:
            now = time.monotonic()
            if self._since is None:
                if now - idle_since >= self.IDLE_EXIT_S:
                    return
                self._cond.wait(self.IDLE_EXIT_S - (now - idle_since))
                continue
            due = self._since + self.window_s - now
            if due > 0:
                self._cond.wait(due)
                continue
            try:
                self._flush()
            except Exception as exc:  # the caller's next add() raises it
                self._error = exc
            idle_since = time.monotonic()

    def _wake(self) -> None:  # with self._cond held
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="preview-batcher", daemon=True)
            self._thread.start()
        else:
            self._cond.notify()

    def _run(self) -> None:
        try:
            with self._cond:
                try:
                    self._wait_and_store()
                finally:  # still under the lock: from now on _wake() starts a new thread
                    if self._thread is threading.current_thread():
                        self._thread = None
        finally:
            from django.db import connections

            connections.close_all()  # this thread's own connections (they are per thread)
