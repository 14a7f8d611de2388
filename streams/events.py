"""Publishing stored events to whoever watches: one channel-layer group per preview room.

Services store an event first and publish it with ``transaction.on_commit`` (:func:`publish_on_commit`), so
a WebSocket client never sees an event the database does not have: a client that reconnects with
``?after=<seq>`` reads the rest from the database and nothing is lost or sent twice.

Publishing never blocks the caller (a turn streaming tokens): messages go, in order, through one
background thread per process that keeps an event loop and its channel-layer connections open. A message
lost there (layer down, process exiting) is still in the database: the consumer fills gaps from it and a
reconnecting client resumes from it. With the in-memory layer (the embedded default) nothing is sent: the
worker is another process, so consumers poll the database instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

EVENT_MESSAGE_TYPE = "preview.event"  # dispatched to PreviewConsumer.preview_event


def preview_group(room_id: Any) -> str:
    return f"preview.{room_id}"


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
        while True:
            room_id, event = await self._queue.get()
            try:
                layer = get_channel_layer()
                if layer is not None:
                    await layer.group_send(preview_group(room_id), {"type": EVENT_MESSAGE_TYPE, "event": event})
            except Exception:  # the layer is down: the event is stored, clients recover it from the database
                logger.warning("publishing preview event %s#%s failed", room_id, event.get("seq"), exc_info=True)
            finally:
                self._queue.task_done()

    def submit(self, room_id: Any, event: dict[str, Any]) -> None:
        if isinstance(get_channel_layer(), InMemoryChannelLayer):
            return  # per process and bound to one loop: consumers poll the database instead (embedded mode)
        with self._lock:
            self._ensure()
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (str(room_id), event))

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


def publish(room_id: Any, event: dict[str, Any]) -> None:
    """Send one stored event (``PreviewEvent.as_message()``) to the room's group; returns at once."""
    _publisher.submit(room_id, event)


def publish_flush(timeout: float = 5.0) -> bool:
    return _publisher.flush(timeout)


def publish_on_commit(room_id: Any, event: dict[str, Any]) -> None:
    transaction.on_commit(lambda: publish(room_id, event))
