"""The one gate page action that lives on the training side (the registry imports nothing from training): start
the evaluation runs a version's approval gate still needs. Mounted at "gate/" (namespace "gate") by console.urls;
the version page (harness_editor) posts here when the gate evidence offers a ``start_url``."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.http import require_POST

from console import roles
from console.errors import DomainError
from console.views import role_required
from harness_editor.models import HarnessVersion
from training_jobs.gate_services import gate_runs_start


@role_required(roles.RUN_EVAL)
@require_POST
def start_runs(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = (HarnessVersion.objects.select_related("harness").filter(harness__slug=slug, number=number).first())
    if version is None:
        raise Http404(f"{slug} has no version {number}")
    try:
        runs = gate_runs_start(user=request.user, version=version)
    except DomainError as exc:
        messages.error(request, f"Nothing started: {exc.message}.")
    else:
        messages.success(request, f"Started {len(runs)} evaluation run{'s' if len(runs) != 1 else ''} for the "
                                  f"gate: " + "; ".join(r.name for r in runs) + ".")
    return redirect("harness_editor:version", slug=slug, number=number)


# include(...) takes this (patterns, app_name) pair as it is
gate_urls = ([
    path("<slug:slug>/v<int:number>/start-runs/", start_runs, name="start_runs"),
], "gate")
