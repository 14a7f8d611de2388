"""Review pages: confirmation steps of the high-impact registry actions (a label move, a label rollback, a draft
discarded), comments on the lines of a diff, and the review checklist.

Confirmations are server-side, so they work without JavaScript: the action's first POST (without ``confirm=1``)
checks everything the action would check and answers a page saying exactly what will change (the label's version
from vN to vM, the deployments, live sessions and rooms it reaches, or the draft that goes); only the POST that
page sends (``confirm=1``, with what it showed) acts. The APIs are unchanged."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from console import roles
from console.errors import DomainError, NotAllowed, ValidationFailed
from console.views import role_required
from harness_editor import review_selectors, review_services, selectors
from harness_editor.lookups import version_or_404
from harness_editor.models import Harness, HarnessVersion, ReviewComment

CONFIRM_TEMPLATE = "harness_editor/confirm.html"


def _confirmed(request: HttpRequest) -> bool:
    return request.POST.get("confirm") == "1"


# --- confirmations (called by harness_editor.views before they act) --------------------------------------------


def _label_confirm_page(request: HttpRequest, plan: review_selectors.LabelMovePlan, *, action: str,
                        fields: dict[str, str], stale: str = "", status: int = 200) -> HttpResponse:
    from_to = None
    if plan.from_version is not None:
        from_to = (f"{reverse('harness_editor:diff', args=[plan.harness.slug])}"
                   f"?a={plan.from_version.number}&b={plan.to_version.number}")
    return render(request, CONFIRM_TEMPLATE, {
        "kind": "rollback" if plan.rollback else "move", "harness": plan.harness, "plan": plan,
        "impact": plan.impact, "action": action, "fields": {**fields, "expected_from": plan.expected_from},
        "diff_link": from_to, "stale": stale,
    }, status=status)


def label_move_unconfirmed(request: HttpRequest, harness: Harness, *, name: str, version: HarnessVersion,
                           comment: str) -> HttpResponse | None:
    """None when this POST confirms the move the page showed; else the confirmation page. Refuses what the move
    would refuse (DomainError) before any confirmation."""
    plan = review_selectors.label_move_plan(harness=harness, name=name, version=version)
    fields = {"name": name, "version": str(version.number), "comment": comment}
    action = reverse("harness_editor:label_move", args=[harness.slug])
    if not _confirmed(request):
        return _label_confirm_page(request, plan, action=action, fields=fields)
    if request.POST.get("expected_from", "") != plan.expected_from:
        return _label_confirm_page(request, plan, action=action, fields=fields, status=409,
                                   stale=_stale_message(plan))
    return None


def label_rollback_unconfirmed(request: HttpRequest, harness: Harness, *, name: str) -> HttpResponse | None:
    plan = review_selectors.label_rollback_plan(harness=harness, name=name)
    fields = {"comment": request.POST.get("comment", "").strip()}
    action = reverse("harness_editor:label_rollback", args=[harness.slug, name])
    if not _confirmed(request):
        return _label_confirm_page(request, plan, action=action, fields=fields)
    if (request.POST.get("expected_from", "") != plan.expected_from
            or request.POST.get("expected_to", "") != str(plan.to_version.number)):
        return _label_confirm_page(request, plan, action=action, fields=fields, status=409,
                                   stale=_stale_message(plan))
    return None


def _stale_message(plan: review_selectors.LabelMovePlan) -> str:
    now = f"v{plan.from_version.number}" if plan.from_version else "nothing"
    return (f"'{plan.name}' changed since that page was shown: it now points at {now}. Nothing was moved; "
            "read what would change now and confirm again.")


def discard_unconfirmed(request: HttpRequest, version: HarnessVersion) -> HttpResponse | None:
    review_selectors.discard_check(user=request.user, version=version)
    if _confirmed(request) and request.POST.get("expected_lock", "") == str(version.lock_version):
        return None
    stale = ""
    if _confirmed(request):
        stale = (f"v{version.number} was saved since that page was shown (it is at revision {version.lock_version}). "
                 "Nothing was discarded; read what would go now and confirm again.")
    from harness_editor.views import diff_context  # the same grouping as the version page

    parent = version.parent
    diff = diff_context(selectors.version_diff(old=parent, new=version)) if parent else None
    return render(request, CONFIRM_TEMPLATE, {
        "kind": "discard", "harness": version.harness, "version": version, "parent": parent, "diff": diff,
        "comment_count": version.review_comments.count(), "stale": stale,
        "action": reverse("harness_editor:discard", args=[version.harness.slug, version.number]),
        "fields": {"expected_lock": str(version.lock_version)},
    }, status=409 if stale else 200)


# --- review context of the version and diff pages -------------------------------------------------------------


def review_context(request: HttpRequest, version: HarnessVersion, base: HarnessVersion | None,
                   diff: dict[str, Any] | None, *, page: str) -> dict[str, Any]:
    """The comment threads of the diff base → version placed on its lines (``diff`` is annotated in place), who
    may comment, the checklist to tick and, once approved, the ticks kept with the approval."""
    here = reverse("harness_editor:version", args=[version.harness.slug, version.number])
    query = "?comment_on="
    if page == "diff" and base is not None:
        here = f"{reverse('harness_editor:diff', args=[version.harness.slug])}?a={base.number}&b={version.number}"
        query = f"?a={base.number}&b={version.number}&comment_on="
    context: dict[str, Any] = {"can_comment": review_selectors.may_comment(request.user, version),
                               "comment_page": page, "outdated_threads": [], "base": base,
                               "comment_version": version, "comment_query": query, "comment_cancel": here}
    if diff is not None and base is not None:
        threads = review_selectors.diff_threads(version=version, base_number=base.number)
        context["outdated_threads"] = review_selectors.annotate_diff(
            diff, threads, comment_on=request.GET.get("comment_on", ""))
        context["open_threads"] = sum(1 for t in threads if not t.resolved)
    context["unresolved_comments"] = review_selectors.unresolved_count(version=version)
    context["checklist"] = review_selectors.checklist_items()
    checked = request.POST.getlist("checklist") if request.method == "POST" else []
    context["checked_items"] = {int(x) for x in checked if x.isdigit() and len(x) < 10}
    context["approval_checklist"] = review_selectors.approval_checklist(version=version)
    return context


# --- comments ------------------------------------------------------------------------------------------------


def _back(request: HttpRequest, version: HarnessVersion, base_number: int, anchor: str = "") -> HttpResponse:
    slug = version.harness.slug
    if request.POST.get("page") == "diff":
        url = f"{reverse('harness_editor:diff', args=[slug])}?a={base_number}&b={version.number}"
    else:
        url = reverse("harness_editor:version", args=[slug, version.number])
    return redirect(url + (f"#{anchor}" if anchor else ""))


def _base_number(raw: str, version: HarnessVersion) -> int:
    try:
        number = int(raw)
    except (TypeError, ValueError):
        raise ValidationFailed("which diff?", errors=[{"path": "base", "message": "base must be a version number"}]) \
            from None
    if not HarnessVersion.objects.filter(harness_id=version.harness_id, number=number).exists():
        raise Http404(f"{version.harness.slug} has no version {number}")
    return number


def _error_page(request: HttpRequest, version: HarnessVersion, exc: DomainError) -> HttpResponse:
    return render(request, "harness_editor/review_error.html", {"harness": version.harness, "version": version,
                                                                "error": exc}, status=exc.status_code)


@role_required(roles.VIEW_HARNESS)
@require_POST
def review_comment_create(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """A new thread on a diff line (component, path, line), or, with ``thread``, a reply in that thread."""
    version = version_or_404(slug, number)
    try:
        if not review_selectors.may_comment(request.user, version):
            raise NotAllowed("only reviewers and the version's author comment on its changes")
        if request.POST.get("thread"):
            thread = _comment_or_404(version, request.POST["thread"])
            reply = review_services.review_comment_reply(user=request.user, thread=thread,
                                                         body=request.POST.get("body", ""))
            messages.success(request, "Reply added.")
            return _back(request, version, reply.base_number,
                         review_selectors.line_anchor(reply.component, reply.path, reply.line))
        base_number = _base_number(request.POST.get("base", ""), version)
        base = HarnessVersion.objects.get(harness_id=version.harness_id, number=base_number)
        component, path, line = (request.POST.get(k, "") for k in ("component", "path", "line"))
        from harness_editor.views import diff_context

        diff = diff_context(selectors.version_diff(old=base, new=version))
        text = review_selectors.diff_line(diff, component=component, path=path, line=line)
        if text is None:
            raise ValidationFailed("no such line", errors=[{"path": "line", "message": (
                f"the diff v{base_number} → v{version.number} has no line {line or '(whole change)'} in "
                f"{component} {path!r}")}])
        review_services.review_comment_create(user=request.user, version=version, base_number=base_number,
                                              component=component, path=path, line=line, line_text=text,
                                              body=request.POST.get("body", ""))
    except DomainError as exc:
        return _error_page(request, version, exc)
    messages.success(request, "Comment added.")
    return _back(request, version, base_number, review_selectors.line_anchor(component, path, line))


def _comment_or_404(version: HarnessVersion, raw: str) -> ReviewComment:
    try:
        return ReviewComment.objects.select_related("version__harness", "thread").get(pk=int(raw), version=version)
    except (ValueError, ReviewComment.DoesNotExist):
        raise Http404("no such comment on this version") from None


def _resolve(request: HttpRequest, slug: str, number: int, comment_id: int, resolved: bool) -> HttpResponse:
    version = version_or_404(slug, number)
    thread = _comment_or_404(version, str(comment_id))
    try:
        review_services.review_comment_resolve(user=request.user, thread=thread, resolved=resolved)
    except DomainError as exc:
        return _error_page(request, version, exc)
    messages.success(request, "Thread resolved." if resolved else "Thread reopened.")
    return _back(request, version, thread.base_number,
                 review_selectors.line_anchor(thread.component, thread.path, thread.line))


@role_required(roles.VIEW_HARNESS)
@require_POST
def review_comment_resolve(request: HttpRequest, slug: str, number: int, comment_id: int) -> HttpResponse:
    return _resolve(request, slug, number, comment_id, True)


@role_required(roles.VIEW_HARNESS)
@require_POST
def review_comment_reopen(request: HttpRequest, slug: str, number: int, comment_id: int) -> HttpResponse:
    return _resolve(request, slug, number, comment_id, False)


# --- checklist ----------------------------------------------------------------------------------------------


@role_required(roles.VIEW_HARNESS)
@require_http_methods(["GET", "POST"])
def review_checklist(request: HttpRequest) -> HttpResponse:
    """The review checklist: everyone reads it; a compliance lead sets it (one item a line)."""
    can_set = request.user.has_perm(roles.SET_REVIEW_CHECKLIST)
    error, text, status = None, None, 200
    if request.method == "POST":
        if not can_set:
            raise PermissionDenied("only a compliance lead sets the review checklist")
        text = request.POST.get("items", "")
        try:
            review_services.review_checklist_set(user=request.user, texts=text.replace("\r\n", "\n").split("\n"))
        except DomainError as exc:
            error, status = exc, exc.status_code
        else:
            messages.success(request, "The review checklist is saved; reviewers tick it before approving.")
            return redirect("harness_editor:review_checklist")
    items = review_selectors.checklist_items()
    return render(request, "harness_editor/review_checklist.html", {
        "items": items, "can_set": can_set, "error": error,
        "text": text if text is not None else "\n".join(i.text for i in items),
    }, status=status)
