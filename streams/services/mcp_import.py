"""Import the tools an allow-listed MCP server lists into a harness, as a new draft.

:func:`mcp_import_preview` lists the server's tools (``tools/list``) and runs them through the one tool importer
(:func:`harness_editor.importers.import_tools`, source ``mcp``): every tool becomes ``{name, description,
parameters: inputSchema, binding: {kind: mcp, server, tool: <remote name>}}``; a remote name that is not a valid
tool name (``orders.lookup``, ``orders/track``) is renamed and kept in ``binding.tool``, so calls still reach
the remote tool. The preview reports every change (renames, filled-in descriptions, schema conversions, names the
harness already uses) before anything is saved. :func:`mcp_import_save` does the same and saves the result as a
new draft of the harness (``version_create_draft``, parent: the version imported into), with the importer's
report in the audit timeline.

Same permission as editing a harness (``roles.EDIT_DRAFT``), checked here too. Only servers of the administrator's
allow-list (``HAT_MCP_SERVERS``) can be listed; their URLs, commands, headers and secrets are never shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console import roles
from console.errors import DomainError, NotAllowed, ValidationFailed
from console.services import audit_record
from harness_editor import services as harness_services
from harness_editor.importers import (
    ImportChange,
    ToolImportError,
    import_into_manifest,
    import_tools,
)
from harness_editor.importers.hints import annotations_of
from harness_editor.importers.schema import Recorder
from harness_editor.models import HarnessVersion
from harness_editor.schemas import parse_manifest
from harness_editor.schemas.manifest import Tool, ToolAnnotations
from harness_editor.schemas.tool_effects import tool_effect
from streams.services.tool_runtime import tool_runtime_for
from streams.tool_bindings.mcp import McpFault, McpServer, list_mcp_tools

ON_CONFLICT = ("rename", "replace", "skip", "error")
LIST_TIMEOUT_S = 15.0
MAX_SELECTED = 500


class McpServerUnavailable(DomainError):
    """The allow-listed server could not be listed (not running, refused, timed out, not MCP): 502, the fault's
    code in ``errors``. The message names the server, never its address or secrets."""

    status_code = 502
    code = "mcp_unavailable"


@dataclass
class McpImportPlan:
    """What an import would add (or added): the server's tools as listed, the manifest tools made of them, the new
    manifest data, and every change made on the way."""

    server: str
    remote: list[dict[str, Any]]  # every tool the server lists: name, description, inputSchema
    chosen: list[str]  # the remote names imported, in the server's order (change paths ``tools[i]`` index these)
    tools: list[dict[str, Any]]  # what the draft gains (appended, or replacing a tool of the same name)
    changes: list[ImportChange]
    manifest_data: dict[str, Any] = field(repr=False)

    def change_dicts(self) -> list[dict[str, Any]]:
        """Each change with the remote tool it is about (``remote``: its name on the server, or None)."""
        return [{**c.as_dict(), "remote": self.chosen[c.tool] if c.tool is not None and c.tool < len(self.chosen)
                 else None} for c in self.changes]

    def as_dict(self) -> dict[str, Any]:
        return {"server": self.server,
                "remote": [{"name": t["name"], "description": t["description"], **remote_hints(t)}
                           for t in self.remote],
                "tools": self.tools, "changes": self.change_dicts()}


def remote_hints(remote: dict[str, Any]) -> dict[str, Any]:
    """What a listed tool says it does, as the report shows it: its annotations as the manifest would carry them,
    whether it declares an output schema, and the effect the console reads from them (``unknown`` without hints:
    MCP's default is that a tool may be destructive)."""
    annotations = annotations_of(remote, "", Recorder())
    effect = tool_effect(Tool.model_construct(name=remote["name"], description="", parameters={},
                                              binding=None, argument_map={},
                                              annotations=ToolAnnotations(**annotations) if annotations else None))
    return {"annotations": annotations, "output_schema": remote.get("outputSchema") is not None,
            "effect": effect.effect, "effect_label": effect.label, "effect_why": effect.why}


def mcp_server_names() -> list[str]:
    """The allow-listed MCP servers' names (what a page or the API may show of them)."""
    return sorted(_servers())


def _servers() -> dict[str, McpServer]:
    return dict(tool_runtime_for().mcp_servers)


def _require(user) -> None:
    if not user.has_perm(roles.EDIT_DRAFT):
        raise NotAllowed("your role does not allow you to edit harnesses")


def _server(name: str) -> McpServer:
    server = _servers().get(name or "")
    if server is None:
        known = ", ".join(mcp_server_names()) or "none are configured"
        raise ValidationFailed("unknown MCP server", errors=[
            {"path": "server", "message": f"{name!r} is not an allow-listed MCP server ({known})"}])
    return server


def _remote_tools(server: McpServer) -> list[dict[str, Any]]:
    try:
        return list_mcp_tools(server, secrets=tool_runtime_for().secrets,
                              timeout_s=min(LIST_TIMEOUT_S, server.timeout_s))
    except McpFault as fault:
        raise McpServerUnavailable(f"the MCP server {server.name!r} could not be listed: {fault.message}",
                                   errors=[{"path": "server", "message": fault.code}]) from None


def _select(remote: list[dict[str, Any]], select: list[str] | None) -> list[dict[str, Any]]:
    if select is None:
        return remote
    if len(select) > MAX_SELECTED:
        raise ValidationFailed("too many tools", errors=[{"path": "tools", "message": f"at most {MAX_SELECTED}"}])
    by_name = {t["name"]: t for t in remote}
    errors = [{"path": f"tools[{i}]", "message": f"the server lists no tool {name!r}"}
              for i, name in enumerate(select) if name not in by_name]
    if errors:
        raise ValidationFailed("unknown tools", errors=errors)
    if not select:
        raise ValidationFailed("no tools chosen", errors=[{"path": "tools", "message": "choose at least one tool"}])
    wanted = set(select)
    return [t for t in remote if t["name"] in wanted]  # the server's order


def _normal(tool: dict[str, Any]) -> Any:
    """A tool as the manifest stores it (defaults filled in), to tell a changed tool from the same one again."""
    try:
        return Tool.model_validate(tool).model_dump(mode="json")
    except ValueError:
        return tool


def mcp_import_preview(*, user, version: HarnessVersion, server: str, select: list[str] | None = None,
                       on_conflict: str = "rename") -> McpImportPlan:
    """List the server's tools and show what importing them (all, or those named in ``select``) into ``version``
    would add and change. Saves nothing."""
    _require(user)
    if on_conflict not in ON_CONFLICT:
        raise ValidationFailed("unknown on_conflict", errors=[
            {"path": "on_conflict", "message": f"one of: {', '.join(ON_CONFLICT)}"}])
    spec = _server(server)
    remote = _remote_tools(spec)
    chosen = _select(remote, select)
    if not chosen:
        raise ValidationFailed("nothing to import", errors=[
            {"path": "server", "message": f"the MCP server {server!r} lists no tools"}])
    base = version.manifest.model_dump(mode="json")
    try:
        result = import_tools({"tools": chosen}, source="mcp",
                              binding=lambda remote_name, _name: {"kind": "mcp", "server": server,
                                                                  "tool": remote_name})
        manifest_data, conflicts = import_into_manifest(base, result, on_conflict=on_conflict)  # type: ignore[arg-type]
    except ToolImportError as exc:
        # a clash's path is relative to the imported list ("[2].name"): the chosen tools, as other paths here
        raise ValidationFailed("the server's tools cannot be imported", errors=[
            {"path": f"tools{p}" if p.startswith("[") else p or "tools", "message": m}
            for p, m in exc.errors]) from None
    # what the draft gains: appended tools, and tools replaced by an import (a tool already there unchanged is not)
    before = [_normal(t) for t in base.get("tools", [])]
    tools = [t for t in manifest_data["tools"] if _normal(t) not in before]
    return McpImportPlan(server=server, remote=remote, chosen=[t["name"] for t in chosen], tools=tools,
                         changes=[*result.changes, *_unchanged(conflicts, manifest_data["tools"], before)],
                         manifest_data=manifest_data)


def _unchanged(conflicts: list[ImportChange], tools: list[dict[str, Any]], before: list[Any]) -> list[ImportChange]:
    """The clashes, a tool "replaced" by the same tool again said as it is: unchanged, nothing replaced."""
    out = []
    for c in conflicts:
        j = c.path[len("tools["):-1] if c.path.startswith("tools[") and c.path.endswith("]") else ""
        if j.isdigit() and int(j) < len(before) and _normal(tools[int(j)]) == before[int(j)]:
            name = tools[int(j)].get("name")
            c = ImportChange(c.path, "unchanged", f"{name!r} is already in the harness as the server lists it "
                             f"({c.path}): nothing to replace", c.tool)
        out.append(c)
    return out


def mcp_import_save(*, user, version: HarnessVersion, server: str, select: list[str] | None = None,
                    on_conflict: str = "rename", change_note: str = "") -> tuple[HarnessVersion, McpImportPlan]:
    """Import as :func:`mcp_import_preview` shows and save the result as a new draft whose parent is ``version``.
    The new manifest is validated whole (``ManifestError``: nothing saved)."""
    plan = mcp_import_preview(user=user, version=version, server=server, select=select, on_conflict=on_conflict)
    if not plan.tools:
        why = "as the server lists it: nothing to replace" if on_conflict == "replace" else "and skipped"
        raise ValidationFailed("nothing to import", errors=[
            {"path": "tools", "message": f"every chosen tool is already in the harness {why} (on_conflict: "
                                         f"{on_conflict})"}])
    manifest = parse_manifest(plan.manifest_data)
    note = (change_note or "").strip() or (
        f"Imported {len(plan.tools)} tool{'s' if len(plan.tools) != 1 else ''} from MCP server {server!r}")
    from django.db import transaction

    with transaction.atomic():
        draft = harness_services.version_create_draft(user=user, harness=version.harness, manifest=manifest,
                                                      parent=version, change_note=note)
        audit_record(actor=user, action="version.tools_imported", scope=f"harness:{version.harness.slug}",
                     target=f"version:{draft.number}", to_state="imported", comment=note,
                     data={"version_id": draft.id, "source": "mcp", "server": server,
                           "tools": [{"name": t["name"], "remote": t["binding"]["tool"]} for t in plan.tools],
                           "changes": plan.change_dicts()})
    return draft, plan
