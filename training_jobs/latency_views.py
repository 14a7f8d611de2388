"""Latency-replay pages (mounted at "evals/latency/", namespace "latency"), beside the evaluation runs.

- the list of replays (refreshing itself while one is active);
- the launch form (eval set version, harness version, endpoint, concurrency levels, turns per level, seed,
  deadline, sampling), the service's located errors on their boxes;
- a replay's page: progress, cancel and resume, the table per concurrency level (P50 / P95 turn time, share
  under 15 s, TTFT, decode tokens/s, turns/s, turns in flight) with the report's reference row, and a histogram
  per level drawn as inline SVG on shared bins (no script: the console's CSP allows none inline).

Each view: authorise (``role_required``) → call one service or selector → render. Everyone with a role reads
replays; ML staff launch; the person who started one or an ML lead cancels and resumes.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from training_jobs import latency_selectors as selectors
from training_jobs import latency_services as services
from training_jobs.evals.replay import REFERENCE
from training_jobs.latency_forms import LatencyReplayForm
from training_jobs.latency_models import LatencyReplay
from training_jobs.services import may_manage

POLL_S = 2
LIST_LIMIT = 100


def _replay_or_404(replay_id) -> LatencyReplay:
    try:
        return selectors.latency_replay_get(replay_id=replay_id)
    except LatencyReplay.DoesNotExist:
        raise Http404("no such latency replay") from None


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def replay_list(request: HttpRequest) -> HttpResponse:
    replays = list(selectors.latency_replay_list()[:LIST_LIMIT])
    context = {"replays": replays, "active": any(r.is_active for r in replays), "poll_s": POLL_S,
               "can_run": request.user.has_perm(roles.RUN_EVAL), "reference": REFERENCE}
    template = ("training_jobs/evals/latency/list.html#replays" if request.htmx
                else "training_jobs/evals/latency/list.html")
    return render(request, template, context)


@role_required(roles.RUN_EVAL)
@require_http_methods(["GET", "POST"])
def replay_new(request: HttpRequest) -> HttpResponse:
    form = LatencyReplayForm(request.POST or None)
    error, other_errors = None, []
    if request.method == "POST" and form.is_valid():
        try:
            replay = services.latency_replay_start(user=request.user, **form.request())
        except ValidationFailed as exc:
            error, other_errors = exc, form.add_located_errors(exc.errors)
        except DomainError as exc:
            error = exc
        else:
            return redirect("latency:detail", replay_id=replay.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "training_jobs/evals/latency/new.html",
                  {"form": form, "error": error, "other_errors": other_errors}, status=status)


def _replay_page(request: HttpRequest, replay: LatencyReplay, *, error=None, status: int = 200) -> HttpResponse:
    summary = replay.summary or {}
    context = {
        "replay": replay, "error": error, "poll_s": POLL_S, "rows": selectors.level_rows(replay),
        "charts": selectors.level_charts(replay), "reference": summary.get("reference") or REFERENCE,
        "summary": summary, "pending": [c for c in replay.concurrency
                                        if c not in {lv["concurrency"] for lv in replay.levels}],
        "can_manage": request.user.has_perm(roles.RUN_EVAL) and may_manage(request.user, replay.created_by),
    }
    template = ("training_jobs/evals/latency/detail.html#replay" if request.htmx
                else "training_jobs/evals/latency/detail.html")
    return render(request, template, context, status=status)


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def replay_detail(request: HttpRequest, replay_id) -> HttpResponse:
    return _replay_page(request, _replay_or_404(replay_id))


def _replay_action(request: HttpRequest, replay_id, service) -> HttpResponse:
    """A button on the replay's page: the service's refusal (403, 409) is shown on the page, else back to it."""
    replay = _replay_or_404(replay_id)
    try:
        service(user=request.user, replay=replay)
    except DomainError as exc:
        return _replay_page(request, replay, error=exc, status=exc.status_code)
    return redirect("latency:detail", replay_id=replay.pk)


@role_required(roles.RUN_EVAL)
@require_POST
def replay_cancel(request: HttpRequest, replay_id) -> HttpResponse:
    return _replay_action(request, replay_id, services.latency_replay_cancel)


@role_required(roles.RUN_EVAL)
@require_POST
def replay_resume(request: HttpRequest, replay_id) -> HttpResponse:
    return _replay_action(request, replay_id, services.latency_replay_resume)
