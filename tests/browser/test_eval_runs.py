"""Evaluation runs in Chromium, the run played by a real Celery worker (the ``gpu`` queue) through the turn engine
against the scripted endpoint: an ML user launches a run from the form, watches its page until it succeeds (the
page redraws itself: WebSocket pushes where the server speaks them, else polling), reads the scores, opens a case's
drill-down with its turn in the transcript's event view, then ticks it and an earlier run in the list, compares
them, makes the new run the baseline and sees the flipped case as a regression linked to both turns. No CSP
violation on any of these pages (the `page` fixture checks)."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    bad, good, play, price_script, scripted_endpoint, scripted_model, start, t1_set, v1)
from training_jobs.eval_run_models import EvalRun

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                 reason="the Celery worker needs the PostgreSQL test database")]


@pytest.fixture
def earlier_run(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    """A finished run of the same set and harness in which t1-001 was answered with the list price as the price."""
    run = play(start(ml_staff, t1_set, scripted_model, v1, name="earlier run"), scripted_endpoint, [good, bad, good])
    assert run.status == EvalRun.Status.SUCCEEDED and not run.results.get(case_id="t1-001").solved
    scripted_endpoint.queue.clear()
    scripted_endpoint.requests.clear()
    return run


def test_launch_watch_drill_down_and_compare(page, login, shot, ml_staff, earlier_run, scripted_endpoint,
                                             celery_worker_process):
    for _ in range(3):  # the worker plays three cases, each: load the skill, look the product up, reply
        price_script(scripted_endpoint)
    login(ml_staff)
    page.click("nav >> text=Evaluations")
    page.click("[data-testid=runs-link]")
    page.wait_for_url("**/evals/runs/")
    page.click("[data-testid=new-run]")
    page.select_option("#id_eval_set_version", "t1-mini@1")
    expect(page.locator("#id_harness_version")).to_have_value("glow-gadget@1")  # what production points at
    page.select_option("#id_endpoint", "scripted")
    page.fill("#id_name", "browser run")
    page.fill("#id_temperature", "0")
    shot("launch")
    page.click("[data-testid=launch]")

    expect(page).to_have_url(re.compile(r"/evals/runs/[0-9a-f-]{36}/$"))
    run = EvalRun.objects.get(name="browser run")
    assert run.sampling == {"temperature": 0.0}
    status = page.locator("#run [data-testid=run-status]")
    expect(status).to_have_text("succeeded", timeout=180_000)  # the page redraws itself while the run is active
    expect(page.locator("[data-testid=progress-text]")).to_have_text("3 / 3 samples")
    expect(page.locator("[data-testid=score-accuracy]")).to_contain_text("100.0")
    expect(page.locator("[data-testid=score-pass_k]")).to_contain_text("[100.0, 100.0]")
    expect(page.locator("[data-testid=latency-p50]")).to_contain_text(" s")
    expect(page.locator("[data-testid=case-row]")).to_have_count(3)
    shot("finished")
    run.refresh_from_db()
    assert run.worker_host and run.summary["cases"] == 3

    # a case's drill-down: the case, the sample's verdict and its turn in the transcript's event view
    page.locator("[data-testid=case-link]", has_text="t1-001").click()
    page.wait_for_url(f"**/evals/runs/{run.pk}/cases/t1-001/")
    expect(page.locator("[data-testid=case-comment]")).to_contain_text("how much is the serum?? (1)")
    expect(page.locator("[data-testid=sample-verdict]")).to_have_text("solved")
    turn = page.locator("[data-testid=sample-turn] [data-testid=transcript-turn]")
    expect(turn).to_contain_text("skill price_stock_qa")
    expect(turn).to_contain_text("lookup_product")
    expect(turn.locator("[data-testid=transcript-reply]")).to_contain_text("$24.9")
    shot("drill-down")

    # compare: tick both runs in the list (the earlier one is the baseline), then make the new run the baseline
    page.goto("/evals/runs/")
    page.check(f"[data-testid=run-row][data-id='{run.pk}'] [data-testid=compare-pick]")
    page.check(f"[data-testid=run-row][data-id='{earlier_run.pk}'] [data-testid=compare-pick]")
    page.click("[data-testid=compare]")
    page.wait_for_url("**/evals/runs/compare/?*")
    expect(page.locator("[data-testid=compared-run]").first).to_have_attribute("data-id", str(earlier_run.pk))
    expect(page.locator("[data-testid=flipped-case]")).to_have_count(1)
    expect(page.locator("[data-testid=flipped-case]")).to_have_attribute("data-kind", "fix")
    page.click("[data-testid=make-baseline]")
    flipped = page.locator("[data-testid=flipped-case]")
    expect(flipped).to_have_attribute("data-kind", "regression")
    expect(flipped).to_have_attribute("data-case", "t1-001")
    expect(page.locator("[data-testid=metric-pass_k] [data-testid=delta]")).to_contain_text("Δ −")
    expect(page.locator("[data-testid=heatmap]")).to_be_visible()
    shot("compare")
    flipped.locator("[data-testid=flip-run-link]").click()
    page.wait_for_url(f"**/evals/runs/{earlier_run.pk}/cases/t1-001/")
    expect(page.locator("[data-testid=sample-verdict]")).to_have_text("not solved")
    expect(page.locator("[data-testid=sample-problems]")).to_be_visible()
    shot("regression")
