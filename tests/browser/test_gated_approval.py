"""Run → compare → gated approval in a real browser: a reviewer finds approve disabled and reads why; an ML user
starts the missing evaluation runs from the version page (played here through the one turn engine against the
scripted endpoint, as the gpu worker would); the gate panel shows the evidence and links to the two runs side by
side; the reviewer approves; a compliance lead overrides the gate of another version only with a written reason,
and the override is on the audit timeline."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from harness_editor import services
from harness_editor.models import HarnessVersion
from tests.harness_editor.gate_helpers import compliance_lead  # noqa: F401  (fixture)
from tests.streams.preview_helpers import price_script, scripted_model  # noqa: F401  (fixtures)
from tests.streams.scripted_endpoint import reply, scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.eval_helpers import t1_case
from training_jobs import eval_run_services
from training_jobs.eval_models import EvalSet
from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_services import eval_set_import
from training_jobs.gate_models import GatePolicy, GateRequirement

pytestmark = pytest.mark.browser

V2 = "/harnesses/glow-gadget/v2/"
V3 = "/harnesses/glow-gadget/v3/"
WRONG = "The HydraGlow serum is $34 right now."  # the list price said as the price: not accurate


@pytest.fixture
def gated(harness_with_history, manager, ml_staff, scripted_model):
    h = harness_with_history
    version, _ = eval_set_import(user=ml_staff, name="t1-gate", kind="t1",
                                 jsonl_text="\n".join(json.dumps(t1_case(i)) for i in range(3)))
    EvalSet.objects.filter(pk=version.eval_set_id).update(pinned=version)
    policy = GatePolicy.objects.create(harness=h["harness"], endpoint=scripted_model)
    GateRequirement.objects.create(policy=policy, eval_set=version.eval_set, metric="accuracy", minimum=60.0,
                                   max_drop=40.0)
    services.version_submit(user=manager, version=h["v3"])
    return h


def _switch(page, login, user) -> None:
    page.context.clear_cookies()
    login(user)


def test_run_compare_then_gated_approval_and_an_audited_override(page, login, shot, gated, reviewer, ml_staff,
                                                                 compliance_lead, scripted_endpoint, monkeypatch):
    queued = []
    monkeypatch.setattr("training_jobs.tasks.eval_run.apply_async", lambda **kw: queued.append(kw))

    # 1. the reviewer: approve is disabled and the page says why
    login(reviewer)
    page.goto(V2)
    expect(page.get_by_test_id("gate-state")).to_have_text("fails")
    expect(page.get_by_test_id("approve-disabled")).to_be_disabled()
    expect(page.get_by_test_id("approve-blocked")).to_contain_text("Approve is disabled")
    expect(page.get_by_test_id("gate-rules")).to_contain_text("no finished run of v2 on t1-gate v1")
    expect(page.get_by_test_id("gate-start-runs")).to_have_count(0)  # reviewers do not launch runs
    shot("01-gate-fails")

    # 2. an ML user starts the missing runs (this version and production v1) from the same page
    _switch(page, login, ml_staff)
    page.goto(V2)
    page.get_by_test_id("gate-start-runs").click()
    expect(page.locator(".messages")).to_contain_text("Started 2 evaluation runs")
    assert len(queued) == 2 and all(q["queue"] == "gpu" for q in queued)
    # the gpu worker's part: every case through the one turn engine; v2 gets the last case wrong
    for run in EvalRun.objects.order_by("created_at"):
        assert run.harness_version.number in (1, 2)
        price_script(scripted_endpoint)
        price_script(scripted_endpoint)
        if run.harness_version.number == 2:
            price_script(scripted_endpoint, text=WRONG)
            for _ in range(4):
                scripted_endpoint.add(reply(WRONG))
        else:
            price_script(scripted_endpoint)
        assert eval_run_services.eval_run_execute(run_id=run.pk).status == EvalRun.Status.SUCCEEDED

    # 3. the evidence on the review page, and the two runs side by side
    _switch(page, login, reviewer)
    page.goto(V2)
    expect(page.get_by_test_id("gate-state")).to_have_text("passes")
    expect(page.get_by_test_id("gate-scores")).to_contain_text("Accuracy")
    expect(page.get_by_test_id("gate-flipped")).to_contain_text("t1-002")
    shot("02-evidence")
    page.get_by_test_id("gate-compare").click()
    expect(page).to_have_url(re.compile(r"/evals/runs/compare/\?runs="))
    expect(page.get_by_test_id("compared-run")).to_have_count(2)
    expect(page.get_by_test_id("baseline")).to_be_visible()
    shot("03-compare")

    # 4. the gate passes: the reviewer approves
    page.goto(V2)
    page.fill("#id_comment", "evidence attached")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_test_id("status")).to_have_text("Approved")
    assert HarnessVersion.objects.get(harness__slug="glow-gadget", number=2).status == "approved"
    shot("04-approved")

    # 5. v3 has no evidence: a compliance lead may approve it only with a written reason, and it is audited
    _switch(page, login, compliance_lead)
    page.goto(V3)
    expect(page.get_by_test_id("gate-state")).to_have_text("fails")
    page.get_by_test_id("override-approve").click()
    expect(page.get_by_test_id("action-error")).to_contain_text("you may override it with a written reason")
    assert HarnessVersion.objects.get(harness__slug="glow-gadget", number=3).status == "submitted"
    page.fill("#id_override_reason", "Tool rename only; evaluation scheduled after go-live")
    page.get_by_test_id("override-approve").click()
    expect(page.locator(".messages")).to_contain_text("gate overridden")
    expect(page.get_by_test_id("status")).to_have_text("Approved")
    page.goto("/timeline/?scope=harness:glow-gadget")
    row = page.locator("tr", has_text="version.gate_overridden")
    expect(row).to_contain_text("Tool rename only; evaluation scheduled after go-live")
    expect(row).to_contain_text("overrode: t1-gate v1: finished run")
    shot("05-override-audited")
