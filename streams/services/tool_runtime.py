"""What tool bindings may reach on this host: :func:`tool_runtime_for` builds the
:class:`streams.tool_bindings.ToolRuntime` every turn path passes to the engine (preview rooms, scenario runs, live
sessions, session replays, evaluation runs, RL rollouts), from settings (``HAT_TOOL_ENDPOINTS``,
``HAT_MCP_SERVERS``, the ``HAT_TOOL_SECRETS_<NAME>`` variables and ``HAT_TOOL_SECRETS``) and a scenario's fixtures.

:func:`tool_bindings_available` is the check the editor and the preview show: which of a manifest's open bindings
this host cannot carry out, and which tools have no binding at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings

from harness_editor.schemas import FieldError, Manifest
from harness_editor.schemas.binding_checks import manifest_warnings
from streams.tool_bindings import ToolRuntime, binding_availability
from streams.tool_bindings.allow_lists import (
    parse_mcp_servers,
    parse_tool_endpoints,
    tool_secrets,
)
from streams.tool_bindings.http import HttpEndpoint


def _endpoints(value: Any) -> dict[str, HttpEndpoint]:
    if not (isinstance(value, Mapping) and all(isinstance(v, HttpEndpoint) for v in value.values())):
        value = parse_tool_endpoints(value)  # a test's override_settings may give the raw form
    # Each call checks its endpoint's host and port against the outbound allow-list as this process reads it.
    hosts = tuple(getattr(settings, "HAT_OUTBOUND_HOSTS", ()))
    return {name: replace(ep, outbound_hosts=hosts) for name, ep in value.items()}


def _servers(value: Any) -> dict[str, Any]:
    from streams.tool_bindings.mcp import McpServer

    if not (isinstance(value, Mapping) and all(isinstance(v, McpServer) for v in value.values())):
        value = parse_mcp_servers(value)
    # Each connection to an http server checks its host and port against the outbound allow-list (as for endpoints).
    hosts = tuple(getattr(settings, "HAT_OUTBOUND_HOSTS", ()))
    return {name: replace(server, outbound_hosts=hosts) for name, server in value.items()}


def scenario_fixtures(scenario: Any) -> dict[str, list[Any]]:
    """A scenario's fixtures by tool name; ``scenario`` is a stored :class:`streams.models.Scenario`, a parsed
    :class:`streams.scenarios.Scenario`, or None."""
    if scenario is None:
        return {}
    parsed = scenario.parsed() if hasattr(scenario, "parsed") else scenario
    return {name: list(cases) for name, cases in (getattr(parsed, "fixtures", None) or {}).items()}


def tool_runtime_for(scenario: Any = None) -> ToolRuntime:
    """The runtime for a turn on this host, with ``scenario``'s fixtures (if any) before the manifests' own."""
    return ToolRuntime(
        http_endpoints=_endpoints(getattr(settings, "HAT_TOOL_ENDPOINTS", {}) or {}),
        mcp_servers=_servers(getattr(settings, "HAT_MCP_SERVERS", {}) or {}),
        fixtures=scenario_fixtures(scenario),
        secrets=tool_secrets(configured=getattr(settings, "HAT_TOOL_SECRETS", None) or {}),
    )


def tool_bindings_available(manifest: Manifest, runtime: ToolRuntime | None = None) -> list[FieldError]:
    """Every tool of ``manifest`` a call would answer with a fault on this host: unbound tools, endpoints or MCP
    servers not on the allow-list, secrets not set. Located like validation errors (``tools[2].binding``)."""
    runtime = runtime if runtime is not None else tool_runtime_for()
    return [*manifest_warnings(manifest), *binding_availability(manifest, runtime)]
