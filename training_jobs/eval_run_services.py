"""Evaluation runs (writes): start, cancel, resume, and the worker's run of every case through the one turn engine.

A run is a job (:mod:`console.jobs`) on the ``gpu`` queue: interactive preview turns never wait behind it. The
worker (:func:`eval_run_execute`) plays each case ``k`` times (sample ``j`` with seed ``seed + j``) through
:func:`training_jobs.evals.runner.run_case` under the run's harness version — for T2 / T3 cases the case's
held-out variant or perturbation of it — judges each sample with the one set of reply rules
(:func:`training_jobs.evals.judging.judge_case`) and stores it as an :class:`EvalResult` at once. A cancelled,
failed or killed run resumes where it stopped: samples already stored are not played again. At the end the
aggregates (scores with 95 % bootstrap intervals, pass^k, latency; for T4 the IFEval scores) are stored in
``summary``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from console import roles
from console.errors import ValidationFailed
from console.jobs import (
    JobCancelled,
    JobReporter,
    job_cancel,
    job_enqueue,
    job_resume,
    job_run,
)
from console.services import audit_record
from harness_editor.selectors import harness_version_by_ref
from streams.sampling import validate_sampling
from training_jobs.eval_models import EvalSetVersion
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.services.access import require, require_manager

logger = logging.getLogger(__name__)

MAX_K = 16
EVENTS_KEPT_PER_SAMPLE = 400  # a runaway turn's token events are thinned to this many (drill-down stays usable)


def _bounded_int(value: Any, path: str, lo: int, hi: int, errors: list[dict[str, str]]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not (lo <= value <= hi):
        errors.append({"path": path, "message": f"a whole number from {lo} to {hi}"})
        return None
    return value


def eval_run_start(*, user, eval_set_version: EvalSetVersion, endpoint, harness_version=None, model=None,
                   sampling: Any = None, k: int = 1, seed: int = 0, max_cases: int | None = None,
                   deadline_s: float | None = None, name: str = "", judges: Any = None,
                   enqueue: bool = True) -> EvalRun:
    """Queue an evaluation run (on commit, ``gpu`` queue; ``enqueue=False``: only create it, for
    :func:`eval_run_execute` in this process — ``manage.py run_eval``). Harness sets (T1–T3) need a harness version; T4
    (IFEval) takes none. ``judges``: names of model endpoints that also judge each sample (training_jobs.eval_judges;
    the rules stay the score of record). Raises NotAllowed for roles that may not evaluate, ValidationFailed (located errors)
    for a bad request (nothing saved), OutboundRefused when the endpoint may not be used."""
    require(user, roles.RUN_EVAL, "launch evaluation runs")
    errors: list[dict[str, str]] = []
    kind = eval_set_version.eval_set.kind
    if kind == "t4":
        if harness_version is not None:
            errors.append({"path": "harness_version", "message": "an IFEval (T4) run uses no harness: leave it empty"})
    elif harness_version is None:
        errors.append({"path": "harness_version", "message": f"a {kind.upper()} run needs the harness version its "
                                                               "cases run under"})
    k = _bounded_int(k, "k", 1, MAX_K, errors) or 1
    seed = _bounded_int(seed, "seed", 0, 2**31 - 1, errors) or 0
    max_cases = _bounded_int(max_cases, "max_cases", 1, eval_set_version.case_count or 1, errors)
    if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float))
                                   or not (0 < deadline_s <= 600)):
        errors.append({"path": "deadline_s", "message": "seconds, more than 0 and at most 600"})
    try:
        parsed_sampling = validate_sampling(sampling)
    except ValidationFailed as exc:
        errors += exc.errors
    from training_jobs.eval_judges import validate_judges

    judge_names = validate_judges(judges, errors, kind=kind)
    if errors:
        raise ValidationFailed("the evaluation run is not valid", errors=errors)
    endpoint.check_usable()
    if model is None:
        from training_jobs.models import TrainedModel

        model = TrainedModel.objects.filter(endpoint=endpoint).order_by("-created_at").first()
    what = harness_version.harness.slug + f" v{harness_version.number}" if harness_version is not None else "IFEval"
    name = (name or "").strip()[:120] or f"{eval_set_version.eval_set.name} v{eval_set_version.number} · {what} · " \
                                          f"{endpoint.name}"[:120]
    cases = min(eval_set_version.case_count, max_cases or eval_set_version.case_count)
    with transaction.atomic():
        run = EvalRun.objects.create(name=name[:120], eval_set_version=eval_set_version, harness_version=harness_version,
                                     endpoint=endpoint, model=model, sampling=parsed_sampling, k=k, seed=seed,
                                     max_cases=max_cases, deadline_s=deadline_s, created_by=user,
                                     progress_total=cases * k, judges=judge_names)
        audit_record(actor=user, action="eval.queued", scope=run.audit_scope(), target=run.audit_target(),
                     to_state=EvalRun.Status.QUEUED,
                     data={"eval_set": eval_set_version.eval_set.name, "set_version": eval_set_version.number,
                           "harness_version": str(harness_version.pk) if harness_version else None,
                           "endpoint": endpoint.name, "k": k, "seed": seed, "sampling": parsed_sampling,
                           "judges": judge_names})
        if enqueue:
            job_enqueue(run)
    return run


def eval_run_cancel(*, user, run: EvalRun) -> EvalRun:
    """The one cancel (console.jobs): queued → cancelled now; running → cancelling, stops after its current
    sample. Resumable."""
    require(user, roles.RUN_EVAL, "cancel evaluation runs")
    require_manager(user, run.created_by, "cancel this run")
    return job_cancel(run, user=user)


def eval_run_resume(*, user, run: EvalRun) -> EvalRun:
    """Queue a cancelled or failed run again: it plays only the samples not stored yet."""
    require(user, roles.RUN_EVAL, "resume evaluation runs")
    require_manager(user, run.created_by, "resume this run")
    return job_resume(run, user=user)


# --- the worker --------------------------------------------------------------------------------------------------


class _RunReporter(JobReporter):
    def on_progress(self) -> None:
        poke_eval_watchers(self.pk)


def eval_group(run_id: Any) -> str:
    return f"eval-{run_id}"


EVAL_PROGRESS_MESSAGE_TYPE = "eval.progress"


def poke_eval_watchers(run_id: Any) -> None:
    """Tell the run page's WebSockets that new progress is stored (they read it from the database)."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        async_to_sync(get_channel_layer().group_send)(eval_group(run_id), {"type": EVAL_PROGRESS_MESSAGE_TYPE})
    except Exception:  # the layer is down: the page's polling picks the progress up from the database
        logger.warning("poking the watchers of evaluation run %s failed", run_id, exc_info=True)


def run_cases(run: EvalRun) -> list[Any]:
    """The cases a run plays, in their set's order (the first ``max_cases`` when set)."""
    from training_jobs.evals.cases import parse_case

    rows = run.eval_set_version.cases.order_by("position").values_list("position", "case_json")
    if run.max_cases:
        rows = rows[: run.max_cases]
    import json

    return [(position, parse_case(json.loads(raw))) for position, raw in rows]


def case_manifest(case: Any, base: Any) -> Any:
    """The harness state a case runs under: the run's version, or its T2 held-out variant / T3 perturbation."""
    variant = getattr(case, "harness_variant", None)
    if variant is None:
        return base
    if variant.kind == "heldout":
        from training_jobs.evals.t2 import variant_manifest

        return variant_manifest(case, base)
    from training_jobs.evals.t3 import perturbed_manifest

    return perturbed_manifest(case, base)


def _thin(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(events) <= EVENTS_KEPT_PER_SAMPLE:
        return events
    keep = [e for e in events if e.get("type") != "token"]
    return keep[:EVENTS_KEPT_PER_SAMPLE]


def _store(run: EvalRun, position: int, outcome: Any, detail: dict[str, Any] | None = None) -> None:
    EvalResult.objects.update_or_create(
        run=run, case_id=outcome.case_id, sample=outcome.sample,
        defaults={"position": position, "accuracy": outcome.accuracy, "effectiveness": outcome.effectiveness,
                  "solved": outcome.solved, "reply": outcome.reply[:20000], "reason": outcome.reason[:64],
                  "fallback": outcome.fallback, "problems": outcome.problems[:50], "events": _thin(outcome.events),
                  "detail": detail or {}, "turn_s": outcome.turn_s, "ttft_s": outcome.ttft_s,
                  "decode_tps": outcome.decode_tps, "error": outcome.error[:2000]})


def _outcomes(run: EvalRun) -> list[Any]:
    from training_jobs.evals.runner import SampleOutcome

    return [SampleOutcome(case_id=r.case_id, sample=r.sample, reply=r.reply, reason=r.reason, fallback=r.fallback,
                          accuracy=r.accuracy, effectiveness=r.effectiveness, problems=r.problems, turn_s=r.turn_s,
                          ttft_s=r.ttft_s, decode_tps=r.decode_tps, error=r.error)
            for r in run.results.order_by("position", "sample")]


def eval_run_summary(run: EvalRun) -> dict[str, Any]:
    """The aggregates of what a run stored so far (harness sets: runner.aggregate; T4: IFEval scores)."""
    from training_jobs.evals import runner

    outcomes = _outcomes(run)
    summary = runner.aggregate(outcomes, k=run.k, seed=run.seed)
    if run.kind == "t4":
        summary["ifeval"] = _ifeval_summary(run)
    if run.judges:
        from training_jobs.eval_judges import run_judges_summary

        summary["judges"] = run_judges_summary(run)
    return summary


def _ifeval_prompt(position: int, case: Any):
    from training_jobs.evals.ifeval import IFEvalPrompt

    tail = case.id.rsplit("-", 1)[-1]
    return IFEvalPrompt(key=int(tail) if tail.isdigit() else position, prompt=case.prompt,
                        instruction_ids=tuple(case.instruction_id_list), kwargs=tuple(dict(k) for k in case.kwargs))


def _ifeval_summary(run: EvalRun) -> dict[str, Any]:
    """IFEval's four figures per sample index (the official metric scores one response per prompt: sample 0 is
    the headline, the others show the spread over k), on the prompts that sample answered."""
    from training_jobs.evals.ifeval import score_responses

    prompts = {case.id: _ifeval_prompt(position, case) for position, case in run_cases(run)}
    by_sample: dict[int, dict[int, str]] = {}
    for case_id, sample, reply in run.results.values_list("case_id", "sample", "reply"):
        if case_id in prompts:
            by_sample.setdefault(sample, {})[prompts[case_id].key] = reply
    out: dict[str, Any] = {}
    for sample, responses in sorted(by_sample.items()):
        answered = [p for p in prompts.values() if p.key in responses]
        scores = score_responses(answered, responses)
        out[str(sample)] = {**scores.percentages(), "prompts": scores.n_prompts,
                            "by_category": {k: {"strict": round(100 * v.strict, 2), "loose": round(100 * v.loose, 2),
                                                "count": v.count} for k, v in scores.by_category.items()}}
    return out


def _judge(base: Any = None):
    """The rules' judge; ``base`` (the run's harness) is what a case's ``tool`` calls are written in when the case
    runs under a T2/T3 variant of it."""
    from functools import partial

    from training_jobs.evals.judging import judge_case

    return partial(judge_case, base_manifest=base)


def _play(run: EvalRun, reporter: JobReporter, *, backend_factory: Callable[[], Any] | None = None,
          on_sample: Callable[[Any, int, int], None] | None = None) -> dict[str, Any]:
    from streams.engine.client import OpenAIChatClient
    from training_jobs.evals import runner

    cases = run_cases(run)
    done = set(run.results.values_list("case_id", "sample"))
    total = len(cases) * run.k
    reporter.stage("playing cases")
    reporter.progress(len(done), total, force=True)
    base = run.harness_version.manifest if run.harness_version is not None else None
    judge = _judge(base) if base is not None else None
    backend = backend_factory() if backend_factory is not None else OpenAIChatClient(run.endpoint.as_config())
    from training_jobs import eval_judges

    judges = eval_judges.open_judges(run) if base is not None and run.judges else []
    from streams.services.tool_runtime import tool_runtime_for

    tools = tool_runtime_for()  # what the version's tool bindings may reach on this worker: as a preview turn
    try:
        for position, case in cases:
            for sample in range(run.k):
                if (case.id, sample) in done:
                    continue
                if reporter.cancel_requested(force=True):  # a sample takes long: one read each
                    raise JobCancelled(summary=eval_run_summary(run))
                seed = run.seed + sample
                try:
                    if base is None:
                        outcome = runner.run_instruction_case(case, sample, backend=backend, sampling=run.sampling,
                                                              seed=seed)
                    else:
                        outcome = runner.run_case(case, sample, manifest=case_manifest(case, base), backend=backend,
                                                  judge=judge, sampling=run.sampling, seed=seed,
                                                  deadline_s=run.deadline_s, tools=tools)
                except Exception as exc:  # this case cannot run (bad variant, engine bug): judged 0, the run goes on
                    logger.warning("eval run %s: case %s sample %s failed", run.pk, case.id, sample, exc_info=True)
                    outcome = runner.SampleOutcome(case_id=case.id, sample=sample, reply="", reason="internal_error",
                                                   fallback=True, accuracy=0.0, effectiveness=0.0,
                                                   error=f"{type(exc).__name__}: {exc}")
                # judge models after the rules: their verdicts and vote go with the sample, the rules' stay its score
                judged = eval_judges.judge_outcome(run, case, outcome, judges) if judges else None
                _store(run, position, outcome, {"judges": judged} if judged is not None else None)
                done.add((case.id, sample))
                reporter.progress(len(done), total)
                if on_sample is not None:
                    on_sample(outcome, len(done), total)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
        eval_judges.close_judges(judges)
    reporter.stage("scoring")
    if base is None:
        _mark_ifeval_results(run)
    return {"summary": eval_run_summary(run), "progress_done": total, "progress_total": total}


def _mark_ifeval_results(run: EvalRun) -> None:
    """T4 samples are judged at the end: each one's per-instruction verdicts are stored with it; solved and
    accuracy = every instruction followed (strict), effectiveness = the same, loose."""
    from training_jobs.evals.ifeval import score_prompt

    prompts = {case.id: _ifeval_prompt(position, case) for position, case in run_cases(run)}
    for r in run.results.all():
        prompt = prompts.get(r.case_id)
        if prompt is None:
            continue
        result, _ = score_prompt(prompt, r.reply)
        detail = {"strict": result.strict, "loose": result.loose, "failed_strict": result.failed("strict"),
                  "failed_loose": result.failed("loose"),
                  "instructions": [{"id": i.instruction_id, "kwargs": i.kwargs, "strict": i.strict, "loose": i.loose}
                                   for i in result.instructions]}
        EvalResult.objects.filter(pk=r.pk).update(detail=detail, solved=result.strict,
                                                  accuracy=float(result.strict), effectiveness=float(result.loose))


def eval_run_execute(*, run_id, task_id: str | None = None, backend_factory: Callable[[], Any] | None = None,
                     on_sample: Callable[[Any, int, int], None] | None = None) -> EvalRun:
    """The worker's service: claim the run, play what is left, store the aggregates. Never raises for a failed
    run (the failure is stored; it can be resumed). ``backend_factory`` replaces the endpoint's client (a few
    tests); ``on_sample(outcome, done, total)`` is called after each stored sample (the CLI's progress bar)."""
    run = EvalRun.objects.select_related("eval_set_version__eval_set", "harness_version__harness", "endpoint").get(
        pk=run_id)
    return job_run(EvalRun, run.pk, lambda job: _play(run, _RunReporter(job), backend_factory=backend_factory,
                                                  on_sample=on_sample),
                   task_id=task_id, stage="starting")


# --- evaluation at the end of a training job -------------------------------------------------------------------

MAX_AUTO_EVALUATIONS = 8


def _set_version_of(name: str) -> EvalSetVersion | None:
    from training_jobs.eval_models import EvalSet

    eval_set = EvalSet.objects.select_related("pinned").filter(name=name).first()
    if eval_set is None:
        return None
    return eval_set.pinned or eval_set.versions.order_by("-number").first()


def validate_auto_evaluations(specs: Any, *, path: str = "evaluate") -> list[dict[str, Any]]:
    """The evaluations a training job runs on the model it registers last, as stored on the job: a list of
    ``{"eval_set": NAME, "harness": "SLUG@LABEL"|"SLUG@N" (not for T4), "max_cases": N, "k": K}``. The harness
    label is resolved when the job ends (``production`` then, not now). ValidationFailed with located errors."""
    if specs in (None, "", []):
        return []
    if not isinstance(specs, list):
        raise ValidationFailed("evaluate must be a list", errors=[{"path": path, "message": "a list of "
                                                                   "{eval_set, harness, max_cases, k}"}])
    errors: list[dict[str, str]] = []
    if len(specs) > MAX_AUTO_EVALUATIONS:
        errors.append({"path": path, "message": f"at most {MAX_AUTO_EVALUATIONS} evaluations"})
    out = []
    for i, spec in enumerate(specs[:MAX_AUTO_EVALUATIONS]):
        at = f"{path}.{i}"
        if not isinstance(spec, Mapping):
            errors.append({"path": at, "message": "an object {eval_set, harness, max_cases, k}"})
            continue
        unknown = sorted(set(spec) - {"eval_set", "harness", "max_cases", "k"})
        errors += [{"path": f"{at}.{key}", "message": "unknown field"} for key in unknown]
        name = spec.get("eval_set")
        version = _set_version_of(name) if isinstance(name, str) else None
        if version is None:
            errors.append({"path": f"{at}.eval_set", "message": "the name of an eval set with a version"})
            continue
        harness = spec.get("harness")
        if version.eval_set.kind == "t4":
            if harness not in (None, ""):
                errors.append({"path": f"{at}.harness", "message": "an IFEval (T4) run uses no harness"})
            harness = None
        elif not isinstance(harness, str) or harness_version_by_ref(harness) is None:
            errors.append({"path": f"{at}.harness", "message": "SLUG@LABEL or SLUG@N of an existing harness version"})
        max_cases = _bounded_int(spec.get("max_cases"), f"{at}.max_cases", 1, version.case_count or 1, errors)
        k = _bounded_int(spec.get("k", 1), f"{at}.k", 1, MAX_K, errors) or 1
        out.append({"eval_set": name, "harness": harness, "max_cases": max_cases, "k": k})
    if errors:
        raise ValidationFailed("the evaluations to run after training are not valid", errors=errors)
    return out


def eval_runs_after_training(*, job, model, log: Callable[[str], None]) -> list[EvalRun]:
    """Queue the job's evaluations of ``model`` (on the worker, when the job succeeded): the model is served on
    this host (training_jobs.services.serving.model_serve_run: its endpoint stays, as if served from the
    console) and each evaluation is queued on the gpu queue as its owner, where it runs after this job. A problem
    is logged, never fails the training job."""
    from training_jobs.services.serving import model_serve_run

    if not job.evaluate:
        return []
    if model.is_adapter:  # the local server loads full models only; an adapter is served by vLLM over its base
        log(f"evaluation after training not queued: {model.name} is a LoRA adapter; load it into a vLLM server "
            f"(Serving) and evaluate that endpoint")
        return []
    try:
        model = model_serve_run(model_id=model.pk)
    except Exception as exc:
        log(f"evaluation after training not queued: serving {model.name} failed: {type(exc).__name__}: {exc}")
        return []
    runs = []
    for spec in job.evaluate:
        version = _set_version_of(spec["eval_set"])
        harness = harness_version_by_ref(spec["harness"]) if spec.get("harness") else None
        try:
            if version is None:
                raise ValidationFailed(f"eval set {spec['eval_set']!r} is gone", errors=[])
            run = eval_run_start(user=job.created_by, eval_set_version=version, endpoint=model.endpoint,
                                 harness_version=harness, model=model, k=spec.get("k") or 1,
                                 max_cases=spec.get("max_cases"), name=f"{job.name} · {spec['eval_set']}"[:120])
        except Exception as exc:
            detail = "; ".join(f"{e['path']}: {e['message']}" for e in getattr(exc, "errors", []) or [])
            log(f"evaluation on {spec['eval_set']} not queued: {exc}{' (' + detail + ')' if detail else ''}")
            continue
        log(f"evaluation queued: {run.name} ({run.progress_total} samples on {model.endpoint.name})")
        runs.append(run)
    return runs
