"""Running one turn of the ONE engine with every event stored: shared by preview rooms
(:func:`streams.services.preview.preview_turn_run`) and live sessions (:mod:`streams.services.live_turns`).

The caller resolves what the turn uses (manifest, room copy, comments, history, backend) and how an event is stored
(``append(type=..., payload=...)`` or ``append(events=[(type, payload), ...])``: its room's or session's next seqs,
published on commit); :func:`turn_run_recorded` runs :func:`streams.engine.turn.run_turn` and stores what it emits,
in order, through :class:`streams.events.EventBatcher`. What the turn's tools changed in the room is computed with
:func:`room_changes` and merged into the stored state with :func:`room_changes_apply` (the clock or an operator may
have changed the stored room meanwhile: the turn's leaf changes win only where they apply).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import connection

from streams.events import EventBatcher

logger = logging.getLogger(__name__)

Append = Callable[..., Any]  # append(type=, payload=) or append(events=[(type, payload), ...])


class TurnRecorder:
    """Stores a turn's events as they come: the engine's (:meth:`engine_event`) and the backend's own (faults,
    failovers, breaker changes: :meth:`side_event`), in one order. What a viewer waits for goes at once (the request
    to the model, the first token of each model call, the turn's end, a fault), the rest within a short window. A
    caller's open transaction (tests) hides rows from other threads: then nothing is stored in the background."""

    def __init__(self, append: Append):
        self.batcher = EventBatcher(lambda batch: append(events=batch), background=not connection.in_atomic_block)
        self._streaming = False  # a token of the current model call was already stored

    def engine_event(self, event) -> None:
        first_token = event.type == "token" and not self._streaming
        self._streaming = (self._streaming or first_token) and event.type != "model_request"
        self.batcher.add(event.type, event.model_dump(mode="json"),
                         urgent=first_token or event.type in ("model_request", "timings"))
        if event.type == "timings":  # the engine's last event
            self.batcher.close()

    def side_event(self, kind: str, payload: dict[str, Any]) -> None:
        self.batcher.add(kind, payload, urgent=True)

    def close(self) -> None:
        self.batcher.close()


def turn_failed_payload(exc: BaseException) -> dict[str, Any]:
    return {"message": f"{type(exc).__name__}: {exc}"[:1000]}


def turn_run_recorded(*, append: Append, turn_id: str, manifest, room: dict[str, Any],
                      comments: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]], backend,
                      faults: Mapping[str, Any] | None = None, recorder: TurnRecorder | None = None,
                      tools=None):
    """Run the turn (``room`` is the copy its tools mutate) and store every event it emits; returns the TurnResult.
    ``tools``: what the tool bindings may reach (default: :func:`streams.services.tool_runtime.tool_runtime_for`).
    An exception ends the turn: what was emitted before it is stored, then ``turn_failed``, and it is raised."""
    from streams.engine.turn import run_turn

    recorder = recorder or TurnRecorder(append)
    if tools is None:
        from streams.services.tool_runtime import tool_runtime_for

        tools = tool_runtime_for()
    try:
        return run_turn(manifest=manifest, room=room, comments=list(comments), history=list(history),
                        backend=backend, emit=recorder.engine_event, faults=faults or {}, turn_id=turn_id,
                        tools=tools)
    except Exception as exc:
        try:
            recorder.close()  # what the engine emitted before the failure is stored before turn_failed
        except Exception:
            logger.warning("storing the held events of failed turn %s failed", turn_id, exc_info=True)
        append(type="turn_failed", payload=turn_failed_payload(exc))
        raise


def room_changes(before: Any, after: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """The leaf changes from ``before`` to ``after`` (dict keys and list indexes as paths)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in after:
            if key not in before:
                out.append((path + (key,), after[key]))
            else:
                out.extend(room_changes(before[key], after[key], path + (key,)))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for i, (b, a) in enumerate(zip(before, after)):
            out.extend(room_changes(b, a, path + (i,)))
        return out
    return [] if before == after else [(path, after)]


def room_changes_apply(state: dict[str, Any], changes: list[tuple[tuple, Any]]) -> dict[str, Any]:
    state = copy.deepcopy(state)
    for path, value in changes:
        if not path:
            return copy.deepcopy(value)
        target = state
        try:
            for key in path[:-1]:
                target = target[key]
            if isinstance(target, list) and path[-1] >= len(target):
                continue
            target[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # what the turn changed is gone from the stored room (the clock removed it): the store wins
    return state
