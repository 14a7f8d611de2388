"""The harness editor: one component form per tab (or the whole manifest as raw YAML), saved as the author's draft,
with live validation and a preview of exactly what the model would receive.

What the page does not lose and what it shows (static/harness_editor/editor.js on top of a page that works without
JavaScript): the page says whether what it shows is already unsaved (``unsaved``: a check, a row operation, a
failed save or a restored draft), and the key of the browser's local copy (slug, version number and the saved
content hash). The preview marks the lines of the rendered prompt that differ from the saved revision's.
"""

from __future__ import annotations

import difflib
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from console import roles
from console.errors import DomainError, EditConflict
from console.views import role_required
from harness_editor import forms as editor_forms
from harness_editor import services
from harness_editor.forms import COMPONENTS, EditorForm
from harness_editor.models import HarnessVersion
from harness_editor.schemas import Manifest, ManifestError, content_hash, parse_manifest
from harness_editor.views import Status, _editable_draft, prompt_preview

DRAFT_KEY_PREFIX = "hat-editor-draft"  # the browser's local copies (editor.js): <prefix>:<slug>:v<n>:<hash>
NOTICES = {
    "check": "Checked; nothing was saved.",
    "restore": "Restored your unsaved edits from this browser; nothing is saved yet: press Save to keep them.",
}


# --- the preview, marked where it differs from the saved revision ------------------------------------------


def _marked_lines(saved: str, current: str) -> tuple[list[dict[str, str]], int]:
    """``current``'s lines, each marked "" or "changed", with the saved lines it no longer has in between
    ("removed"), and how many lines differ."""
    old, new = saved.splitlines(), current.splitlines()
    out: list[dict[str, str]] = []
    differ = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            out += [{"text": t, "css": ""} for t in new[j1:j2]]
            continue
        out += [{"text": t, "css": "removed"} for t in old[i1:i2]]
        out += [{"text": t, "css": "changed"} for t in new[j1:j2]]
        differ += max(i2 - i1, j2 - j1)
    return out, differ


def marked_preview(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (a :func:`prompt_preview`) with its system text, other messages and tools JSON as lines marked
    against ``saved`` (the saved revision's preview); ``changed_lines`` counts the lines that differ."""
    system_lines, total = _marked_lines(saved["system_text"], current["system_text"])
    old_messages = saved["messages"]
    others = []
    for i, m in enumerate(current["messages"]):
        if i == 0:
            continue
        before = old_messages[i]["content"] if i < len(old_messages) and old_messages[i]["role"] == m["role"] else ""
        lines, n = _marked_lines(before or "", m.get("content") or "")
        total += n
        others.append({"role": m["role"], "content": m.get("content"), "lines": lines, "changed": n})
    for m in old_messages[len(current["messages"]):]:  # messages the saved prompt had and this one has not
        lines, n = _marked_lines(m.get("content") or "", "")
        total += n
        others.append({"role": m["role"], "content": "", "lines": lines, "changed": n})
    tools_lines, tools_changed = _marked_lines(saved["tools_json"], current["tools_json"])
    return {**current, "marked": True, "system_lines": system_lines, "other_messages": others,
            "tools_lines": tools_lines, "tools_changed": tools_changed, "changed_lines": total + tools_changed}


def _preview(version: HarnessVersion, manifest: Manifest | None) -> dict[str, Any]:
    saved = prompt_preview(version.manifest)
    if manifest is None:
        return marked_preview(saved, saved)
    return marked_preview(saved, prompt_preview(manifest))


# --- reading the form -----------------------------------------------------------------------------------


def _component(value: str | None) -> str:
    return value if value in COMPONENTS else "skills"


def _read_form(request: HttpRequest, version: HarnessVersion) -> EditorForm:
    component = _component(request.POST.get("component"))
    try:
        lock = int(request.POST.get("lock_version", ""))
    except ValueError:
        lock = 0  # never a real lock_version: saving reports a conflict instead of overwriting
    state = editor_forms.state_from_post(component, request.POST)
    return EditorForm(component=component, state=state, lock_version=lock,
                      change_note=request.POST.get("change_note", version.change_note).replace("\r\n", "\n"))


def _parse_form(form: EditorForm, base: dict) -> Manifest | None:
    """Build the manifest from the form; on failure fill ``form.errors`` (every error, with its path)."""
    data, read_errors = editor_forms.manifest_data_from_state(form.component, form.state, base)
    if read_errors and data is None:  # nothing could be read (raw YAML that does not parse): that is the error
        form.errors = read_errors
        return None
    try:
        manifest = parse_manifest(data)
    except ManifestError as exc:
        form.errors = editor_forms.merge_errors(read_errors, exc.errors)
        return None
    if read_errors:
        form.errors = read_errors
        return None
    return manifest


def _error_rows(form: EditorForm) -> list[dict[str, Any]]:
    """The errors with the raw YAML line each is about (the YAML tab only: other tabs have no such editor)."""
    if form.component == "yaml":
        return editor_forms.error_lines(form.state["text"], form.errors)
    return [{"e": e, "line": None} for e in form.errors]


def _unsaved(request: HttpRequest, version: HarnessVersion, form: EditorForm, manifest: Manifest | None) -> bool:
    """Whether the page shows something other than the saved revision (then leaving it asks first)."""
    if request.method != "POST":
        return False
    return (manifest is None or content_hash(manifest) != version.content_hash
            or form.change_note != version.change_note)


def _live_context(request: HttpRequest, version: HarnessVersion, form: EditorForm,
                  manifest: Manifest | None) -> dict[str, Any]:
    return {
        "harness": version.harness,
        "version": version,
        "form": form,
        "errors": form.errors,
        "error_rows": _error_rows(form),
        "preview": _preview(version, manifest),
        "preview_is_saved": manifest is None and bool(form.errors),
        "unsaved": _unsaved(request, version, form, manifest),
    }


def _render_editor(request: HttpRequest, version: HarnessVersion, form: EditorForm, *, status: int = 200,
                   manifest: Manifest | None = None, conflict: EditConflict | None = None,
                   notice: str = "", action_error: DomainError | None = None) -> HttpResponse:
    base = version.manifest.model_dump(mode="json")
    context = {
        **_live_context(request, version, form, manifest),
        "components": COMPONENTS,
        "view": editor_forms.editor_view(form.component, form.state, form.errors, base),
        "conflict": conflict,
        "notice": notice,
        "action_error": action_error,
        "draft_key": f"{DRAFT_KEY_PREFIX}:{version.harness.slug}:v{version.number}:{version.content_hash}",
        "draft_prefix": f"{DRAFT_KEY_PREFIX}:{version.harness.slug}:v{version.number}:",
    }
    return render(request, "harness_editor/editor.html", context, status=status)


# --- views ------------------------------------------------------------------------------------------------


@role_required(roles.EDIT_DRAFT)
@require_http_methods(["GET", "POST"])
def version_edit(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = _editable_draft(request, slug, number)
    if version.status != Status.DRAFT:
        messages.warning(request, f"v{number} is {version.status} and can no longer be edited; "
                                  "start a new draft from it instead.")
        return redirect("harness_editor:version", slug=slug, number=number)
    if request.method == "GET":
        component = _component(request.GET.get("tab"))
        form = EditorForm(component=component, lock_version=version.lock_version, change_note=version.change_note,
                          state=editor_forms.state_from_manifest(component, version.manifest.model_dump(mode="json")))
        return _render_editor(request, version, form)

    form = _read_form(request, version)
    op = request.POST.get("op", "save")
    if op != "save":  # check, restore a local copy, or add / remove / move a row: show the result, save nothing
        editor_forms.apply_op(form.component, form.state, op, hook_kind=request.POST.get("new_hook_kind", ""))
        manifest = _parse_form(form, version.manifest.model_dump(mode="json"))
        notice = NOTICES.get(op, "Not saved yet: press Save to keep this change.")
        return _render_editor(request, version, form, manifest=manifest, notice=notice)
    manifest = _parse_form(form, version.manifest.model_dump(mode="json"))
    if manifest is None:
        return _render_editor(request, version, form, status=400)
    try:
        services.version_save_draft(user=request.user, version=version, manifest=manifest,
                                    lock_version=form.lock_version, change_note=form.change_note)
    except EditConflict as exc:
        return _render_editor(request, version, form, status=409, manifest=manifest, conflict=exc)
    except DomainError as exc:
        return _render_editor(request, version, form, status=exc.status_code, manifest=manifest, action_error=exc)
    messages.success(request, f"Saved v{number} ({COMPONENTS[form.component].lower()}).")
    return redirect(f"{reverse('harness_editor:edit', args=[slug, number])}?tab={form.component}")


@role_required(roles.EDIT_DRAFT)
@require_POST
def version_validate(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """Live validation for the editor (htmx): the errors and the preview of what is typed, saving nothing."""
    version = _editable_draft(request, slug, number)
    form = _read_form(request, version)
    manifest = _parse_form(form, version.manifest.model_dump(mode="json"))
    if not request.htmx:
        return _render_editor(request, version, form, manifest=manifest, notice=NOTICES["check"])
    return render(request, "harness_editor/editor.html#live",
                  {**_live_context(request, version, form, manifest), "validated": True})
