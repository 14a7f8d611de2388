"""Eval-case calls named by a harness's tool (``tool: lookup_order``), whatever binds it: checked against the harness
when a case is validated, and compared with a played turn's calls by what carries them out.

A built-in binding is compared as before: its id and the implementation arguments (``argument_map``). An open
binding has no implementation names, so a call is identified by what survives the HSA and T3 edits of a harness
(renamed tools, renamed or wrapped parameters; :mod:`training_jobs.hsa.tool_ops`):

- ``fixture``: the table's answers (results in order, and the default) — HSA moves the ``when`` paths with the
  parameters but never the answers — and, as the call's argument, which answer the call gets (``case 2``,
  ``default``). Two calls that get the same answer of the same table are the same call, under any tool name and
  parameter shape;
- ``mcp``: the server and the server's tool name (HSA pins ``binding.tool`` to the old name when it renames the
  manifest tool, and never reshapes an MCP tool's parameters), with the arguments as they are;
- ``http``: the endpoint, method and path with its templates blanked, with the arguments as they are (a parameter
  rename of an http tool is not followed: compared in the judged harness's terms);
- unbound: never a successful call.

Plain Python, no Django.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from harness_editor.schemas import FieldError, Manifest, Tool
from harness_editor.schemas.bindings import binding_kind
from streams import bound_calls
from streams.bound_calls import BoundCall
from training_jobs.hsa.relabel import undeclared_arguments

NO_ANSWER = "none"  # a fixture call no case and no default answers (the dispatcher's not_found)
_TEMPLATE = re.compile(r"\{[^{}]*\}")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def stable_key(tool: Tool) -> str:
    """What carries out ``tool``'s calls, in terms that survive renames (module docstring)."""
    b = tool.binding
    kind = binding_kind(b)
    if kind == "fixture":
        return f"fixture:{_digest([[c.result for c in b.cases], b.default])}"  # type: ignore[union-attr]
    if kind == "http":
        return f"http:{b.endpoint}:{b.method}:{_TEMPLATE.sub('{}', b.path)}"  # type: ignore[union-attr]
    return bound_calls.binding_key(tool)  # built-in id, mcp:<server>/<tool>, unbound:<name>


def fixture_answer(tool: Tool, arguments: Mapping[str, Any]) -> str:
    """Which answer of the tool's fixture table a call gets: ``case <i>``, ``default`` or ``none``."""
    from streams.tool_bindings.fixture import case_matches

    for i, case in enumerate(tool.binding.cases):  # type: ignore[union-attr]
        if case_matches(case.when, arguments):
            return f"case {i}"
    return "default" if tool.binding.default is not None else NO_ANSWER  # type: ignore[union-attr]


def call_identity(tool: Tool, arguments: Mapping[str, Any] | None) -> BoundCall:
    """A call of ``tool`` as evaluation compares calls (module docstring); built-in: :func:`bound_calls.bound_call`."""
    args = dict(arguments or {})
    if binding_kind(tool.binding) == "fixture":
        return BoundCall(stable_key(tool), {"answer": fixture_answer(tool, args)})
    return BoundCall(stable_key(tool), bound_calls.implementation_arguments(tool, args))


def expected_identity(tool_name: str, arguments: Mapping[str, Any], base: Manifest) -> BoundCall:
    """A case's ``tool`` call (written in the terms of the case's harness, ``base``); a tool ``base`` lacks can
    match no call."""
    tool = base.tool(tool_name)
    if tool is None:
        return BoundCall(f"missing:{tool_name}", dict(arguments))
    return call_identity(tool, arguments)


# --- validation -----------------------------------------------------------------------------------------------


def field_value(result: Any, field: str) -> tuple[bool, Any]:
    """The value at a dotted path of a result (list items by index: ``items.0.sku``)."""
    node = result
    for part in field.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)
    return a == b


def _call(tool: Tool, room: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """The call made through the real dispatcher, or None when this check cannot make it (http and MCP bindings
    reach a host's allow-list: the case is checked when it runs)."""
    from streams.tool_bindings import call_bound_tool

    if binding_kind(tool.binding) in ("http", "mcp"):
        return None
    return call_bound_tool(tool, copy.deepcopy(dict(room)), dict(arguments))


def _tool(manifest: Manifest, name: str, at: str, harness: str) -> tuple[Tool | None, list[FieldError]]:
    tool = manifest.tool(name)
    if tool is not None:
        return tool, []
    known = ", ".join(t.name for t in manifest.tools) or "none"
    return None, [FieldError(path=f"{at}.tool", message=f"the harness {harness or manifest.name!r} has no tool "
                             f"{name!r}; its tools: {known}")]


def _argument_errors(tool: Tool, arguments: Mapping[str, Any], at: str) -> list[FieldError]:
    return [FieldError(path=f"{at}.arguments.{p}", message=f"{tool.name} declares no parameter {p!r}")
            for p in undeclared_arguments(tool.parameters, arguments)]


def tool_call_errors(case: Any, manifest: Manifest) -> list[FieldError]:
    """The case's ``tool`` calls checked against ``manifest`` (the harness the case is written for): the tool
    exists, its arguments are declared, and — through the real dispatcher, as a turn would call it — each gold
    fact's value is what the tool answers at its field, and each expected call gets an answer (not a fault)."""
    errors: list[FieldError] = []
    for i, f in enumerate(case.gold_facts):
        if not f.tool:
            continue
        at = f"gold_facts[{i}]"
        tool, errs = _tool(manifest, f.tool, at, case.harness)
        errors += errs
        if tool is None:
            continue
        arg_errors = _argument_errors(tool, f.arguments, at)
        errors += arg_errors
        result = None if arg_errors else _call(tool, case.room, f.arguments)
        if result is None:
            continue
        if "error" in result:
            errors.append(FieldError(path=f"{at}.arguments", message=f"{tool.name} answers this call with a "
                                     f"fault: {result.get('error')}"))
            continue
        found, value = field_value(result, f.field)
        if not found:
            errors.append(FieldError(path=f"{at}.field", message=f"{tool.name}'s answer has no field {f.field!r}; "
                                     f"its fields: {', '.join(map(str, result)) or 'none'}"))
        elif not same_value(value, f.value):
            errors.append(FieldError(path=f"{at}.value", message=f"{tool.name} answers {value!r} at {f.field!r}, "
                                     f"not {f.value!r}"))
    for i, t in enumerate(case.expected_tools):
        if not t.tool:
            continue
        at = f"expected_tools[{i}]"
        tool, errs = _tool(manifest, t.tool, at, case.harness)
        errors += errs
        if tool is None:
            continue
        arg_errors = _argument_errors(tool, t.arguments, at)
        errors += arg_errors
        if arg_errors:
            continue
        if binding_kind(tool.binding) == "unbound":
            errors.append(FieldError(path=f"{at}.tool", message=f"{tool.name} has no binding: a turn calling it "
                                     "gets the fault 'unbound', so no correct turn makes this call"))
        elif binding_kind(tool.binding) == "fixture":
            result = _call(tool, case.room, t.arguments)
            if fixture_answer(tool, t.arguments) == NO_ANSWER:
                errors.append(FieldError(path=f"{at}.arguments", message=f"no fixture of {tool.name} answers "
                                         "these arguments (and it has no default)"))
            elif result is not None and "error" in result:
                errors.append(FieldError(path=f"{at}.arguments", message=f"{tool.name} answers these arguments "
                                         f"with a fault: {result.get('error')}"))
        elif binding_kind(tool.binding) == "builtin":
            result = _call(tool, case.room, t.arguments)
            if result is not None and result.get("code") in ("invalid_argument", "binding_unavailable"):
                errors.append(FieldError(path=f"{at}.arguments", message=str(result.get("error"))))
    return errors

