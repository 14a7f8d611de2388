"""Harness pages: list, detail (history, labels, diff picker), version, diff (the editor: editor_views).

Each view: parse the request → authorise (``role_required`` for the role, then what is about this user and
object) → call one service or selector → render. One view serves its page and, for htmx requests, the
fragment it updates (django-template-partials: ``"file.html#partial"``). Domain errors from
:mod:`console.errors` are shown inline with their message and their HTTP status, never a 500.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console import selectors as audit_selectors
from console.errors import DomainError
from console.views import role_required
from harness_editor import forms as editor_forms
from harness_editor import gate, review_services, review_views, selectors, services
from harness_editor.forms import DecisionForm, HarnessCreateForm, LabelMoveForm
from harness_editor.lookups import harness_or_404, harness_version_or_404, version_or_404
from harness_editor.models import Harness, HarnessVersion
from harness_editor.render import render_prompt, render_skill_body
from harness_editor.tool_availability import tool_warnings
from harness_editor.schemas import FieldError, Manifest, ManifestError, manifest_to_yaml
from harness_editor.schemas.tool_effects import manifest_tool_effects

HISTORY_PAGE_SIZE = 50
SUGGESTED_VERSIONS = 20  # version numbers offered as suggestions in forms (typing any number works)
DEMO_DIR = Path(__file__).resolve().parent / "demo"
DEMO_MANIFEST = DEMO_DIR / "skincare_v1.yaml"
SAMPLE_COMMENTS = (
    {"viewer": "lily_88", "text": "Is the serum #101 still on sale? My skin is sensitive, will it work for me?"},
)
Status = HarnessVersion.Status


# --- lookups and shared helpers ------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _demo_room() -> dict:
    return yaml.safe_load(DEMO_DIR.joinpath("room.yaml").read_text(encoding="utf-8"))


def prompt_preview(manifest: Manifest) -> dict[str, Any]:
    """Exactly what the model would receive for a sample viewer comment in the demo room."""
    rendered = render_prompt(manifest, room=copy.deepcopy(_demo_room()), comments=SAMPLE_COMMENTS)
    return {
        "system_text": rendered.system_text,
        "messages": rendered.messages,
        "messages_json": json.dumps(rendered.messages, indent=2, ensure_ascii=False),
        "tools_json": json.dumps(rendered.tools, indent=2, ensure_ascii=False),
        "tool_count": len(rendered.tools),
        "tokens": rendered.estimated_tokens(),
        "skill_bodies": [{"id": s.id, "text": render_skill_body(manifest, s.id)} for s in manifest.skills],
        "comments": SAMPLE_COMMENTS,
    }


def _diff_lines(text_diff: Any) -> list[dict[str, str]]:
    """A unified text diff (string or list of lines) as lines with a CSS class each."""
    if not text_diff:
        return []
    lines = text_diff.splitlines() if isinstance(text_diff, str) else [str(x).rstrip("\n") for x in text_diff]
    out = []
    for line in lines:
        if line.startswith(("+++", "---")):
            css = "meta"
        elif line.startswith("@@"):
            css = "hunk"
        elif line.startswith("+"):
            css = "add"
        elif line.startswith("-"):
            css = "del"
        else:
            css = "ctx"
        out.append({"css": css, "text": line})
    return out


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def diff_context(diff) -> dict[str, Any]:
    """Group a ManifestDiff by component for the template, breaking changes first within each."""
    groups: dict[str, list] = {}
    for change in diff.changes:
        lines = _diff_lines(getattr(change, "text_diff", None))
        groups.setdefault(change.component, []).append({
            "c": change,
            "lines": lines,
            "before": "" if lines else _value_text(change.before),
            "after": "" if lines else _value_text(change.after),
        })
    return {
        "groups": [{"component": name, "title": COMPONENT_TITLES.get(name, name),
                    "changes": sorted(items, key=lambda x: not x["c"].breaking)}
                   for name, items in sorted(groups.items(), key=lambda kv: _component_order(kv[0]))],
        "breaking_count": len(diff.breaking_changes()),
        "change_count": len(diff.changes),
        "summary": ", ".join(f"{COMPONENT_TITLES.get(k, k).lower()}: {n}" for k, n in diff.summary().items()),
    }


COMPONENT_TITLES = {"manifest": "Manifest", "skill": "Skills", "tool": "Tools", "hook": "Hooks",
                    "prompt_block": "Prompt blocks", "prompt": "Prompt", "constraint": "Constraints"}


def _component_order(name: str) -> int:
    order = list(COMPONENT_TITLES)
    return order.index(name) if name in order else len(order)


# --- harness list and creation ---------------------------------------------------------------------------


@role_required(roles.VIEW_HARNESS)
@require_GET
def harness_list(request: HttpRequest) -> HttpResponse:
    return render(request, "harness_editor/harness_list.html", {
        "harnesses": selectors.harness_list(),
        "can_add": request.user.has_perm(roles.ADD_HARNESS),
    })


@role_required(roles.ADD_HARNESS)
@require_http_methods(["GET", "POST"])
def harness_new(request: HttpRequest) -> HttpResponse:
    manifest_errors: list[FieldError] = []
    if request.method == "GET":
        form = HarnessCreateForm()
        return render(request, "harness_editor/harness_new.html", {"form": form})
    form = HarnessCreateForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            text, fmt = form.manifest_text_for(DEMO_MANIFEST)
            manifest = editor_forms.parse_manifest_text(text, fmt)
            version = services.harness_create(
                user=request.user, slug=form.cleaned_data["slug"], name=form.cleaned_data["name"],
                description=form.cleaned_data["description"], manifest=manifest,
                change_note=form.cleaned_data["change_note"] or "Initial version")
        except ManifestError as exc:
            manifest_errors = exc.errors
        except DomainError as exc:
            editor_forms.add_domain_errors(form, exc.errors or [{"path": None, "message": exc.message}])
        else:
            messages.success(request, f"Created {version.harness.name} with draft v{version.number}.")
            return redirect("harness_editor:version", slug=version.harness.slug, number=version.number)
    return render(request, "harness_editor/harness_new.html",
                  {"form": form, "manifest_errors": manifest_errors}, status=400)


# --- harness detail: history, labels, diff picker ---------------------------------------------------------


def _detail_context(request: HttpRequest, harness: Harness, *, move_form: LabelMoveForm | None = None,
                    label_error: DomainError | None = None) -> dict[str, Any]:
    page = Paginator(selectors.version_history(harness=harness), HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    labels = list(selectors.label_list(harness=harness))
    labels_by_version: dict[int, list[str]] = {}
    for label in labels:
        labels_by_version.setdefault(label.version_id, []).append(label.name)
    for v in page.object_list:
        v.label_names = labels_by_version.get(v.id, [])
    approved = list(selectors.version_history(harness=harness).filter(status=Status.APPROVED)
                    .values_list("number", flat=True)[:SUGGESTED_VERSIONS])
    if move_form is None:
        move_form = LabelMoveForm(initial={"name": "production", "version": approved[0] if approved else None})
    return {
        "recent_approved": approved,
        "harness": harness,
        "page": page,
        "labels": labels,
        "label_moves": audit_selectors.audit_list(scope=f"harness:{harness.slug}").filter(action="label.moved")[:20],
        "move_form": move_form,
        "label_error": label_error,
        "can_move": request.user.has_perm(roles.MOVE_LABEL),
        "can_add": request.user.has_perm(roles.ADD_HARNESS),
    }


@role_required(roles.VIEW_HARNESS)
@require_GET
def harness_detail(request: HttpRequest, slug: str) -> HttpResponse:
    harness = harness_or_404(slug)
    context = _detail_context(request, harness)
    template = "harness_editor/harness_detail.html"
    if request.htmx and request.htmx.target == "history":
        template += "#history"
    return render(request, template, context)


@role_required(roles.MOVE_LABEL)
@require_POST
def label_move(request: HttpRequest, slug: str) -> HttpResponse:
    harness = harness_or_404(slug)
    form = LabelMoveForm(request.POST)
    status = 400
    if form.is_valid():
        name, number = form.cleaned_data["name"].strip(), form.cleaned_data["version"]
        try:
            version = selectors.version_get(harness=harness, number=number)
        except HarnessVersion.DoesNotExist:
            form.add_error("version", f"{harness.slug} has no version {number}")
            return render(request, "harness_editor/harness_detail.html",
                          _detail_context(request, harness, move_form=form), status=400)
        try:
            # the first POST shows what would change and asks to confirm; only the confirming POST moves
            pending = review_views.label_move_unconfirmed(request, harness, name=name, version=version,
                                                          comment=form.cleaned_data["comment"])
            if pending is not None:
                return pending
            label = services.label_move(user=request.user, harness=harness, name=name, version=version,
                                        comment=form.cleaned_data["comment"])
        except DomainError as exc:
            editor_forms.add_domain_errors(form, exc.errors or [{"path": None, "message": exc.message}])
            status = exc.status_code
        else:
            messages.success(request, f"Moved '{label.name}' to v{label.version.number}.")
            return redirect("harness_editor:detail", slug=harness.slug)
    return render(request, "harness_editor/harness_detail.html",
                  _detail_context(request, harness, move_form=form), status=status)


@role_required(roles.MOVE_LABEL)
@require_POST
def label_rollback(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    harness = harness_or_404(slug)
    try:
        pending = review_views.label_rollback_unconfirmed(request, harness, name=name)  # confirm step first
        if pending is not None:
            return pending
        label = services.label_rollback(user=request.user, harness=harness, name=name,
                                        comment=request.POST.get("comment", "").strip())
    except DomainError as exc:
        return render(request, "harness_editor/harness_detail.html",
                      _detail_context(request, harness, label_error=exc), status=exc.status_code)
    messages.success(request, f"Rolled '{label.name}' back to v{label.version.number}.")
    return redirect("harness_editor:detail", slug=harness.slug)


# --- version page and its actions -------------------------------------------------------------------------


def _version_actions(user, version: HarnessVersion) -> dict[str, bool]:
    is_author = version.author_id == user.id
    draft = version.status == Status.DRAFT
    return {
        "is_author": is_author,
        "can_edit": draft and is_author and user.has_perm(roles.EDIT_DRAFT),
        "can_submit": draft and is_author and user.has_perm(roles.SUBMIT_VERSION),
        "can_discard": draft and is_author and user.has_perm(roles.EDIT_DRAFT),
        "can_new_draft": user.has_perm(roles.EDIT_DRAFT),
        # Four eyes: the author never sees the buttons, whatever their roles.
        "can_review": version.status == Status.SUBMITTED and not is_author and user.has_perm(roles.REVIEW_VERSION),
        "author_is_reviewer": version.status == Status.SUBMITTED and is_author
        and user.has_perm(roles.REVIEW_VERSION),
    }


def _gate_context(user, version: HarnessVersion, actions: dict[str, bool]) -> dict[str, Any] | None:
    """The approval gate panel: shown while a version can still be approved (draft or submitted)."""
    if version.status not in (Status.DRAFT, Status.SUBMITTED):
        return None
    evidence = gate.approval_evidence(version)
    blocked = evidence.enabled and not evidence.passed
    return {
        "evidence": evidence,
        "failing": evidence.failing,
        "blocked": blocked,
        # reviewers see approve disabled while the gate fails; a compliance lead may override with a reason
        "can_approve": actions["can_review"] and not blocked,
        "can_override": actions["can_review"] and blocked and user.has_perm(roles.OVERRIDE_GATE),
        "can_start_runs": bool(evidence.start_url) and user.has_perm(roles.RUN_EVAL),
    }


def _render_version(request: HttpRequest, version: HarnessVersion, *, status: int = 200,
                    action_error: DomainError | None = None, decision_form: DecisionForm | None = None
                    ) -> HttpResponse:
    parent = version.parent
    actions = _version_actions(request.user, version)
    context = {
        "harness": version.harness,
        "version": version,
        "labels": selectors.version_labels(version=version),
        "actions": actions,
        "gate": _gate_context(request.user, version, actions),
        "action_error": action_error,
        "decision_form": decision_form or DecisionForm(),
        "preview": prompt_preview(version.manifest),
        "diff": diff_context(selectors.version_diff(old=parent, new=version)) if parent else None,
        "parent": parent,
        "tool_warnings": tool_warnings(version.manifest),  # what Try warns of: tools that answer with a fault here
        "tool_effects": manifest_tool_effects(version.manifest),
    }
    context.update(review_views.review_context(request, version, parent, context["diff"], page="version"))
    return render(request, "harness_editor/version_detail.html", context, status=status)


@role_required(roles.VIEW_HARNESS)
@require_GET
def version_detail(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    return _render_version(request, version_or_404(slug, number))


@role_required(roles.SUBMIT_VERSION)
@require_POST
def version_submit(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = version_or_404(slug, number)
    try:
        services.version_submit(user=request.user, version=version, comment=request.POST.get("comment", "").strip())
    except DomainError as exc:
        return _render_version(request, version, status=exc.status_code, action_error=exc)
    messages.success(request, f"v{version.number} is submitted for review.")
    return redirect("harness_editor:version", slug=slug, number=number)


@role_required(roles.EDIT_DRAFT)
@require_POST
def version_discard(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = version_or_404(slug, number)
    try:
        pending = review_views.discard_unconfirmed(request, version)  # confirm step first
        if pending is not None:
            return pending
        services.version_discard_draft(user=request.user, version=version)
    except DomainError as exc:
        return _render_version(request, version, status=exc.status_code, action_error=exc)
    messages.success(request, f"Draft v{number} was discarded.")
    return redirect("harness_editor:detail", slug=slug)


@role_required(roles.REVIEW_VERSION)
@require_POST
def version_approve(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = version_or_404(slug, number)
    form = DecisionForm(request.POST)
    form.is_valid()
    try:
        version = review_services.version_approve_reviewed(
            user=request.user, version=version, comment=form.cleaned_data.get("comment", ""),
            override_reason=form.cleaned_data.get("override_reason", ""),
            ticked={int(x) for x in request.POST.getlist("checklist") if x.isdigit() and len(x) < 10})
    except DomainError as exc:
        editor_forms.add_domain_errors(form, [e for e in exc.errors if not str(e.get("path", "")).startswith("gate.")])
        return _render_version(request, version, status=exc.status_code, action_error=exc, decision_form=form)
    messages.success(request, f"v{number} is approved" + (" (gate overridden; the reason is on the audit timeline)."
                                                          if version.gate_overridden else "."))
    if version.unresolved_comments:
        messages.warning(request, f"{version.unresolved_comments} review comment thread"
                                  f"{'s were' if version.unresolved_comments != 1 else ' was'} still open.")
    return redirect("harness_editor:version", slug=slug, number=number)


@role_required(roles.REVIEW_VERSION)
@require_POST
def version_reject(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = version_or_404(slug, number)
    form = DecisionForm(request.POST)
    form.is_valid()
    try:
        services.version_reject(user=request.user, version=version, comment=form.cleaned_data.get("comment", ""))
    except DomainError as exc:
        editor_forms.add_domain_errors(form, exc.errors)
        return _render_version(request, version, status=exc.status_code, action_error=exc, decision_form=form)
    messages.success(request, f"v{number} is rejected.")
    return redirect("harness_editor:version", slug=slug, number=number)


@role_required(roles.EDIT_DRAFT)
@require_POST
def version_new_draft(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    harness = harness_or_404(slug)
    version = harness_version_or_404(harness, number)
    try:
        draft = services.version_create_draft(
            user=request.user, harness=harness, manifest=version.manifest, parent=version,
            change_note=request.POST.get("change_note", "").strip() or f"Draft from v{number}")
    except DomainError as exc:
        return _render_version(request, version, status=exc.status_code, action_error=exc)
    messages.success(request, f"Started draft v{draft.number} from v{number}.")
    return redirect("harness_editor:edit", slug=slug, number=draft.number)


@role_required(roles.VIEW_HARNESS)
@require_GET
def version_export(request: HttpRequest, slug: str, number: int, fmt: str) -> HttpResponse:
    version = version_or_404(slug, number)
    if fmt == "yaml":
        body, content_type = manifest_to_yaml(version.manifest), "application/yaml; charset=utf-8"
    elif fmt == "json":
        body = json.dumps(json.loads(version.manifest_json), indent=2, ensure_ascii=False) + "\n"
        content_type = "application/json; charset=utf-8"
    else:
        raise Http404("export as yaml or json")
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{slug}-v{number}.{fmt}"'
    return response


# --- diff --------------------------------------------------------------------------------------------


@role_required(roles.VIEW_HARNESS)
@require_GET
def version_diff(request: HttpRequest, slug: str) -> HttpResponse:
    harness = harness_or_404(slug)
    numbers = list(selectors.version_history(harness=harness).values_list("number", flat=True)[:SUGGESTED_VERSIONS])
    context: dict[str, Any] = {"harness": harness, "numbers": numbers, "a": None, "b": None, "diff": None,
                               "error": None}
    raw_a, raw_b = request.GET.get("a", ""), request.GET.get("b", "")
    if not raw_a and not raw_b:
        return render(request, "harness_editor/diff.html", context)
    try:
        a, b = int(raw_a), int(raw_b)
    except ValueError:
        context["error"] = "choose two versions: a and b must be version numbers"
        return render(request, "harness_editor/diff.html", context, status=400)
    old, new = harness_version_or_404(harness, a), harness_version_or_404(harness, b)
    context.update(a=old, b=new, diff=diff_context(selectors.version_diff(old=old, new=new)))
    context.update(review_views.review_context(request, new, old, context["diff"], page="diff"))
    return render(request, "harness_editor/diff.html", context)


# --- shared with the editor (harness_editor.editor_views) and the tool import -----------------------------


def _editable_draft(request: HttpRequest, slug: str, number: int) -> HarnessVersion:
    """The draft, if this user may edit it: only its author, only while it is a draft."""
    version = version_or_404(slug, number)
    if version.author_id != request.user.id:
        raise PermissionDenied("only the author edits a draft; start your own draft from this version")
    return version
