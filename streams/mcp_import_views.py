"""The page that imports an MCP server's tools into a harness (mounted at /harnesses/<slug>/v<n>/mcp-import/ by
console.urls: the registry's own URL module imports nothing from streams).

GET: pick an allow-listed server; with ``?server=`` the page (or, for htmx, the ``tools`` fragment) lists the
server's tools, what each becomes in the manifest and every change the import makes. POST: import the ticked tools
as a new draft (parent: this version) and go to it. Same role as editing a harness (EDIT_DRAFT)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from console import roles
from console.errors import DomainError
from console.views import role_required
from harness_editor.lookups import version_or_404
from harness_editor.models import HarnessVersion
from harness_editor.schemas import ManifestError
from streams.services import mcp_import as services

TEMPLATE = "harness_editor/mcp_import.html"


def _page(request: HttpRequest, version: HarnessVersion, *, status: int = 200, **extra: Any) -> HttpResponse:
    context = {"harness": version.harness, "version": version, "servers": services.mcp_server_names(),
               "on_conflict_choices": services.ON_CONFLICT, "server": "", "plan": None, "error": None,
               "errors": [], "on_conflict": "rename", "selected": None, "change_note": "", **extra}
    plan = context["plan"]
    if plan is not None:
        tool_of = {t["binding"]["tool"]: t for t in plan.tools if isinstance(t.get("binding"), dict)}
        changes = plan.change_dicts()
        context["rows"] = [{"remote": r, "tool": tool_of.get(r["name"]), "hints": services.remote_hints(r),
                            "checked": context["selected"] is None or r["name"] in context["selected"],
                            "changes": [c for c in changes if c["remote"] == r["name"]]} for r in plan.remote]
        context["other_changes"] = [c for c in changes if c["remote"] is None]
    template = f"{TEMPLATE}#tools" if request.htmx and request.method == "GET" and context["server"] else TEMPLATE
    return render(request, template, context, status=status)


@role_required(roles.EDIT_DRAFT)
@require_http_methods(["GET", "POST"])
def mcp_import(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = version_or_404(slug, number)
    source = request.POST if request.method == "POST" else request.GET
    server = source.get("server", "").strip()
    on_conflict = source.get("on_conflict", "rename")
    if request.method == "GET":
        if not server:
            return _page(request, version)
        try:
            plan = services.mcp_import_preview(user=request.user, version=version, server=server,
                                               on_conflict=on_conflict)
        except DomainError as exc:
            return _page(request, version, status=exc.status_code, server=server, error=exc.message,
                         errors=exc.errors, on_conflict=on_conflict)
        return _page(request, version, server=server, plan=plan, on_conflict=on_conflict)

    selected = request.POST.getlist("tools")
    change_note = request.POST.get("change_note", "").strip()
    try:
        draft, plan = services.mcp_import_save(user=request.user, version=version, server=server, select=selected,
                                               on_conflict=on_conflict, change_note=change_note)
    except ManifestError as exc:
        errors = [{"path": e.path, "message": e.message} for e in exc.errors]
        return _page(request, version, status=400, server=server, error="the harness with these tools is invalid",
                     errors=errors, on_conflict=on_conflict, selected=set(selected), change_note=change_note)
    except DomainError as exc:
        plan = None
        if exc.status_code == 400 and server in services.mcp_server_names():
            try:  # show the tools again, with the choice made, beside the error
                plan = services.mcp_import_preview(user=request.user, version=version, server=server,
                                                   on_conflict=on_conflict if on_conflict in services.ON_CONFLICT
                                                   else "rename")
            except DomainError:
                plan = None
        return _page(request, version, status=exc.status_code, server=server, plan=plan, error=exc.message,
                     errors=exc.errors, on_conflict=on_conflict, selected=set(selected), change_note=change_note)
    messages.success(request, f"Imported {len(plan.tools)} tool{'s' if len(plan.tools) != 1 else ''} from MCP "
                              f"server {server!r} into draft v{draft.number}.")
    return redirect("harness_editor:version", slug=slug, number=draft.number)
