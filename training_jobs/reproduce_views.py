"""Reproduction pages (under "training/reproductions/", namespace "training"): ``manage.py reproduce_hat`` as a
console job, and the committed result.

- the list: the runs (refreshing itself while one is active) and the committed cpu-budget result when
  ``results/hat-miniature/results.json`` exists;
- the start form (base, budget, seed), the service's located errors on their boxes;
- a run's page: status, progress, the last log lines, cancel; then its result folder: the table (every cell with
  its 95 % interval, the report's reference rows with their sources), the claims with their verdicts, the four
  plots (``<img>`` of a view that serves only those four names from that folder) and the provenance (command,
  commit, base weights' sha256, data hashes, wall times). A run whose folder is gone says so and shows what it
  stored when it ended;
- the committed result's page: the same, read-only.

Each view: authorise (``role_required``) → call one service or selector → render. Whoever may see training pages
reads; ML staff and ML leads start; the person who started a run or an ML lead cancels.
"""

from __future__ import annotations

from pathlib import Path

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from training_jobs import reproduce_selectors as selectors
from training_jobs import reproduce_services as services
from training_jobs.reproduce_forms import ReproductionForm
from training_jobs.reproduce_models import ReproductionRun
from training_jobs.services import may_manage

POLL_S = 3
LIST_LIMIT = 100
PLOT_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                "X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=60"}


def _run_or_404(run_id) -> ReproductionRun:
    try:
        return selectors.reproduction_get(run_id=run_id)
    except ReproductionRun.DoesNotExist:
        raise Http404("no such reproduction run") from None


@role_required(roles.VIEW_TRAINING)
@require_GET
def reproduction_list(request: HttpRequest) -> HttpResponse:
    runs = list(selectors.reproduction_list()[:LIST_LIMIT])
    committed = selectors.committed_dir()
    context = {"runs": runs, "active": any(r.is_active for r in runs), "poll_s": POLL_S,
               "can_run": request.user.has_perm(roles.RUN_TRAINING),
               "committed": selectors.folder_report(committed) if committed else None,
               "committed_path": "results/hat-miniature"}
    template = ("training_jobs/reproduction_list.html#runs" if request.htmx
                else "training_jobs/reproduction_list.html")
    return render(request, template, context)


@role_required(roles.RUN_TRAINING)
@require_http_methods(["GET", "POST"])
def reproduction_new(request: HttpRequest) -> HttpResponse:
    form = ReproductionForm(request.POST or None)
    error, other_errors = None, []
    if request.method == "POST" and form.is_valid():
        try:
            run = services.reproduction_start(user=request.user, **form.request())
        except ValidationFailed as exc:
            error, other_errors = exc, form.add_located_errors(exc.errors)
        except DomainError as exc:
            error = exc
        else:
            return redirect("training:reproduction", run_id=run.pk)
    status = (error.status_code if error is not None else 400) if request.method == "POST" else 200
    return render(request, "training_jobs/reproduction_new.html",
                  {"form": form, "error": error, "other_errors": other_errors}, status=status)


def _run_page(request: HttpRequest, run: ReproductionRun, *, error=None, status: int = 200) -> HttpResponse:
    report = None if run.is_active else selectors.folder_report(run.out_dir)  # a running run's folder is half written
    claims = (report or {}).get("claims") or run.claims or []
    context = {
        "run": run, "error": error, "poll_s": POLL_S, "report": report, "claims": claims,
        "provenance": selectors.provenance_view((report or {}).get("run"), stored=run.provenance,
                                                git_commit=run.git_commit, wall_s=run.wall_s),
        "log_lines": run.log.splitlines()[-40:] if run.log else [],
        "can_manage": request.user.has_perm(roles.RUN_TRAINING) and may_manage(request.user, run.created_by),
        "plot_url_name": "training:reproduction_plot",
    }
    template = ("training_jobs/reproduction_detail.html#run" if request.htmx
                else "training_jobs/reproduction_detail.html")
    return render(request, template, context, status=status)


@role_required(roles.VIEW_TRAINING)
@require_GET
def reproduction_detail(request: HttpRequest, run_id) -> HttpResponse:
    return _run_page(request, _run_or_404(run_id))


@role_required(roles.RUN_TRAINING)
@require_POST
def reproduction_cancel(request: HttpRequest, run_id) -> HttpResponse:
    """The cancel button: the service's refusal (403, 409) is shown on the run's page, else back to it."""
    run = _run_or_404(run_id)
    try:
        services.reproduction_cancel(user=request.user, run=run)
    except DomainError as exc:
        return _run_page(request, run, error=exc, status=exc.status_code)
    return redirect("training:reproduction", run_id=run.pk)


def _plot(folder: Path | str | None, name: str) -> HttpResponse:
    path = selectors.plot_file(Path(folder), name) if folder else None
    if path is None:
        raise Http404("no such plot")
    response = FileResponse(path.open("rb"), content_type="image/svg+xml")
    for key, value in PLOT_HEADERS.items():
        response[key] = value
    return response


@role_required(roles.VIEW_TRAINING)
@require_GET
def reproduction_plot(request: HttpRequest, run_id, name: str) -> HttpResponse:
    """One of the four SVG plots of a run's folder (no other file is served)."""
    return _plot(_run_or_404(run_id).out_dir, name)


@role_required(roles.VIEW_TRAINING)
@require_GET
def committed_detail(request: HttpRequest) -> HttpResponse:
    """The committed result (results/hat-miniature), read-only; 404 until it is committed."""
    folder = selectors.committed_dir()
    if folder is None:
        raise Http404("no committed reproduction result (results/hat-miniature/results.json)")
    report = selectors.folder_report(folder)
    return render(request, "training_jobs/reproduction_detail.html", {
        "run": None, "report": report, "claims": report["claims"], "committed_path": "results/hat-miniature",
        "provenance": selectors.provenance_view(report["run"]),
        "plot_url_name": "training:reproduction_committed_plot"})


@role_required(roles.VIEW_TRAINING)
@require_GET
def committed_plot(request: HttpRequest, name: str) -> HttpResponse:
    return _plot(selectors.committed_dir(), name)
