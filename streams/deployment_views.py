"""Deployment pages: the list (what each serves now), a deployment (in force, the proposal waiting with its
semantic diff, revision history, timeline linked to the live sessions), create, propose, approve / reject /
withdraw, and rollback with a confirmation page and a reason.

Each view: authorise (``role_required``; rules about this user and revision are the service's) → one service or
selector → render. Domain errors are shown on the page with their status (400, 403, 409), never a 500."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError
from console.views import role_required
from streams import deployment_selectors as selectors
from streams.deployment_forms import DecisionForm, DeploymentCreateForm, ProposeForm, RollbackForm, add_service_errors
from streams.label_impact import label_impact
from streams.models import Deployment, DeploymentRevision
from streams.services import deployments as services

Status = DeploymentRevision.Status
TIMELINE_ROWS = 50
HISTORY_ROWS = 100


def _deployment_or_404(name: str) -> Deployment:
    try:
        return selectors.deployment_get(name=name)
    except Deployment.DoesNotExist:
        raise Http404(f"no deployment '{name}'") from None


def _revision_or_404(deployment: Deployment, number: int) -> DeploymentRevision:
    try:
        return selectors.revision_get(deployment, number)
    except DeploymentRevision.DoesNotExist:
        raise Http404(f"{deployment.name} has no revision {number}") from None


def _revision_actions(user, revision: DeploymentRevision | None) -> dict[str, bool]:
    proposed = revision is not None and revision.status == Status.PROPOSED
    is_proposer = proposed and revision.proposed_by_id == user.id
    return {
        # four eyes: the proposer never sees approve / reject, whatever their roles
        "can_review": proposed and not is_proposer and user.has_perm(roles.REVIEW_DEPLOYMENT),
        "proposer_is_reviewer": is_proposer and user.has_perm(roles.REVIEW_DEPLOYMENT),
        "can_withdraw": is_proposer and user.has_perm(roles.PROPOSE_DEPLOYMENT),
    }


@role_required(roles.VIEW_DEPLOYMENTS)
@require_GET
def deployment_list(request: HttpRequest) -> HttpResponse:
    return render(request, "streams/deployments/list.html", {
        "rows": selectors.deployment_summaries(),
        "can_create": request.user.has_perm(roles.PROPOSE_DEPLOYMENT),
    })


def _detail_context(request: HttpRequest, deployment: Deployment, **extra) -> dict[str, Any]:
    summary = selectors.deployment_summary(deployment)
    pending = summary["pending"]
    target = services.rollback_target(deployment)
    user = request.user
    return {
        "deployment": deployment,
        "s": summary,
        "pending": pending,
        "diff": selectors.revision_diff(in_force=summary["revision"], proposed=pending) if pending else None,
        "actions": _revision_actions(user, pending),
        "revisions": list(selectors.revision_list(deployment)[:HISTORY_ROWS]),
        "events": list(selectors.deployment_timeline(deployment)[:TIMELINE_ROWS]),
        "rollback_target": target,
        "can_rollback": target is not None and user.has_perm(roles.ROLLBACK_DEPLOYMENT),
        "can_propose": pending is None and user.has_perm(roles.PROPOSE_DEPLOYMENT),
        "decision_form": extra.pop("decision_form", None) or DecisionForm(),
        **extra,
    }


@role_required(roles.VIEW_DEPLOYMENTS)
@require_GET
def deployment_detail(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "streams/deployments/detail.html", _detail_context(request, _deployment_or_404(name)))


@role_required(roles.VIEW_DEPLOYMENTS)
@require_GET
def revision_detail(request: HttpRequest, name: str, number: int) -> HttpResponse:
    deployment = _deployment_or_404(name)
    revision = _revision_or_404(deployment, number)
    in_force = deployment.current_revision
    return render(request, "streams/deployments/revision.html", {
        "deployment": deployment, "revision": revision, "in_force": in_force,
        "diff": selectors.revision_diff(in_force=in_force, proposed=revision),
        "endpoints": selectors.endpoint_names(revision.endpoints),
        "actions": _revision_actions(request.user, revision), "decision_form": DecisionForm(),
        "before_title": f"r{in_force.number} (in force)" if in_force else "In force",
        "after_title": f"r{revision.number}",
    })


@role_required(roles.PROPOSE_DEPLOYMENT)
@require_http_methods(["GET", "POST"])
def deployment_new(request: HttpRequest) -> HttpResponse:
    form = DeploymentCreateForm(request.POST or None)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                deployment = services.deployment_create(
                    user=request.user, name=data["name"], title=data["title"], harness=data["harness"],
                    note=data["note"], **form.revision_fields())
            except DomainError as exc:
                add_service_errors(form, exc.errors or [{"path": "", "message": exc.message}])
                status = exc.status_code
            else:
                messages.success(request, f"Proposed {deployment.name} r1: someone else reviews it.")
                return redirect("deployment:detail", name=deployment.name)
    return render(request, "streams/deployments/new.html", {"form": form}, status=status)


@role_required(roles.PROPOSE_DEPLOYMENT)
@require_http_methods(["GET", "POST"])
def deployment_propose(request: HttpRequest, name: str) -> HttpResponse:
    deployment = _deployment_or_404(name)
    base = deployment.current_revision or selectors.revision_list(deployment).first()
    status = 200
    if request.method == "POST":
        form = ProposeForm(request.POST)
        status = 400
        if form.is_valid():
            try:
                revision = services.deployment_propose(user=request.user, deployment=deployment,
                                                       note=form.cleaned_data["note"], **form.revision_fields())
            except DomainError as exc:
                add_service_errors(form, exc.errors or [{"path": "", "message": exc.message}])
                status = exc.status_code
            else:
                messages.success(request, f"Proposed r{revision.number}: someone else reviews it.")
                return redirect("deployment:detail", name=deployment.name)
    else:
        form = ProposeForm.from_revision(base)
    return render(request, "streams/deployments/propose.html",
                  {"deployment": deployment, "form": form, "base": base}, status=status)


def _decide(request: HttpRequest, name: str, number: int, action: str) -> HttpResponse:
    deployment = _deployment_or_404(name)
    revision = _revision_or_404(deployment, number)
    form = DecisionForm(request.POST)
    form.is_valid()
    comment = form.cleaned_data.get("comment", "")
    service = {"approve": services.deployment_approve, "reject": services.deployment_reject,
               "withdraw": services.deployment_withdraw}[action]
    try:
        service(user=request.user, revision=revision, comment=comment)
    except DomainError as exc:
        add_service_errors(form, exc.errors)
        context = _detail_context(request, deployment, action_error=exc, decision_form=form)
        return render(request, "streams/deployments/detail.html", context, status=exc.status_code)
    done = {"approve": "approved: it is in force now", "reject": "rejected", "withdraw": "withdrawn"}[action]
    messages.success(request, f"r{number} is {done}.")
    return redirect("deployment:detail", name=name)


@role_required(roles.REVIEW_DEPLOYMENT)
@require_POST
def revision_approve(request: HttpRequest, name: str, number: int) -> HttpResponse:
    return _decide(request, name, number, "approve")


@role_required(roles.REVIEW_DEPLOYMENT)
@require_POST
def revision_reject(request: HttpRequest, name: str, number: int) -> HttpResponse:
    return _decide(request, name, number, "reject")


@role_required(roles.PROPOSE_DEPLOYMENT)
@require_POST
def revision_withdraw(request: HttpRequest, name: str, number: int) -> HttpResponse:
    return _decide(request, name, number, "withdraw")


@role_required(roles.ROLLBACK_DEPLOYMENT)
@require_http_methods(["GET", "POST"])
def deployment_rollback(request: HttpRequest, name: str) -> HttpResponse:
    """GET: what would move (the diff from the revision in force back to the target) and the form; POST: do it."""
    deployment = _deployment_or_404(name)
    form = RollbackForm(request.POST or None)
    status, error = 200, None
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                services.deployment_rollback(user=request.user, deployment=deployment,
                                             comment=form.cleaned_data["comment"])
            except DomainError as exc:
                add_service_errors(form, exc.errors)
                status, error = exc.status_code, exc
            else:
                deployment.refresh_from_db()
                messages.success(request, f"Rolled {deployment.name} back to r{deployment.current_revision.number}: "
                                          "label, model and profile moved together.")
                return redirect("deployment:detail", name=name)
    target = services.rollback_target(deployment)
    current = deployment.current_revision
    return render(request, "streams/deployments/rollback.html", {
        "deployment": deployment, "form": form, "target": target, "current": current, "action_error": error,
        "diff": selectors.revision_diff(in_force=current, proposed=target) if target else None,
        "sessions": list(selectors.live_sessions(deployment)),
        # the label moves for every deployment on it: say from which version, and what else it reaches
        "label_now": selectors.label_versions([deployment.harness_id]).get((deployment.harness_id, target.label))
        if target else None,
        "label_impact": label_impact(deployment.harness, target.label) if target else None,
    }, status=status if (target or request.method == "POST") else 409)
