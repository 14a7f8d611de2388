"""A training job can end with an automatic evaluation: its last model is served on the worker's host and each
evaluation is queued on the gpu queue as the job's owner (located validation at launch; the harness label is
resolved when the job ends; a problem is logged, never fails the job)."""

from __future__ import annotations

import pytest

from console.errors import NotAllowed, ValidationFailed
from training_jobs import eval_run_services, services
from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_services import eval_sets_seed_demo
from training_jobs.models import TrainedModel
from tests.training_jobs.test_training_jobs import _start, cleanup, ready  # noqa: F401  (fixtures)


@pytest.fixture
def shipped_sets(db):
    return {v.eval_set.name: v for v in eval_sets_seed_demo()}


def test_evaluations_are_validated_with_located_errors(ml_staff, ready, shipped_sets, harness_with_history,
                                                       django_capture_on_commit_callbacks):
    bad = [{"eval_set": "nope"}, {"eval_set": "t1-live-stream-qa", "harness": "glow-gadget@nowhere", "k": 0},
           {"eval_set": "t4-ifeval", "harness": "glow-gadget@production", "extra": 1}, "x"]
    with pytest.raises(ValidationFailed) as exc:
        _start(ml_staff, ready, evaluate=bad)
    assert {e["path"] for e in exc.value.errors} == {
        "evaluate.0.eval_set", "evaluate.1.harness", "evaluate.1.k", "evaluate.2.extra", "evaluate.2.harness",
        "evaluate.3"}
    with django_capture_on_commit_callbacks(execute=False):
        job = _start(ml_staff, ready, evaluate=[{"eval_set": "t1-live-stream-qa", "harness": "glow-gadget@production",
                                                 "max_cases": 2}, {"eval_set": "t4-ifeval", "max_cases": 3}])
    assert job.evaluate == [{"eval_set": "t1-live-stream-qa", "harness": "glow-gadget@production", "max_cases": 2,
                             "k": 1}, {"eval_set": "t4-ifeval", "harness": None, "max_cases": 3, "k": 1}]


def test_a_manager_cannot_ask_for_evaluations(manager, ready, shipped_sets):
    with pytest.raises(NotAllowed):
        services.training_job_start(user=manager, kind="sft", dataset_id=ready["hsa"].pk,
                                    base_model_id=ready["base"].pk, evaluate=[{"eval_set": "t4-ifeval"}])


def test_a_finished_job_serves_its_model_and_queues_its_evaluations(ml_staff, ready, shipped_sets,
                                                                   harness_with_history, monkeypatch,
                                                                   django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("training_jobs.tasks.eval_run.apply_async", lambda **kw: sent.append(kw))
    with django_capture_on_commit_callbacks(execute=False):
        job = _start(ml_staff, ready, evaluate=[
            {"eval_set": "t4-ifeval", "max_cases": 2},
            {"eval_set": "t1-live-stream-qa", "harness": "glow-gadget@production", "max_cases": 1}])
    with django_capture_on_commit_callbacks(execute=True):  # the worker runs outside a transaction
        job = services.training_job_run(job_id=job.pk)
    assert job.status == "succeeded", job.error
    model = TrainedModel.objects.get(pk=job.result["model"])
    try:
        runs = list(EvalRun.objects.filter(pk__in=job.result["eval_runs"]).order_by("created_at"))
        assert [r.eval_set_version.eval_set.name for r in runs] == ["t4-ifeval", "t1-live-stream-qa"]
        assert all(r.model_id == model.pk and r.endpoint_id == model.endpoint_id and r.created_by == ml_staff
                   for r in runs)
        assert runs[1].harness_version == harness_with_history["v1"]  # production, resolved at the end
        assert [s["queue"] for s in sent] == ["gpu", "gpu"]
        assert "evaluation queued" in job.log_tail
        # the queued IFEval run plays for real against the served model
        run = eval_run_services.eval_run_execute(run_id=runs[0].pk)
        assert run.status == "succeeded", run.error
        assert run.results.count() == 2 and "0" in run.summary["ifeval"]
    finally:
        services.model_serve_stop(model_id=model.pk)
