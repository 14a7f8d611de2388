"""The approval gate's evidence (reads): what the registry's review flow asks through
``settings.HAT_APPROVAL_EVIDENCE`` (harness_editor.gate), answered from evaluation runs.

For the version under review and each eval set its harness's :class:`~training_jobs.gate_models.GatePolicy`
requires, the evidence is the latest *finished* (succeeded, every case of the set) run of that version on the set's
pinned version against the policy's endpoint (and with its k / seed, when the policy fixes them): a run of the
version is what "attached" means — there is nothing else to attach. The baseline is the same for the version the
``production`` label points at. Rules, per set: the run exists; each minimum holds; each metric drops at most so
many points against production (the change per case, paired, with its 95 % bootstrap interval; when the policy
asks for it the interval must exclude a larger drop). IFEval (T4) runs use no harness: they are evidence about
the production model, with minimums only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.db.models import Q
from django.urls import NoReverseMatch, reverse

from harness_editor.gate import FlippedCase, GateEvidence, GateRule, MetricEvidence, Score, SetEvidence
from harness_editor.models import HarnessVersion, Label
from streams.labels import endpoint_label
from training_jobs.eval_models import EvalSet, EvalSetVersion
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.evals import runner
from training_jobs.gate_models import METRICS, GatePolicy, GateRequirement

NO_POLICY = "No evaluation gate is set for this harness: its versions are approved without evaluation evidence."
SWITCHED_OFF = "The evaluation gate of this harness is switched off: its versions are approved without evaluation " \
               "evidence."
IFEVAL_METRICS = ("prompt_strict", "instruction_strict", "prompt_loose", "instruction_loose")
SHOWN = {"t4": ("prompt_strict", "instruction_strict"), "": ("accuracy", "effectiveness", "pass_k")}
FLIPPED_SHOWN = 200  # flipped cases listed per set (the count is always whole)
CHANGE_CACHE_S = 7 * 24 * 3600


# --- links: the run pages, when they are mounted ----------------------------------------------------------------

def _url(name: str, *args: Any) -> str:
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return ""


def run_link(run: EvalRun | None) -> str:
    return _url("eval_runs:detail", run.pk) if run is not None else ""


def case_link(run: EvalRun | None, case_id: str) -> str:
    return _url("eval_runs:case", run.pk, case_id) if run is not None else ""


def compare_link(baseline: EvalRun | None, candidate: EvalRun | None) -> str:
    """The runs side by side, production first (the compare page takes the first run as its baseline)."""
    page = _url("eval_runs:compare") if baseline is not None and candidate is not None else ""
    return f"{page}?runs={baseline.pk},{candidate.pk}" if page else ""


# --- policy and runs ----------------------------------------------------------------------------------------------

def policy_for(harness) -> GatePolicy | None:
    """The harness's own policy (even when switched off), else the default one (harness empty), else None."""
    own = GatePolicy.objects.select_related("endpoint").filter(harness=harness).first()
    return own or GatePolicy.objects.select_related("endpoint").filter(harness__isnull=True).first()


def production_version(harness) -> HarnessVersion | None:
    label = Label.objects.select_related("version").filter(harness=harness, name="production").first()
    return label.version if label else None


def _runs(policy: GatePolicy, set_version: EvalSetVersion, harness_version: HarnessVersion | None):
    qs = EvalRun.objects.filter(eval_set_version=set_version, endpoint=policy.endpoint)
    qs = qs.filter(harness_version__isnull=True) if harness_version is None else qs.filter(
        harness_version=harness_version)
    if policy.k:
        qs = qs.filter(k=policy.k)
    if policy.seed is not None:
        qs = qs.filter(seed=policy.seed)
    return qs


def finished_run(policy: GatePolicy, set_version: EvalSetVersion, harness_version: HarnessVersion | None,
                 *, like: EvalRun | None = None) -> EvalRun | None:
    """The latest succeeded run over every case of ``set_version`` (``like``: prefer one with the same k and
    seed as that run, so a baseline is sampled the way the candidate was)."""
    qs = _runs(policy, set_version, harness_version).filter(status=EvalRun.Status.SUCCEEDED).filter(
        Q(max_cases__isnull=True) | Q(max_cases__gte=set_version.case_count)).order_by("-finished_at", "-created_at")
    if like is not None:
        same = qs.filter(k=like.k, seed=like.seed).first()
        if same is not None:
            return same
    return qs.first()


def active_run(policy: GatePolicy, set_version: EvalSetVersion,
               harness_version: HarnessVersion | None) -> EvalRun | None:
    return _runs(policy, set_version, harness_version).filter(status__in=EvalRun.ACTIVE).filter(
        Q(max_cases__isnull=True) | Q(max_cases__gte=set_version.case_count)).order_by("-created_at").first()


@dataclass(frozen=True)
class NeededRun:
    """A run the gate needs and does not have: what to start (training_jobs.gate_services.gate_runs_start)."""

    set_version: EvalSetVersion
    harness_version: HarnessVersion | None
    in_progress: EvalRun | None

    @property
    def label(self) -> str:
        what = (f"{self.harness_version.harness.slug} v{self.harness_version.number}" if self.harness_version
                else "no harness (IFEval)")
        return f"{self.set_version.eval_set.name} v{self.set_version.number} · {what}"


def _requirements(policy: GatePolicy) -> dict[EvalSet, list[GateRequirement]]:
    by_set: dict[EvalSet, list[GateRequirement]] = {}
    for req in policy.requirements.select_related("eval_set__pinned").order_by("eval_set__name", "metric"):
        by_set.setdefault(req.eval_set, []).append(req)
    return by_set


# --- scores ----------------------------------------------------------------------------------------------------

def _pct(value: Any) -> float | None:
    return None if value is None else 100.0 * float(value)


def metric_score(summary: dict[str, Any], metric: str) -> Score | None:
    """A metric of a run's summary in percent (T1–T3: mean with its 95 % interval; T4: IFEval's figure of
    sample 0, the official one-response score)."""
    if metric in IFEVAL_METRICS:
        figures = (summary.get("ifeval") or {}).get("0") or {}
        value = figures.get(metric)
        return None if value is None else Score(mean=float(value), n=figures.get("prompts"))
    data = summary.get(metric) or {}
    if data.get("mean") is None:
        return None
    return Score(mean=_pct(data["mean"]), ci_low=_pct(data.get("ci_low")), ci_high=_pct(data.get("ci_high")),
                 n=data.get("n"))


def per_case(run: EvalRun) -> dict[str, dict[str, float]]:
    """Each case's accuracy, effectiveness, solve rate (pass_1) and pass^k (all k solved) over its samples."""
    by_case: dict[str, list[tuple[float, float, bool]]] = {}
    for case_id, acc, eff, solved in EvalResult.objects.filter(run=run).values_list(
            "case_id", "accuracy", "effectiveness", "solved"):
        by_case.setdefault(case_id, []).append((acc, eff, solved))
    out = {}
    for case_id, rows in by_case.items():
        n = len(rows)
        out[case_id] = {"accuracy": sum(r[0] for r in rows) / n, "effectiveness": sum(r[1] for r in rows) / n,
                        "pass_1": sum(r[2] for r in rows) / n, "pass_k": float(all(r[2] for r in rows))}
    return out


def paired_change(candidate: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]],
                  metric: str) -> tuple[float, float | None, float | None] | None:
    """The mean per-case change of ``metric`` in points on the cases both runs scored, with its 95 % bootstrap
    interval; None when they share no case."""
    common = sorted(set(candidate) & set(baseline))
    if not common:
        return None
    diffs = [100.0 * (candidate[c][metric] - baseline[c][metric]) for c in common]
    ci = runner.bootstrap_ci(diffs, seed=0)
    return sum(diffs) / len(diffs), (ci[0] if ci else None), (ci[1] if ci else None)


def run_change(candidate: EvalRun, baseline: EvalRun, metric: str, candidate_cases: dict[str, dict[str, float]],
               baseline_cases: dict[str, dict[str, float]]) -> tuple[float, float | None, float | None] | None:
    """:func:`paired_change` of two finished runs, cached: a succeeded run's results never change again, and the
    bootstrap costs a fraction of a second per metric, on every page view and approval otherwise."""
    key = f"gate:change:{candidate.pk}:{baseline.pk}:{metric}"
    try:
        hit = cache.get(key)
    except Exception:  # the cache (Redis) is an optimisation here: without it the change is computed
        hit = None
    if hit is not None:
        return tuple(hit) if hit else None
    change = paired_change(candidate_cases, baseline_cases, metric)
    try:
        cache.set(key, list(change) if change else [], timeout=CHANGE_CACHE_S)
    except Exception:
        pass
    return change


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _score_text(score: Score) -> str:
    if score.ci_low is not None and score.ci_high is not None:
        return f"{_fmt(score.mean)} (95 % CI {_fmt(score.ci_low)}–{_fmt(score.ci_high)})"
    return _fmt(score.mean)


def _run_text(run: EvalRun) -> str:
    when = run.finished_at.strftime("%Y-%m-%d %H:%M") if run.finished_at else "?"
    return f"run “{run.name}” finished {when} (k={run.k}, seed {run.seed})"


# --- the evidence ---------------------------------------------------------------------------------------------

def _metrics_shown(kind: str, reqs: Iterable[GateRequirement]) -> list[str]:
    shown = list(SHOWN["t4" if kind == "t4" else ""])
    for r in reqs:
        if r.metric not in shown:
            shown.append(r.metric)
    return shown


def _set_evidence(policy: GatePolicy, version: HarnessVersion, baseline: HarnessVersion | None,
                  baseline_note: str, eval_set: EvalSet, reqs: list[GateRequirement]
                  ) -> tuple[list[GateRule], SetEvidence, list[NeededRun]]:
    rules: list[GateRule] = []
    needed: list[NeededRun] = []
    pinned = eval_set.pinned
    set_link = _url("evals:set", eval_set.name)
    if pinned is None:
        rules.append(GateRule(name=f"{eval_set.name}: pinned version", passed=False, link=set_link,
                              detail=f"no version of {eval_set.name} is pinned; an ML lead pins the version the gate "
                                     "evaluates on, on the eval set's page"))
        return rules, SetEvidence(eval_set=eval_set.name, set_version="not pinned"), needed
    t4 = eval_set.kind == "t4"
    subject = None if t4 else version
    set_label = f"{eval_set.name} v{pinned.number}"
    run = finished_run(policy, pinned, subject)
    if run is not None:
        rules.append(GateRule(name=f"{set_label}: finished run", passed=True, link=run_link(run),
                              detail=_run_text(run) + (" — IFEval runs use no harness: this is evidence about the "
                                                       "production model" if t4 else "")))
    else:
        active = active_run(policy, pinned, subject)
        needed.append(NeededRun(pinned, subject, active))
        who = f"of the production model ({policy.endpoint.name})" if t4 else f"of v{version.number}"
        constraints = "".join([f", k={policy.k}" if policy.k else "",
                               f", seed {policy.seed}" if policy.seed is not None else ""])
        detail = f"no finished run {who} on {set_label} (all {pinned.case_count} cases) against endpoint " \
                 f"{policy.endpoint.name}{constraints}"
        if active is not None:
            detail += f"; one is {active.status} ({active.percent} %)"
        rules.append(GateRule(name=f"{set_label}: finished run", passed=False, detail=detail,
                              link=run_link(active)))

    # the baseline: the production version's run (shown whenever there is one; needed when a regression rule asks)
    compare = not t4 and baseline is not None
    base_run = finished_run(policy, pinned, baseline, like=run) if compare else None
    if compare and base_run is None and any(r.max_drop is not None for r in reqs):
        needed.append(NeededRun(pinned, baseline, active_run(policy, pinned, baseline)))
    both = run is not None and base_run is not None
    cand_cases = per_case(run) if both else {}
    base_cases = per_case(base_run) if both else {}
    changes: dict[str, Any] = {}

    def change_of(metric: str) -> tuple[float, float | None, float | None] | None:
        if metric not in changes:
            changes[metric] = run_change(run, base_run, metric, cand_cases, base_cases) if both else None
        return changes[metric]

    cand_summary = run.summary if run is not None else {}
    base_summary = base_run.summary if base_run is not None else {}
    for req in reqs:
        label = METRICS[req.metric][0]
        score = metric_score(cand_summary, req.metric)
        if req.minimum is not None:
            name = f"{set_label}: {label} ≥ {req.minimum:g}"
            if run is None:
                rules.append(GateRule(name=name, passed=False, detail="no finished run to score"))
            elif score is None or score.mean is None:
                rules.append(GateRule(name=name, passed=False, link=run_link(run),
                                      detail=f"the run has no {label} figure"))
            else:
                ok = score.mean >= req.minimum
                rules.append(GateRule(name=name, passed=ok, link=run_link(run),
                                      detail=f"{_score_text(score)} {'≥' if ok else '<'} {req.minimum:g}"))
        if req.max_drop is not None:
            name = f"{set_label}: {label} drops at most {req.max_drop:g} points against production"
            if t4:
                rules.append(GateRule(name=name, passed=True, detail="IFEval runs use no harness: nothing to compare"))
            elif baseline is None:
                rules.append(GateRule(name=name, passed=True, detail=f"nothing to compare: {baseline_note}"))
            elif run is None:
                rules.append(GateRule(name=name, passed=False, detail=f"no finished run of v{version.number} to "
                                                                      "compare"))
            elif base_run is None:
                rules.append(GateRule(name=name, passed=False,
                                      detail=f"no finished run of production v{baseline.number} on {set_label} "
                                             f"against endpoint {policy.endpoint.name} to compare with"))
            else:
                change = change_of(req.metric)
                if change is None:
                    rules.append(GateRule(name=name, passed=False, link=run_link(run),
                                          detail="the two runs share no case"))
                    continue
                mean, low, high = change
                if policy.regression_needs_ci:
                    ok = low is not None and low >= -req.max_drop
                    why = (f"change {mean:+.1f} points (95 % CI {_fmt(low)} to {_fmt(high)}): the interval "
                           f"{'excludes' if ok else 'does not exclude'} a drop of more than {req.max_drop:g}")
                else:
                    ok = mean >= -req.max_drop
                    why = (f"change {mean:+.1f} points (95 % CI {_fmt(low)} to {_fmt(high)}) against "
                           f"v{baseline.number}: {'within' if ok else 'more than'} the allowed {req.max_drop:g}")
                rules.append(GateRule(name=name, passed=ok, detail=why, link=run_link(run)))

    metrics: list[MetricEvidence] = []
    for metric in _metrics_shown(eval_set.kind, reqs):
        cand = metric_score(cand_summary, metric)
        base = metric_score(base_summary, metric)
        change = change_of(metric) if metric not in IFEVAL_METRICS else None
        metrics.append(MetricEvidence(metric=metric, label=METRICS[metric][0], candidate=cand, baseline=base,
                                      delta=change[0] if change else None,
                                      delta_ci_low=change[1] if change else None,
                                      delta_ci_high=change[2] if change else None))
    regressions: tuple[FlippedCase, ...] = ()
    fixes: tuple[FlippedCase, ...] = ()
    note = ""
    if cand_cases and base_cases:
        flips = runner.flipped({c: v["pass_1"] for c, v in base_cases.items()},
                               {c: v["pass_1"] for c, v in cand_cases.items()})
        regressions = tuple(FlippedCase(c, case_link(run, c), case_link(base_run, c))
                            for c in flips["regressions"][:FLIPPED_SHOWN])
        fixes = tuple(FlippedCase(c, case_link(run, c), case_link(base_run, c)) for c in flips["fixes"][:FLIPPED_SHOWN])
        note = (f"{len(flips['regressions'])} case(s) solved by production v{baseline.number} and not by this "
                f"version; {len(flips['fixes'])} the other way")
    elif t4:
        note = "IFEval runs use no harness: the scores are the production model's"
    elif baseline is None:
        note = f"nothing to compare: {baseline_note}"
    elif run is not None and base_run is None:
        note = f"no finished run of production v{baseline.number} on {set_label} to compare with"
    evidence = SetEvidence(eval_set=eval_set.name, set_version=f"v{pinned.number}",
                           run_id=str(run.pk) if run else "", run_name=run.name if run else "", run_link=run_link(run),
                           baseline_run_id=str(base_run.pk) if base_run else "",
                           baseline_run_name=base_run.name if base_run else "", baseline_run_link=run_link(base_run),
                           compare_link=compare_link(base_run, run),
                           metrics=tuple(metrics), regressions=regressions, fixes=fixes, note=note)
    return rules, evidence, needed


def _policy_lines(policy: GatePolicy, by_set: dict[EvalSet, list[GateRequirement]]) -> list[str]:
    by = f" by {policy.updated_by.get_username()}" if policy.updated_by else ""
    lines = [f"Policy: {'this harness' if policy.harness_id else 'the default for every harness without its own'}"
             f" (updated {policy.updated_at:%Y-%m-%d}{by})",
             f"Production model: endpoint {endpoint_label(policy.endpoint, with_model=True)}"]
    if policy.k or policy.seed is not None:
        lines.append("Runs must use " + ", ".join(([f"k={policy.k}"] if policy.k else [])
                                                    + ([f"seed {policy.seed}"] if policy.seed is not None else [])))
    for eval_set, reqs in by_set.items():
        pinned = f"pinned v{eval_set.pinned.number}, {eval_set.pinned.case_count} cases" if eval_set.pinned else \
            "not pinned"
        parts = []
        for r in reqs:
            label = METRICS[r.metric][0]
            if r.minimum is not None:
                parts.append(f"{label} ≥ {r.minimum:g}")
            if r.max_drop is not None:
                parts.append(f"{label} drops at most {r.max_drop:g} points against production")
        lines.append(f"Required: {eval_set.name} ({pinned})" + (": " + "; ".join(parts) if parts else
                                                                 ": a finished run"))
    if policy.regression_needs_ci:
        lines.append("Regressions are judged on the 95 % interval of the per-case change, not on the means alone")
    if policy.note:
        lines.append(f"Note: {policy.note}")
    return lines


def approval_evidence(version: HarnessVersion) -> GateEvidence:
    """The gate's answer for ``version`` (the provider ``settings.HAT_APPROVAL_EVIDENCE`` names)."""
    return _evaluate(version)[1]


def needed_runs(version: HarnessVersion) -> tuple[GatePolicy | None, list[NeededRun]]:
    """The runs (of ``version``, and of the production version where a regression rule needs one) the gate needs
    and has no finished one of; each says whether one is in progress."""
    policy, _evidence, needed = _evaluate(version)
    return policy, needed


def _evaluate(version: HarnessVersion) -> tuple[GatePolicy | None, GateEvidence, list[NeededRun]]:
    policy = policy_for(version.harness)
    if policy is None:
        return None, GateEvidence.off(NO_POLICY), []
    if not policy.enabled:
        return policy, GateEvidence.off(SWITCHED_OFF), []
    by_set = _requirements(policy)
    baseline = production_version(version.harness)
    if baseline is None:
        baseline_note, baseline_text = "no version carries the production label", "no production version"
    elif baseline.pk == version.pk:
        baseline_note = baseline_text = f"v{version.number} is the production version"
        baseline = None
    else:
        baseline_note, baseline_text = "", f"production → v{baseline.number}"
    rules: list[GateRule] = []
    sets: list[SetEvidence] = []
    needed: list[NeededRun] = []
    if not by_set:
        rules.append(GateRule(name="policy: required eval sets", passed=False,
                              link=_url("admin:training_jobs_gatepolicy_change", policy.pk),
                              detail="the policy requires no eval set, so no evidence can satisfy it; an "
                                     "administrator adds the required sets"))
    for eval_set, reqs in by_set.items():
        set_rules, evidence, set_needed = _set_evidence(policy, version, baseline, baseline_note, eval_set, reqs)
        rules += set_rules
        sets.append(evidence)
        needed += set_needed
    passed = all(r.passed for r in rules)
    failing = sum(not r.passed for r in rules)
    summary = ("The evaluation gate passes: every rule of the policy holds." if passed else
               f"The evaluation gate fails: {failing} of {len(rules)} rule{'s' if len(rules) != 1 else ''} "
               f"do{'es' if failing == 1 else ''} not hold.")
    startable = [n for n in needed if n.in_progress is None]
    return policy, GateEvidence(
        enabled=True, passed=passed, summary=summary, rules=tuple(rules), sets=tuple(sets),
        policy=tuple(_policy_lines(policy, by_set)), baseline=baseline_text,
        start_url=_url("gate:start_runs", version.harness.slug, version.number) if startable else "",
        missing_runs=tuple(n.label + (f" (in progress: {n.in_progress.status})" if n.in_progress else "")
                           for n in needed)), needed
