"""Canonical samples from written turns: how a team brings gold turns for a harness the reference policy does not
know (an order desk, a help desk: anything outside the live room).

A written turn names the comment(s), the skill to load, the tool calls with their arguments and the reply; each
call is answered by the ``result`` written with it, or through the tool's own binding by the one dispatcher
(:func:`streams.tool_bindings.call_bound_tool`: a fixture table, an allow-listed http endpoint or MCP server in
``runtime``), so the results are what the harness really returns. Checking never calls a tool that may act (an MCP
tool not marked read-only, an HTTP method other than GET): such a call needs its ``result`` written. A turn becomes
a sample only when the harness accepts it as it stands (arguments valid for each tool's schema, every before-reply
hook, tool rounds, request limit: :func:`training_jobs.hsa.samples.target_problems` with ``full=True``); otherwise
:class:`WrittenTurnError` says which turn and why.

File form (YAML or JSON), a list of::

    - id: status-a1002
      comments: [{viewer: dana, text: "Where is my order A1002?"}]   # or comment: "..."
      skill: order_status            # a reply skill (or skills: [...], loaded in order)
      calls:
        - {tool: lookup_order, arguments: {order_id: A1002}}
        - {tool: open_ticket, arguments: {order_id: A1002}, result: {ticket: T-88}}   # a tool that may act
      reply: "Order A1002 has shipped ..."

Plain Python, no Django.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness_editor.schemas import Manifest
from harness_editor.schemas.bindings import binding_kind
from harness_editor.schemas.safe_schema import ToolSchemaFault, check_arguments
from harness_editor.schemas.tool_effects import tool_effect
from streams.engine.hooks import validate_arguments
from streams.reference_policy import tool_result_text
from streams.tool_bindings import EMPTY_RUNTIME, ToolRuntime, call_bound_tool
from training_jobs.hsa.samples import (
    LoadSkill,
    Reply,
    Sample,
    Step,
    ToolCall,
    target_problems,
)


class WrittenTurnError(ValueError):
    """A written turn the harness does not accept (``path``: ``turns[3].calls[1].tool``)."""

    def __init__(self, path: str, message: str):
        self.path, self.reason = path, message
        super().__init__(f"{path}: {message}")


def _comments(turn: Mapping[str, Any], at: str) -> tuple[dict[str, str], ...]:
    if "comments" in turn:
        raw = turn["comments"]
        if not isinstance(raw, list) or not raw:
            raise WrittenTurnError(f"{at}.comments", "a non-empty list of {viewer, text}")
        return tuple({"viewer": str(c.get("viewer") or "customer"), "text": str(c["text"])} for c in raw)
    if isinstance(turn.get("comment"), str) and turn["comment"].strip():
        return ({"viewer": str(turn.get("viewer") or "customer"), "text": turn["comment"]},)
    raise WrittenTurnError(at, "a turn needs a comment (or comments)")


# Bindings that run in this process on the sample's own copy of the room: calling them acts on nothing outside it.
_IN_PROCESS = frozenset({"builtin", "fixture", "unbound"})


def _call_result(tool: Any, call: Mapping[str, Any], room_state: dict[str, Any], args: dict[str, Any],
                 runtime: ToolRuntime, *, remote: bool, at: str) -> dict[str, Any] | None:
    """What the call returned: its recorded ``result``, else its binding's answer where calling it cannot act
    (in process, or an HTTP/MCP tool that is read-only: :func:`tool_effect`), and then only with ``remote`` for
    HTTP/MCP (None: not called here). A tool that may act is never called: the turn must say what it returned."""
    if "result" in call:
        recorded = call["result"]
        if not isinstance(recorded, dict):
            raise WrittenTurnError(f"{at}.result", "a recorded result is a JSON object (what the tool returned)")
        if tool.output_schema is not None:
            try:
                errors = check_arguments(tool.output_schema, recorded, strict=False)
            except ToolSchemaFault as fault:
                raise WrittenTurnError(f"{at}.result", f"{tool.name}'s output schema is at fault: {fault}") from None
            if errors:
                raise WrittenTurnError(f"{at}.result", f"not what {tool.name} returns: " + "; ".join(errors))
        return dict(recorded)
    if binding_kind(tool.binding) in _IN_PROCESS:
        return call_bound_tool(tool, room_state, args, runtime)
    effect = tool_effect(tool)
    if not effect.read_only:
        raise WrittenTurnError(at, f"{tool.name} may act ({effect.label}: {effect.why}), and checking a turn never "
                               "calls a tool that may act: write what it returned as the call's 'result'")
    return call_bound_tool(tool, room_state, args, runtime) if remote else None


def written_sample(manifest: Manifest, turn: Mapping[str, Any], *, index: int = 0, source: str = "written",
                   runtime: ToolRuntime = EMPTY_RUNTIME, room: Mapping[str, Any] | None = None,
                   remote: bool = True) -> Sample | None:
    """One written turn as a sample under ``manifest`` (WrittenTurnError when the harness would not accept it).

    Checking a turn never calls a tool that may act (:func:`_call_result`). ``remote=False`` (a web request) does
    not call read-only HTTP or MCP tools either: such a turn is checked up to its calls (skills, tools, arguments,
    recorded results, the reply) and None is returned; the build job checks the rest."""
    at = f"turns[{index}]"
    comments = _comments(turn, at)
    skills = turn.get("skills") or ([turn["skill"]] if turn.get("skill") else [])
    steps: list[Step] = []
    n = 0
    for j, sid in enumerate(skills):
        if manifest.skill(sid) is None:
            raise WrittenTurnError(f"{at}.skills[{j}]", f"no skill {sid!r} in the harness")
        n += 1
        steps.append(LoadSkill(f"call_{n}", sid))
    room_state = dict(room or {})
    complete = True
    for j, call in enumerate(turn.get("calls") or []):
        tool = manifest.tool(call.get("tool", ""))
        if tool is None:
            raise WrittenTurnError(f"{at}.calls[{j}].tool", f"no tool {call.get('tool')!r} in the harness")
        args = dict(call.get("arguments") or {})
        try:
            errors = validate_arguments(tool, args)  # what the tool_args hook would refuse
        except ToolSchemaFault as fault:
            raise WrittenTurnError(f"{at}.calls[{j}].tool",
                                   f"{tool.name} cannot be used, its schema is at fault: {fault}") from None
        if errors:
            raise WrittenTurnError(f"{at}.calls[{j}].arguments", "; ".join(errors))
        result = _call_result(tool, call, room_state, args, runtime, remote=remote, at=f"{at}.calls[{j}]")
        if result is None:
            complete = False
            continue
        if "error" in result and not call.get("fault_expected"):
            raise WrittenTurnError(f"{at}.calls[{j}]", f"{tool.name} answered a fault: {result.get('error')}")
        n += 1
        text = tool_result_text(result)
        steps.append(ToolCall(f"call_{n}", tool.name, args, result, text))
    reply = turn.get("reply")
    if not isinstance(reply, str) or not reply.strip():
        raise WrittenTurnError(f"{at}.reply", "a turn ends with a reply")
    if not complete:
        return None
    steps.append(Reply(reply))
    sample = Sample(id=str(turn.get("id") or f"{source}-{index}"), manifest=manifest, room=room_state,
                    comments=comments, target=tuple(steps), source=source,
                    meta={"written": True, "skill": skills[0] if skills else ""})
    problems = target_problems(manifest, sample, full=True)
    if problems:
        raise WrittenTurnError(at, "; ".join(problems))
    return sample


def written_samples(manifest: Manifest, turns: Sequence[Mapping[str, Any]], *, source: str = "written",
                    runtime: ToolRuntime = EMPTY_RUNTIME) -> list[Sample]:
    samples = [written_sample(manifest, t, index=i, source=source, runtime=runtime) for i, t in enumerate(turns)]
    return [s for s in samples if s is not None]


def load_turns(path: str | Path) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, list):
        raise WrittenTurnError("turns", "a list of turns")
    return data
