"""Dataset pages: the list of builds (refreshing itself while any runs), the compose-recipe form that launches
one, a build's page (progress, cancel, error, statistics per operator), and the sample browser (a row's original
and augmented harness side by side with the semantic diff, and the target turn before/after relabelling).

Each view: authorise (``role_required``) → call one service or selector → render. A page and its htmx fragment
come from one template (django-template-partials); forms are plain POSTs, so everything works without script.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from harness_editor.schemas import manifest_to_yaml
from harness_editor.views import diff_context
from training_jobs import selectors, services
from training_jobs.forms import RecipeForm
from training_jobs.models import Dataset

SAMPLES_PER_PAGE = 25
POLL_S = 1


def _dataset_or_404(dataset_id) -> Dataset:
    try:
        return selectors.dataset_get(dataset_id=dataset_id)
    except Dataset.DoesNotExist:
        raise Http404("no such dataset") from None


@role_required(roles.VIEW_DATASETS)
@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    datasets = list(selectors.dataset_list()[:100])
    context = {"datasets": datasets, "active": any(d.is_active for d in datasets), "poll_s": POLL_S * 2,
               "can_build": request.user.has_perm(roles.BUILD_DATASET)}
    template = "training_jobs/dataset_list.html#datasets" if request.htmx else "training_jobs/dataset_list.html"
    return render(request, template, context)


@role_required(roles.BUILD_DATASET)
@require_http_methods(["GET", "POST"])
def dataset_new(request: HttpRequest) -> HttpResponse:
    form = RecipeForm(request.POST or None)
    error = None
    if request.method == "POST" and form.is_valid():
        req = form.request()
        try:
            dataset = services.dataset_build_start(user=request.user, **req)
        except ValidationFailed as exc:
            form.add_located_errors(exc.errors)
            error = exc
        except DomainError as exc:
            error = exc
        else:
            return redirect("training_jobs:detail", dataset_id=dataset.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "training_jobs/dataset_new.html", {"form": form, "error": error}, status=status)


def _detail_page(request: HttpRequest, dataset: Dataset, *, error=None, status: int = 200) -> HttpResponse:
    context = {
        "dataset": dataset, "error": error, "poll_s": POLL_S,
        "stats_rows": selectors.dataset_stats_rows(dataset),
        "recipe_json": json.dumps(dataset.recipe, indent=2),
        "sources_json": json.dumps(dataset.sources, indent=2),
        "baselines": list(dataset.baselines.all()),
        "can_build": request.user.has_perm(roles.BUILD_DATASET),
    }
    template = "training_jobs/dataset_detail.html#job" if request.htmx else "training_jobs/dataset_detail.html"
    return render(request, template, context, status=status)


@role_required(roles.VIEW_DATASETS)
@require_GET
def dataset_detail(request: HttpRequest, dataset_id) -> HttpResponse:
    return _detail_page(request, _dataset_or_404(dataset_id))


@role_required(roles.BUILD_DATASET)
@require_POST
def dataset_cancel(request: HttpRequest, dataset_id) -> HttpResponse:
    dataset = _dataset_or_404(dataset_id)
    try:
        services.dataset_cancel(user=request.user, dataset=dataset)
    except DomainError as exc:
        return _detail_page(request, dataset, error=exc, status=exc.status_code)
    return redirect("training_jobs:detail", dataset_id=dataset.pk)


@role_required(roles.VIEW_DATASETS)
@require_GET
def dataset_samples(request: HttpRequest, dataset_id) -> HttpResponse:
    dataset = _dataset_or_404(dataset_id)
    rows = selectors.dataset_rows(dataset=dataset)
    page = Paginator(rows, SAMPLES_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "training_jobs/sample_list.html", {"dataset": dataset, "page": page,
                                                               "rows": page.object_list})


def _steps_view(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for s in steps:
        if "tool" in s:
            out.append({"kind": "tool", "name": s["tool"],
                        "arguments": json.dumps(s.get("arguments"), ensure_ascii=False, sort_keys=False)})
        elif "load_skill" in s:
            out.append({"kind": "load_skill", "name": s["load_skill"]})
        elif "retry" in s:
            out.append({"kind": "retry", "text": s["retry"], "feedback": s.get("feedback", "")})
        else:
            out.append({"kind": "reply", "text": s.get("reply", "")})
    return out


@role_required(roles.VIEW_DATASETS)
@require_GET
def dataset_sample(request: HttpRequest, dataset_id, index: int) -> HttpResponse:
    dataset = _dataset_or_404(dataset_id)
    try:
        sample = selectors.dataset_sample(dataset=dataset, index=index)
    except IndexError:
        raise Http404("no such sample") from None
    base, augmented = sample["base_manifest"], sample["augmented_manifest"]
    return render(request, "training_jobs/sample_detail.html", {
        "dataset": dataset, "index": index, "s": sample, "row": sample["row"],
        "before": _steps_view(sample["before"]), "after": _steps_view(sample["after"]),
        "diff": diff_context(sample["diff"]) if sample["diff"] is not None else None,
        "base_yaml": manifest_to_yaml(base) if base is not None else "",
        "augmented_yaml": manifest_to_yaml(augmented) if augmented is not None else "",
        "messages_json": json.dumps(sample["row"]["messages"], indent=2, ensure_ascii=False),
        "prev": index - 1 if index > 0 else None, "next": index + 1 if index + 1 < sample["count"] else None,
    })
