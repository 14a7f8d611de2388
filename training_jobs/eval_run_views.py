"""Evaluation-run pages (mounted at "evals/runs/", namespace "eval_runs").

- the run list: filters (set, harness, endpoint, model, status), each run's scores with their 95 % intervals at a
  glance, ticks to compare; it refreshes itself while a run is active;
- the launch form (set version: the pinned one by default; harness version: what ``production`` points at; an
  endpoint or a served registered model; k, seed, max cases, sampling, deadline), the service's located errors on
  their boxes;
- a run's page: live progress (the run's WebSocket asks htmx to redraw; slow polling as fallback), cancel and
  resume, scores with intervals, pass^k, latency, problems by rule, IFEval's four figures and categories (T4), and
  the per-case table (failed only / rule / tag);
- a case's drill-down: the case (comments, room, gold facts, expected calls and skills, forbidden claims) and each
  sample's reply, verdict, problems and full turn in the preview transcript's event view;
- the compare page (:mod:`training_jobs.eval_run_compare`).

Each view: authorise (``role_required``) → call one service or selector → render. Everyone with a role reads runs
(reviewers need the evidence); ML staff launch; the person who started a run or an ML lead cancels and resumes.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from streams.engine.outbound import OutboundRefused
from training_jobs import eval_run_compare as compare
from training_jobs import eval_run_selectors as selectors
from training_jobs import eval_run_services as services
from training_jobs import list_filters, tag_selectors
from training_jobs.eval_models import EvalCase
from training_jobs.eval_run_forms import CaseFilterForm, EvalRunForm, RunFilterForm
from training_jobs.eval_run_models import EvalRun
from training_jobs.evals import charts
from training_jobs.services import may_manage

RUNS_PER_PAGE = 50
CASES_PER_PAGE = 50
POLL_S = 2


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def _run_or_404(run_id) -> EvalRun:
    try:
        return selectors.eval_run_get(run_id=run_id)
    except EvalRun.DoesNotExist:
        raise Http404("no such evaluation run") from None


# --- the list and the launch form --------------------------------------------------------------------------------


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    filters = RunFilterForm(request.GET or None, choices=selectors.filter_choices())
    chosen = filters.filters() if request.GET else {}
    more, runs, status = list_filters.narrow(request, "eval_run", selectors.eval_run_list(**chosen),
                                             everyone=EvalRun.objects.all())
    page = Paginator(runs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    tag_selectors.tags_and_notes("eval_run", page.object_list)
    rows = [{"run": r, "figures": selectors.headline(r)} for r in page.object_list]
    query = request.GET.copy()
    query.pop("page", None)
    context = {"rows": rows, "page": page, "filters": filters, "query": query.urlencode(),
               "active": any(r.is_active for r in page.object_list), "poll_s": POLL_S,
               "filtered": any(chosen.values()) or list_filters.given(request, more),
               "more_filters": more, "filter_errors": list_filters.errors(more),
               "can_run": request.user.has_perm(roles.RUN_EVAL)}
    fragment = request.htmx and not request.htmx.history_restore_request
    template = "training_jobs/evals/runs/list.html#runs" if fragment else "training_jobs/evals/runs/list.html"
    return render(request, template, context, status=status)


@role_required(roles.RUN_EVAL)
@require_http_methods(["GET", "POST"])
def run_new(request: HttpRequest) -> HttpResponse:
    form = EvalRunForm(request.POST or None, query={k: request.GET.get(k, "") for k in
                                                    ("set", "version", "harness", "endpoint", "model")})
    error, other_errors = None, []
    if request.method == "POST" and form.is_valid():
        try:
            run = services.eval_run_start(user=request.user, **form.request())
        except ValidationFailed as exc:
            error, other_errors = exc, form.add_located_errors(exc.errors)
        except DomainError as exc:
            error = exc
        except OutboundRefused as exc:  # the endpoint's URL or secret name is not allowed (an administrator's row)
            form.add_error("endpoint", str(exc))
        else:
            return redirect("eval_runs:detail", run_id=run.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "training_jobs/evals/runs/new.html",
                  {"form": form, "error": error, "other_errors": other_errors}, status=status)


# --- one run -----------------------------------------------------------------------------------------------------


SCORE_HELP = {
    "accuracy": "no factual error, unsupported claim or false promise (mean over cases of each case's mean)",
    "effectiveness": "0 / 0.5 / 1: the comment's questions answered with the expected calls and skills",
    "pass_k": "cases solved in all k samples (tau-bench's pass^k)",
    "pass_1": "solved samples, per sample",
}


def _score_cards(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "label": label, "score": summary[key], "help": SCORE_HELP[key]}
            for key, label in selectors.SCORE_KEYS if summary.get(key) and summary[key].get("mean") is not None]


def _score_chart(cards: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not cards:
        return None
    groups = [charts.BarGroup(label=c["label"].split(" (")[0], bars=[charts.Bar(
        label=c["label"], value=c["score"]["mean"], low=c["score"]["ci_low"], high=c["score"]["ci_high"],
        text=f"{100 * c['score']['mean']:.1f} %")]) for c in cards]
    return charts.bar_chart(groups, width=460, height=200)


def _category_chart(ifeval: dict[str, Any] | None) -> dict[str, Any] | None:
    if not ifeval or not ifeval["categories"]:
        return None
    groups = [charts.BarGroup(label=c["category"], bars=[
        charts.Bar(label="strict", value=c["strict"] / 100, series=0, text=f"{c['strict']:.1f} % strict"),
        charts.Bar(label="loose", value=c["loose"] / 100, series=1, text=f"{c['loose']:.1f} % loose")])
        for c in ifeval["categories"]]
    return charts.bar_chart(groups, width=max(480, 70 * len(groups)), height=220)


def _judge_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each judge's (and the vote's) agreement with the rules: accuracy and effectiveness (unweighted)."""
    judges = summary.get("judges") or {}
    with_rules = judges.get("with_rules") or {}
    rows = []
    for name in [*(judges.get("judges") or []), "vote"]:  # the run's order (JSONB keeps no key order)
        block = with_rules.get(name)
        if block is None:
            continue
        eff = block.get("effectiveness") or {}
        rows.append({"name": name, "vote": name == "vote", "accuracy": block.get("accuracy") or {},
                     "effectiveness": eff.get("unweighted") or {}, "abstained": block.get("abstained", 0)})
    return rows


def _case_table(request: HttpRequest, run: EvalRun) -> dict[str, Any]:
    rules = selectors.rule_choices(run)
    form = CaseFilterForm(request.GET or None, rules=rules, tags=selectors.tag_choices(run))
    chosen = form.filters() if request.GET else {"failed_only": False, "rule": None, "tag": None}
    rows = selectors.case_rows(run, **chosen)
    page = Paginator(rows, CASES_PER_PAGE).get_page(request.GET.get("page"))
    selectors.attach_case_texts(run.eval_set_version, page.object_list)
    query = request.GET.copy()
    query.pop("page", None)
    return {"case_filters": form, "case_page": page, "case_rows": page.object_list, "case_query": query.urlencode(),
            "cases_filtered": any(chosen.values()), "rules": rules}


def _run_page(request: HttpRequest, run: EvalRun, *, error: Exception | None = None, status: int = 200
              ) -> HttpResponse:
    active = run.is_active
    summary = {} if active else selectors.run_summary(run)
    cards = _score_cards(summary)
    ifeval = selectors.ifeval_view(summary)
    context = {
        "run": run, "kind": run.kind, "error": error, "poll_s": POLL_S, "active": active, "summary": summary,
        "so_far": selectors.scores_so_far(run) if active else None, "cards": cards,
        "score_chart": _score_chart(cards), "latency": summary.get("latency") or {},
        "problems": selectors.problem_rules(summary), "ifeval": ifeval, "category_chart": _category_chart(ifeval),
        "judge_rows": _judge_rows(summary), "judges_summary": summary.get("judges") or {},
        "can_label": request.user.has_perm(roles.LABEL_EVAL) and run.kind != "t4",
        "sampling_json": json.dumps(run.sampling or {}, sort_keys=True),
        "can_run": request.user.has_perm(roles.RUN_EVAL),
        "can_manage": request.user.has_perm(roles.RUN_EVAL) and may_manage(request.user, run.created_by),
        **_case_table(request, run),
    }
    if request.htmx:
        part = "cases" if request.htmx.target == "cases" else "run"
        return render(request, f"training_jobs/evals/runs/detail.html#{part}", context, status=status)
    return render(request, "training_jobs/evals/runs/detail.html", context, status=status)


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    return _run_page(request, _run_or_404(run_id))


def _run_action(request: HttpRequest, run_id, service) -> HttpResponse:
    """A button on the run page: the service's refusal (403, 409) is shown on the page, else back to it."""
    run = _run_or_404(run_id)
    try:
        service(user=request.user, run=run)
    except DomainError as exc:
        return _run_page(request, run, error=exc, status=exc.status_code)
    return redirect("eval_runs:detail", run_id=run.pk)


@role_required(roles.RUN_EVAL)
@require_POST
def run_cancel(request: HttpRequest, run_id) -> HttpResponse:
    return _run_action(request, run_id, services.eval_run_cancel)


@role_required(roles.RUN_EVAL)
@require_POST
def run_resume(request: HttpRequest, run_id) -> HttpResponse:
    return _run_action(request, run_id, services.eval_run_resume)


# --- a case's drill-down -----------------------------------------------------------------------------------------


def _sample_view(result, run: EvalRun, data: dict[str, Any]) -> dict[str, Any]:
    detail = result.detail or {}
    return {"result": result, "seed": run.seed + result.sample, "turn": selectors.sample_turn(result, run, data),
            "instructions": [{**i, "kwargs_json": json.dumps(i.get("kwargs") or {}, ensure_ascii=False)}
                             for i in detail.get("instructions") or []]}


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def run_case(request: HttpRequest, run_id, case_id: str) -> HttpResponse:
    run = _run_or_404(run_id)
    try:
        case, results = selectors.run_case(run, case_id)
    except EvalCase.DoesNotExist:
        raise Http404("no such case in this run's eval set") from None
    d = case.data
    prev, nxt = selectors.neighbour_cases(run, case.position)
    variant = d.get("harness_variant") or {}
    return render(request, "training_jobs/evals/runs/case.html", {
        "run": run, "case": case, "d": d, "case_room": selectors.room_view(d.get("room") or {}),
        "samples": [_sample_view(r, run, d) for r in results], "prev": prev, "next": nxt,
        "solved": sum(r.solved for r in results), "variant": variant,
        "group": selectors.case_group(selectors.case_index(run.eval_set_version).get(case.case_id)),
        "facts": [{**f, "binding": f.get("binding") or f.get("tool", ""),
                   "arguments": json.dumps(f.get("arguments") or {}, ensure_ascii=False)}
                  for f in d.get("gold_facts") or []],
        "tools": [{"binding": t.get("binding") or t.get("tool", ""),
                   "arguments": json.dumps(t.get("arguments") or {}, ensure_ascii=False),
                   "optional": t.get("optional", False)} for t in d.get("expected_tools") or []],
        "instructions": [{"id": i, "kwargs": json.dumps(k, ensure_ascii=False)}
                         for i, k in zip(d.get("instruction_id_list") or [], d.get("kwargs") or [])],
    })


# --- comparing runs ----------------------------------------------------------------------------------------------


def compare_ids(values: list[str]) -> list[str]:
    """Run ids from ``?runs=a,b&runs=c`` (ticks or a typed URL), in order, each once."""
    ids: list[str] = []
    for value in values:
        ids += [v.strip() for v in re.split(r"[,\s]+", value) if v.strip()]
    return list(dict.fromkeys(ids))


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def run_compare(request: HttpRequest) -> HttpResponse:
    """Runs side by side (``?runs=<id>,<id>`` or ``?runs=<id>&runs=<id>``, 2 to COMPARE_MAX; the first is the
    baseline; or the list's ticks, ``?tick=<id>&tick=<id>``, oldest first), ``metric`` picks what the robustness
    grid shows."""
    ids = compare_ids(request.GET.getlist("runs"))
    ticked = not ids  # ticks in the list (?tick=): the oldest run is the baseline; ?runs= keeps the order given
    if ticked:
        ids = compare_ids(request.GET.getlist("tick"))
    if not 2 <= len(ids) <= compare.COMPARE_MAX or not all(_is_uuid(i) for i in ids):
        return render(request, "training_jobs/evals/runs/compare.html",
                      {"error": f"Pick 2 to {compare.COMPARE_MAX} evaluation runs to compare (tick them in the run "
                                f"list); the first is the baseline.", **_reproductions(request)}, status=400)
    try:
        runs = compare.compared_runs(ids)
    except EvalRun.DoesNotExist as exc:
        raise Http404(str(exc)) from None
    if ticked:
        runs.sort(key=lambda r: r.created_at)
    metric = request.GET.get("metric", "accuracy")
    result = compare.comparison(runs, metric=metric)
    others = [{"run": r, "ids": ",".join(str(x.pk) for x in [r] + [y for y in runs if y.pk != r.pk])}
              for r in runs[1:]]
    return render(request, "training_jobs/evals/runs/compare.html", {
        **result, "columns": list(zip(runs, result["labels"])), "ids": ",".join(str(r.pk) for r in runs),
        "rebase": others, "metrics": compare.HEAT_METRICS, "flipped_shown": compare.FLIPPED_SHOWN,
        **_reproductions(request)})


def _reproductions(request: HttpRequest) -> dict:
    """The compare page's section on HAT reproductions (training_jobs.reproduce_views), for who may see them."""
    if not request.user.has_perm(roles.VIEW_TRAINING):
        return {}
    from training_jobs.reproduce_selectors import reproductions_for_compare

    return {"show_reproductions": True, **reproductions_for_compare()}
