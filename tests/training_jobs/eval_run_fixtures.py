"""Fixtures of the evaluation-run page, API and WebSocket tests: small eval sets, runs played for real through the one
turn engine against the scripted loopback endpoint (each sample's script is loaded just before it is played, so a
sample that uses fewer model calls than scripted leaves nothing behind for the next), a T3 run whose results are
rows written here (levels and faults for the robustness grid), and a registered lineage of models."""

from __future__ import annotations

import json

import pytest

from tests.streams.preview_helpers import GOOD, price_script, scripted_model  # noqa: F401  (fixtures)
from tests.streams.scripted_endpoint import reply, scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.eval_helpers import t1_case, t4_case
from training_jobs import eval_run_services as S
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.eval_services import eval_set_import
from training_jobs.evals.cases import EVAL_DATA_DIR

BAD = "The HydraGlow serum is $34 right now."  # the list price said as the price: not accurate


def import_set(user, name: str, kind: str, cases: list[dict]):
    version, _ = eval_set_import(user=user, name=name, kind=kind, jsonl_text="\n".join(json.dumps(c) for c in cases))
    return version


def good(ep) -> None:
    price_script(ep)


def bad(ep) -> None:
    price_script(ep, text=BAD)
    for _ in range(4):  # the hooks may ask for retries
        ep.add(reply(BAD))


def play(run: EvalRun, ep, scripts) -> EvalRun:
    """Execute ``run`` in this process; ``scripts[i]`` loads the endpoint's answers for the i-th sample played."""
    scripts = list(scripts)
    ep.queue.clear()
    scripts[0](ep)

    def next_sample(outcome, done, total):
        ep.queue.clear()
        if done < len(scripts):
            scripts[done](ep)

    return S.eval_run_execute(run_id=run.pk, on_sample=next_sample)


def start(user, version, endpoint, harness_version=None, **kwargs) -> EvalRun:
    return S.eval_run_start(user=user, eval_set_version=version, endpoint=endpoint, harness_version=harness_version,
                            enqueue=False, **kwargs)


@pytest.fixture
def v1(harness_with_history):
    return harness_with_history["v1"]


@pytest.fixture
def t1_set(ml_staff):
    return import_set(ml_staff, "t1-mini", "t1", [t1_case(0, tags=("price", "typo")), t1_case(1),
                                                  t1_case(2, tags=("price", "slang"))])


@pytest.fixture
def t4_set(ml_staff):
    return import_set(ml_staff, "t4-mini", "t4", [t4_case(1), t4_case(2, "change_case:english_lowercase")])


@pytest.fixture
def good_run(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    """Every case solved (the baseline)."""
    run = play(start(ml_staff, t1_set, scripted_model, v1, name="all good"), scripted_endpoint, [good] * 3)
    assert run.status == EvalRun.Status.SUCCEEDED, run.error
    return run


@pytest.fixture
def bad_run(ml_staff, t1_set, v1, scripted_model, scripted_endpoint, good_run):
    """The same set and harness, case t1-001 answered with the list price as the price (a regression)."""
    run = play(start(ml_staff, t1_set, scripted_model, v1, name="one bad"), scripted_endpoint, [good, bad, good])
    assert run.status == EvalRun.Status.SUCCEEDED, run.error
    return run


@pytest.fixture
def t4_run(ml_staff, t4_set, scripted_model, scripted_endpoint):
    run = start(ml_staff, t4_set, scripted_model, name="ifeval mini")
    scripted_endpoint.add(reply("an old pond a frog jumps in the sound of water"),  # no comma: followed
                          reply("This Has Capitals, And Commas."))  # not lowercase: not followed
    run = S.eval_run_execute(run_id=run.pk)
    assert run.status == EvalRun.Status.SUCCEEDED, run.error
    return run


@pytest.fixture
def queued_run(ml_staff, t1_set, v1, scripted_model):
    """A run waiting for a worker (nothing enqueued)."""
    return start(ml_staff, t1_set, scripted_model, v1, name="waiting", k=2)


@pytest.fixture
def t3_set(ml_staff):
    """The first committed T3 cases of each level and fault (real perturbation cases)."""
    lines = (EVAL_DATA_DIR / "t3_robustness.jsonl").read_text(encoding="utf-8").splitlines()
    picked, seen = [], set()
    for line in lines:
        d = json.loads(line)
        key = (d["harness_variant"]["level"], tuple(sorted(f["kind"] for f in (d.get("tool_faults") or {}).values())))
        if seen.__contains__(key):
            continue
        seen.add(key)
        picked.append(line)
    version, _ = eval_set_import(user=ml_staff, name="t3-mini", kind="t3", jsonl_text="\n".join(picked))
    return version


def t3_run_with(user, version, endpoint, harness_version, accuracy_of, *, name: str, model=None) -> EvalRun:
    """A finished T3 run whose results are written here: ``accuracy_of(level, faults)`` → 0 or 1 per case."""
    from training_jobs.eval_run_selectors import case_index

    run = start(user, version, endpoint, harness_version, name=name, model=model)
    for case_id, info in sorted(case_index(version).items(), key=lambda kv: kv[1]["position"]):
        value = float(accuracy_of(info["level"], info["faults"]))
        EvalResult.objects.create(run=run, case_id=case_id, position=info["position"], sample=0, accuracy=value,
                                  effectiveness=value, solved=value == 1.0, reply="…", reason="ok", turn_s=0.5)
    run.refresh_from_db()
    EvalRun.objects.filter(pk=run.pk).update(status=EvalRun.Status.SUCCEEDED, summary=S.eval_run_summary(run),
                                             progress_done=run.results.count())
    run.refresh_from_db()
    return run


@pytest.fixture
def lineage_models(ml_staff):
    """base → HSA-SFT → distillation → RL, and the fixed-harness SFT baseline of the same base."""
    from training_jobs.models import TrainedModel

    base = TrainedModel.objects.create(name="tiny-base", kind="base", path="/tmp/models/base", created_by=ml_staff)
    sft = TrainedModel.objects.create(name="tiny-sft", kind="sft", path="/tmp/models/sft", parent=base)
    distill = TrainedModel.objects.create(name="tiny-distill", kind="distill", path="/tmp/models/d", parent=sft)
    rl = TrainedModel.objects.create(name="tiny-rl", kind="rl", path="/tmp/models/rl", parent=distill)
    baseline = TrainedModel.objects.create(name="tiny-fixed", kind="baseline_sft", path="/tmp/models/f", parent=base)
    return {"base": base, "sft": sft, "distill": distill, "rl": rl, "baseline": baseline}


def judged(verdict: str):
    """A good sample, then the judge's verdict (the judge is the same scripted endpoint, asked after the rules)."""
    def script(ep) -> None:
        price_script(ep)
        ep.add(reply(verdict))
    return script


@pytest.fixture
def judged_run(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    """Every case solved by the rules; the judge ("scripted") agrees on t1-000 and t1-002, not on t1-001."""
    agree = judged('{"accuracy": 1, "effectiveness": 1, "reason": "backed by the lookup"}')
    differ = judged('{"accuracy": 0, "effectiveness": 0.5, "reason": "the price looks invented"}')
    run = play(start(ml_staff, t1_set, scripted_model, v1, name="judged", judges=["scripted"]), scripted_endpoint,
               [agree, differ, agree])
    assert run.status == EvalRun.Status.SUCCEEDED, run.error
    return run
