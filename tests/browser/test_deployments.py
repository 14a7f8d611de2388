"""Deployments in a real browser, under the CSP: a reviewer reads a proposal's field-by-field diff and approves it;
an operator rolls the deployment back from its confirmation page with a reason and sees r1 in force again."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from harness_editor import services as harness_services
from streams.services import deployments
from tests.streams.deployment_helpers import deploy_world, deployed, live_session_on  # noqa: F401

pytestmark = pytest.mark.browser


def test_reviewer_approves_and_operator_rolls_back(page, login, deployed, ml_staff, reviewer, operator):
    w = deployed
    harness_services.label_move(user=reviewer, harness=w["harness"], name="production", version=w["v2"])
    deployments.deployment_propose(user=ml_staff, deployment=w["deployment"], model=w["tuned"],
                                   serve_profile="vllm-plain", note="the SFT model")
    live_session_on(w["deployment"], operator, title="Night show")

    login(reviewer)
    page.goto("/deployments/")
    expect(page.get_by_test_id("deployment-row")).to_contain_text("r2 proposed")
    page.get_by_role("link", name="tiny-live").click()
    diff = page.get_by_test_id("revision-diff")
    expect(diff.locator('tr[data-field="model"]')).to_contain_text("demo-sft")
    expect(diff.locator('tr[data-changed="1"]')).to_have_count(2)  # model and serve profile
    page.fill("#decision-comment", "SFT model checked")
    page.get_by_test_id("approve").click()
    expect(page.get_by_test_id("in-force")).to_contain_text("demo-sft")

    page.context.clear_cookies()
    login(operator)
    page.goto("/deployments/tiny-live/")
    page.get_by_test_id("rollback").click()
    expect(page.get_by_test_id("rollback-preview")).to_contain_text("Night show")
    page.fill("#id_comment", "replies drift on air")
    page.check("#id_confirm")
    page.get_by_test_id("confirm-rollback").click()
    expect(page.get_by_test_id("messages")).to_contain_text("back to r1")
    expect(page.get_by_test_id("in-force")).to_contain_text("demo-tiny")
    expect(page.get_by_test_id("version")).to_have_text("v1")
    expect(page.get_by_test_id("deployment-timeline")).to_contain_text("deployment.rollback")
