"""The administrator's allow-lists and secrets for tool bindings, read from settings.

- ``HAT_TOOL_ENDPOINTS``: the HTTP endpoints ``http`` bindings may call (:func:`parse_tool_endpoints`);
- ``HAT_MCP_SERVERS``: the MCP servers ``mcp`` bindings may call (:func:`parse_mcp_servers`);
- ``HAT_TOOL_SECRETS_<NAME>``: secret values, referenced by name as ``{secret:NAME}`` in an endpoint's headers or a
  server's headers/env (:func:`tool_secrets`). Never in a manifest, never shown in a page.

Each allow-list is a mapping ``name -> entry`` or a list of entries with a ``name``, given as inline JSON or as the
path of a YAML/JSON file. Errors name the entry and field (``HAT_MCP_SERVERS.files.command: ...``), so the console
refuses to start with a message that says what to fix.

Plain Python, no Django: console.config validates with these at start-up, the service layer builds a
:class:`~streams.tool_bindings.ToolRuntime` from the parsed values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.tool_bindings.http import (
    HttpEndpoint,
    load_allow_list,
    parse_tool_endpoints,
)

__all__ = ["SECRETS_PREFIX", "HttpEndpoint", "parse_mcp_servers", "parse_tool_endpoints", "tool_secrets"]

SECRETS_PREFIX = "HAT_TOOL_SECRETS_"
_SECRET_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")


class _McpSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    transport: str
    command: list[str] | str = Field(default_factory=list)
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)


def parse_mcp_servers(value: Any, outbound_hosts: list[str] | None = None) -> dict[str, Any]:
    """``HAT_MCP_SERVERS`` -> name -> :class:`streams.tool_bindings.mcp.McpServer`; ``ValueError`` naming every
    problem; with ``outbound_hosts`` (start-up), an http server whose host and port that list does not allow is
    one."""
    from streams.tool_bindings.mcp import McpServer

    entries = load_allow_list(value, "HAT_MCP_SERVERS")
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, entry in entries.items():
        try:
            spec = _McpSpec.model_validate(entry)
        except ValidationError as exc:
            problems.extend(f"HAT_MCP_SERVERS.{name}." + ".".join(str(p) for p in e["loc"]) + f": {e['msg']}"
                            for e in exc.errors())
            continue
        command = tuple(spec.command) if isinstance(spec.command, list) else spec.command
        try:
            out[name] = McpServer(name=name, transport=spec.transport, command=command,  # type: ignore[arg-type]
                                  url=spec.url, headers=dict(spec.headers), env=dict(spec.env),
                                  timeout_s=spec.timeout_s)
        except (TypeError, ValueError) as exc:
            problems.append(f"HAT_MCP_SERVERS.{name}: {exc}")
            continue
        refused = (replace(out[name], outbound_hosts=tuple(outbound_hosts)).refusal()
                   if outbound_hosts is not None else None)
        if refused:
            problems.append(f"HAT_MCP_SERVERS.{name}.url: {refused}")
    if problems:
        raise ValueError("; ".join(problems))
    return out


def tool_secrets(environ: Mapping[str, str] | None = None, configured: Mapping[str, str] | None = None
                 ) -> dict[str, str]:
    """Secret name -> value: ``configured`` (a settings mapping), then ``HAT_TOOL_SECRETS_<NAME>`` variables of
    ``environ`` (default: this process's environment), which win. Only names under the prefix can be reached."""
    env = os.environ if environ is None else environ
    out = {str(k): str(v) for k, v in (configured or {}).items() if v}
    for key, value in env.items():
        if key.startswith(SECRETS_PREFIX) and value:
            name = key[len(SECRETS_PREFIX):]
            if _SECRET_NAME_RE.match(name):
                out[name] = value
    return out
