"""Eval-set pages (mounted at "evals/", namespace "evals"): the list of sets, import (paste or upload JSON lines), a
set's versions (with the pin the approval gate uses), a version's case table (filter by tag, text and the kind's own
fields, paginated; the table is an htmx fragment of the same template), one case, the download, and "save as eval
case" for a turn of a preview room or scenario run.

Each view: authorise (``role_required``) → call one service or selector → render. Everyone with a role browses and
downloads; ML staff import; ML leads pin; whoever may author cases (campaign managers, ML staff) saves a turn of a
room they can see — a room they cannot see is a 404, as in the preview pages.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from streams.models import PreviewRoom
from training_jobs import eval_selectors as selectors
from training_jobs import eval_services as services
from training_jobs.eval_forms import CaseFilterForm, EvalSetImportForm, SaveCaseForm
from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion

CASES_PER_PAGE = 25


def _set_or_404(name: str) -> EvalSet:
    try:
        return selectors.eval_set_get(name=name)
    except EvalSet.DoesNotExist:
        raise Http404("no such eval set") from None


def _version_or_404(name: str, number: int) -> EvalSetVersion:
    try:
        return selectors.eval_set_version_get(eval_set=_set_or_404(name), number=number)
    except EvalSetVersion.DoesNotExist:
        raise Http404("no such version") from None


@role_required(roles.VIEW_EVAL_SETS)
@require_GET
def eval_set_list(request: HttpRequest) -> HttpResponse:
    kind = request.GET.get("kind") or None
    if kind not in EvalSet.Kind.values:
        kind = None
    return render(request, "training_jobs/evals/set_list.html", {
        "sets": list(selectors.eval_set_list(kind=kind)), "kind": kind, "kinds": EvalSet.Kind.choices,
        "can_import": request.user.has_perm(roles.IMPORT_EVAL_SET)})


@role_required(roles.IMPORT_EVAL_SET)
@require_http_methods(["GET", "POST"])
def eval_set_import(request: HttpRequest) -> HttpResponse:
    initial = {}
    existing = EvalSet.objects.filter(name=request.GET.get("set", "")).first()
    if existing is not None:
        initial = {"name": existing.name, "kind": existing.kind}
    form = EvalSetImportForm(request.POST or None, request.FILES or None, initial=initial)
    error, other_errors = None, []
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            version, created = services.eval_set_import(user=request.user, name=d["name"], kind=d["kind"],
                                                        jsonl_text=d["jsonl_text"], note=d["note"],
                                                        description=d["description"])
        except ValidationFailed as exc:
            error, other_errors = exc, form.add_located_errors(exc.errors)
        else:
            if created:
                messages.success(request, f"Imported {version.case_count} cases as {version}.")
            else:
                messages.info(request, f"Those cases are already {version}: no new version.")
            return redirect("evals:version", name=version.eval_set.name, number=version.number)
    status = 400 if request.method == "POST" else 200
    return render(request, "training_jobs/evals/import.html", {
        "form": form, "error": error, "other_errors": other_errors, "sets": EvalSet.objects.order_by("name")},
        status=status)


def _set_page(request: HttpRequest, eval_set: EvalSet, *, error=None, status: int = 200) -> HttpResponse:
    return render(request, "training_jobs/evals/set_detail.html", {
        "eval_set": eval_set, "versions": list(selectors.eval_set_versions(eval_set=eval_set)), "error": error,
        "can_import": request.user.has_perm(roles.IMPORT_EVAL_SET),
        "can_pin": request.user.has_perm(roles.PIN_EVAL_SET)}, status=status)


@role_required(roles.VIEW_EVAL_SETS)
@require_GET
def eval_set_detail(request: HttpRequest, name: str) -> HttpResponse:
    return _set_page(request, _set_or_404(name))


@role_required(roles.PIN_EVAL_SET)
@require_POST
def eval_set_pin(request: HttpRequest, name: str) -> HttpResponse:
    eval_set = _set_or_404(name)
    raw = request.POST.get("number", "")
    version = None
    try:
        if raw:
            if not raw.isdigit() or len(raw) > 9:
                raise ValidationFailed("pick a version", errors=[{"path": "number", "message": "a version number"}])
            version = eval_set.versions.filter(number=int(raw)).first()
            if version is None:
                raise ValidationFailed("no such version", errors=[{"path": "number", "message": "not a version of "
                                                                                                  "this set"}])
        services.eval_set_pin(user=request.user, eval_set=eval_set, version=version)
    except DomainError as exc:
        return _set_page(request, eval_set, error=exc, status=exc.status_code)
    messages.success(request, f"Pinned v{version.number}." if version else "Unpinned.")
    return redirect("evals:set", name=eval_set.name)


def _case_summary(case: EvalCase) -> dict[str, Any]:
    d = case.data
    comments = d.get("comments") or []
    variant = d.get("harness_variant") or {}
    return {
        "case": case, "text": " · ".join(c.get("text", "") for c in comments) or d.get("prompt", ""),
        "tools": [t.get("binding") or t.get("tool", "") for t in d.get("expected_tools") or []],
        "claims": [c["kind"] for c in d.get("forbidden_claims") or []],
        "level": variant.get("level") or "", "faults": sorted({f["kind"] for f in (d.get("tool_faults") or {}).values()}),
        "instructions": d.get("instruction_id_list") or [],
    }


@role_required(roles.VIEW_EVAL_SETS)
@require_GET
def eval_version_detail(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = _version_or_404(name, number)
    filters = CaseFilterForm(request.GET or None, facets=selectors.facet_choices(version),
                             tags=(version.facet_counts or {}).get("tag", {}))
    chosen = filters.filters() if request.GET else {"tag": None, "q": None, "facets": {}}
    qs = selectors.eval_case_list(version=version, **chosen)
    page = Paginator(qs, CASES_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "version": version, "eval_set": version.eval_set, "filters": filters, "page": page,
        "rows": [_case_summary(c) for c in page.object_list], "query": query.urlencode(),
        "filtered": bool(chosen["tag"] or chosen["q"] or chosen["facets"]),
        "is_latest": not version.eval_set.versions.filter(number__gt=version.number).exists(),
        "can_import": request.user.has_perm(roles.IMPORT_EVAL_SET),
    }
    template = "training_jobs/evals/version.html#cases" if request.htmx else "training_jobs/evals/version.html"
    return render(request, template, context)


@role_required(roles.VIEW_EVAL_SETS)
@require_GET
def eval_version_export(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = _version_or_404(name, number)
    response = HttpResponse(services.eval_set_export(version=version), content_type="application/x-ndjson; "
                                                                                     "charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{version.eval_set.name}-v{version.number}.jsonl"'
    return response


def _room_state_view(room: dict) -> dict[str, Any]:
    campaign = room.get("campaign") or {}
    return {"products": room.get("products") or [], "coupons": room.get("coupons") or [],
            "phase": campaign.get("phase"), "flash_sale": campaign.get("flash_sale"),
            "clock_minute": room.get("clock_minute"), "currency": room.get("currency") or "",
            "shipping": room.get("shipping") or {}, "title": room.get("title") or room.get("room_id") or ""}


@role_required(roles.VIEW_EVAL_SETS)
@require_GET
def eval_case_detail(request: HttpRequest, name: str, number: int, case_id: str) -> HttpResponse:
    version = _version_or_404(name, number)
    try:
        case = selectors.eval_case_get(version=version, case_id=case_id)
    except EvalCase.DoesNotExist:
        raise Http404("no such case") from None
    d = case.data
    neighbours = EvalCase.objects.filter(version=version)
    prev = neighbours.filter(position__lt=case.position).order_by("-position").values_list("case_id", flat=True).first()
    nxt = neighbours.filter(position__gt=case.position).order_by("position").values_list("case_id", flat=True).first()
    return render(request, "training_jobs/evals/case.html", {
        "version": version, "eval_set": version.eval_set, "case": case, "d": d,
        "room": _room_state_view(d.get("room") or {}) if d.get("room") else None,
        "tools": [{"binding": t.get("binding") or t.get("tool", ""),
                   "arguments": json.dumps(t.get("arguments") or {}, ensure_ascii=False),
                   "optional": t.get("optional", False)} for t in d.get("expected_tools") or []],
        "facts": [{**f, "binding": f.get("binding") or f.get("tool", ""),
                   "arguments": json.dumps(f.get("arguments") or {}, ensure_ascii=False)}
                  for f in d.get("gold_facts") or []],
        "instructions": [{"id": i, "kwargs": json.dumps(k, ensure_ascii=False)}
                         for i, k in zip(d.get("instruction_id_list") or [], d.get("kwargs") or [])],
        "variant_json": json.dumps(d["harness_variant"], indent=2, ensure_ascii=False) if d.get("harness_variant") else "",
        "case_json": json.dumps(d, indent=2, ensure_ascii=False), "prev": prev, "next": nxt,
    })


# --- save a recorded turn as a case ------------------------------------------------------------------------------


def _room_or_404(request: HttpRequest, room_id) -> PreviewRoom:
    from streams import selectors as stream_selectors

    try:
        return stream_selectors.preview_room_get_for(user=request.user, room_id=room_id)
    except PreviewRoom.DoesNotExist:
        raise Http404("no such preview room") from None


@role_required(roles.SAVE_EVAL_CASE)
@require_http_methods(["GET", "POST"])
def eval_case_from_turn(request: HttpRequest, room_id, turn_id: str) -> HttpResponse:
    """The turn (comments, calls and results, the reply) beside a form: the set, the gold reply (the avatar's reply
    to start from), tags, forbidden claims."""
    room = _room_or_404(request, room_id)
    turn = selectors.preview_turn(room_id=room.pk, turn_id=turn_id)
    if turn is None:
        raise Http404("no such turn")
    reply = (turn.get("reply") or {}).get("text", "")
    form = SaveCaseForm(request.POST or None, initial={"gold_reply": reply})
    error, other_errors = None, []
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            version, case_id = services.eval_case_save_from_turn(
                user=request.user, room=room, turn_id=turn_id, set_name=d["set_name"], gold_reply=d["gold_reply"],
                tags=d["tags"], note=d["note"], forbidden_claims=d["forbidden_claims"])
        except services.TurnNotFound:
            raise Http404("no such turn") from None
        except ValidationFailed as exc:
            error, other_errors = exc, form.add_located_errors(exc.errors)
        else:
            messages.success(request, f"Saved as case {case_id} in {version}.")
            return redirect("evals:case", name=version.eval_set.name, number=version.number, case_id=case_id)
    status = 400 if request.method == "POST" else 200
    transcript = reverse("streams:preview_transcript", args=[room.pk])
    return render(request, "training_jobs/evals/save_turn.html", {
        "room": room, "turn": turn, "form": form, "error": error, "other_errors": other_errors,
        "sets": selectors.saveable_sets(), "transcript_url": transcript,
        "finished": turn.get("state") == "done" and bool(reply),
    }, status=status)
