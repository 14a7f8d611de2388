"""Calling a manifest tool through its binding, whatever its kind (the contract: harness_editor.schemas.bindings).

:func:`call_bound_tool` is the one entry point the turn engine, the reference policy, evaluation and RL use:

- built-in: :mod:`streams.bindings` (the live-commerce catalog), arguments through the tool's ``argument_map``;
- ``http``: :mod:`streams.tool_bindings.http`, only to endpoints of the administrator's allow-list;
- ``fixture``: :mod:`streams.tool_bindings.fixture`, a scenario's fixtures for the tool first;
- ``mcp``: :mod:`streams.tool_bindings.mcp`, only to servers of the allow-list;
- unbound, or a binding whose endpoint or server is not configured on this host: a tool fault the hooks understand
  (``{"error": ..., "code": "unbound" | "binding_unavailable"}``), never another tool's data.

What a call may reach is a :class:`ToolRuntime`: plain data built from settings by the service layer (or by a GPU
worker or the CLI from theirs). Plain Python, no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_editor.schemas import FieldError, Manifest, Tool, argument_path_get
from harness_editor.schemas.bindings import binding_kind


@dataclass(frozen=True)
class ToolRuntime:
    """What tool calls may reach on this host.

    ``http_endpoints``: allow-list name -> :class:`streams.tool_bindings.http.HttpEndpoint`;
    ``mcp_servers``: allow-list name -> :class:`streams.tool_bindings.mcp.McpServer`;
    ``fixtures``: manifest tool name -> fixture cases (a scenario's own, tried before the manifest's);
    ``secrets``: secret name -> value, resolved from settings / the environment (never from a manifest);
    ``approval``: asked before a bound call runs, ``(tool, call id, arguments, seconds left in the turn) -> None``
    (go ahead) or a tool fault (the call does not run): a live session's operator approval of destructive tools
    (:mod:`streams.services.live_tool_approval`); None everywhere else (previews, evaluation, RL)."""

    http_endpoints: Mapping[str, Any] = field(default_factory=dict)
    mcp_servers: Mapping[str, Any] = field(default_factory=dict)
    fixtures: Mapping[str, list[Any]] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    approval: Callable[[Tool, str, Mapping[str, Any], Callable[[], float]], dict[str, Any] | None] | None = None


EMPTY_RUNTIME = ToolRuntime()


# --- the dispatcher ------------------------------------------------------------------------------------------

BoundCall = Callable[[], dict[str, Any]]


def _fault(message: str, code: str) -> dict[str, Any]:
    return {"error": message, "code": code}


def prepare_call(tool: Tool, room: dict[str, Any], arguments: Mapping[str, Any] | None, runtime: ToolRuntime,
                 *, time_left_s: Callable[[], float] | None = None) -> BoundCall | dict[str, Any]:
    """The call of ``tool`` with ``arguments``, ready to run (a thunk the engine may wrap in an injected fault), or
    the fault the call gets without running (unbound, a binding unavailable on this host, a missing argument)."""
    args = dict(arguments or {})
    binding = tool.binding
    kind = binding_kind(binding)
    if kind == "unbound":
        return _fault(f"tool {tool.name!r} has no binding: nothing carries it out, so it has no data", "unbound")
    if kind == "builtin":
        from streams.bindings import BINDINGS

        impl = BINDINGS.get(binding)  # type: ignore[arg-type]
        if impl is None:  # validated with the manifest; a catalog that lost an id is this host's problem
            return _fault(f"tool {tool.name!r}: the built-in binding {binding!r} does not exist on this host",
                          "binding_unavailable")
        kwargs: dict[str, Any] = {}
        for name, path in tool.argument_map.items():
            found, value = argument_path_get(args, path)
            if found:
                kwargs[name] = value
        missing = [p.name for p in impl.params.values() if p.required and p.name not in kwargs]
        if missing:
            return _fault(f"missing argument(s): {', '.join(tool.argument_map.get(p, p) for p in missing)}",
                          "invalid_argument")
        return lambda: impl.func(room, **kwargs)
    if kind == "fixture":
        from streams.tool_bindings.fixture import call_fixture

        cases = list(runtime.fixtures.get(tool.name, ()))
        return lambda: call_fixture(tool.name, binding, args, cases)  # type: ignore[arg-type]
    if kind == "http":
        endpoint = runtime.http_endpoints.get(binding.endpoint)  # type: ignore[union-attr]
        if endpoint is None:
            return _fault(f"tool {tool.name!r}: the endpoint {binding.endpoint!r} is not on this host's "  # type: ignore[union-attr]
                          "allow-list (HAT_TOOL_ENDPOINTS)", "binding_unavailable")
        from streams.tool_bindings.http import call_http

        return lambda: call_http(endpoint, binding, args, secrets=runtime.secrets,  # type: ignore[arg-type]
                                 time_left_s=time_left_s() if time_left_s else None)
    if kind == "mcp":
        server = runtime.mcp_servers.get(binding.server)  # type: ignore[union-attr]
        if server is None:
            return _fault(f"tool {tool.name!r}: the MCP server {binding.server!r} is not on this host's "  # type: ignore[union-attr]
                          "allow-list (HAT_MCP_SERVERS)", "binding_unavailable")

        def mcp_call() -> dict[str, Any]:
            from streams.tool_bindings.mcp import call_mcp_tool

            timeout = min(binding.timeout_s, getattr(server, "timeout_s", binding.timeout_s))  # type: ignore[union-attr]
            if time_left_s is not None:
                timeout = max(min(timeout, time_left_s()), 0.001)
            return call_mcp_tool(server, binding.tool or tool.name, args, timeout_s=timeout,  # type: ignore[union-attr]
                                 secrets=runtime.secrets)

        return mcp_call
    return _fault(f"tool {tool.name!r}: unknown binding kind {kind!r}", "binding_unavailable")


def call_bound_tool(tool: Tool, room: dict[str, Any], arguments: Mapping[str, Any] | None,
                    runtime: ToolRuntime = EMPTY_RUNTIME, *,
                    time_left_s: Callable[[], float] | None = None) -> dict[str, Any]:
    """Call ``tool`` through its binding: the result dict, or a fault dict (``error``, ``code``). Never raises for
    what an implementation or an upstream does (an exception there is the fault ``internal``)."""
    prepared = prepare_call(tool, room, arguments, runtime, time_left_s=time_left_s)
    if isinstance(prepared, dict):
        return prepared
    try:
        result = prepared()
    except Exception as exc:  # a binding bug must not crash its caller
        return _fault(f"{tool.name} failed: {type(exc).__name__}", "internal")
    if not isinstance(result, dict):
        return _fault(f"{tool.name} returned {type(result).__name__}, not an object", "internal")
    return result


def binding_availability(manifest: Manifest, runtime: ToolRuntime) -> list[FieldError]:
    """What of ``manifest``'s open bindings this host cannot carry out (endpoints and servers not on its allow-list,
    methods an endpoint refuses, secrets not set). Checked here, not in validation: a stored version must not turn
    invalid when an administrator edits the allow-list."""
    problems: list[FieldError] = []
    for i, t in enumerate(manifest.tools):
        b, at = t.binding, f"tools[{i}].binding"
        kind = binding_kind(b)
        if kind == "http":
            endpoint = runtime.http_endpoints.get(b.endpoint)  # type: ignore[union-attr]
            if endpoint is None:
                problems.append(FieldError(path=f"{at}.endpoint", message=f"the endpoint {b.endpoint!r} is not on "  # type: ignore[union-attr]
                                           "this host's allow-list (HAT_TOOL_ENDPOINTS): a call gets the fault "
                                           "'binding_unavailable'"))
                continue
            refused = endpoint.refusal()
            if refused:
                problems.append(FieldError(path=f"{at}.endpoint", message=f"the endpoint {endpoint.name!r} is "
                                           f"refused: {refused}: a call gets the fault 'binding_unavailable'"))
            if b.method not in endpoint.methods:  # type: ignore[union-attr]
                problems.append(FieldError(path=f"{at}.method", message=f"the endpoint {endpoint.name!r} allows "
                                           f"{', '.join(endpoint.methods)}, not {b.method}"))  # type: ignore[union-attr]
            for name in endpoint.secret_names():
                if not runtime.secrets.get(name):
                    problems.append(FieldError(path=f"{at}.endpoint", message=f"the endpoint {endpoint.name!r} "
                                               f"needs the secret {name}, which is not set on this host"))
        elif kind == "mcp" and b.server not in runtime.mcp_servers:  # type: ignore[union-attr]
            problems.append(FieldError(path=f"{at}.server", message=f"the MCP server {b.server!r} is not on this "  # type: ignore[union-attr]
                                       "host's allow-list (HAT_MCP_SERVERS): a call gets the fault "
                                       "'binding_unavailable'"))
        elif kind == "mcp" and runtime.mcp_servers[b.server].refusal():  # type: ignore[union-attr]
            problems.append(FieldError(path=f"{at}.server", message=f"the MCP server {b.server!r} is on a host or "  # type: ignore[union-attr]
                                       "port the outbound allow-list (HAT_OUTBOUND_HOSTS) does not allow: a call "
                                       "gets the fault 'binding_unavailable'"))
    return problems
