"""Checks of a tool's open binding (http, fixture, mcp) or of its absence, against the tool's own schema.

Part of the semantic pass (:func:`harness_editor.schemas.semantics.validate_semantics`): http path and query
templates must name parameter paths of the tool (values that fit in a URL), a fixture's ``when`` keys must be
parameter paths. Whether an endpoint or an MCP server exists on a host is not checked here: a stored version must
not turn invalid when an administrator edits the allow-list (the runtime answers ``binding_unavailable``, and
``streams.tool_bindings.binding_availability`` tells the editor).

An unbound tool is valid but worth a warning (:func:`manifest_warnings`): a call to it gets the fault ``unbound``.
"""

from __future__ import annotations

import re
from typing import Any

from harness_editor.schemas.bindings import FixtureBinding, HttpBinding, http_path_problem
from harness_editor.schemas.errors import FieldError, _join
from harness_editor.schemas.manifest import Manifest, Tool
from harness_editor.schemas.tool_schema import resolve_param_path

# As streams.tool_bindings.http fills them: {order_id}, {order.id}
_TEMPLATE_RE = re.compile(r"\{([^{}]*)\}")
_JSON_PATH_PART_RE = re.compile(r"^[^\[\]]+(\[\d+\])*$|^(\[\d+\])+$")
_URL_TYPES = frozenset({"string", "integer", "number", "boolean"})


def _template_errors(template: str, where: str, t: Tool, schema_ok: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    if _TEMPLATE_RE.sub("", template).count("{") or _TEMPLATE_RE.sub("", template).count("}"):
        errors.append(FieldError(path=where, message="unbalanced braces: a template names an argument as {name} or "
                                 "{object.field}"))
    for raw in _TEMPLATE_RE.findall(template):
        name = raw.strip()
        if not name:
            errors.append(FieldError(path=where, message="an empty {} names no argument"))
            continue
        if not schema_ok:
            continue
        node = resolve_param_path(t.parameters, name)
        if node is None:
            errors.append(FieldError(path=where, message=f"{{{name}}} is not a parameter path of tool {t.name!r} "
                                     "(dotted names through 'properties', e.g. order.id)"))
            continue
        kind = node.get("type")
        kinds = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
        if kinds and not kinds & _URL_TYPES:
            errors.append(FieldError(path=where, message=f"{{{name}}} is of type {'/'.join(sorted(kinds))}: only a "
                                     "string, number, integer or boolean goes into a URL"))
    return errors


def _http_errors(b: HttpBinding, t: Tool, at: str, schema_ok: bool) -> list[FieldError]:
    errors = _template_errors(b.path, f"{at}.path", t, schema_ok)
    literal = _TEMPLATE_RE.sub("x", b.path)
    if any(c in literal for c in "?#@\\") or "//" in literal:
        errors.append(FieldError(path=f"{at}.path", message="the path is the part after the endpoint's base URL: "
                                 "no scheme, host, '@', '?' or '#' (query parameters go in query)"))
    problem = http_path_problem(literal)
    if problem:
        errors.append(FieldError(path=f"{at}.path", message=problem))
    for key, template in b.query.items():
        where = _join(f"{at}.query", key)
        if not key.strip():
            errors.append(FieldError(path=where, message="a query parameter needs a name"))
        errors += _template_errors(template, where, t, schema_ok)
    if b.result and not all(_JSON_PATH_PART_RE.match(p) for p in b.result.split(".")):
        errors.append(FieldError(path=f"{at}.result", message=f"{b.result!r} is not a JSON path (names joined by "
                                 "dots, list items as [0]: data.items[0].sku)"))
    if b.body == "arguments" and b.method not in ("POST", "PUT", "PATCH"):
        errors.append(FieldError(path=f"{at}.body", message=f"a {b.method} request has no body: body 'arguments' "
                                 "goes with POST, PUT or PATCH (GET and DELETE take query parameters)"))
    return errors


def _fixture_errors(b: FixtureBinding, t: Tool, at: str, schema_ok: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    if not schema_ok:
        return errors
    for j, case in enumerate(b.cases):
        for key in case.when:
            if resolve_param_path(t.parameters, key) is None:
                errors.append(FieldError(path=_join(f"{at}.cases[{j}].when", key), message=f"{key!r} is not a "
                                         f"parameter path of tool {t.name!r} (dotted names through 'properties')"))
    return errors


def open_binding_errors(t: Tool, at: str, schema_ok: bool) -> list[FieldError]:
    """An open binding (http, fixture, mcp) or none: its argument_map must be empty (these kinds take the call's
    arguments as they are; templates and patterns name argument paths), and what it names must be in the tool's
    schema."""
    errors: list[FieldError] = []
    if t.argument_map and t.binding is not None:
        errors.append(FieldError(path=f"{at}.argument_map", message=f"a {t.binding.kind} binding takes the call's "
                                 "arguments as they are: leave argument_map empty"))
    if isinstance(t.binding, HttpBinding):
        errors += _http_errors(t.binding, t, f"{at}.binding", schema_ok)
    elif isinstance(t.binding, FixtureBinding):
        errors += _fixture_errors(t.binding, t, f"{at}.binding", schema_ok)
    return errors


def manifest_warnings(m: Manifest | Any) -> list[FieldError]:
    """What is valid but will not work as it reads: tools with no binding (a call gets the fault ``unbound``)."""
    return [FieldError(path=f"tools[{i}].binding", message=f"tool {t.name!r} has no binding: a call gets the fault "
                       "'unbound' (bind it to a built-in, http, fixture or mcp binding)")
            for i, t in enumerate(m.tools) if t.binding is None]
