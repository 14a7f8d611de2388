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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolRuntime:
    """What tool calls may reach on this host.

    ``http_endpoints``: allow-list name -> :class:`streams.tool_bindings.http.HttpEndpoint`;
    ``mcp_servers``: allow-list name -> :class:`streams.tool_bindings.mcp.McpServer`;
    ``fixtures``: manifest tool name -> fixture cases (a scenario's own, tried before the manifest's);
    ``secrets``: secret name -> value, resolved from settings / the environment (never from a manifest)."""

    http_endpoints: Mapping[str, Any] = field(default_factory=dict)
    mcp_servers: Mapping[str, Any] = field(default_factory=dict)
    fixtures: Mapping[str, list[Any]] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)


EMPTY_RUNTIME = ToolRuntime()
