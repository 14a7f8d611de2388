"""Compliance review in a real browser: the compliance lead sets the review checklist; a reviewer comments on a
line of the semantic diff and on a whole change; the author replies in the thread; the reviewer resolves it, finds
Approve disabled until every checklist item is ticked, approves with a thread still open (warned, not blocked) and
sees the ticks kept with the approval; then moves production, rolls it back and the author discards a draft, each
through a confirmation page that says exactly what changes. Screenshots in test-artifacts/screenshots/."""

from __future__ import annotations

from playwright.sync_api import expect

from harness_editor.models import ApprovalChecklist, HarnessVersion, Label, ReviewComment
from tests.browser.test_accessibility import BLOCKING, _axe
from tests.harness_editor.gate_helpers import compliance_lead  # noqa: F401  (fixture)

V2 = "/harnesses/glow-gadget/v2/"


def _switch(page, login, user) -> None:
    page.context.clear_cookies()
    login(user)


def _no_serious_violation(page) -> None:
    """axe-core on a confirmation page (reached by a POST, so the accessibility walk's links never lead there)."""
    serious = [f"{v['id']} ({v['impact']}): {v['targets']}" for v in _axe(page) if v["impact"] in BLOCKING]
    assert not serious, f"{page.url}: {serious}"


def test_comments_checklist_and_confirmations(page, login, shot, harness_with_history, compliance_lead, reviewer,
                                              manager):
    # 1. the compliance lead sets the checklist
    login(compliance_lead)
    page.goto("/harnesses/review/checklist/")
    page.fill("#id_items", "Every price claim is backed by a tool result\nNo efficacy promise")
    page.get_by_role("button", name="Save the checklist").click()
    expect(page.get_by_test_id("checklist-items")).to_contain_text("No efficacy promise")
    shot("01-checklist-set")

    # 2. a reviewer comments on an added line of v1 → v2
    _switch(page, login, reviewer)
    page.goto(V2)
    line = page.locator(".diff .add[data-line]").first
    line.hover()
    line.locator("a.line-comment").click()
    form = page.get_by_test_id("comment-form")
    expect(form).to_be_visible()
    expect(form).to_contain_text("Comment on line n")
    form.locator("textarea").fill("Is this claim backed by a tool result?")
    shot("02-comment-form")
    form.get_by_test_id("comment-submit").click()
    thread = page.get_by_test_id("thread").first
    expect(thread).to_contain_text("Is this claim backed by a tool result?")
    # the thread sits right under its line
    expect(page.locator(".diff .add[data-line] + .thread")).to_have_count(1)
    # and one on a whole change
    page.get_by_test_id("comment-change").last.click()
    page.get_by_test_id("comment-form").locator("textarea").fill("Why is this change needed at all?")
    page.get_by_test_id("comment-form").get_by_test_id("comment-submit").click()
    expect(page.get_by_test_id("thread")).to_have_count(2)
    shot("03-two-threads")

    # 3. the author replies in the first thread
    _switch(page, login, manager)
    page.goto(V2)
    first = page.locator('[data-testid=thread][data-resolved=false]').filter(has_text="tool result").first
    first.locator("textarea").fill("Yes: get_product returns the price.")
    first.get_by_role("button", name="Reply", exact=True).click()
    expect(page.get_by_test_id("reply").first).to_contain_text("get_product returns the price")
    shot("04-author-replied")

    # 4. the reviewer resolves it; Approve waits for the checklist; approves with one thread open
    _switch(page, login, reviewer)
    page.goto(V2)
    page.locator("[data-testid=thread]").filter(has_text="tool result").get_by_test_id("resolve").click()
    expect(page.locator("[data-testid=thread][data-resolved=true]")).to_have_count(1)
    expect(page.get_by_test_id("unresolved-warning")).to_contain_text("1 review comment thread still open")
    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_disabled()
    boxes = page.get_by_test_id("checklist").locator("input[type=checkbox]")
    boxes.nth(0).check()
    expect(approve).to_be_disabled()
    boxes.nth(1).check()
    expect(approve).to_be_enabled()
    shot("05-checklist-ticked")
    approve.click()
    expect(page.get_by_test_id("status")).to_have_text("Approved")
    expect(page.get_by_test_id("messages")).to_contain_text("1 review comment thread was still open")
    expect(page.get_by_test_id("approval-checklist")).to_contain_text("No efficacy promise")
    shot("06-approved-with-ticks")
    v2 = HarnessVersion.objects.get(harness__slug="glow-gadget", number=2)
    assert v2.status == "approved" and len(ApprovalChecklist.objects.get(version=v2).items) == 2
    assert ReviewComment.objects.filter(thread__isnull=True, resolved_at__isnull=True).count() == 1

    # 5. moving production asks to confirm, saying v1 → v2
    page.goto("/harnesses/glow-gadget/")
    move = page.get_by_test_id("label-move")
    move.locator("input[name=name]").fill("production")
    move.locator("[name=version]").fill("2")
    move.get_by_role("button", name="Move label").click()
    expect(page.get_by_test_id("confirm-change")).to_contain_text("moves from v1 to v2")
    expect(page.get_by_test_id("affected")).to_contain_text("No live session uses this label now")
    shot("07-confirm-label-move")
    _no_serious_violation(page)
    assert Label.objects.get(name="production").version.number == 1
    page.get_by_test_id("confirm-submit").click()
    expect(page.get_by_test_id("messages")).to_contain_text("Moved 'production' to v2.")

    # 6. rolling it back asks too
    page.locator("#labels").get_by_role("button", name="Roll back").first.click()
    expect(page.get_by_test_id("confirm-change")).to_contain_text("moves from v2 back to v1")
    shot("08-confirm-label-rollback")
    _no_serious_violation(page)
    page.get_by_test_id("confirm-submit").click()
    expect(page.get_by_test_id("messages")).to_contain_text("Rolled 'production' back to v1.")
    assert Label.objects.get(name="production").version.number == 1

    # 7. the author discards draft v3 after a page naming it
    _switch(page, login, manager)
    page.goto("/harnesses/glow-gadget/v3/")
    page.get_by_role("button", name="Discard draft").click()
    expect(page.get_by_test_id("confirm-change")).to_contain_text("Draft v3 of glow-gadget is deleted for good")
    shot("09-confirm-discard")
    _no_serious_violation(page)
    page.get_by_test_id("confirm-submit").click()
    expect(page.get_by_test_id("messages")).to_contain_text("Draft v3 was discarded.")
    assert not HarnessVersion.objects.filter(harness__slug="glow-gadget", number=3).exists()
