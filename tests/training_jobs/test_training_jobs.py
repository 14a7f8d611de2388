"""Training jobs through the console's services: located validation, an atomic claim, HSA-SFT for real on the
tiny model (progress points, log, a registered model with lineage that serves through the local server), a
cooperative cancel that ends resumable and a resume that finishes the schedule, a job on the real Celery worker,
and a killed worker detected by the heartbeat sweep."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from unittest import mock
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.models import AuditEvent
from tests.conftest import start_worker, stop_worker
from console.jobs import jobs_sweep_stalled
from training_jobs import services, tasks
from training_jobs.models import Dataset, TrainedModel, TrainingJob

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")
CONFIG = {"max_steps": 6, "per_device_batch_size": 2, "learning_rate": 5e-3, "save_steps": 3, "max_length": 1024,
          "logging_steps": 1}


def _dataset(user, kind="hsa") -> Dataset:
    with mock.patch.object(tasks.dataset_build, "apply_async"):  # built here: the session's worker must not claim it
        d = services.dataset_build_start(user=user, kind=kind,
                                         recipe={"variants_per_sample": 2, "harness_pool_size": 2},
                                         sources={"scenarios": [], "tiny_gold": 16, "tiny_gold_seed": 3})
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "succeeded", d.error
    return d


@pytest.fixture
def cleanup(db):
    yield
    for d in Dataset.objects.all():
        shutil.rmtree(services.datasets_dir() / str(d.pk), ignore_errors=True)
    for j in TrainingJob.objects.all():
        shutil.rmtree(j.output_dir, ignore_errors=True)


@pytest.fixture
def ready(ml_staff, cleanup):
    return {"hsa": _dataset(ml_staff), "fixed": _dataset(ml_staff, "fixed_harness"),
            "base": services.demo_base_model()}


def _start(user, ready, **kw):
    return services.training_job_start(user=user, kind=kw.pop("kind", "sft"), config=kw.pop("config", CONFIG),
                                       dataset_id=kw.pop("dataset_id", ready["hsa"].pk),
                                       base_model_id=kw.pop("base_model_id", ready["base"].pk), **kw)


# --- validation and permissions ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_requests_are_validated_with_paths_and_save_nothing(ml_staff, ready, django_capture_on_commit_callbacks):
    cases = [
        ({"config": {**CONFIG, "max_steps": 0}}, ["config.max_steps"]),
        ({"config": {**CONFIG, "bogus": 1}}, ["config.bogus"]),
        ({"config": {**CONFIG, "device": "cpu", "bf16": True}}, ["config"]),
        ({"config": "fast please"}, ["config"]),
        ({"kind": "sft", "dataset_id": ready["fixed"].pk}, ["dataset"]),  # SFT trains on an HSA dataset
        ({"kind": "baseline_sft", "dataset_id": ready["hsa"].pk}, ["dataset"]),
        ({"dataset_id": "0b5b4a47-2f0e-4a39-9d8b-3c4f5c1d2e3f"}, ["dataset"]),
        ({"dataset_id": "not-an-id", "base_model_id": "nope"}, ["dataset", "base_model"]),
        ({"dataset_id": None, "base_model_id": ""}, ["dataset", "base_model"]),
        ({"kind": "dance"}, ["kind"]),
        ({"kind": "rl", "dataset_id": None, "config": {}}, ["dataset"]),  # RL rolls out over a dataset's samples
        ({"kind": "pipeline", "config": {"sft": {"max_steps": -1}}}, ["config.sft.max_steps"]),
        ({"kind": "distill", "config": {"beta": 2}}, ["config.beta"]),
        ({"config": {**CONFIG, "max_length": 4096}}, ["config.max_length"]),  # the demo model has 2048 positions
        ({"kind": "pipeline", "config": {"sft": {"max_length": 2049}}}, ["config.sft.max_length"]),
    ]
    for kw, paths in cases:
        with pytest.raises(ValidationFailed) as exc:
            _start(ml_staff, ready, **kw)
        assert [e["path"] for e in exc.value.errors] == paths, kw
    queued = Dataset.objects.create(name="q", kind="hsa", created_by=ml_staff)
    with pytest.raises(ValidationFailed, match="invalid") as exc:
        _start(ml_staff, ready, dataset_id=queued.pk)
    assert "is queued, not ready" in exc.value.errors[0]["message"]
    with pytest.raises(ValidationFailed) as exc:  # nothing picked: say what to pick, not "no model None"
        _start(ml_staff, ready, dataset_id="", base_model_id=None)
    assert [e["message"] for e in exc.value.errors] == ["pick the dataset to train on",
                                                        "pick the model the job starts from"]
    assert not TrainingJob.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["manager", "reviewer", "operator", "outsider"])
def test_only_ml_staff_may_train(request, role, ml_staff, ready):
    user = request.getfixturevalue(role)
    with pytest.raises(NotAllowed):
        _start(user, ready)
    job = TrainingJob.objects.create(name="j", kind="sft", config=CONFIG, dataset=ready["hsa"],
                                     base_model=ready["base"], created_by=ml_staff)
    with pytest.raises(NotAllowed):
        services.training_job_cancel(user=user, job=job)
    with pytest.raises(NotAllowed):
        services.training_job_resume(user=user, job=job)
    assert not TrainingJob.objects.exclude(pk=job.pk).exists()


@pytest.mark.django_db
def test_start_queues_on_the_gpu_queue_on_commit(ml_staff, ready, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.training_job, "apply_async",
                        lambda args, queue, task_id: sent.append((args, queue, task_id)))
    with django_capture_on_commit_callbacks(execute=True):
        job = _start(ml_staff, ready, name="first")
    assert len(job.task_id) == 36 and TrainingJob.objects.get(pk=job.pk).task_id == job.task_id
    assert sent == [((str(job.pk),), "gpu", job.task_id)]  # under the id a revoke would name
    assert (job.status, job.kind, job.name, job.progress_total) == ("queued", "sft", "first", 6)
    assert job.config["max_steps"] == 6 and job.config["device"] == "cpu"  # the snapshot has every field
    assert AuditEvent.objects.filter(scope=f"training:{job.pk}", action="training.queued").exists()


# --- running in-process ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_job_trains_registers_its_model_and_the_model_serves(ml_staff, manager, demo_manifest, ready,
                                                               django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = _start(ml_staff, ready, kind="baseline_sft", dataset_id=ready["fixed"].pk)
    job = services.training_job_run(job_id=job.pk)
    assert job.status == "succeeded", job.error
    assert job.progress_done == job.progress_total == 6 and job.worker_host and job.heartbeat_at
    losses = [p for p in job.metrics if "loss" in p]
    assert [p["step"] for p in losses] == list(range(1, 7)) and all(p["loss"] > 0 for p in losses)
    assert "training from step 0 to 6" in job.log_tail
    model = TrainedModel.objects.get(pk=job.result["model"])
    assert model.kind == "baseline_sft" and model.job == job and model.dataset == ready["fixed"]
    assert [m.pk for m in model.lineage()] == [ready["base"].pk, model.pk]
    assert (model.directory / "model.safetensors").exists() and model.metrics["samples_per_s"] > 0
    assert services.training_job_run(job_id=job.pk).status == "succeeded"  # a redelivered task does nothing

    # attached to a local server: its endpoint answers a real preview turn
    with django_capture_on_commit_callbacks(execute=False) as queued:
        services.model_serve_start(user=ml_staff, model=model)
    assert len(queued) == 1
    model = services.model_serve_run(model_id=model.pk)
    try:
        assert model.endpoint.name == f"model-{str(model.pk)[:8]}" and model.endpoint.model == str(model.directory)
        from streams import services as preview
        from tests.streams.test_preview_local_model import tiny_version

        room = preview.preview_open(user=manager, version=tiny_version(manager, demo_manifest),
                                    endpoint=model.endpoint)
        with django_capture_on_commit_callbacks(execute=False):
            turn_id = preview.preview_comment_post(user=manager, room=room, text="how much is #101?")
        result = preview.preview_turn_run(room_id=room.pk, turn_id=turn_id)
        assert result is not None and not any(e.type == "error" and e.stage == "model" and
                                              e.kind in ("connect", "timeout") for e in result.events)
        assert services.model_serve_run(model_id=model.pk).serve_pid == model.serve_pid  # already served
    finally:
        pid = model.serve_pid
        services.model_serve_stop(model_id=model.pk)
    deadline = time.monotonic() + 15
    while services.serving._alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not services.serving._alive(pid) or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert TrainedModel.objects.get(pk=model.pk).serve_pid is None


@pytest.mark.django_db(transaction=True)
def test_cancel_mid_run_then_resume_finishes_the_schedule(ml_staff, ready):
    from unittest import mock

    with mock.patch.object(tasks.training_job, "apply_async"):  # no worker here: the test runs the job
        job = _start(ml_staff, ready, config={**CONFIG, "max_steps": 40, "save_steps": 1000})
    done = threading.Thread(target=lambda: (services.training_job_run(job_id=job.pk), connection.close()))
    done.start()
    deadline = time.monotonic() + 120
    while (current := TrainingJob.objects.get(pk=job.pk)).progress_done < 2:
        assert time.monotonic() < deadline and done.is_alive(), (current.status, current.error)
        time.sleep(0.2)
    assert services.training_job_cancel(user=ml_staff, job=job).status == "cancelling"
    done.join(timeout=120)
    job.refresh_from_db()
    (stage,) = job.result["stages"]
    assert job.status == "cancelled" and 2 <= stage["steps"] < 40 and stage["final_dir"] is None
    stopped_at = stage["steps"]
    assert stage["checkpoint_dir"].endswith(f"checkpoint-{stopped_at}")
    with pytest.raises(InvalidTransition):
        services.training_job_cancel(user=ml_staff, job=job)
    with mock.patch.object(tasks.training_job, "apply_async"):
        job = services.training_job_resume(user=ml_staff, job=job)
    assert (job.status, job.resumes, job.cancel_requested) == ("queued", 1, False)
    job = services.training_job_run(job_id=job.pk)
    assert job.status == "succeeded" and job.progress_done == 40
    steps = [p["step"] for p in job.metrics if "loss" in p]
    assert steps == sorted(steps) and steps[-1] == 40 and f"resuming from checkpoint-{stopped_at}" in job.log_tail
    with pytest.raises(InvalidTransition):
        services.training_job_resume(user=ml_staff, job=job)


@pytest.mark.django_db
@pytest.mark.django_db
def test_the_pipeline_chains_the_three_stages_and_registers_each_model(ml_staff, ready,
                                                                      django_capture_on_commit_callbacks):
    config = {"sft": {**CONFIG, "max_steps": 3, "save_steps": 100},
              "distill": {"max_steps": 2, "per_device_batch_size": 2, "max_new_tokens": 8, "general_prompts": 8,
                          "save_steps": 100},
              "rl": {"max_steps": 1, "per_device_batch_size": 2, "num_generations": 2, "max_completion_length": 32,
                     "prompts": 4, "save_steps": 100}}
    with django_capture_on_commit_callbacks(execute=False):
        job = _start(ml_staff, ready, kind="pipeline", config=config)
    assert job.progress_total == 6
    job = services.training_job_run(job_id=job.pk)
    assert job.status == "succeeded", job.error
    assert [r["stage"] for r in job.result["stages"]] == ["sft", "distill", "rl"]
    final = TrainedModel.objects.get(pk=job.result["model"])
    assert [m.kind for m in final.lineage()] == ["base", "sft", "distill", "rl"]
    assert [m.pk for m in final.lineage()][0] == ready["base"].pk
    assert services.teacher_of(final.lineage()[2]) == ready["base"]  # distillation's teacher: the pre-SFT base
    steps = [p["step"] for p in job.metrics if "loss" in p]
    assert steps == sorted(steps) and steps[-1] == 6 and {p["stage"] for p in job.metrics} == {"sft", "distill", "rl"}
    assert "[distill] teacher: demo-tiny" in job.log_tail and "[rl] agentic RL" in job.log_tail


@pytest.mark.django_db
def test_a_pipeline_with_two_processes_per_stage_runs_each_through_accelerate_launch(
        ml_staff, ready, django_capture_on_commit_callbacks):
    """What a multi-GPU host does, on two CPU processes (gloo): each stage is launched with ``accelerate launch``
    through the stage CLI (the RL stage's samples handed over as a file), followed through its JSON lines, and
    registered as a model like an in-process stage."""
    two = {"num_processes": 2, "threads": 1, "save_steps": 100}
    config = {"sft": {**CONFIG, **two, "max_steps": 2},
              "distill": {**two, "max_steps": 1, "per_device_batch_size": 2, "max_new_tokens": 8,
                          "general_prompts": 8},
              "rl": {**two, "max_steps": 1, "per_device_batch_size": 2, "num_generations": 2,
                     "max_completion_length": 32, "prompts": 4}}
    with django_capture_on_commit_callbacks(execute=False):
        job = _start(ml_staff, ready, kind="pipeline", config=config)
    job = services.training_job_run(job_id=job.pk)
    assert job.status == "succeeded", job.error
    assert job.log_tail.count("launching 2 processes: ") == 3 and "--multi_gpu" in job.log_tail
    assert (Path(job.output_dir) / "rl" / "samples.jsonl").exists()
    final = TrainedModel.objects.get(pk=job.result["model"])
    assert [m.kind for m in final.lineage()] == ["base", "sft", "distill", "rl"]
    assert all((m.directory / "model.safetensors").exists() for m in final.lineage()[1:])
    steps = [p["step"] for p in job.metrics if "loss" in p]
    assert steps == [1, 2, 3, 4] and [p["stage"] for p in job.metrics if "loss" in p] == ["sft", "sft", "distill", "rl"]


@pytest.mark.django_db
def test_a_failed_stage_is_stored_with_its_cause_and_can_be_resumed(ml_staff, ready, monkeypatch,
                                                                    django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = _start(ml_staff, ready)
    shutil.rmtree(ready["hsa"].artifact_dir / "dataset")  # the artifact went missing under the job
    job = services.training_job_run(job_id=job.pk)
    assert job.status == "failed" and job.error.startswith("FileNotFoundError") and job.can_resume
    assert "failed: FileNotFoundError" in job.log_tail


@pytest.mark.django_db
def test_sweep_fails_jobs_whose_worker_went_silent(ml_staff, ready):
    now = timezone.now()
    old = now - timedelta(seconds=settings.HEARTBEAT_STALE_S + 5)

    def job(status, **kw):
        return TrainingJob.objects.create(name="j", kind="sft", config=CONFIG, dataset=ready["hsa"],
                                          base_model=ready["base"], created_by=ml_staff, status=status,
                                          started_at=kw.pop("started_at", old), **kw)

    dead, cancelling = job("running", heartbeat_at=old), job("cancelling", heartbeat_at=old)
    alive, queued = job("running", heartbeat_at=now), job("queued", started_at=None)
    assert sorted(jobs_sweep_stalled(now=now)) == sorted([str(dead.pk), str(cancelling.pk)])
    dead.refresh_from_db()
    assert dead.status == "failed" and dead.error.startswith("WorkerLost") and dead.can_resume
    assert TrainingJob.objects.get(pk=cancelling.pk).status == "cancelled"
    assert {TrainingJob.objects.get(pk=j.pk).status for j in (alive, queued)} == {"running", "queued"}
    assert jobs_sweep_stalled(now=now) == []


# --- the real worker -----------------------------------------------------------------------------------------------


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_the_worker_trains_on_the_gpu_queue(ml_staff, ready, celery_worker_process):
    job = _start(ml_staff, ready)  # queued on commit to the gpu queue the session worker consumes
    deadline = time.monotonic() + 300
    while not (job := TrainingJob.objects.get(pk=job.pk)).status in ("succeeded", "failed"):
        assert time.monotonic() < deadline, (job.status, job.progress_done)
        time.sleep(0.5)
    assert job.status == "succeeded", job.error
    assert TrainedModel.objects.filter(job=job, kind="sft").exists()


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_is_detected_and_the_job_resumes(ml_staff, ready, settings):
    proc, log = start_worker("train-kill-test", log_name="train-kill-worker.log",
                             env_extra={"HAT_HEARTBEAT_EVERY_S": "0.3"})
    try:
        from unittest import mock

        with mock.patch.object(tasks.training_job, "apply_async"):  # queued to the test's own worker below
            job = _start(ml_staff, ready, config={**CONFIG, "max_steps": 400, "save_steps": 2})
        tasks.training_job.apply_async(args=(str(job.pk),), queue="train-kill-test", task_id=job.task_id)
        deadline = time.monotonic() + 180
        while (job := TrainingJob.objects.get(pk=job.pk)).progress_done < 3:
            assert job.status in ("queued", "running") and time.monotonic() < deadline, (job.status, job.error)
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        last = TrainingJob.objects.get(pk=job.pk).heartbeat_at
        settings.HEARTBEAT_STALE_S = 2.0
        while timezone.now() < last + timedelta(seconds=2.2):
            time.sleep(0.1)
        assert jobs_sweep_stalled() == [str(job.pk)]
        job.refresh_from_db()
        assert job.status == "failed" and "WorkerLost" in job.error and job.can_resume
    finally:
        stop_worker(proc, log)


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_cancel_not_honoured_in_time_is_revoked_and_the_job_ends_cancelled(ml_staff, ready, settings):
    """The fallback of a cooperative cancel: a job that keeps running past ``JOB_CANCEL_GRACE_S`` (here its
    stop flag is never raised, as when a step hangs) has its Celery task revoked with SIGTERM. The worker's pool
    process dies, the stage processes it launched die with it, the heartbeat stops and the sweep ends the job
    cancelled, resumable. A prefork worker, as `make run` starts."""
    proc, log = start_worker("train-revoke-test", log_name="train-revoke-worker.log", pool="prefork",
                             env_extra={"HAT_HEARTBEAT_EVERY_S": "0.3"})
    try:
        from unittest import mock

        with mock.patch.object(tasks.training_job, "apply_async"):  # queued to the test's own worker below
            job = _start(ml_staff, ready, config={**CONFIG, "max_steps": 400, "save_steps": 2, "num_processes": 2,
                                                   "threads": 1})
        tasks.training_job.apply_async(args=(str(job.pk),), queue="train-revoke-test", task_id=job.task_id)
        deadline = time.monotonic() + 180
        while (job := TrainingJob.objects.get(pk=job.pk)).progress_done < 3:
            assert job.status in ("queued", "running") and time.monotonic() < deadline, (job.status, job.error)
            time.sleep(0.2)
        asked = timezone.now() - timedelta(seconds=settings.JOB_CANCEL_GRACE_S + 1)
        TrainingJob.objects.filter(pk=job.pk).update(status="cancelling", cancel_requested_at=asked)

        assert jobs_sweep_stalled() == []  # revoked; still beating for a moment
        job.refresh_from_db()
        assert job.revoked_at is not None and f"its task {job.task_id} was revoked" in job.log_tail
        settings.HEARTBEAT_STALE_S = 2.0
        deadline = time.monotonic() + 60
        while jobs_sweep_stalled() != [str(job.pk)]:
            assert time.monotonic() < deadline, "the job's heartbeat did not stop after the revoke"
            time.sleep(0.5)
        job.refresh_from_db()
        assert job.status == "cancelled" and job.can_resume
        stage_processes = [p for p in Path("/proc").iterdir() if p.name.isdigit() and
                           job.output_dir.encode() in _cmdline(p)]
        deadline = time.monotonic() + 30
        while stage_processes and time.monotonic() < deadline:  # SIGTERM: they save a checkpoint and end
            time.sleep(0.5)
            stage_processes = [p for p in stage_processes if p.exists() and b"Z" != _state(p)]
        assert not stage_processes, [_cmdline(p) for p in stage_processes]
        assert proc.poll() is None  # the worker itself lives on (its pool replaced the process)
    finally:
        stop_worker(proc, log)


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def _state(p: Path) -> bytes:
    try:
        return (p / "stat").read_bytes().split(b") ", 1)[1][:1]
    except (OSError, IndexError):
        return b"Z"
