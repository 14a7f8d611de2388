"""Eval sets in Chromium: browse a set, filter its cases by tag (the table swaps in place through htmx) and open a
case; a campaign manager saves a preview turn as an eval case from the transcript, editing the gold reply, the
forbidden claims and the tags. No CSP violation on any of these pages (the `page` fixture checks)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from training_jobs import eval_services as services
from training_jobs.eval_models import EvalSetVersion
from tests.training_jobs.eval_helpers import (  # noqa: F401
    GOOD, canonical_jsonl, price_script, scripted_endpoint, scripted_model, t1_case)

pytestmark = pytest.mark.browser


@pytest.fixture
def t1_set(ml_staff):
    cases = [t1_case(i, tags=["typo"] if i % 3 == 0 else ["price"]) for i in range(40)]
    version, _ = services.eval_set_import(user=ml_staff, name="t1-browse", kind="t1",
                                          jsonl_text=canonical_jsonl(cases), note="forty cases")
    return version


def test_browse_a_set_and_filter_by_tag(page, login, reviewer, t1_set, shot):
    login(reviewer)
    page.click("nav >> text=Evaluations")
    page.wait_for_url("**/eval-sets/")
    row = page.locator("[data-testid=eval-set-row][data-name=t1-browse]")
    expect(row).to_contain_text("40")
    expect(row).to_contain_text(t1_set.content_hash[:10])
    row.locator("[data-testid=latest-version]").click()
    page.wait_for_url("**/eval-sets/t1-browse/v1/")
    expect(page.locator("[data-testid=case-row]")).to_have_count(25)
    expect(page.locator("[data-testid=case-count]")).to_contain_text("40 cases")
    page.select_option("#id_tag", "typo")  # htmx swaps the table and pushes the filtered address
    expect(page.locator("[data-testid=case-count]")).to_contain_text("14 cases match the filters")
    expect(page.locator("[data-testid=case-row]")).to_have_count(14)
    page.wait_for_url("**/eval-sets/t1-browse/v1/?*tag=typo*")
    shot("filtered")
    page.locator("[data-testid=case-link]", has_text="t1-003").click()
    page.wait_for_url("**/cases/t1-003/")
    expect(page.locator("[data-testid=case-comment]")).to_contain_text("how much is the serum?? (3)")
    expect(page.locator("[data-testid=expected-tools]")).to_contain_text("catalog.product_info")
    expect(page.locator("[data-testid=forbidden-claims]")).to_contain_text("heals acne")
    expect(page.locator("[data-testid=case-room]")).to_contain_text("HydraGlow")


def test_save_a_preview_turn_as_an_eval_case(page, login, manager, harness_with_history, scripted_model,
                                             scripted_endpoint, monkeypatch, shot):
    from streams import services as stream_services
    from streams import tasks

    monkeypatch.setattr(tasks.preview_turn, "delay", lambda *args: None)  # the test runs the turn itself
    room = stream_services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    turn_id = stream_services.preview_comment_post(user=manager, room=room, text="how much is #101 and is it in stock")
    price_script(scripted_endpoint)
    assert stream_services.preview_turn_run(room_id=room.pk, turn_id=turn_id).reply == GOOD

    login(manager)
    page.goto(f"/preview/{room.pk}/transcript/")
    page.click("[data-testid=save-as-case]")
    page.wait_for_url(f"**/eval-sets/save-turn/{room.pk}/{turn_id}/")
    expect(page.locator("[data-testid=saved-turn]")).to_contain_text("how much is #101 and is it in stock")
    expect(page.locator("#id_gold_reply")).to_have_value(GOOD)
    page.fill("#id_set_name", "regressions")
    page.fill("#id_gold_reply", "HydraGlow serum is $24.9 now (list $34), 180 in stock.")
    page.fill("#id_forbidden_claims", "efficacy: it heals scars\nlies: nonsense")
    page.fill("#id_tags", "price stock")
    page.click("[data-testid=save-case]")
    expect(page.locator(".has-error")).to_contain_text("unknown kind 'lies'")  # the bad line, on its field
    page.fill("#id_forbidden_claims", "efficacy: it heals scars")
    page.click("[data-testid=save-case]")
    page.wait_for_url(f"**/eval-sets/regressions/v1/cases/turn-{turn_id}/")
    expect(page.locator("[data-testid=messages]")).to_contain_text("Saved as case")
    expect(page.locator("[data-testid=gold-reply]")).to_have_text("HydraGlow serum is $24.9 now (list $34), 180 in stock.")
    expect(page.locator("[data-testid=forbidden-claims]")).to_contain_text("it heals scars")
    expect(page.locator("[data-testid=gold-facts]")).to_contain_text("24.9")
    expect(page.locator("[data-testid=case-harness]")).to_have_text("glow-gadget@1")
    shot("saved-case")
    version = EvalSetVersion.objects.get(eval_set__name="regressions")
    assert version.case_count == 1 and version.author == manager
