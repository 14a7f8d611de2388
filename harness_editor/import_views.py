"""The editor's tool import (paste or upload on the tools tab): a report of what the converter changed and what
the draft would become, shown before anything is saved; the draft is saved only on confirmation, whole or not at
all, through :func:`harness_editor.services.version_save_draft` (the author's own draft, at the revision the
report was made from)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console import roles
from console.errors import DomainError, EditConflict
from console.views import role_required
from harness_editor import services
from harness_editor.forms import IMPORT_ON_CONFLICT as ON_CONFLICT
from harness_editor.forms import IMPORT_SOURCES
from harness_editor.importers import SOURCES
from harness_editor.importers.plan import ImportPlan, plan_import
from harness_editor.models import HarnessVersion
from harness_editor.schemas import MAX_MANIFEST_BYTES, FieldError
from harness_editor.views import _editable_draft


def _payload(request: HttpRequest) -> tuple[str, list[FieldError]]:
    upload = request.FILES.get("tools_file")
    if upload is not None:
        raw = upload.read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            return "", [FieldError(path="", message=f"the file is larger than {MAX_MANIFEST_BYTES} bytes")]
        try:
            return raw.decode("utf-8"), []
        except UnicodeDecodeError as exc:
            return "", [FieldError(path="", message=f"the file is not UTF-8 text: {exc}")]
    text = request.POST.get("tools_text", "").replace("\r\n", "\n")
    if not text.strip():
        return "", [FieldError(path="", message="paste tool definitions or choose a file")]
    return text, []


def _render(request: HttpRequest, version: HarnessVersion, *, text: str, source: str, on_conflict: str,
            lock_version: int, change_note: str, plan: ImportPlan | None, errors: list[FieldError],
            status: int, conflict: EditConflict | None = None, action_error: DomainError | None = None):
    report = plan.as_dict() if plan is not None else None
    by_tool: list[dict] = []
    if plan is not None and plan.result is not None:
        for i, tool in enumerate(plan.result.tools):
            by_tool.append({"tool": tool, "origin": plan.result.origins[i],
                            "changes": [c for c in report["changes"] if c["tool"] == i],
                            "conflicts": [c for c in report["conflicts"] if c["tool"] == i]})
    context = {
        "harness": version.harness, "version": version, "text": text, "source": source,
        "on_conflict": on_conflict, "lock_version": lock_version, "change_note": change_note, "plan": plan,
        "report": report, "by_tool": by_tool, "general_changes": [c for c in (report or {}).get("changes", [])
                                                                  if c["tool"] is None],
        "errors": errors, "conflict": conflict, "action_error": action_error, "sources": IMPORT_SOURCES,
        "on_conflicts": ON_CONFLICT,
    }
    return render(request, "harness_editor/import_tools.html", context, status=status)


@role_required(roles.EDIT_DRAFT)
@require_POST
def version_import_tools(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = _editable_draft(request, slug, number)
    if version.status != HarnessVersion.Status.DRAFT:
        messages.warning(request, f"v{number} is {version.status} and can no longer be edited; "
                                  "start a new draft from it instead.")
        return redirect("harness_editor:version", slug=slug, number=number)
    source = request.POST.get("source", "auto")
    on_conflict = request.POST.get("on_conflict", "rename")
    change_note = request.POST.get("change_note", version.change_note).replace("\r\n", "\n")
    try:
        lock = int(request.POST.get("lock_version", ""))
    except ValueError:
        lock = 0  # never a real lock_version: confirming reports a conflict instead of overwriting
    text, errors = _payload(request)
    if source not in SOURCES:
        errors.append(FieldError(path="source", message=f"choose one of: {', '.join(SOURCES)}"))
    if on_conflict not in ON_CONFLICT:
        errors.append(FieldError(path="on_conflict", message=f"choose one of: {', '.join(ON_CONFLICT)}"))
    args = {"text": text, "source": source, "on_conflict": on_conflict, "lock_version": lock,
            "change_note": change_note}
    if errors:
        return _render(request, version, **args, plan=None, errors=errors, status=400)
    plan = plan_import(version.manifest.model_dump(mode="json"), text, source=source, on_conflict=on_conflict)
    if not plan.ok:
        return _render(request, version, **args, plan=plan, errors=plan.errors, status=400)
    if request.POST.get("op") != "confirm":
        return _render(request, version, **args, plan=plan, errors=[], status=200)
    try:
        services.version_save_draft(user=request.user, version=version, manifest=plan.manifest, lock_version=lock,
                                    change_note=change_note)
    except EditConflict as exc:
        return _render(request, version, **args, plan=plan, errors=[], status=409, conflict=exc)
    except DomainError as exc:
        return _render(request, version, **args, plan=plan, errors=[], status=exc.status_code, action_error=exc)
    messages.success(request, f"Imported {len(plan.added)} tool{'s' if len(plan.added) != 1 else ''} into "
                              f"v{number}: {', '.join(plan.added) or 'none'}.")
    return redirect(f"{reverse('harness_editor:edit', args=[slug, number])}?tab=tools")
