"""The dataset page in Chromium, with builds in the real Celery worker: compose a small recipe, launch it (an HSA
dataset and its fixed-harness baseline), watch the job page refresh itself to done, read the per-operator
statistics, and open a sample: the semantic diff of the harnesses and the target before/after relabelling."""

from __future__ import annotations

import re
import shutil

import pytest
from django.conf import settings
from playwright.sync_api import expect

from training_jobs import services
from training_jobs.models import Dataset

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                 reason="the Celery worker needs the PostgreSQL test database")]


@pytest.fixture
def cleanup_artifacts():
    yield
    for d in Dataset.objects.all():
        shutil.rmtree(services.datasets_dir() / str(d.pk), ignore_errors=True)


def test_launch_watch_and_open_a_sample(page, login, shot, ml_staff, celery_worker_process, cleanup_artifacts):
    login(ml_staff)
    page.click("nav >> text=Datasets")
    page.click("[data-testid=new-dataset]")
    page.fill("#id_name", "browser-demo")
    page.check("input[name=build][value=both]")
    page.fill("#id_variants_per_sample", "2")
    page.fill("#id_harness_pool_size", "4")
    for box in page.locator("input[name=scenarios]").all():
        if box.get_attribute("value") != "compliance-traps":
            box.uncheck()
    for box in page.locator("input[name=demo_manifests]").all():
        if box.get_attribute("value") != "skincare_v1":
            box.uncheck()
    page.fill("#id_max_samples", "12")
    page.fill("#id_p_rename_tools", "1")
    shot("compose")
    page.click("[data-testid=launch]")

    expect(page).to_have_url(re.compile(r"/datasets/[0-9a-f-]{36}/$"))
    expect(page.locator("[data-testid=dataset-status]")).to_have_text("succeeded", timeout=90_000)  # htmx polling
    expect(page.locator("[data-testid=progress-text]")).to_have_text("24 / 24 rows")
    expect(page.locator("[data-testid=operator-row]")).to_have_count(21)
    expect(page.locator("[data-testid=operator-stats]")).to_contain_text("rename_tools")
    shot("job-done")

    # the baseline from the same samples, in the list
    page.goto("/datasets/")
    rows = page.locator("[data-testid=dataset-row]")
    expect(rows).to_have_count(2)
    expect(page.locator("[data-testid=datasets]")).to_contain_text("Fixed harness (baseline)")
    expect(page.locator("[data-testid=dataset-status]").first).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("[data-testid=dataset-status]").nth(1)).to_have_text("succeeded", timeout=60_000)
    shot("list")

    hsa = Dataset.objects.get(kind="hsa")
    page.goto(f"/datasets/{hsa.pk}/")
    page.click("[data-testid=browse-samples]")
    expect(page.locator("[data-testid=sample-row]")).to_have_count(min(25, hsa.rows))
    page.locator("[data-testid=sample-link]").first.click()
    expect(page.locator("[data-testid=diff]")).to_be_visible()
    expect(page.locator("[data-testid=target-before] li").first).to_be_visible()
    expect(page.locator("[data-testid=target-after] li").last).to_contain_text("reply")
    expect(page.locator("[data-testid=diff] .change").first).to_be_visible()
    shot("sample")
