"""Storing and publishing a live session's events (one seq per session; the preview room's event store)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.events import live_group
from streams.models import LiveEvent, LiveSession
from streams.services.preview import events_store


def live_event_append(*, session_id, type: str = "", payload: dict[str, Any] | None = None, turn_id: str = "",
                      events: Sequence[tuple[str, dict[str, Any]]] = ()) -> LiveEvent:
    """Store one event (``type``, ``payload``), or several of one turn in order (``events``: (type, payload)
    pairs), with the session's next seqs in one transaction, and publish them to the session's group
    (:func:`streams.events.live_group`) as one message when it commits. Returns the (last) stored event."""
    batch = list(events) or [(type, payload if payload is not None else {})]
    return events_store(LiveSession, LiveEvent, "session", session_id, batch, turn_id=turn_id,
                        group=live_group(session_id))
