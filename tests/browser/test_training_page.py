"""The training pages in Chromium, with the job trained for real by the Celery worker on the tiny demo model: an ML
user launches HSA-SFT on a ready HSA dataset from the demo base model, watches the job page refresh itself (htmx)
until it succeeds, reads the loss curve, and follows the link to the registered model and its lineage."""

from __future__ import annotations

import re
import shutil
from unittest import mock

import pytest
from django.conf import settings
from playwright.sync_api import expect

from training_jobs import services, tasks
from training_jobs.models import Dataset, TrainedModel, TrainingJob

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                 reason="the Celery worker needs the PostgreSQL test database")]


@pytest.fixture
def ready_hsa(ml_staff):
    """A small ready HSA dataset, built here (not by the worker: its queued task is held back)."""
    with mock.patch.object(tasks.dataset_build, "apply_async"):
        d = services.dataset_build_start(user=ml_staff, kind="hsa", name="tiny-hsa",
                                         recipe={"variants_per_sample": 2, "harness_pool_size": 2},
                                         sources={"scenarios": [], "tiny_gold": 16})
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == "succeeded", d.error
    yield d
    for job in TrainingJob.objects.all():
        if job.output_dir:
            shutil.rmtree(job.output_dir, ignore_errors=True)
    for dataset in Dataset.objects.all():
        shutil.rmtree(services.datasets_dir() / str(dataset.pk), ignore_errors=True)


def test_launch_watch_and_open_the_model(page, login, shot, ml_staff, ready_hsa, celery_worker_process):
    base = services.demo_base_model()
    login(ml_staff)
    page.click("nav >> text=Training")
    page.click("[data-testid=new-job]")

    # the stage decides which datasets are offered (htmx swaps the select)
    page.check("input[name=kind][value=baseline_sft]")
    expect(page.locator("#id_dataset")).to_contain_text("no ready dataset for this stage")
    page.check("input[name=kind][value=sft]")
    expect(page.locator(f"#id_dataset option[value='{ready_hsa.pk}']")).to_have_count(1)

    page.select_option("#id_dataset", value=str(ready_hsa.pk))
    page.select_option("#id_base_model", label=f"{base.name} · Base model")
    page.fill("#id_name", "browser-sft")
    page.fill("#id_max_steps", "6")
    page.fill("#id_per_device_batch_size", "2")
    page.fill("#id_max_length", "1024")
    shot("launch")
    page.click("[data-testid=launch]")

    expect(page).to_have_url(re.compile(r"/training/[0-9a-f-]{36}/$"))
    job = TrainingJob.objects.get()
    assert (job.config["max_steps"], job.config["per_device_batch_size"], job.config["max_length"]) == (6, 2, 1024)
    status = page.locator("[data-testid=job-status]")
    expect(status).to_have_text(re.compile("running|succeeded"), timeout=120_000)
    expect(page.locator("[data-testid=loss-curve] polyline")).to_have_count(1, timeout=240_000)
    shot("running")
    expect(status).to_have_text("succeeded", timeout=300_000)  # the page polls itself every 2 s
    expect(page.locator("[data-testid=progress-text]")).to_have_text("step 6 / 6")
    expect(page.locator("[data-testid=loss-curve] polyline")).to_be_visible()
    expect(page.locator("[data-testid=lr-curve] polyline")).to_be_visible()
    points = page.locator("[data-testid=loss-curve] polyline").get_attribute("points").split()
    assert len(points) == 6
    expect(page.locator("[data-testid=number-loss] strong")).to_have_text(re.compile(r"^\d+\.\d{4}$"))
    expect(page.locator("[data-testid=log-tail]")).to_contain_text("training from step 0 to 6")
    expect(page.locator("[data-testid=cancel]")).to_have_count(0)
    shot("done")

    model = TrainedModel.objects.get(job=job)
    page.click("[data-testid=model-link]")
    expect(page).to_have_url(re.compile(rf"/models/{model.pk}/$"))
    expect(page.locator("[data-testid=lineage] a")).to_have_text([base.name, model.name])
    expect(page.locator("[data-testid=model-path]")).to_have_text(model.path)
    shot("model")

    page.click("nav >> text=Models")
    expect(page.locator("[data-testid=model-row]")).to_have_count(2)
    shot("registry")

    page.click("nav >> text=Training")
    expect(page.locator("[data-testid=job-row]")).to_have_count(1)
    expect(page.locator("[data-testid=job-row] [data-testid=job-status]")).to_have_text("succeeded")
    shot("list")


def test_tick_two_jobs_and_compare_their_curves(page, login, shot, ml_staff):
    """The job list's ticks open the comparison: both jobs in the table, their loss curves in one box."""
    base = services.demo_base_model()
    jobs = []
    for name, scale in (("hsa-sft", 2.5), ("baseline", 3.5)):
        points = [{"step": s, "loss": scale / s, "learning_rate": 1e-3, "samples_per_s": 2.0} for s in range(1, 9)]
        jobs.append(TrainingJob.objects.create(name=name, kind="sft", status="succeeded", config={}, base_model=base,
                                               created_by=ml_staff, progress_done=8, progress_total=8, metrics=points))
    login(ml_staff)
    page.goto("/training/")
    for job in jobs:
        page.check(f"#pick-{job.pk}")
    shot("ticked")
    page.click("[data-testid=compare]")
    expect(page).to_have_url(re.compile(r"/training/compare/\?jobs="))
    rows = page.locator("[data-testid=compare-row]")
    expect(rows).to_have_count(2)  # in the list's order: the newest first
    expect(rows.nth(0)).to_contain_text("baseline")
    expect(rows.nth(1)).to_contain_text("hsa-sft")
    expect(page.locator("[data-testid=compare-loss] polyline")).to_have_count(2)
    expect(page.locator("[data-testid=last-loss]")).to_have_text(["0.4375", "0.3125"])
    shot("compare")
