"""Dataset pages: the list of builds (refreshing itself while any runs), the compose-recipe form that launches
one, a build's page (progress, cancel, error, statistics per operator), and the sample browser (a row's original
and augmented harness side by side with the semantic diff, and the target turn before/after relabelling).

Training pages: the job list, the launch form (stage, dataset, base model, stage config), a job's page (status,
progress and ETA, loss and learning-rate curves drawn as inline SVG, latest numbers, log tail, config, cancel and
resume) refreshing itself while the job is active; and the model registry (every model with its lineage).

Each view: authorise (``role_required``) → call one service or selector → render. A page and its htmx fragment
come from one template (django-template-partials); forms are plain POSTs, so everything works without script.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from harness_editor.schemas import manifest_to_yaml
from harness_editor.views import diff_context
from training_jobs import eval_run_selectors, list_filters, selectors, services
from training_jobs.forms import RecipeForm, TrainingJobForm
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from training_jobs.schemas import is_uuid
from training_jobs.tag_models import Subject

SAMPLES_PER_PAGE = 25
POLL_S = 1


def _or_404(get: Callable[..., Any], missing: type[Exception], what: str, **lookup: Any) -> Any:
    try:
        return get(**lookup)
    except missing:
        raise Http404(f"no such {what}") from None


def _dataset_or_404(dataset_id) -> Dataset:
    return _or_404(selectors.dataset_get, Dataset.DoesNotExist, "dataset", dataset_id=dataset_id)


def _list_page(request: HttpRequest, template: str, partial: str, context: dict, status: int) -> HttpResponse:
    """A list page, or (htmx: polling, filters, page links) its table alone; both under the same URL, hence Vary.
    A history restore (the back button with htmx's cache empty) wants the whole page."""
    fragment = request.htmx and not request.htmx.history_restore_request
    response = render(request, f"{template}#{partial}" if fragment else template, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


@role_required(roles.VIEW_DATASETS)
@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    found = list_filters.listing(request, Subject.DATASET, selectors.dataset_list(), kinds=Dataset.Kind.choices,
                                 statuses=Dataset.Status.choices)
    context = {"datasets": found.objects, "active": any(d.is_active for d in found.objects), "poll_s": POLL_S * 2,
               "can_build": request.user.has_perm(roles.BUILD_DATASET), **found.context}
    return _list_page(request, "training_jobs/dataset_list.html", "datasets", context, found.status)


@role_required(roles.BUILD_DATASET)
@require_http_methods(["GET", "POST"])
def dataset_new(request: HttpRequest) -> HttpResponse:
    form = RecipeForm(request.POST or None, user=request.user)
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
        "recipe_endpoints": selectors.recipe_endpoints(dataset.recipe) if dataset.kind == Dataset.Kind.HSA else [],
        "sources_json": json.dumps(dataset.sources, indent=2),
        "baselines": list(dataset.baselines.all()),
        "can_build": request.user.has_perm(roles.BUILD_DATASET),
        "can_cancel": request.user.has_perm(roles.BUILD_DATASET) and services.may_manage(request.user,
                                                                                          dataset.created_by),
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


# --- training jobs ------------------------------------------------------------------------------------------------

TRAINING_POLL_S = 2


def _job_or_404(job_id) -> TrainingJob:
    return _or_404(selectors.training_job_get, TrainingJob.DoesNotExist, "training job", job_id=job_id)


@role_required(roles.VIEW_TRAINING)
@require_GET
def training_list(request: HttpRequest) -> HttpResponse:
    found = list_filters.listing(request, Subject.TRAINING_JOB, selectors.training_job_list(),
                                 kinds=TrainingJob.Kind.choices, statuses=TrainingJob.Status.choices,
                                 kind_label="Stage")
    context = {"jobs": found.objects, "active": any(j.is_active for j in found.objects), "poll_s": TRAINING_POLL_S,
               "can_run": request.user.has_perm(roles.RUN_TRAINING), **found.context}
    return _list_page(request, "training_jobs/training_list.html", "jobs", context, found.status)


COMPARE_MAX = 6


@role_required(roles.VIEW_TRAINING)
@require_GET
def training_compare(request: HttpRequest) -> HttpResponse:
    """Jobs side by side (``?jobs=<id>&jobs=<id>``, 2 to COMPARE_MAX): their loss (and, for RL, reward) curves on
    shared axes, and their final numbers."""
    job_ids = list(dict.fromkeys(request.GET.getlist("jobs")))
    if not 2 <= len(job_ids) <= COMPARE_MAX or not all(is_uuid(i) for i in job_ids):
        return render(request, "training_jobs/training_compare.html",
                      {"error": f"Pick 2 to {COMPARE_MAX} jobs to compare (tick them in the job list).", "rows": []},
                      status=400)
    try:
        jobs = selectors.compared_jobs(job_ids)
    except TrainingJob.DoesNotExist as exc:
        raise Http404(str(exc)) from None
    x_max = max(j.progress_total for j in jobs)
    runs = [(j.name, selectors.run_points(j.metrics or [])) for j in jobs]  # each job's whole run, across resumes
    charts = []
    for key, title in (("loss", "Loss"), ("reward", "Reward (combined, RL)"), ("learning_rate", "Learning rate")):
        chart = selectors.chart(key, title, runs, x_max=x_max, testid=f"compare-{key}")
        if chart is not None:
            for s in chart["series"]:
                s["job"] = jobs[s["n"]]
            charts.append(chart)
    rows = [{"job": j, "n": i, **selectors.final_numbers(j)} for i, j in enumerate(jobs)]
    return render(request, "training_jobs/training_compare.html", {"rows": rows, "charts": charts})


@role_required(roles.RUN_TRAINING)
@require_http_methods(["GET", "POST"])
def training_new(request: HttpRequest) -> HttpResponse:
    # ?kind= picks the stage: its datasets and its config (the htmx swap when the stage changes, or a link)
    form = TrainingJobForm(request.POST or None, initial={"kind": request.GET.get("kind", "")})
    if request.htmx and request.method == "GET":
        return render(request, "training_jobs/training_new.html#form-body", {"form": form})
    error = None
    if request.method == "POST" and form.is_valid():
        try:
            job = services.training_job_start(user=request.user, **form.request())
        except ValidationFailed as exc:
            form.add_located_errors(exc.errors)
            error = exc
        except DomainError as exc:
            error = exc
        else:
            return redirect("training:detail", job_id=job.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "training_jobs/training_new.html", {"form": form, "error": error}, status=status)


def _training_page(request: HttpRequest, job: TrainingJob, *, error=None, status: int = 200) -> HttpResponse:
    points = selectors.run_points(job.metrics or [])  # the whole run, across resumes
    latest_eta = next((p["eta_s"] for p in reversed(points) if "eta_s" in p), None)
    context = {
        "job": job, "error": error, "poll_s": TRAINING_POLL_S,
        "models": selectors.training_job_models(job),
        "loss_chart": selectors.chart("loss", "Loss", [(job.name, points)], x_max=job.progress_total,
                                      testid="loss-curve"),
        "lr_chart": selectors.chart("learning_rate", "Learning rate", [(job.name, points)],
                                    x_max=job.progress_total, testid="lr-curve"),
        "reward_curves": selectors.reward_curves(points, x_max=job.progress_total, name=job.name),
        "numbers": selectors.latest_numbers(points),
        "eta": selectors.duration_text(latest_eta) if job.status == TrainingJob.Status.RUNNING else "",
        "config_json": json.dumps(job.config, indent=2),
        "result_json": json.dumps(job.result, indent=2) if job.result else "",
        "can_run": request.user.has_perm(roles.RUN_TRAINING),
        "can_manage": request.user.has_perm(roles.RUN_TRAINING) and services.may_manage(request.user, job.created_by),
    }
    template = "training_jobs/training_detail.html#job" if request.htmx else "training_jobs/training_detail.html"
    return render(request, template, context, status=status)


@role_required(roles.VIEW_TRAINING)
@require_GET
def training_detail(request: HttpRequest, job_id) -> HttpResponse:
    return _training_page(request, _job_or_404(job_id))


def _job_action(request: HttpRequest, job_id, service) -> HttpResponse:
    """A button on the job page: the service's refusal (409, ...) is shown on the page, else back to it."""
    job = _job_or_404(job_id)
    try:
        service(user=request.user, job=job)
    except DomainError as exc:
        return _training_page(request, job, error=exc, status=exc.status_code)
    return redirect("training:detail", job_id=job.pk)


@role_required(roles.RUN_TRAINING)
@require_POST
def training_cancel(request: HttpRequest, job_id) -> HttpResponse:
    return _job_action(request, job_id, services.training_job_cancel)


@role_required(roles.RUN_TRAINING)
@require_POST
def training_resume(request: HttpRequest, job_id) -> HttpResponse:
    return _job_action(request, job_id, services.training_job_resume)


# --- the model registry -------------------------------------------------------------------------------------------


@role_required(roles.VIEW_MODELS)
@require_GET
def model_list(request: HttpRequest) -> HttpResponse:
    found = list_filters.listing(request, Subject.MODEL, selectors.model_list(), kinds=TrainedModel.Kind.choices,
                                 statuses=None, kind_label="Kind (stage)")
    lineages = selectors.model_lineages(found.objects)
    rows = [{"model": m, "lineage": lineages[m.pk]} for m in found.objects]
    return _list_page(request, "training_jobs/model_list.html", "models", {"rows": rows, **found.context},
                      found.status)


def _model_or_404(model_id) -> TrainedModel:
    return _or_404(selectors.model_get, TrainedModel.DoesNotExist, "model", model_id=model_id)


def _model_page(request: HttpRequest, model: TrainedModel, *, error: Exception | None = None,
                status: int = 200) -> HttpResponse:
    return render(request, "training_jobs/model_detail.html", {
        "model": model, "lineage": model.lineage(), "children": list(model.children.order_by("-created_at")),
        "config_json": json.dumps(model.config, indent=2), "metrics_json": json.dumps(model.metrics, indent=2),
        "recipe_json": json.dumps(model.recipe, indent=2) if model.recipe else "",
        "can_serve": request.user.has_perm(roles.RUN_TRAINING), "error": error,
        "eval_scores": eval_run_selectors.model_latest_scores(model),
        "training": selectors.model_training(model, with_curves=request.user.has_perm(roles.VIEW_TRAINING)),
        "can_evaluate": request.user.has_perm(roles.RUN_EVAL),
        "can_stop": (model.endpoint_id is not None and request.user.has_perm(roles.RUN_TRAINING)
                     and services.may_manage(request.user, selectors.model_served_by(model), model.created_by)),
    }, status=status)


@role_required(roles.VIEW_MODELS)
@require_GET
def model_detail(request: HttpRequest, model_id) -> HttpResponse:
    return _model_page(request, _model_or_404(model_id))


@role_required(roles.RUN_TRAINING)
@require_POST
def model_serve(request: HttpRequest, model_id) -> HttpResponse:
    """Attach the model to a local server on a worker (or, with ``stop``, detach it)."""
    model = _model_or_404(model_id)
    try:
        if request.POST.get("stop"):
            services.model_unserve(user=request.user, model=model)
            notice = "Stopping its server on the worker."
        else:
            services.model_serve_start(user=request.user, model=model)
            notice = "Starting a local server (vLLM, the default CPU serve profile) on a serve worker: its endpoint " \
                     "appears here (reload) and in the preview room when it is ready (about 90 s; see Serving)."
    except DomainError as exc:
        return _model_page(request, model, error=exc, status=exc.status_code)
    messages.info(request, notice)
    return redirect("models:detail", model_id=model.pk)  # a reload is a GET, not a second serve request
