"""Operator approval of destructive tools in a live session (``constraints.destructive_tools_need_approval``).

A harness that asks for it gets a :class:`LiveToolGate` as its turns' :attr:`ToolRuntime.approval`. Before a call of
a tool that may be destructive runs (:func:`harness_editor.schemas.tool_effects.tool_effect`: destructive, or saying
nothing: MCP's default is "may be destructive"), the gate stores ``tool_approval_pending`` {call_id, tool, binding,
arguments, effect, why, wait_s} in the turn and waits, the way approve-before-speak holds a reply, for the operator's
decision (:func:`streams.services.live_controls.live_tool_decide`: ``tool_approval_decided`` {call_id, approved, by}).
The turn cannot wait past its deadline, so the gate waits at most until :data:`APPROVAL_REPLY_RESERVE_S` before it,
then stores ``tool_approval_decided`` {approved: false, by: "timeout"} and the model gets the tool fault
``approval_timeout``; a refusal is ``approval_refused``; a turn with less than :data:`MIN_APPROVAL_WAIT_S` left to
wait is refused at once (``approval_unavailable``). Every fault tells the model the action did not happen.

Read-only and non-destructive tools, and fixture tables (nothing is called), run without asking. Preview rooms,
simulation, evaluation and RL never have a gate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from harness_editor.schemas import Tool
from harness_editor.schemas.bindings import binding_kind, binding_label
from harness_editor.schemas.tool_effects import tool_effect
from streams.models import LiveEvent, LiveSession
from streams.services.live_events import live_event_append

# Left of the turn for the model to answer once the tool's result is in: the report's 3.407 s P50 per reply on one
# GPU (DESIGN.md §1), rounded up. The operator's window is the rest of the turn's deadline.
APPROVAL_REPLY_RESERVE_S = 4.0
# Less than this to read a call and press a button is no choice at all: the call is refused at once.
MIN_APPROVAL_WAIT_S = 2.0
POLL_S = 0.5  # the decision is read at least this often (the operator's decision also nudges the runner)
PENDING = "tool_approval_pending"
DECIDED = "tool_approval_decided"


def needs_approval(tool: Tool) -> bool:
    """May this tool's call destroy something, and does running it call anything (a fixture table does not)?"""
    return binding_kind(tool.binding) not in ("fixture", "unbound") and tool_effect(tool).may_destroy


def decision_of(session_id, turn_id: str, call_id: str) -> dict[str, Any] | None:
    """The stored decision on a call (``tool_approval_decided`` payload), or None."""
    for payload in (LiveEvent.objects.filter(session_id=session_id, turn_id=turn_id, type=DECIDED)
                    .order_by("seq").values_list("payload", flat=True)):
        if payload.get("call_id") == call_id:
            return payload
    return None


def _fault(code: str, message: str) -> dict[str, Any]:
    return {"error": message, "code": code}


@dataclass
class LiveToolGate:
    """The approval step of one live turn (module docstring)."""

    session_id: Any
    turn_id: str
    # stores an event of the turn at once, in order with the engine's (the turn's recorder: TurnRecorder.side_event)
    emit: Callable[[str, dict[str, Any]], None]

    def __call__(self, tool: Tool, call_id: str, arguments: Mapping[str, Any],
                 time_left_s: Callable[[], float]) -> dict[str, Any] | None:
        if not needs_approval(tool):
            return None
        effect = tool_effect(tool)
        wait_s = time_left_s() - APPROVAL_REPLY_RESERVE_S
        base = {"call_id": call_id, "tool": tool.name, "binding": binding_label(tool.binding)}
        if wait_s < MIN_APPROVAL_WAIT_S:
            self.emit(DECIDED, {
                **base, "approved": False, "by": "deadline",
                "reason": f"{max(wait_s, 0):.1f} s left to wait: too little for an operator to decide"})
            return _fault("approval_unavailable", f"{tool.name} may be destructive and needs an operator's approval "
                          "in this live session; there is no time left in this turn to ask, so it was NOT run. Tell "
                          "the viewer a person will follow up; do not say it was done.")
        self.emit(PENDING, {
            **base, "arguments": dict(arguments), "effect": effect.effect, "effect_label": effect.label,
            "why": effect.why,
            "wait_s": round(wait_s, 1)})
        decision = self._wait(call_id, time.monotonic() + wait_s)
        if decision.get("approved"):
            return None
        if decision.get("by") == "timeout":
            return _fault("approval_timeout", f"{tool.name} needs an operator's approval in this live session and "
                          f"none came within {wait_s:.0f} s, so it was NOT run. Tell the viewer a person will "
                          "follow up; do not say it was done.")
        return _fault("approval_refused", f"the operator refused this call of {tool.name}: it was NOT run. Do not "
                      "say it was done; offer what you can do instead.")

    def _wait(self, call_id: str, until: float) -> dict[str, Any]:
        from streams.services.live_sessions import live_runner_wait

        while True:
            found = decision_of(self.session_id, self.turn_id, call_id)
            if found is not None:
                return found
            left = until - time.monotonic()
            if left <= 0:
                return self._expire(call_id)
            live_runner_wait(self.session_id, min(POLL_S, left))

    def _expire(self, call_id: str) -> dict[str, Any]:
        """No decision in time: store the timeout under the session's lock, unless a decision landed meanwhile
        (the operator's click and the deadline race: whichever is stored first is the decision)."""
        with transaction.atomic():
            LiveSession.objects.select_for_update().filter(pk=self.session_id).first()
            found = decision_of(self.session_id, self.turn_id, call_id)
            if found is not None:
                return found
            payload = {"call_id": call_id, "approved": False, "by": "timeout",
                       "reason": "no operator decided before the turn's deadline"}
            live_event_append(session_id=self.session_id, turn_id=self.turn_id, type=DECIDED, payload=payload)
            return payload


def gated_runtime(runtime, manifest, session_id, turn_id: str, *, emit: Callable[[str, dict[str, Any]], None]):
    """``runtime`` with the approval gate of this turn when the harness asks for it, else ``runtime``."""
    import dataclasses

    if not manifest.constraints.destructive_tools_need_approval:
        return runtime
    return dataclasses.replace(runtime, approval=LiveToolGate(session_id, turn_id, emit))


def pending_tool_calls(*, session_id) -> list[dict[str, Any]]:
    """Calls waiting for an operator: ``tool_approval_pending`` events with no decision yet, oldest first."""
    rows = (LiveEvent.objects.filter(session_id=session_id, type__in=(PENDING, DECIDED)).exclude(turn_id="")
            .order_by("seq").values("seq", "turn_id", "type", "payload"))
    pending: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["turn_id"], r["payload"].get("call_id", ""))
        if r["type"] == PENDING:
            pending[key] = {"turn_id": r["turn_id"], "seq": r["seq"], **r["payload"]}
        else:
            pending.pop(key, None)
    return list(pending.values())
