"""Human labels (reads): the blind sample a reviewer labels, what a sample shows before and after labelling, and the
agreement of human labels with the rules and the judge models (per run and per eval set).

The sample of a run is drawn from its labellable samples (harness sets T1–T3; samples that could not be run are
left out) with ``random.Random(seed)``: the same ``n`` and ``seed`` give every reviewer the same samples in the same
order, so several people label the same ones and their agreement with each other can be reported too.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from training_jobs import eval_run_selectors
from training_jobs.eval_models import EvalCase, EvalSet
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.evals.agreement import label_agreement
from training_jobs.evals.judge_model import tool_results_from_events
from training_jobs.label_models import HumanLabel

DEFAULT_SAMPLE = 20
MAX_SAMPLE = 200


def labellable(run: EvalRun):
    """The run's samples a person can label (T1–T3 replies; none for T4, whose checkers are exact)."""
    if run.kind == "t4":
        return EvalResult.objects.none()
    return run.results.filter(error="").order_by("position", "sample", "pk")


def label_sample(run: EvalRun, *, n: int = DEFAULT_SAMPLE, seed: int = 0) -> list[EvalResult]:
    """``n`` of the run's labellable samples drawn with ``seed`` (all of them when there are fewer), in the drawn
    order, without their events."""
    ids = list(labellable(run).values_list("pk", flat=True))
    picked = random.Random(seed).sample(ids, min(max(n, 0), len(ids)))
    rows = EvalResult.objects.defer("events").in_bulk(picked)
    return [rows[pk] for pk in picked]


def labelled_by(user, results) -> dict[int, HumanLabel]:
    """The user's labels of these samples, by sample id."""
    ids = [r.pk for r in results]
    return {label.result_id: label for label in HumanLabel.objects.filter(reviewer=user, result_id__in=ids)}


def result_get(run: EvalRun, result_id: int) -> EvalResult:
    """One sample of ``run`` (EvalResult.DoesNotExist when the run has no such sample)."""
    return run.results.get(pk=result_id)


def result_by_case(run: EvalRun, case_id: str, sample: int) -> EvalResult:
    return run.results.get(case_id=case_id, sample=sample)


def label_of(user, result: EvalResult) -> HumanLabel | None:
    return HumanLabel.objects.filter(reviewer=user, result=result).first()


def _case_data(run: EvalRun, case_id: str) -> dict[str, Any]:
    case = EvalCase.objects.filter(version=run.eval_set_version, case_id=case_id).first()
    return case.data if case is not None else {}


def blind_turn(turn: dict[str, Any] | None) -> dict[str, Any] | None:
    """A folded turn without what would give the rules' verdict away: hook results, retries (their messages name
    the failed rule) and the fallback's reason."""
    if turn is None:
        return None
    t = copy.deepcopy(turn)
    t["hooks"], t["retries"], t["hook_failures"] = [], [], 0
    if t.get("reply") and t["reply"].get("fallback"):
        t["reply"]["reason"] = "the harness's fallback line"
    return t


def sample_view(run: EvalRun, result: EvalResult, *, reveal: bool) -> dict[str, Any]:
    """What the label page shows of one sample: the comments, the room, the tool results the turn got, the reply and
    the turn in the preview transcript's event view. ``reveal=False`` (before the reviewer's label) hides the
    rules' verdict, the judges' verdicts and the hooks; ``reveal=True`` shows them."""
    data = _case_data(run, result.case_id)
    turn = eval_run_selectors.sample_turn(result, run, data)
    view: dict[str, Any] = {
        "result": result, "case_id": result.case_id, "sample": result.sample, "reply": result.reply,
        "comments": data.get("comments") or [], "room": eval_run_selectors.room_view(data.get("room") or {}),
        "tool_results": tool_results_from_events(result.events or []),
        "tool_results_shown": [
            {"tool": t["tool"], "error": t.get("error"),
             "arguments": json.dumps(t.get("arguments") or {}, ensure_ascii=False),
             "result": t["result"] if isinstance(t.get("result"), str)
             else json.dumps(t.get("result"), ensure_ascii=False, indent=1, default=str)}
            for t in tool_results_from_events(result.events or [])],
        "turn": turn if reveal else blind_turn(turn), "revealed": reveal,
    }
    if reveal:
        judges = (result.detail or {}).get("judges") or {}
        view["rules"] = {"accuracy": result.accuracy, "effectiveness": result.effectiveness, "solved": result.solved,
                         "problems": result.problems, "reason": result.reason, "fallback": result.fallback}
        view["judges"] = judges.get("verdicts") or []
        view["vote"] = judges.get("vote")
        view["others"] = list(result.human_labels.select_related("reviewer").order_by("created_at"))
    return view


# --- agreement ---------------------------------------------------------------------------------------------------


def _label_rows(labels) -> list[dict[str, Any]]:
    return [{"result": label.result_id, "reviewer": label.reviewer_id, "accuracy": label.accuracy,
             "effectiveness": label.effectiveness, "rules": (label.result.accuracy, label.result.effectiveness),
             "judges": (label.result.detail or {}).get("judges")}
            for label in labels]


def _labels_qs():
    return HumanLabel.objects.select_related("result").defer("result__events", "result__reply", "result__problems")


def run_agreement(run: EvalRun) -> dict[str, Any]:
    """Human labels of ``run`` against the rules, each judge, the judges' vote and each other."""
    return label_agreement(_label_rows(_labels_qs().filter(result__run=run).order_by("result_id", "created_at")))


def set_agreement(eval_set: EvalSet) -> dict[str, Any]:
    """The same over every run of every version of ``eval_set``, with the runs that have labels."""
    labels = _labels_qs().filter(result__run__eval_set_version__eval_set=eval_set).order_by("result_id", "created_at")
    out = label_agreement(_label_rows(labels))
    runs = (EvalRun.objects.filter(results__human_labels__isnull=False, eval_set_version__eval_set=eval_set)
            .select_related("eval_set_version").distinct().order_by("-created_at"))
    out["runs"] = list(runs)
    return out


def labelled_runs(eval_set: EvalSet | None = None):
    """Runs with at least one human label (newest first)."""
    qs = EvalRun.objects.filter(results__human_labels__isnull=False)
    if eval_set is not None:
        qs = qs.filter(eval_set_version__eval_set=eval_set)
    return qs.select_related("eval_set_version__eval_set").distinct().order_by("-created_at")
