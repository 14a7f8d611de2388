"""Judge models in evaluation runs (the Django side of :mod:`training_jobs.evals.judge_model`).

A run may name up to five model endpoints as judges (``EvalRun.judges``, checked by :func:`validate_judges` when it
is started: existing, usable endpoints, picked by name, never a URL). The worker opens one chat client per judge
(:func:`open_judges`) and after the rules have judged each sample asks every judge (:func:`judge_outcome`); the
verdicts, their vote and the disagreements are stored with the sample in ``EvalResult.detail["judges"]``. The rules'
verdict stays the score of record (accuracy, effectiveness, solved); the run's summary adds each judge's and the
vote's agreement with the rules (:func:`run_judges_summary`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from streams.models import ModelEndpoint
from training_jobs.evals import judge_model

logger = logging.getLogger(__name__)

MAX_JUDGES = judge_model.MAX_JUDGES
JUDGE_MAX_TOKENS = 300


def validate_judges(judges: Any, errors: list[dict[str, str]], *, kind: str) -> list[str]:
    """The judge endpoint names as stored (each once, in the order given); located errors (``judges``,
    ``judges[i]``) appended to ``errors`` for anything else: not a list of names, too many, an unknown endpoint or
    one that may not be used (its URL or secret refused)."""
    from streams.engine.outbound import OutboundRefused

    if judges in (None, "", []):
        return []
    if isinstance(judges, (str, bytes)) or not isinstance(judges, Sequence):
        errors.append({"path": "judges", "message": "a list of model endpoint names"})
        return []
    if kind == "t4":
        errors.append({"path": "judges", "message": "an IFEval (T4) run is scored by IFEval's checkers: judge "
                                                    "models judge harness replies (T1–T3) only"})
        return []
    if len(judges) > MAX_JUDGES:
        errors.append({"path": "judges", "message": f"at most {MAX_JUDGES} judges"})
        return []
    names: list[str] = []
    for i, name in enumerate(judges):
        path = f"judges[{i}]"
        if not isinstance(name, str) or not name.strip() or len(name) > 64:
            errors.append({"path": path, "message": "a model endpoint's name"})
            continue
        name = name.strip()
        if name in names:
            errors.append({"path": path, "message": f"{name!r} is named twice"})
            continue
        endpoint = ModelEndpoint.objects.filter(name=name).first()
        if endpoint is None:
            errors.append({"path": path, "message": f"no model endpoint {name!r} (an administrator adds endpoints)"})
            continue
        try:
            endpoint.check_usable()
        except OutboundRefused as exc:
            errors.append({"path": path, "message": str(exc)})
            continue
        names.append(name)
    return names


def open_judges(run) -> list[tuple[str, Any]]:
    """(name, chat client) per judge of ``run``; an endpoint that cannot be opened now (deleted, refused, its secret
    missing on this host) is (name, the exception): that judge abstains on every sample, the run goes on."""
    from streams.engine.client import OpenAIChatClient

    out: list[tuple[str, Any]] = []
    for name in run.judges or []:
        try:
            endpoint = ModelEndpoint.objects.get(name=name)
            out.append((name, OpenAIChatClient(endpoint.as_config())))
        except ModelEndpoint.DoesNotExist:
            out.append((name, LookupError(f"model endpoint {name!r} no longer exists")))
        except Exception as exc:  # OutboundRefused, a secret not set here
            logger.warning("eval run %s: judge %s cannot be used", run.pk, name, exc_info=True)
            out.append((name, exc))
    return out


def close_judges(backends: Sequence[tuple[str, Any]]) -> None:
    for _name, backend in backends:
        close = getattr(backend, "close", None)
        if close is not None and not isinstance(backend, BaseException):
            try:
                close()
            except Exception:  # closing never fails a run
                logger.warning("closing a judge client failed", exc_info=True)


def judge_outcome(run, case: Any, outcome: Any, backends: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """Every judge's verdict on one played sample, their vote and the disagreements (the value of
    ``detail["judges"]``); None when there is nothing to judge (no judges, or the case could not be run)."""
    if not backends or outcome.error:
        return None
    return judge_model.judge_sample(
        backends, case, outcome.reply, judge_model.tool_results_from_events(outcome.events),
        rules=(outcome.accuracy, outcome.effectiveness), seed=run.seed + outcome.sample, max_tokens=JUDGE_MAX_TOKENS)


def run_judges_summary(run) -> dict[str, Any]:
    """Each judge's and the vote's agreement with the rules over the samples stored so far."""
    rows = run.results.order_by("position", "sample").values_list("accuracy", "effectiveness", "detail")
    samples = [(acc, eff, (detail or {}).get("judges")) for acc, eff, detail in rows]
    return judge_model.judges_summary(samples, list(run.judges or []))
