"""Dataset build jobs: validation (located errors, nothing saved), the worker's service in-process (success with
statistics and a complete artifact, cancel, failure with its cause and no artifact left), and end to end on
PostgreSQL + Redis with the real Celery worker (an HSA dataset and its fixed-harness baseline, cancel of a running
build, a failure shown with its cause)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from django.conf import settings

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.jobs import JobReporter
from console.models import AuditEvent
from training_jobs import services
from training_jobs.models import Dataset

SMALL_SOURCES = {"scenarios": ["compliance-traps"], "demo_manifests": ["skincare_v1"], "max_samples": 12}
SMALL_RECIPE = {"name": "small", "seed": 1, "variants_per_sample": 2, "harness_pool_size": 4}

needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the Celery worker needs the PostgreSQL test database")


@pytest.fixture
def cleanup_artifacts(db):
    """Remove the artifact folders the test's datasets wrote (before the database is flushed)."""
    yield
    for d in Dataset.objects.all():
        shutil.rmtree(services.datasets_dir() / str(d.pk), ignore_errors=True)


def _wait(dataset_id, until, timeout: float = 120.0) -> Dataset:
    deadline = time.monotonic() + timeout
    while True:
        d = Dataset.objects.get(pk=dataset_id)
        if until(d):
            return d
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {d.status} {d.progress_done}/{d.progress_total} {d.error}")
        time.sleep(0.2)


def _no_tmp_dirs() -> bool:
    root = services.datasets_dir()
    return not root.exists() or not any(p.name.startswith(".tmp-") for p in root.iterdir())


# --- validation --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("recipe, sources, path", [
    ({"variants_per_sample": 0}, {}, "recipe.variants_per_sample"),
    ({"operators": [{"name": "rename_tools", "probability": 1.5}]}, {}, "recipe.operators[0].probability"),
    ({"operators": [{"name": "no_such_operator"}]}, {}, "recipe.operators[0]"),
    ({"operators": [{"name": "rename_tools", "settings": {"bogus": 1}}]}, {}, "recipe.operators[0]"),
    ({"names": "secret"}, {}, "recipe.names"),
    ({"colour": "blue"}, {}, "recipe.colour"),
    ({}, {"scenarios": ["no-such-scenario"]}, "sources.scenarios"),
    ({}, {"scenarios": [], "tiny_gold": 0}, "sources"),
    ({}, {"tiny_gold": -1}, "sources.tiny_gold"),
    ({}, {"versions": ["not a ref"]}, "sources.versions"),
    ({}, {"versions": ["glow-gadget@99"]}, "sources.versions[0]"),
    ({}, {"versions": ["glow-gadget@2"]}, "sources.versions[0]"),  # submitted, not approved
    ("not an object", {}, "recipe"),
])
def test_invalid_requests_are_located_and_save_nothing(ml_staff, harness_with_history, recipe, sources, path):
    with pytest.raises(ValidationFailed) as info:
        services.dataset_build_start(user=ml_staff, recipe=recipe, sources=sources)
    assert path in [e["path"] for e in info.value.errors], info.value.errors
    assert not Dataset.objects.exists()
    assert not AuditEvent.objects.filter(scope__startswith="dataset:").exists()


@pytest.mark.django_db
def test_unknown_kind_is_refused(ml_staff):
    with pytest.raises(ValidationFailed) as info:
        services.dataset_build_start(user=ml_staff, kind="magic", recipe={}, sources={})
    assert [e["path"] for e in info.value.errors] == ["kind"]


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["manager", "reviewer", "operator", "outsider"])
def test_only_ml_staff_may_build(request, role):
    with pytest.raises(NotAllowed):
        services.dataset_build_start(user=request.getfixturevalue(role), recipe={}, sources=SMALL_SOURCES)
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_start_queues_on_commit_with_baseline(ml_staff, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    from training_jobs import tasks

    monkeypatch.setattr(tasks.dataset_build, "apply_async", lambda args, queue, task_id: sent.append(args[0]))
    with django_capture_on_commit_callbacks(execute=True):
        d = services.dataset_build_start(user=ml_staff, recipe=SMALL_RECIPE, sources=SMALL_SOURCES,
                                         with_baseline=True)
    baseline = d.baselines.get()
    assert (d.kind, d.status, d.name, d.split) == ("hsa", "queued", "small", "train")
    assert (baseline.kind, baseline.sources, baseline.baseline_of_id) == ("fixed_harness", d.sources, d.pk)
    assert d.recipe["variants_per_sample"] == 2 and d.recipe["operators"]  # defaults filled in
    assert sent == [str(d.pk), str(baseline.pk)]
    assert AuditEvent.objects.filter(scope=f"dataset:{d.pk}", action="dataset.queued").exists()


@pytest.mark.django_db
def test_heldout_recipe_makes_a_heldout_split(ml_staff):
    d = services.dataset_build_start(user=ml_staff, recipe={**SMALL_RECIPE, "names": "heldout"},
                                     sources=SMALL_SOURCES)
    assert d.split == "heldout"


# --- the worker's service, in this process -------------------------------------------------------------------------


def _queued(user, **kw) -> Dataset:
    return services.dataset_build_start(user=user, recipe=kw.pop("recipe", SMALL_RECIPE),
                                        sources=kw.pop("sources", SMALL_SOURCES), **kw)


@pytest.mark.django_db
def test_run_builds_the_artifact_with_statistics(ml_staff, cleanup_artifacts):
    d = services.dataset_build_run(dataset_id=_queued(ml_staff).pk)
    assert d.status == "succeeded", d.error
    assert d.sample_count == 12 and d.progress_done == d.progress_total == 24
    assert d.row_counts == {"train": d.stats["rows"]} and 0 < d.stats["rows"] <= 24
    assert set(d.stats["operators"]) == {o["name"] for o in d.recipe["operators"]}
    assert all(set(v) >= {"applied", "dropped", "mean_prompt_tokens"} for v in d.stats["operators"].values())
    out = d.artifact_dir
    assert out == services.datasets_dir() / str(d.pk) and d.is_ready
    assert {p.name for p in out.iterdir()} >= {"dataset", "recipe.json", "stats.json", "harnesses.jsonl",
                                                "samples.jsonl", "base_harnesses.jsonl"}
    assert json.loads((out / "recipe.json").read_text())["progress_every"] == 500  # the recipe as written
    from datasets import load_from_disk

    assert len(load_from_disk(str(out / "dataset"))) == d.stats["rows"]
    assert _no_tmp_dirs()
    assert AuditEvent.objects.filter(scope=f"dataset:{d.pk}", action="dataset.succeeded").exists()
    assert services.dataset_build_run(dataset_id=d.pk).status == "succeeded"  # a redelivery does nothing


@pytest.mark.django_db
def test_fixed_harness_baseline_has_one_row_per_sample(ml_staff, cleanup_artifacts):
    d = _queued(ml_staff, with_baseline=True)
    baseline = services.dataset_build_run(dataset_id=d.baselines.get().pk)
    assert baseline.status == "succeeded", baseline.error
    assert baseline.stats["kind"] == "fixed_harness"
    assert baseline.row_counts == {"train": 12} and baseline.stats["operators"] == {}


@pytest.mark.django_db
def test_cancel_a_queued_build(ml_staff):
    d = _queued(ml_staff)
    d = services.dataset_cancel(user=ml_staff, dataset=d)
    assert d.status == "cancelled" and d.finished_at
    assert services.dataset_build_run(dataset_id=d.pk).status == "cancelled"  # the task finds nothing to do
    with pytest.raises(InvalidTransition):
        services.dataset_cancel(user=ml_staff, dataset=d)
    assert AuditEvent.objects.filter(scope=f"dataset:{d.pk}", action="dataset.cancel").exists()


@pytest.mark.django_db
def test_cancel_needs_the_build_permission(ml_staff, manager):
    with pytest.raises(NotAllowed):
        services.dataset_cancel(user=manager, dataset=_queued(ml_staff))


@pytest.mark.django_db
def test_cancel_while_running_stops_at_the_next_step_and_leaves_nothing(ml_staff, monkeypatch, cleanup_artifacts):
    d = _queued(ml_staff)
    monkeypatch.setattr(Dataset, "job_cancel_check_every_s", 0.0)
    real = JobReporter.progress

    def progress(self, done, total=None, **kw):  # the user presses cancel while the first rows are made
        real(self, done, total, **kw)
        Dataset.objects.filter(pk=self.pk).update(cancel_requested=True)

    monkeypatch.setattr(JobReporter, "progress", progress)
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "cancelled" and not d.error
    assert 0 < d.progress_done < 24
    assert not (services.datasets_dir() / str(d.pk)).exists() and not d.artifact_path and _no_tmp_dirs()


@pytest.mark.django_db
def test_failure_is_stored_with_its_cause_and_no_artifact(ml_staff, monkeypatch, cleanup_artifacts):
    d = _queued(ml_staff)

    def broken(samples, out_dir):  # the rows are on disk by now: half-written
        assert (out_dir / "dataset").is_dir()
        raise OSError("No space left on device")

    monkeypatch.setattr(services.datasets, "write_originals", broken)
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "failed"
    assert d.error == "OSError: No space left on device"
    assert not d.is_ready and not d.artifact_path
    assert not (services.datasets_dir() / str(d.pk)).exists() and _no_tmp_dirs()
    assert AuditEvent.objects.filter(scope=f"dataset:{d.pk}", action="dataset.failed").exists()


@pytest.mark.django_db
def test_a_training_split_with_a_heldout_name_is_refused(ml_staff, monkeypatch, cleanup_artifacts):
    monkeypatch.setattr(services.datasets, "heldout_leaks", lambda rows, **_: ["zz_heldout_name"])
    d = services.dataset_build_run(dataset_id=_queued(ml_staff).pk)
    assert d.status == "failed" and d.error == "ValueError: held-out names in a training split: zz_heldout_name"


# --- end to end: PostgreSQL + Redis + the real Celery worker -------------------------------------------------------


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_worker_builds_hsa_and_baseline(ml_staff, celery_worker_process, cleanup_artifacts):
    d = _queued(ml_staff, with_baseline=True)
    baseline = d.baselines.get()
    d = _wait(d.pk, lambda x: not x.is_active)
    baseline = _wait(baseline.pk, lambda x: not x.is_active)
    assert d.status == "succeeded", d.error
    assert baseline.status == "succeeded", baseline.error
    assert d.is_ready and baseline.is_ready
    assert d.stats["operators"] and d.row_counts["train"] == d.stats["rows"]
    assert baseline.row_counts == {"train": d.sample_count}
    assert d.started_at and d.finished_at and d.progress_done == d.progress_total == 24


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_worker_cancels_a_running_build(ml_staff, celery_worker_process, cleanup_artifacts):
    # a fresh harness variant for every row: slow enough (a few thousand rows) to be cancelled mid-way
    d = _queued(ml_staff, recipe={"variants_per_sample": 64, "harness_pool_size": 0},
                sources={"scenarios": ["compliance-traps"], "demo_manifests": ["skincare_v1"]})
    d = _wait(d.pk, lambda x: x.status == "running" and x.progress_done > 0)
    services.dataset_cancel(user=ml_staff, dataset=d)
    d = _wait(d.pk, lambda x: not x.is_active, timeout=60)
    assert d.status == "cancelled"
    assert d.progress_done < d.progress_total
    assert not (services.datasets_dir() / str(d.pk)).exists() and _no_tmp_dirs()


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_worker_failure_shows_its_cause(ml_staff, celery_worker_process, cleanup_artifacts):
    from django.db import transaction

    with transaction.atomic():  # a stored recipe the code no longer accepts (queued on commit)
        d = _queued(ml_staff)
        Dataset.objects.filter(pk=d.pk).update(recipe={"operators": [{"name": "retired_operator"}]})
    d = _wait(d.pk, lambda x: not x.is_active)
    assert d.status == "failed"
    assert d.error.startswith("ValidationError: ") and "retired_operator" in d.error
    assert not d.artifact_path
