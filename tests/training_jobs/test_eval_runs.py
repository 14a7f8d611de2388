"""Evaluation runs as jobs: validation and roles, cases played through the one turn engine against the real
local model and a scripted endpoint, results stored per sample, resume without replaying, IFEval (T4) scored at
the end, cancel through the one job lifecycle, and the CLI."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from console.errors import NotAllowed, ValidationFailed
from console.jobs import Job
from harness_editor import services as harness_services
from streams.models import ModelEndpoint
from tests.streams.preview_helpers import GOOD, price_script, scripted_model  # noqa: F401  (fixtures)
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply, scripted_endpoint  # noqa: F401
from tests.training_jobs.eval_helpers import t1_case, t4_case
from training_jobs import eval_run_services as S
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.eval_services import eval_set_import
from training_jobs.evals.cases import EVAL_DATA_DIR


def _import(user, name: str, kind: str, cases: list[dict]):
    version, _ = eval_set_import(user=user, name=name, kind=kind,
                                 jsonl_text="\n".join(json.dumps(c) for c in cases))
    return version


@pytest.fixture
def t1_set(ml_staff):
    return _import(ml_staff, "t1-mini", "t1", [t1_case(i) for i in range(3)])


@pytest.fixture
def t4_set(ml_staff):
    return _import(ml_staff, "t4-mini", "t4", [t4_case(1), t4_case(2, "change_case:english_lowercase")])


@pytest.fixture
def v1(harness_with_history):
    return harness_with_history["v1"]


def test_start_validates_with_located_errors_and_saves_nothing(ml_staff, t1_set, t4_set, v1, scripted_model):
    with pytest.raises(ValidationFailed) as exc:
        S.eval_run_start(user=ml_staff, eval_set_version=t1_set, endpoint=scripted_model, k=0,
                         sampling={"temperature": 9, "typo": 1}, max_cases=99)
    paths = {e["path"] for e in exc.value.errors}
    assert paths == {"harness_version", "k", "max_cases", "sampling.temperature", "sampling.typo"}
    with pytest.raises(ValidationFailed) as exc:
        S.eval_run_start(user=ml_staff, eval_set_version=t4_set, endpoint=scripted_model, harness_version=v1)
    assert [e["path"] for e in exc.value.errors] == ["harness_version"]
    assert not EvalRun.objects.exists()


def test_roles_start_cancel_resume(ml_staff, ml_staff2, ml_lead, reviewer, manager, t1_set, v1, scripted_model,
                                   django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr("training_jobs.tasks.eval_run.apply_async", lambda **kw: sent.append(kw))
    for user in (reviewer, manager):
        with pytest.raises(NotAllowed):
            S.eval_run_start(user=user, eval_set_version=t1_set, endpoint=scripted_model, harness_version=v1)
    with django_capture_on_commit_callbacks(execute=True):
        run = S.eval_run_start(user=ml_staff, eval_set_version=t1_set, endpoint=scripted_model, harness_version=v1,
                               k=2)
    assert sent and sent[0]["queue"] == "gpu" and sent[0]["task_id"] == run.task_id
    assert run.progress_total == 6 and run.status == Job.Status.QUEUED
    with pytest.raises(NotAllowed):
        S.eval_run_cancel(user=ml_staff2, run=run)
    run = S.eval_run_cancel(user=ml_lead, run=run)
    assert run.status == Job.Status.CANCELLED
    with pytest.raises(NotAllowed):
        S.eval_run_resume(user=ml_staff2, run=run)
    with django_capture_on_commit_callbacks(execute=True):
        run = S.eval_run_resume(user=ml_staff, run=run)
    assert run.status == Job.Status.QUEUED and run.resumes == 1 and len(sent) == 2


def _scripted_answers(ep, n: int) -> None:
    for _ in range(n):
        price_script(ep)


def test_run_plays_judges_stores_and_resumes_without_replaying(ml_staff, t1_set, v1, scripted_model,
                                                              scripted_endpoint):
    run = S.eval_run_start(user=ml_staff, eval_set_version=t1_set, endpoint=scripted_model, harness_version=v1, k=2,
                           seed=7, enqueue=False)
    _scripted_answers(scripted_endpoint, 6)
    run = S.eval_run_execute(run_id=run.pk)
    assert run.status == Job.Status.SUCCEEDED, run.error
    results = list(EvalResult.objects.filter(run=run).order_by("position", "sample"))
    assert [(r.case_id, r.sample) for r in results] == [(f"t1-{i:03d}", s) for i in range(3) for s in range(2)]
    good = results[0]
    assert good.reply == GOOD and good.accuracy == 1.0 and good.effectiveness == 1.0 and good.solved
    assert any(e["type"] == "timings" for e in good.events) and good.turn_s > 0
    # sample j goes out with seed + j
    seeds = [r.get("seed") for r in scripted_endpoint.requests]
    assert set(seeds) == {7, 8}
    s = run.summary
    assert s["cases"] == 3 and s["samples"] == 6 and s["accuracy"]["mean"] == 1.0 and s["pass_k"]["mean"] == 1.0
    assert s["latency"]["p50_s"] > 0
    # resuming a finished sample set plays nothing again: delete one result, resume, exactly one turn is played
    EvalResult.objects.filter(run=run, case_id="t1-002", sample=1).delete()
    EvalRun.objects.filter(pk=run.pk).update(status=Job.Status.QUEUED)
    before = len(scripted_endpoint.requests)
    _scripted_answers(scripted_endpoint, 1)
    run = S.eval_run_execute(run_id=run.pk)
    assert run.status == Job.Status.SUCCEEDED
    assert len(scripted_endpoint.requests) - before == 3  # one turn: skill, tool, reply
    assert EvalResult.objects.filter(run=run).count() == 6


def test_a_wrong_reply_is_judged_by_the_rules(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    """A figure attributed to the wrong product: the turn passes its hooks or falls back, and either way the
    sample is not accurate-and-effective."""
    run = S.eval_run_start(user=ml_staff, eval_set_version=t1_set, endpoint=scripted_model, harness_version=v1,
                           max_cases=1, enqueue=False)
    price_script(scripted_endpoint, text="The HydraGlow serum is $34 right now.")  # the list price, said as price
    for _ in range(4):
        scripted_endpoint.add(reply("The HydraGlow serum is $34 right now."))
    run = S.eval_run_execute(run_id=run.pk)
    result = EvalResult.objects.get(run=run)
    assert not result.solved
    assert result.accuracy == 0.0 or result.fallback
    assert result.problems


def test_ifeval_run_scores_at_the_end(ml_staff, t4_set, scripted_model, scripted_endpoint):
    run = S.eval_run_start(user=ml_staff, eval_set_version=t4_set, endpoint=scripted_model, enqueue=False)
    scripted_endpoint.add(reply("an old pond a frog jumps in the sound of water"),  # no comma: followed
                          reply("This Has Capitals, And Commas."))  # not lowercase: not followed
    run = S.eval_run_execute(run_id=run.pk)
    assert run.status == Job.Status.SUCCEEDED, run.error
    by_case = {r.case_id: r for r in run.results.all()}
    assert by_case["ifeval-1"].solved and by_case["ifeval-1"].detail["instructions"][0]["strict"]
    assert not by_case["ifeval-2"].solved
    assert by_case["ifeval-2"].detail["failed_strict"] == ["change_case:english_lowercase"]
    figures = run.summary["ifeval"]["0"]
    assert figures["prompts"] == 2 and figures["prompt_strict"] == 50.0
    assert scripted_endpoint.requests[0]["messages"] == [{"role": "user", "content": t4_case(1)["prompt"]}]


def test_cancel_request_stops_the_run_after_the_current_sample(ml_staff, t1_set, v1, scripted_model,
                                                               scripted_endpoint):
    run = S.eval_run_start(user=ml_staff, eval_set_version=t1_set, endpoint=scripted_model, harness_version=v1,
                           enqueue=False)
    _scripted_answers(scripted_endpoint, 3)

    def cancel_after_first(outcome, done, total):
        if done == 1:
            S.eval_run_cancel(user=ml_staff, run=EvalRun.objects.get(pk=run.pk))

    run = S.eval_run_execute(run_id=run.pk, on_sample=cancel_after_first)
    assert run.status == Job.Status.CANCELLED
    assert run.results.count() == 1 and run.summary["samples"] == 1 and run.can_resume


@pytest.mark.django_db(transaction=True)
def test_run_on_a_real_worker_and_the_local_model(ml_staff, manager, local_model_server):
    """The whole path: the task on the gpu queue of a real Celery worker, the real local model server, three
    committed T1 cases on the harness the demo model was trained on. Whatever the tiny model answers, every
    sample is stored, judged and aggregated."""
    from tests.conftest import start_worker, stop_worker
    from tests.streams.preview_helpers import wait_for

    tiny = harness_services.harness_create(user=manager, slug="tiny-room", name="Tiny room",
                                           manifest=_tiny_manifest())
    endpoint = ModelEndpoint.objects.create(name="local-test", base_url=local_model_server.openai_base_url,
                                            model=local_model_server.model, kind="local", timeout_s=60)
    lines = (EVAL_DATA_DIR / "t1_live_stream_qa.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    version, _ = eval_set_import(user=ml_staff, name="t1-head", kind="t1", jsonl_text="\n".join(lines))
    proc, log = start_worker(queues="gpu", log_name="eval-worker.log")
    try:
        run = S.eval_run_start(user=ml_staff, eval_set_version=version, endpoint=endpoint,
                               harness_version=tiny, deadline_s=30)
        done = wait_for(lambda: EvalRun.objects.get(pk=run.pk).is_finished, timeout=240, interval=0.5)
        run = EvalRun.objects.get(pk=run.pk)
        assert done and run.status == Job.Status.SUCCEEDED, (run.status, run.error)
    finally:
        stop_worker(proc, log)
    assert run.results.count() == 3 and run.summary["cases"] == 3
    assert all(r.events or r.error for r in run.results.all())
    assert run.worker_host and run.heartbeat_at is not None


def _tiny_manifest():
    from training_jobs.tiny_model.gold import load_tiny_manifest

    return load_tiny_manifest()


def test_cli_runs_and_prints_json(ml_staff, t1_set, v1, scripted_model, scripted_endpoint, admin_user):
    _scripted_answers(scripted_endpoint, 3)
    out = io.StringIO()
    call_command("run_eval", "t1-mini", "--harness", "glow-gadget@production", "--endpoint", "scripted", "--json",
                 "--user", ml_staff.username, stdout=out, stderr=io.StringIO())
    data = json.loads(out.getvalue())
    assert data["status"] == "succeeded" and data["summary"]["cases"] == 3
    with pytest.raises(CommandError, match="no eval set"):
        call_command("run_eval", "nope", stdout=io.StringIO())
    with pytest.raises(CommandError, match="harness_version"):
        call_command("run_eval", "t1-mini", "--endpoint", "scripted", "--user", ml_staff.username,
                     stdout=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_fails_the_run_and_resume_plays_only_what_is_missing(ml_staff, harness_with_history,
                                                                             scripted_model, scripted_endpoint,
                                                                             settings):
    """A worker killed mid-run (SIGKILL: no goodbye) is found by the one sweep; the run ends failed (WorkerLost)
    and resumable, and the resumed run plays only the samples that were not stored."""
    import os
    import signal
    import time
    from datetime import timedelta

    from django.utils import timezone

    from console.jobs import jobs_sweep_stalled
    from tests.conftest import start_worker, stop_worker
    from tests.streams.scripted_endpoint import Scripted
    from training_jobs import tasks

    version = _import(ml_staff, "t1-kill", "t1", [t1_case(i) for i in range(6)])
    for _ in range(6):  # every response of every turn takes a while: the worker is killed mid-run
        for s in (hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
                  native_calls(("lookup_product", {"link_id": 101})), reply(GOOD)):
            scripted_endpoint.add(Scripted(chunks=s.chunks, hang_s=0.4))
    run = S.eval_run_start(user=ml_staff, eval_set_version=version, endpoint=scripted_model,
                           harness_version=harness_with_history["v1"], enqueue=False)
    proc, log = start_worker("eval-kill-test", log_name="eval-kill-worker.log",
                             env_extra={"HAT_HEARTBEAT_EVERY_S": "0.3"})
    try:
        tasks.eval_run.apply_async(args=(str(run.pk),), queue="eval-kill-test")
        deadline = time.monotonic() + 120
        while EvalResult.objects.filter(run_id=run.pk).count() < 2:
            assert time.monotonic() < deadline, EvalRun.objects.get(pk=run.pk).status
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        stop_worker(proc, log)
    stored = EvalResult.objects.filter(run_id=run.pk).count()
    last = EvalRun.objects.get(pk=run.pk).heartbeat_at
    settings.HEARTBEAT_STALE_S = 2.0
    while timezone.now() < last + timedelta(seconds=2.2):
        time.sleep(0.1)
    assert str(run.pk) in jobs_sweep_stalled()
    run = EvalRun.objects.get(pk=run.pk)
    assert run.status == Job.Status.FAILED and "WorkerLost" in run.error and run.can_resume
    # resume (queued again) and play here: only the missing samples go to the endpoint
    EvalRun.objects.filter(pk=run.pk).update(status=Job.Status.QUEUED, error="")
    scripted_endpoint.queue.clear()
    _scripted_answers(scripted_endpoint, 6 - stored)
    before = len(scripted_endpoint.requests)
    run = S.eval_run_execute(run_id=run.pk)
    assert run.status == Job.Status.SUCCEEDED, run.error
    assert run.results.count() == 6 and run.summary["cases"] == 6
    assert len(scripted_endpoint.requests) - before == 3 * (6 - stored)  # stored samples are not played again


def test_cli_refuses_an_unknown_judge_with_its_path(ml_staff, t1_set, v1, scripted_model):
    with pytest.raises(CommandError, match="judges"):
        call_command("run_eval", "t1-mini", "--harness", "glow-gadget@production", "--endpoint", "scripted",
                     "--judge", "no-such-endpoint", "--user", ml_staff.username, stdout=io.StringIO())
    assert not EvalRun.objects.exists()
