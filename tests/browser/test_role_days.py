"""Each role's day in real Chromium, through the pages a person would click (issue 14, "the console as a product").

- manager: opens a draft from home, edits it in the editor, saves, tries it beside production (real turns through the
  tiny local model on the real web process and Celery worker, as test_try_draft.py does) and submits it for review;
- reviewer: sees the bell, opens the notification, comments on a line of the diff, the author replies, the reviewer
  resolves the thread, ticks the checklist, approves and moves ``production`` through its confirmation page;
- ML staff: ticks two finished training runs on the list, compares them, reads values under the cursor, hides a run
  from the legend and zooms by dragging.

State a role would find already there (the harness's history, the review checklist, finished training runs) is
arranged through services; every step of the walk itself is a click or a fill. Each page visited is checked by
axe-core (test_accessibility's helper); serious/critical findings are collected and fail the test at its end, so the
walk and its screenshots are complete either way. Screenshots: test-artifacts/screenshots/role-day-<role>-NN-<step>.png.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from harness_editor import review_services
from harness_editor.models import HarnessVersion, Label
from streams.models import ModelEndpoint
from tests.browser.conftest import SCREENSHOTS
from tests.browser.test_accessibility import BLOCKING, _axe
from tests.browser.test_charts import _drag_zoom, _hover, _job, _legend_step, _points
from tests.browser.test_preview_room import _login, asgi_page, asgi_server  # noqa: F401  (fixtures)
from tests.harness_editor.gate_helpers import compliance_lead  # noqa: F401  (fixture)

pytestmark = pytest.mark.browser

NEW_DESCRIPTION = "Answer price and stock questions from live tool results only, never from memory."
COMMENT = "Is this claim backed by a tool result?"
REPLY = "Yes: get_product returns the price."
CHECKLIST = ["Every price claim is backed by a tool result", "No efficacy promise"]
OFF = re.compile(r"(^|\s)(u-)?off(\s|$)")


class Day:
    """One role's walk: numbered screenshots and an axe check of every page it visits."""

    def __init__(self, page, role: str):
        self.page, self.role, self.n = page, role, 0
        self.findings: list[str] = []
        self.checked: set[str] = set()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def step(self, name: str, *, full_page: bool = True, axe: bool = True) -> None:
        self.n += 1
        path = SCREENSHOTS / f"role-day-{self.role}-{self.n:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        if axe:
            self.axe()

    def axe(self) -> None:
        """axe-core on the page as it is now (once per address and state name is enough for a walk)."""
        where = self.page.url.split("://", 1)[-1].split("/", 1)[-1].split("#", 1)[0]
        for v in _axe(self.page):
            if v["impact"] in BLOCKING:
                finding = f"/{where}: {v['id']} ({v['impact']}) {v['help']} at {v['targets']}"
                if finding not in self.findings:
                    self.findings.append(finding)
        self.checked.add(where)

    def finish(self) -> None:
        assert not self.findings, "axe-core (serious/critical) on the walk:\n" + "\n".join(self.findings)


def _switch(page, login, user) -> None:
    page.context.clear_cookies()
    login(user)


def test_manager_edits_tries_and_submits_a_draft(request, asgi_page, asgi_server, harness_with_history,  # noqa: F811
                                                 manager, celery_worker_process):
    from tests.streams.test_preview_local_model import QUESTION, local_model_endpoint
    from tests.streams.test_try_draft import glow_expected_level

    endpoint = local_model_endpoint(request)  # the tiny local model, the default endpoint for Try
    ModelEndpoint.objects.exclude(pk=endpoint.pk).update(is_default=False)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)
    page = asgi_page
    day = Day(page, "manager")
    _login(page, manager, asgi_server)

    # 1. home lists the manager's draft
    drafts = page.get_by_test_id("my-drafts")
    expect(drafts).to_contain_text("glow-gadget v3")
    day.step("home-my-drafts")

    # 2. the draft opens in the editor; an edit shows in the live preview, marked as changed
    drafts.get_by_role("link", name="glow-gadget v3").click()
    page.wait_for_url("**/harnesses/glow-gadget/v3/edit/**")
    expect(page.get_by_role("heading", name="Edit glow-gadget v3")).to_be_visible()
    page.locator("nav.tabs").get_by_role("link", name="Skills", exact=True).click()
    page.wait_for_url(re.compile(r"tab=skills$"))
    field = page.locator("#skills-0-description")
    field.click()
    field.fill(NEW_DESCRIPTION)
    expect(page.get_by_test_id("live-valid")).to_be_visible()
    expect(page.get_by_test_id("system-text").locator(".pl.changed").first).to_contain_text(NEW_DESCRIPTION)
    day.step("editor-edited", full_page=False)

    # 3. saved: the message says so and the draft holds the new text
    page.get_by_role("button", name="Save", exact=True).first.click()
    expect(page.locator(".messages")).to_contain_text("Saved v3")
    expect(page.get_by_test_id("preview-changes")).to_have_text("Same prompt as the saved revision.")
    assert HarnessVersion.objects.get(pk=harness_with_history["v3"].pk).manifest.skills[0].description \
        == NEW_DESCRIPTION
    day.step("editor-saved", full_page=False)

    # 4. Try this draft, from the editor: the model-fit notice before sending
    page.get_by_test_id("try-draft-link").click()
    page.wait_for_url("**/harnesses/glow-gadget/v3/try/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Try glow-gadget v3 beside production (v1)")
    # the edited v3 is a manifest the demo model never saw (it may know other glow-gadget versions: metrics.json)
    expect(page.get_by_test_id("model-fit")).to_contain_text(
        "of glow-gadget, not on v3" if glow_expected_level(3) == "info" else "was not trained on glow-gadget")
    expect(page.get_by_test_id("try-endpoint")).to_have_text("local-test")
    day.step("try-before-sending")

    # 5. one comment, both versions answer side by side (real turns on the local model)
    page.fill("#try-text", QUESTION)
    page.click("#try-send")
    page.wait_for_url("**/try/?draft=*")
    columns = {side: page.get_by_test_id(f"try-{side}") for side in ("draft", "production")}
    for column in columns.values():
        expect(column.get_by_test_id("comment")).to_contain_text(QUESTION)
    expect(columns["production"]).to_contain_text("production: v1")
    for column in columns.values():
        expect(column).to_have_attribute("data-done", re.compile(r"^(ok|fallback)$"), timeout=240_000)
        expect(column.get_by_test_id("reply")).to_be_visible()
        expect(column.get_by_test_id("timings")).to_contain_text("total")
    turns = page.get_by_test_id("turn")
    expect(turns).to_have_count(2)
    expect(turns.nth(0)).to_contain_text("glow-gadget v3")
    expect(turns.nth(1)).to_contain_text("glow-gadget v1")
    day.step("try-side-by-side")

    # 6. back to the version (breadcrumb) and submit it for review
    page.locator("p.small").get_by_role("link", name="v3", exact=True).click()
    page.wait_for_url("**/harnesses/glow-gadget/v3/")
    expect(page.get_by_test_id("status")).to_have_text("Draft")
    day.step("version-draft")
    page.get_by_role("button", name="Submit for review").click()
    expect(page.get_by_test_id("messages")).to_contain_text("v3 is submitted for review.")
    expect(page.get_by_test_id("status")).to_have_text("Submitted")
    expect(page.get_by_text("Submitted for review: a compliance reviewer other than you")).to_be_visible()
    expect(page.get_by_role("button", name="Submit for review")).to_have_count(0)
    day.step("submitted")
    v3 = HarnessVersion.objects.get(pk=harness_with_history["v3"].pk)
    assert v3.status == "submitted" and v3.manifest.skills[0].description == NEW_DESCRIPTION
    day.finish()


def test_reviewer_reviews_approves_and_moves_production(page, login, harness_with_history, compliance_lead,  # noqa: F811
                                                        reviewer, manager):
    # already there: v2 submitted by the manager (harness_with_history) and the compliance lead's checklist
    review_services.review_checklist_set(user=compliance_lead, texts=CHECKLIST)
    day = Day(page, "reviewer")

    # 1. home: the bell counts the submissions, the review queue lists v2
    login(reviewer)
    expect(page.get_by_test_id("bell-count")).to_have_text("2")  # v1 and v2 were submitted
    expect(page.get_by_test_id("review-queue")).to_contain_text("glow-gadget v2")
    day.step("home-bell")

    # 2. the bell opens the notifications, newest first
    page.get_by_test_id("bell").click()
    expect(page).to_have_url(re.compile(r"/notifications/$"))
    items = page.get_by_test_id("notification")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text("cm_alice submitted glow-gadget v2 for review")
    day.step("notifications")

    # 3. opening it marks it read and lands on v2, submitted
    items.first.get_by_test_id("notification-open").click()
    expect(page).to_have_url(re.compile(r"/harnesses/glow-gadget/v2/$"))
    expect(page.get_by_test_id("bell-count")).to_have_text("1")
    expect(page.get_by_test_id("status")).to_have_text("Submitted")
    day.step("version-opened")

    # 4. a comment on an added line of the diff
    line = page.locator(".diff .add[data-line]").first
    line.hover()
    line.locator("a.line-comment").click()
    form = page.get_by_test_id("comment-form")
    expect(form).to_contain_text("Comment on line n")
    form.locator("textarea").fill(COMMENT)
    form.get_by_test_id("comment-submit").click()
    expect(page.get_by_test_id("thread").first).to_contain_text(COMMENT)
    expect(page.locator(".diff .add[data-line] + .thread")).to_have_count(1)
    expect(page.get_by_test_id("comment-count")).to_contain_text("1 open")
    day.step("commented-on-line")

    # 5. the author replies in the thread
    _switch(page, login, manager)
    page.goto("/harnesses/glow-gadget/v2/")
    thread = page.locator("[data-testid=thread][data-resolved=false]").filter(has_text=COMMENT)
    thread.locator("textarea").fill(REPLY)
    thread.get_by_role("button", name="Reply", exact=True).click()
    expect(page.get_by_test_id("reply").first).to_contain_text(REPLY)
    day.step("author-replied")

    # 6. the reviewer comes back from the review queue, reads the reply, resolves the thread
    _switch(page, login, reviewer)
    page.get_by_test_id("review-queue").get_by_role("link", name="glow-gadget v2").click()
    page.wait_for_url("**/harnesses/glow-gadget/v2/")
    thread = page.locator("[data-testid=thread]").filter(has_text=COMMENT)
    expect(thread).to_contain_text(REPLY)
    thread.get_by_test_id("resolve").click()
    expect(page.get_by_test_id("messages")).to_contain_text("Thread resolved.")
    expect(page.locator("[data-testid=thread][data-resolved=true]")).to_have_count(1)
    expect(page.get_by_test_id("comment-count")).to_contain_text("none open")
    day.step("thread-resolved")

    # 7. Approve waits for every checklist item
    approve = page.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_disabled()
    boxes = page.get_by_test_id("checklist").locator("input[type=checkbox]")
    expect(boxes).to_have_count(len(CHECKLIST))
    boxes.nth(0).check()
    expect(approve).to_be_disabled()
    boxes.nth(1).check()
    expect(approve).to_be_enabled()
    day.step("checklist-ticked")
    approve.click()
    expect(page.get_by_test_id("messages")).to_contain_text("v2 is approved")
    expect(page.get_by_test_id("status")).to_have_text("Approved")
    expect(page.get_by_test_id("approval-checklist")).to_contain_text(CHECKLIST[1])
    day.step("approved")

    # 8. production moves to v2 through a confirmation page that says v1 → v2
    page.locator("p.small").get_by_role("link", name="Glow & Gadget live room").click()
    page.wait_for_url("**/harnesses/glow-gadget/")
    move = page.get_by_test_id("label-move")
    move.locator("input[name=name]").fill("production")
    move.locator("[name=version]").fill("2")
    move.get_by_role("button", name="Move label").click()
    expect(page.get_by_test_id("confirm-change")).to_contain_text("moves from v1 to v2")
    expect(page.get_by_test_id("affected")).to_contain_text("No live session uses this label now")
    assert Label.objects.get(name="production").version.number == 1  # nothing moved before confirming
    day.step("confirm-production-move")
    page.get_by_test_id("confirm-submit").click()
    expect(page.get_by_test_id("messages")).to_contain_text("Moved 'production' to v2.")
    expect(page.locator("#labels")).to_contain_text("production")
    expect(page.locator("#labels table").first.locator("tbody tr").filter(has_text="production")).to_contain_text("v2")
    day.step("production-moved")
    assert Label.objects.get(name="production").version.number == 2
    day.finish()


def test_ml_staff_compares_two_training_runs(page, login, ml_staff):
    # already there: two SFT runs that finished earlier, the second with a lower learning rate (a slower curve)
    slow_points = _points(range(1, 41), lambda s: 3.0 / (s ** 0.5) + 0.05)
    for point in slow_points:  # its schedule is the same shape, at 0.3 times the rate
        point["learning_rate"] *= 0.3
    fast = _job(ml_staff, "sft lr 1e-3", _points(range(1, 41), lambda s: 3.0 / s + 0.05))
    slow = _job(ml_staff, "sft lr 3e-4", slow_points)
    day = Day(page, "ml-staff")

    # 1. the training list from the header, both runs there
    login(ml_staff)
    page.get_by_role("navigation").get_by_role("link", name="Training", exact=True).click()
    expect(page).to_have_url(re.compile(r"/training/$"))
    rows = page.get_by_test_id("job-row")
    expect(rows.filter(has_text="sft lr 1e-3")).to_have_count(1)
    expect(rows.filter(has_text="sft lr 3e-4")).to_have_count(1)
    day.step("training-list")

    # 2. tick both, compare
    page.get_by_label("compare sft lr 1e-3").check()
    page.get_by_label("compare sft lr 3e-4").check()
    page.get_by_test_id("compare").click()
    expect(page).to_have_url(re.compile(r"/training/compare/\?jobs=[\w-]+&jobs=[\w-]+$"))
    assert set(re.findall(r"jobs=([\w-]+)", page.url)) == {str(fast.pk), str(slow.pk)}
    loss = page.locator("[data-testid=compare-loss]")
    expect(loss.locator(".uplot canvas")).to_have_count(1)
    legend = loss.locator(".u-legend .u-series")
    expect(legend).to_have_count(3)  # the step, then one row per run
    fast_row, slow_row = legend.filter(has_text="sft lr 1e-3"), legend.filter(has_text="sft lr 3e-4")
    expect(fast_row).to_have_count(1)
    expect(slow_row).to_have_count(1)
    day.step("compare")

    # 3. hover: the step and each run's loss there; the slower run's loss is higher
    _hover(page, "compare-loss", 0.5)
    step = int(_legend_step(page, "compare-loss"))
    values = [float(row.locator("td").inner_text()) for row in (fast_row, slow_row)]
    assert 10 <= step <= 30, step
    assert values[1] > values[0], values
    lr = page.locator("[data-testid=compare-learning_rate] .u-legend .u-series")
    expect(lr.filter(has_text="same values")).to_have_count(0)  # two schedules, not one drawn twice
    day.step("hover-values", full_page=False, axe=False)

    # 4. the legend hides a run and shows it again
    slow_row.locator("th").click()
    expect(slow_row).to_have_class(OFF)
    expect(fast_row).not_to_have_class(OFF)
    day.step("legend-run-hidden", full_page=False, axe=False)
    slow_row.locator("th").click()
    expect(slow_row).not_to_have_class(OFF)

    # 5. drag to zoom: the same place under the cursor is a later step; a double-click resets
    before, zoomed, middle = _drag_zoom(page, loss, "compare-loss")
    assert zoomed > before + 10, (before, zoomed)
    day.step("zoomed", full_page=False, axe=False)
    page.mouse.dblclick(*middle)
    _hover(page, "compare-loss", 0.25)
    assert int(_legend_step(page, "compare-loss")) == before
    day.step("zoom-reset", full_page=False)
    day.finish()
