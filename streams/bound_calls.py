"""What a tool call does, whatever the harness calls it: the binding that carries it out and the binding's keyword
arguments — and what the reply rules read of a played turn (its executed manifest-tool calls, bound, with success;
the results that back facts; the skills loaded). Plain Python, no Django.

The runtime owns this reading, so every judge of a turn reads calls the same way: a live turn against its replay
(:mod:`streams.replay_compare`) and evaluation (:func:`training_jobs.evals.judging.turn_calls`). The HSA judge and
the RL rewards still keep their own copy of ``binding_key`` / ``implementation_arguments``
(:mod:`training_jobs.hsa.relabel`, same rules): one of the two is to import the other.

A built-in binding's arguments are read through the tool's ``argument_map`` and coerced as the binding coerces them;
an open binding (http, fixture, mcp) or none takes the call's arguments as they are (its ``argument_map`` is empty).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest, Tool, argument_path_get
from harness_editor.schemas.bindings import (
    BUILTIN_BINDINGS,
    BindingParam,
    binding_kind,
    binding_label,
)
from streams.engine.events import SkillLoaded, ToolCallEvent, ToolResultEvent
from streams.engine.rules.judge import CallRecord


class BoundCall(NamedTuple):
    """What a call does, whatever the harness calls it: the binding and its keyword arguments."""

    binding: str
    arguments: dict[str, Any]


def _coerce(param: BindingParam, value: Any) -> Any:
    """What the binding makes of a value: integer parameters that declare ``coerces_digit_strings`` accept
    integer-looking strings (``streams.bindings._as_int``); every other value reaches the binding as it is."""
    if param.coerces_digit_strings and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return value


def implementation_arguments(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The binding's keyword arguments for a call of ``tool`` (module docstring)."""
    signature = BUILTIN_BINDINGS.get(tool.binding) if isinstance(tool.binding, str) else None
    if signature is None:
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in arguments.items()}
    out: dict[str, Any] = {}
    for impl_name, path in tool.argument_map.items():
        found, value = argument_path_get(arguments, path)
        if found:
            out[impl_name] = _coerce(signature.params[impl_name], value)
    return out


def binding_key(tool: Tool) -> str:
    """A hashable name of what carries out the tool's calls, for comparing calls within one harness: the built-in id,
    ``http:<endpoint>``, ``mcp:<server>/<tool>``, ``fixture:<digest of its table>`` or ``unbound:<tool name>``."""
    b = tool.binding
    kind = binding_kind(b)
    if kind == "builtin":
        return b  # type: ignore[return-value]
    if kind == "unbound":
        return f"unbound:{tool.name}"
    if kind == "mcp":
        return f"mcp:{b.server}/{b.tool or tool.name}"  # type: ignore[union-attr]
    digest = hashlib.sha256(b.model_dump_json().encode()).hexdigest()[:12]  # type: ignore[union-attr]
    return f"{binding_label(b)}:{digest}"


def bound_call(manifest: Manifest, name: str, arguments: Mapping[str, Any] | None) -> BoundCall | None:
    """The call under ``manifest``, or None when the manifest has no tool of that name (``load_skill`` too)."""
    tool = manifest.tool(name)
    if tool is None:
        return None
    return BoundCall(binding_key(tool), implementation_arguments(tool, arguments or {}))


def turn_calls(events: Iterable[Any], manifest: Manifest) -> tuple[list[CallRecord], list[Any], list[str]]:
    """What the rules read of a played turn's ``events``: its executed manifest-tool calls (bound, with success),
    the results of the successful ones (what backs facts) and the skills loaded."""
    events = list(events)
    results = {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}
    calls: list[CallRecord] = []
    backing: list[Any] = []
    for e in events:
        if not isinstance(e, ToolCallEvent) or not e.valid or e.error is not None or e.name == LOAD_SKILL_TOOL:
            continue
        bound = bound_call(manifest, e.name, e.arguments)
        res = results.get(e.call_id)
        ok = res is not None and res.error is None and res.fault in (None, "slow")
        if bound is not None:
            calls.append(CallRecord(bound.binding, dict(bound.arguments), ok))
        if ok and isinstance(res.result, dict) and res.binding is not None:
            backing.append(res.result)
    loaded = [e.skill_id for e in events if isinstance(e, SkillLoaded)]
    return calls, backing, loaded
