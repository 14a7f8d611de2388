"""Human-label and agreement pages (mounted under "evals/runs/", namespace "eval_runs").

- a run's label sample (``<run>/labels/?n=20&seed=0``): the same ``n`` samples for every reviewer (seeded), each
  with the reviewer's own label if given, and the next one to label;
- one sample to label (``<run>/labels/<sample id>/``): blind — the comments, the room, the tool results the turn got,
  the reply and the turn's events without hooks or verdicts; after the label is submitted the same page shows the
  rules' verdict, the judges' verdicts and vote, and other reviewers' labels;
- agreement (``<run>/agreement/``, ``agreement/<set>/``, ``agreement/``): Cohen's kappa, raw agreement and the
  confusion matrices of human labels against the rules, each judge model, the judges' vote, and each other.

Labelling needs ``training_jobs.label_evalresult`` (compliance reviewers, ML staff); agreement is evidence: everyone
who sees runs sees it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from console import roles
from console.errors import ValidationFailed
from console.views import role_required
from training_jobs import eval_run_selectors
from training_jobs import label_selectors as selectors
from training_jobs import label_services as services
from training_jobs.eval_models import EvalSet
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.label_models import ACCURACY_CHOICES, EFFECTIVENESS_CHOICES, NOTE_MAX


def _fmt(v: Any) -> str:
    """A class as written: 0, 0.5, 1."""
    return str(int(v)) if float(v).is_integer() else str(v)


class SampleForm(forms.Form):
    """How many samples, drawn with which seed (GET)."""

    n = forms.IntegerField(min_value=1, max_value=selectors.MAX_SAMPLE, required=False, label="Samples",
                           help_text=f"1–{selectors.MAX_SAMPLE}")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, required=False, label="Seed",
                              help_text="the same seed gives every reviewer the same samples")

    def values(self) -> tuple[int, int]:
        d = self.cleaned_data
        return (d.get("n") or selectors.DEFAULT_SAMPLE, d.get("seed") or 0)


class LabelForm(forms.Form):
    accuracy = forms.TypedChoiceField(choices=ACCURACY_CHOICES, coerce=int, widget=forms.RadioSelect,
                                      label="Accuracy")
    effectiveness = forms.TypedChoiceField(choices=[(_fmt(v), text) for v, text in EFFECTIVENESS_CHOICES],
                                           coerce=float, widget=forms.RadioSelect, label="Effectiveness")
    note = forms.CharField(required=False, max_length=NOTE_MAX, widget=forms.Textarea(attrs={"rows": 3}),
                           label="Note (optional)")


def _run_or_404(run_id) -> EvalRun:
    try:
        return eval_run_selectors.eval_run_get(run_id=run_id)
    except EvalRun.DoesNotExist:
        raise Http404("no such evaluation run") from None


def _sample_params(request: HttpRequest) -> tuple[SampleForm, int, int] | None:
    form = SampleForm(request.GET)
    if not form.is_valid():
        return None
    n, seed = form.values()
    return form, n, seed


def _query(n: int, seed: int) -> str:
    return urlencode({"n": n, "seed": seed})


@role_required(roles.LABEL_EVAL)
@require_GET
def label_start(request: HttpRequest, run_id) -> HttpResponse:
    run = _run_or_404(run_id)
    parsed = _sample_params(request)
    if parsed is None:
        return render(request, "training_jobs/evals/labels/start.html",
                      {"run": run, "form": SampleForm(request.GET), "rows": [], "invalid": True}, status=400)
    form, n, seed = parsed
    sample = selectors.label_sample(run, n=n, seed=seed)
    mine = selectors.labelled_by(request.user, sample)
    rows = [{"result": r, "label": mine.get(r.pk)} for r in sample]
    nxt = next((r["result"] for r in rows if r["label"] is None), None)
    return render(request, "training_jobs/evals/labels/start.html", {
        "run": run, "form": form, "rows": rows, "n": n, "seed": seed, "query": _query(n, seed), "next": nxt,
        "done": len(mine), "t4": run.kind == "t4"})


def _case_page(request: HttpRequest, run: EvalRun, result: EvalResult, n: int, seed: int, *,
               form: LabelForm | None = None, error: str = "", status: int = 200) -> HttpResponse:
    label = selectors.label_of(request.user, result)
    view = selectors.sample_view(run, result, reveal=label is not None)
    nxt = None
    if label is not None:
        sample = selectors.label_sample(run, n=n, seed=seed)
        mine = selectors.labelled_by(request.user, sample)
        nxt = next((r for r in sample if r.pk not in mine and r.pk != result.pk), None)
    return render(request, "training_jobs/evals/labels/case.html", {
        "run": run, "s": view, "label": label, "form": form or LabelForm(), "error": error, "next": nxt,
        "query": _query(n, seed), "labellable": run.kind != "t4" and not result.error}, status=status)


@role_required(roles.LABEL_EVAL)
@require_http_methods(["GET", "POST"])
def label_case(request: HttpRequest, run_id, result_id: int) -> HttpResponse:
    run = _run_or_404(run_id)
    try:
        result = selectors.result_get(run, result_id)
    except EvalResult.DoesNotExist:
        raise Http404("no such sample in this run") from None
    parsed = _sample_params(request)
    n, seed = (parsed[1], parsed[2]) if parsed else (selectors.DEFAULT_SAMPLE, 0)
    if request.method == "GET":
        return _case_page(request, run, result, n, seed)
    form = LabelForm(request.POST)
    if not form.is_valid():
        return _case_page(request, run, result, n, seed, form=form, status=400)
    d = form.cleaned_data
    try:
        services.human_label_create(user=request.user, result=result, accuracy=d["accuracy"],
                                    effectiveness=d["effectiveness"], note=d["note"])
    except services.AlreadyLabelled as exc:
        return _case_page(request, run, result, n, seed, error=exc.message, status=409)
    except ValidationFailed as exc:
        for e in exc.errors:
            field = e["path"] if e["path"] in form.fields else None
            form.add_error(field, e["message"])
        return _case_page(request, run, result, n, seed, form=form, error=exc.message, status=400)
    return redirect(reverse("eval_runs:label_case", args=[run.pk, result.pk]) + "?" + _query(n, seed))


# --- agreement ---------------------------------------------------------------------------------------------------


def _rows(agreement: dict[str, Any]) -> list[dict[str, Any]]:
    """The agreement table's rows: humans against the rules, each judge, the vote, and each other."""
    rows = [{"key": "rules", "label": "Rules", "block": agreement["rules"]}]
    for name, block in agreement["judges"].items():
        rows.append({"key": f"judge:{name}", "label": f"Judge {name}", "block": block})
    if agreement.get("vote"):
        rows.append({"key": "vote", "label": "Judges' vote", "block": agreement["vote"]})
    if agreement.get("humans"):
        rows.append({"key": "humans", "label": "Other reviewers", "block": agreement["humans"]})
    for row in rows:
        for metric in (row["block"]["accuracy"], row["block"]["effectiveness"]["unweighted"]):
            metric["cells"] = _matrix_cells(metric)
    return rows


def _matrix_cells(metric: dict[str, Any]) -> list[dict[str, Any]]:
    """The confusion matrix as rows of (human class, counts) for the template."""
    labels = [_fmt(v) for v in metric["labels"]]
    return [{"label": labels[i], "counts": row} for i, row in enumerate(metric["matrix"])]


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def run_agreement(request: HttpRequest, run_id) -> HttpResponse:
    run = _run_or_404(run_id)
    agreement = selectors.run_agreement(run)
    summary = (run.summary or {}).get("judges") or None
    # the judges in the run's order, then their vote (the stored summary's keys come back in jsonb's order)
    judge_rows = [(name, summary["with_rules"][name]) for name in [*summary.get("judges", []), "vote"]
                  if name in summary.get("with_rules", {})] if summary else []
    return render(request, "training_jobs/evals/labels/agreement.html", {
        "run": run, "a": agreement, "rows": _rows(agreement), "judge_summary": summary, "judge_rows": judge_rows,
        "can_label": request.user.has_perm(roles.LABEL_EVAL)})


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def set_agreement(request: HttpRequest, eval_set: str) -> HttpResponse:
    the_set = EvalSet.objects.filter(name=eval_set).first()
    if the_set is None:
        raise Http404("no such eval set")
    agreement = selectors.set_agreement(the_set)
    return render(request, "training_jobs/evals/labels/agreement.html", {
        "eval_set": the_set, "a": agreement, "rows": _rows(agreement), "runs": agreement["runs"],
        "can_label": request.user.has_perm(roles.LABEL_EVAL)})


@role_required(roles.VIEW_EVAL_RUNS)
@require_GET
def agreement_index(request: HttpRequest) -> HttpResponse:
    """The eval sets and runs that have human labels."""
    runs = list(selectors.labelled_runs()[:200])
    sets: dict[str, Any] = {}
    for run in runs:
        sets.setdefault(run.eval_set_version.eval_set.name, run.eval_set_version.eval_set)
    return render(request, "training_jobs/evals/labels/index.html", {"runs": runs, "sets": list(sets.values())})
