"""The turn engine: one implementation that turns (manifest, live room, comments, history) into a reply.

Plain Python, no Django: the preview room, live sessions, the simulator, evaluation, RL rollouts and latency
replay all call :func:`run_turn`. Modules:

- :mod:`~streams.engine.turn` — ``run_turn``, ``TurnResult``, ``ReplayBackend``, ``ScriptedBackend``
- :mod:`~streams.engine.client` — ``ModelEndpoint``, ``OpenAIChatClient``, ``ChatDelta``, ``ModelError``
- :mod:`~streams.engine.events` — typed events, ``TurnEvent``, ``event_adapter``
- :mod:`~streams.engine.hooks` — one pure function per manifest hook kind
- :mod:`~streams.engine.toolcalls` — native and Hermes text tool calls, ``<think>`` stripping
- :mod:`~streams.engine.faults` — ``ToolFault`` and how a fault wraps a binding call
- :mod:`~streams.engine.breaker` — ``FailoverBackend``, ``BreakerBoard``, ``CircuitBreaker``: endpoint faults
- :mod:`~streams.engine.outbound` — ``check_url``, ``OutboundRefused``: the one check of every outbound target

Names are re-exported lazily, so ``import streams.engine.faults`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_turn": "turn",
    "TurnResult": "turn",
    "ReplayBackend": "turn",
    "ScriptedBackend": "turn",
    "ModelEndpoint": "client",
    "OpenAIChatClient": "client",
    "ChatDelta": "client",
    "NativeToolCall": "client",
    "ModelError": "client",
    "TurnEvent": "events",
    "event_adapter": "events",
    "events_adapter": "events",
    "ToolFault": "faults",
    "FailoverBackend": "breaker",
    "BreakerBoard": "breaker",
    "CircuitBreaker": "breaker",
    "check_url": "outbound",
    "OutboundRefused": "outbound",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streams.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"streams.engine.{module}"), name)
