"""Reads of evaluation runs: the list with its filters, a run's scores (stored once it ends, counted so far while it
runs), its per-case table, one case's samples with each turn folded for the preview room's event view, and the
latest scores of a model. The comparison of runs lives in :mod:`training_jobs.eval_run_compare`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db.models import Avg, Count, IntegerField, Q, QuerySet, Sum
from django.db.models.functions import Cast

from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion
from training_jobs.eval_run_models import EvalResult, EvalRun

RUN_RELATED = ("eval_set_version__eval_set", "harness_version__harness", "endpoint", "model", "created_by")
SCORE_KEYS = (("accuracy", "Accuracy"), ("effectiveness", "Effectiveness"), ("pass_k", "pass^k"),
              ("pass_1", "pass@1 (per sample)"))
IFEVAL_KEYS = (("prompt_strict", "Prompt-level strict"), ("instruction_strict", "Instruction-level strict"),
               ("prompt_loose", "Prompt-level loose"), ("instruction_loose", "Instruction-level loose"))
LEVELS = ("clean", "slight", "medium", "heavy", "union")  # T3 perturbation levels, mildest first (RoTBench)
FAULTS = ("timeout", "malformed", "permission_denied", "slow")


# --- lists and one run -------------------------------------------------------------------------------------------


def eval_run_list(*, eval_set: str | None = None, harness: str | None = None, endpoint: str | None = None,
                  model=None, status: str | None = None, kind: str | None = None) -> QuerySet[EvalRun]:
    """Runs, newest first, filtered by eval set name, harness slug, endpoint name, registered model id, status or
    set kind (each optional; the caller checks a model id is a UUID)."""
    qs = EvalRun.objects.select_related(*RUN_RELATED)
    if eval_set:
        qs = qs.filter(eval_set_version__eval_set__name=eval_set)
    if harness:
        qs = qs.filter(harness_version__harness__slug=harness)
    if endpoint:
        qs = qs.filter(endpoint__name=endpoint)
    if model:
        qs = qs.filter(model_id=model)
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(eval_set_version__eval_set__kind=kind)
    return qs


def eval_run_get(*, run_id) -> EvalRun:
    return EvalRun.objects.select_related(*RUN_RELATED).get(pk=run_id)


def filter_choices() -> dict[str, list[str]]:
    """The values the list's filters offer: sets, harnesses and endpoints that have runs, and models."""
    runs = EvalRun.objects.order_by()
    return {
        "eval_set": sorted(set(runs.values_list("eval_set_version__eval_set__name", flat=True))),
        "harness": sorted(set(runs.exclude(harness_version=None)
                              .values_list("harness_version__harness__slug", flat=True))),
        "endpoint": sorted(set(runs.values_list("endpoint__name", flat=True))),
        "model": [(str(pk), name) for pk, name in
                  runs.exclude(model=None).values_list("model_id", "model__name").distinct().order_by("model__name")],
    }


# --- scores ------------------------------------------------------------------------------------------------------


def scores_so_far(run: EvalRun) -> dict[str, Any]:
    """A running run's numbers, cheap enough for every refresh: samples stored, mean accuracy, effectiveness and
    solve rate per sample (no intervals: they come with the aggregates when it ends)."""
    agg = run.results.aggregate(samples=Count("id"), accuracy=Avg("accuracy"), effectiveness=Avg("effectiveness"),
                                solved=Sum(Cast("solved", IntegerField())), errors=Count("id", filter=~Q(error="")),
                                fallbacks=Count("id", filter=Q(fallback=True)), turn_s=Avg("turn_s"))
    agg["solved"] = agg["solved"] or 0
    agg["cases"] = run.results.values("case_id").distinct().count()
    return agg


def run_summary(run: EvalRun) -> dict[str, Any]:
    """The run's aggregates: those stored when it ended; for a run that ended without them (a failed or killed
    worker) those of the samples it stored; {} while it is active or has no sample."""
    if run.summary:
        return run.summary
    if run.is_active or not run.results.exists():
        return {}
    from training_jobs.eval_run_services import eval_run_summary

    return eval_run_summary(run)


def headline(run: EvalRun, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures a list row or a model page shows: harness sets accuracy, effectiveness and pass^k (score dicts
    with intervals); T4 the four IFEval figures of sample 0 (percent)."""
    s = run.summary if summary is None else summary
    if not s:
        return {}
    if run.eval_set_version.eval_set.kind == EvalSet.Kind.T4:
        figures = (s.get("ifeval") or {}).get("0") or {}
        return {"ifeval": figures, "latency": s.get("latency") or {}}
    return {key: s.get(key) for key, _ in SCORE_KEYS} | {"latency": s.get("latency") or {}}


def problem_rules(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"rule": rule, "count": count} for rule, count in (summary.get("problems") or {}).items()]


def ifeval_view(summary: dict[str, Any]) -> dict[str, Any] | None:
    """T4: the four figures per sample (sample 0 first: the official single-response metric) and sample 0's
    breakdown by instruction category."""
    ifeval = summary.get("ifeval") or {}
    if not ifeval:
        return None
    samples = [{"sample": int(k), **v} for k, v in sorted(ifeval.items(), key=lambda kv: int(kv[0]))]
    head = samples[0]
    categories = sorted(({"category": c, **v} for c, v in (head.get("by_category") or {}).items()),
                        key=lambda c: c["category"])
    return {"head": head, "samples": samples, "categories": categories}


# --- cases -------------------------------------------------------------------------------------------------------


def _facets(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in (text or "").strip("|").split("|"):
        key, sep, value = part.partition("=")
        if sep:
            out.setdefault(key, []).append(value)
    return out


def case_index(version: EvalSetVersion) -> dict[str, dict[str, Any]]:
    """Each case of a version by id: position, tags, perturbation level and tool faults (from the filter fields
    the set stores, without parsing the cases)."""
    out = {}
    for case_id, position, tags, facets_text in (EvalCase.objects.filter(version=version)
                                                 .values_list("case_id", "position", "tags", "facets_text")):
        facets = _facets(facets_text)
        out[case_id] = {"position": position, "tags": tags or [], "level": (facets.get("level") or [""])[0],
                        "faults": facets.get("fault") or []}
    return out


def case_group(info: dict[str, Any] | None) -> str:
    """The robustness column of a case: its tool fault ("fault:timeout") or else its perturbation level; "" for a
    case with neither (T1, T2, T4)."""
    if not info:
        return ""
    if info["faults"]:
        return "fault:" + info["faults"][0]
    return info["level"]


def _case_text(data: dict[str, Any]) -> str:
    comments = data.get("comments") or []
    return " · ".join(str(c.get("text", "")) for c in comments) or str(data.get("prompt") or "")


def case_rows(run: EvalRun, *, failed_only: bool = False, rule: str | None = None, tag: str | None = None
              ) -> list[dict[str, Any]]:
    """One row per case the run stored samples of, in the set's order: samples solved of those stored, mean
    accuracy and effectiveness, the rules that found problems, fallbacks, errors, mean turn time, sample 0's reply
    and (T4) the instructions not followed. Filters: ``failed_only`` (not every sample solved), ``rule`` (a
    sample has a problem of that rule), ``tag`` (the case carries it)."""
    index = case_index(run.eval_set_version)
    by_case: dict[str, dict[str, Any]] = {}
    fields = ("case_id", "position", "sample", "solved", "accuracy", "effectiveness", "problems", "turn_s", "error",
              "fallback", "reason", "reply", "detail")
    for r in run.results.order_by("position", "sample").values(*fields):
        row = by_case.get(r["case_id"])
        if row is None:
            info = index.get(r["case_id"]) or {}
            row = by_case[r["case_id"]] = {
                "case_id": r["case_id"], "position": r["position"], "samples": 0, "solved": 0, "accuracy": 0.0,
                "effectiveness": 0.0, "rules": {}, "fallbacks": 0, "errors": 0, "turn_s": 0.0, "reply": r["reply"],
                "reason": r["reason"], "tags": info.get("tags") or [], "group": case_group(info),
                "failed_instructions": []}
        row["samples"] += 1
        row["solved"] += int(r["solved"])
        row["accuracy"] += r["accuracy"]
        row["effectiveness"] += r["effectiveness"]
        row["fallbacks"] += int(r["fallback"])
        row["errors"] += int(bool(r["error"]))
        row["turn_s"] += r["turn_s"]
        for p in r["problems"] or []:
            name = str(p.get("rule") or p.get("id") or "other")
            row["rules"][name] = row["rules"].get(name, 0) + 1
        for instruction in (r["detail"] or {}).get("failed_strict") or []:
            if instruction not in row["failed_instructions"]:
                row["failed_instructions"].append(instruction)
    rows = []
    for row in by_case.values():
        n = row["samples"]
        row.update(accuracy=row["accuracy"] / n, effectiveness=row["effectiveness"] / n, turn_s=row["turn_s"] / n,
                   all_solved=row["solved"] == n, rules=sorted(row["rules"]))
        if failed_only and row["all_solved"]:
            continue
        if rule and rule not in row["rules"]:
            continue
        if tag and tag not in row["tags"]:
            continue
        rows.append(row)
    rows.sort(key=lambda r: r["position"])
    return rows


def attach_case_texts(version: EvalSetVersion, rows: Iterable[dict[str, Any]]) -> None:
    """Add each row's comment text (T4: the prompt), reading only those cases (a page of the table)."""
    rows = list(rows)
    raw = dict(EvalCase.objects.filter(version=version, case_id__in=[r["case_id"] for r in rows])
               .values_list("case_id", "case_json"))
    for row in rows:
        row["text"] = _case_text(json.loads(raw[row["case_id"]])) if row["case_id"] in raw else ""


def rule_choices(run: EvalRun) -> list[tuple[str, int]]:
    """The problem rules the run's samples hit, most frequent first (the per-case filter)."""
    counts: dict[str, int] = {}
    for problems in run.results.exclude(problems=[]).values_list("problems", flat=True):
        for p in problems or []:
            name = str(p.get("rule") or p.get("id") or "other")
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def tag_choices(run: EvalRun) -> list[str]:
    return sorted(((run.eval_set_version.facet_counts or {}).get("tag") or {}).keys())


def run_case(run: EvalRun, case_id: str) -> tuple[EvalCase, list[EvalResult]]:
    """A case of the run's set version and the run's samples of it (EvalCase.DoesNotExist when the set has no
    such case)."""
    case = EvalCase.objects.select_related("version__eval_set").get(version=run.eval_set_version, case_id=case_id)
    return case, list(run.results.filter(case_id=case_id).order_by("sample"))


def neighbour_cases(run: EvalRun, position: int) -> tuple[str | None, str | None]:
    """The previous and next case the run stored samples of."""
    results = run.results.order_by()
    prev = results.filter(position__lt=position).order_by("-position").values_list("case_id", flat=True).first()
    nxt = results.filter(position__gt=position).order_by("position").values_list("case_id", flat=True).first()
    return prev, nxt


def sample_turn(result: EvalResult, run: EvalRun, data: dict[str, Any]) -> dict[str, Any] | None:
    """A sample's engine events folded into the one turn the preview transcript shows
    (:func:`streams.selectors.fold_turns`), with what the room's own events would add (the harness, the endpoint,
    the faults in force) taken from the run and the case. None when the sample stored no event (T4, an error)."""
    from streams.selectors import fold_turns

    events = [{"seq": e.get("seq", i), "turn_id": e.get("turn_id") or "turn", "type": e.get("type", ""),
               "payload": e} for i, e in enumerate(result.events or []) if isinstance(e, dict)]
    turns = fold_turns(events)
    if not turns:
        return None
    turn = turns[0]
    if turn["started"] is None:
        faults = {key: (f.get("kind") if isinstance(f, dict) else f) for key, f in (data.get("tool_faults") or {}).items()}
        turn["started"] = {"minute": (data.get("room") or {}).get("clock_minute"),
                           "endpoint": {"name": run.endpoint.name, "model": run.endpoint.model}, "comments": len(data.get("comments") or []),
                           "history_messages": 0, "faults": faults}
        if run.harness_version is not None and not data.get("harness_variant"):
            turn["version"] = {"harness": run.harness_version.harness.slug, "number": run.harness_version.number}
    turn["state"] = turn["state"] if turn["reply"] or turn["state"] == "failed" else "failed"
    return turn


def room_view(room: dict[str, Any]) -> dict[str, Any] | None:
    """A case's room as the drill-down shows it: products, coupons, campaign, shipping."""
    if not room:
        return None
    campaign = room.get("campaign") or {}
    return {"products": room.get("products") or [], "coupons": room.get("coupons") or [],
            "phase": campaign.get("phase"), "flash_sale": campaign.get("flash_sale"),
            "clock_minute": room.get("clock_minute"), "currency": room.get("currency") or "",
            "shipping": room.get("shipping") or {}, "title": room.get("title") or room.get("room_id") or ""}


# --- a model's latest scores -------------------------------------------------------------------------------------


def model_latest_scores(model) -> list[dict[str, Any]]:
    """Per eval set, the latest succeeded run whose registered model is ``model``, with its headline figures."""
    seen: set[int] = set()
    out = []
    for run in (EvalRun.objects.filter(model=model, status=EvalRun.Status.SUCCEEDED).select_related(*RUN_RELATED)
                .order_by("-finished_at", "-created_at")):
        eval_set = run.eval_set_version.eval_set
        if eval_set.pk in seen:
            continue
        seen.add(eval_set.pk)
        out.append({"run": run, "eval_set": eval_set, "figures": headline(run)})
    return sorted(out, key=lambda r: (r["eval_set"].kind, r["eval_set"].name))


def latest_run_for(model, set_version: EvalSetVersion, harness_version) -> EvalRun | None:
    """The latest succeeded run of ``model`` on this set version under this harness version (None: T4)."""
    qs = EvalRun.objects.filter(model=model, eval_set_version=set_version, status=EvalRun.Status.SUCCEEDED)
    qs = qs.filter(harness_version__isnull=True) if harness_version is None else qs.filter(
        harness_version=harness_version)
    return qs.select_related(*RUN_RELATED).order_by("-finished_at", "-created_at").first()
