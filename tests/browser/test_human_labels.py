"""Human labels in Chromium: a compliance reviewer opens a judged run's label sample, labels each reply blind (the
verdicts appear only after submitting), follows "label the next one" to the end, and reads the agreement page
(humans against the rules, each judge and the vote, with confusion matrices). No CSP violation on any page (the
`page` fixture checks)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from streams.models import ModelEndpoint
from tests.streams.scripted_endpoint import ScriptedEndpoint, reply
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    bad, good, play, scripted_endpoint, scripted_model, start, t1_set, v1)
from training_jobs.label_models import HumanLabel

pytestmark = pytest.mark.browser


@pytest.fixture
def judged_run(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    judges = ScriptedEndpoint()
    ModelEndpoint.objects.create(name="judge-a", base_url=judges.base_url, model="judge-a", kind="vllm",
                                 timeout_s=5.0, connect_timeout_s=1.0)
    for acc, eff in ((1, 1), (0, 0.5), (1, 1)):
        judges.add(reply(json.dumps({"accuracy": acc, "effectiveness": eff, "reason": f"judge says {acc}/{eff}"})))
    try:
        run = play(start(ml_staff, t1_set, scripted_model, v1, name="judged run", judges=["judge-a"]),
                   scripted_endpoint, [good, bad, good])
    finally:
        judges.close()
    assert run.status == run.Status.SUCCEEDED, run.error
    return run


def test_label_a_sample_blind_then_read_the_agreement(page, login, shot, reviewer, judged_run):
    login(reviewer)
    page.goto(f"/evals/runs/{judged_run.pk}/labels/?n=3&seed=0")
    expect(page.locator("[data-testid=sample-row]")).to_have_count(3)
    shot("sample")
    page.click("[data-testid=label-next]")
    for i in range(3):
        expect(page.locator("[data-testid=blind]")).to_be_visible()
        expect(page.locator("[data-testid=verdict-rules]")).to_have_count(0)
        expect(page.locator("text=judge says")).to_have_count(0)
        expect(page.locator("[data-testid=tool-result-item]").first).to_contain_text("HydraGlow")
        if i == 0:
            shot("blind")
        page.check("input[name=accuracy][value='1']")
        page.check("input[name=effectiveness][value='1']")
        page.fill("textarea[name=note]", f"label {i}")
        page.click("[data-testid=submit-label]")
        expect(page.locator("[data-testid=revealed]")).to_be_visible()
        expect(page.locator("[data-testid=verdict-rules]")).to_be_visible()
        expect(page.locator("[data-testid=verdict-judge]")).to_contain_text("judge says")
        if i == 0:
            shot("revealed")
        if i < 2:
            page.click("[data-testid=label-next]")
    assert HumanLabel.objects.filter(reviewer=reviewer).count() == 3
    page.click("[data-testid=agreement-link]")
    expect(page.locator("[data-testid=agreement-row]")).to_have_count(3)  # rules, judge-a, the vote
    expect(page.locator("[data-testid=label-counts]")).to_contain_text("3 labels of 3 samples by 1 reviewer")
    expect(page.locator("[data-testid=judges-vs-rules]")).to_be_visible()
    shot("agreement")
