"""Tool faults a scenario (or a test) injects around a binding call, so hooks and retries can be exercised.

A fault is keyed by a binding id from :mod:`streams.bindings` (``catalog.product_info``) or by a manifest
tool name (``lookup_product``); the engine looks up the tool name first, then the binding id.

Kinds:

- ``timeout``: the binding is not called (after ``delay_ms``, default 0); the model sees a tool error
  ``{"error": "... timed out", "code": "timeout"}``.
- ``malformed``: the binding runs (its side effects happen) but the model receives a non-JSON garbage
  string instead of its result. Nothing in it backs a factual claim.
- ``permission_denied``: the binding is not called; the model sees
  ``{"error": "...", "code": "permission_denied"}``.
- ``slow``: sleep ``delay_ms``, then the real result.

Plain Python, no Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FaultKind = Literal["timeout", "malformed", "permission_denied", "slow"]
FAULT_KINDS: tuple[str, ...] = ("timeout", "malformed", "permission_denied", "slow")

# What a broken upstream might send: truncated, not JSON, no usable numbers.
MALFORMED_RESULT = '{"status": "ok", "data": {"item": <<upstream returned HTML>> </body></html>'


class ToolFault(BaseModel):
    """One injected fault for one binding id or manifest tool name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    binding: str = Field(min_length=1, max_length=100)
    kind: FaultKind
    delay_ms: int = Field(default=0, ge=0, le=60000)


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    """What the engine does with a (possibly faulted) call.

    ``result`` is the dict the model should see (JSON-encoded by the engine), or ``None`` when ``raw`` holds
    a non-JSON string the model sees verbatim (the ``malformed`` fault). ``error`` is set when the call
    failed from the model's point of view; ``fault`` names the injected kind, if any.
    """

    result: dict[str, Any] | None
    raw: str | None
    error: str | None
    fault: FaultKind | None
    called: bool


def find_fault(
    faults: Mapping[str, ToolFault] | None, tool_name: str, binding_id: str | None
) -> ToolFault | None:
    """The fault for a call: by manifest tool name first, then by binding id."""
    if not faults:
        return None
    fault = faults.get(tool_name)
    if fault is None and binding_id:
        fault = faults.get(binding_id)
    return fault


def faults_by_key(faults: Mapping[str, ToolFault] | list[ToolFault] | None) -> dict[str, ToolFault]:
    """Accept a mapping or a list of faults (keyed by their ``binding``)."""
    if not faults:
        return {}
    if isinstance(faults, Mapping):
        return dict(faults)
    return {f.binding: f for f in faults}




def apply_fault(
    fault: ToolFault | None,
    call: Callable[[], dict[str, Any]],
    *,
    name: str = "tool",
    sleep: Callable[[float], None] = time.sleep,
) -> FaultOutcome:
    """Run ``call`` (the binding with its arguments bound) under ``fault``.

    Exceptions raised by the binding itself become an ``internal`` tool error, never escape.
    """

    def real() -> FaultOutcome:
        try:
            result = call()
        except Exception as exc:  # a binding bug must not crash the turn
            msg = f"{name} failed: {type(exc).__name__}"
            return FaultOutcome({"error": msg, "code": "internal"}, None, msg, None, True)
        if not isinstance(result, dict):
            msg = f"{name} returned {type(result).__name__}, not an object"
            return FaultOutcome({"error": msg, "code": "internal"}, None, msg, None, True)
        err = result.get("error")
        return FaultOutcome(result, None, str(err) if err else None, None, True)

    if fault is None:
        return real()
    if fault.kind == "slow":
        if fault.delay_ms:
            sleep(fault.delay_ms / 1000)
        out = real()
        return FaultOutcome(out.result, out.raw, out.error, "slow", True)
    if fault.kind == "timeout":
        if fault.delay_ms:
            sleep(fault.delay_ms / 1000)
        msg = f"{name} timed out"
        return FaultOutcome({"error": msg, "code": "timeout"}, None, msg, "timeout", False)
    if fault.kind == "permission_denied":
        msg = f"permission denied for {name}"
        return FaultOutcome({"error": msg, "code": "permission_denied"}, None, msg, "permission_denied", False)
    # malformed: the call happens, the model gets garbage
    if fault.delay_ms:
        sleep(fault.delay_ms / 1000)
    real()
    return FaultOutcome(None, MALFORMED_RESULT, "malformed tool output", "malformed", True)
