"""The editor → review loop in a real browser: live preview while typing, save, submit, diff, approve, and
the four-eyes rule as the author sees it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from harness_editor import services
from harness_editor.models import HarnessVersion

pytestmark = pytest.mark.browser

SLUG = "glow-gadget"
NEW_DESCRIPTION = "Answer price, discount and stock questions using live tool results only."
NEW_BODY_LINE = "Never round a price; say it exactly as the tool returned it."


def test_manager_edits_skill_sees_live_preview_saves_and_submits(page, login, shot, harness_with_history, manager):
    v3 = harness_with_history["v3"]
    login(manager)
    expect(page.get_by_test_id("my-drafts")).to_contain_text("glow-gadget v3")
    shot("01-home")

    page.goto(f"/harnesses/{SLUG}/v3/edit/?tab=skills")
    expect(page.get_by_role("heading", name="Edit glow-gadget v3")).to_be_visible()
    system_text = page.get_by_test_id("system-text")
    expect(system_text).not_to_contain_text(NEW_DESCRIPTION)
    shot("02-editor", full_page=False)

    # Invalid input first: the path-precise error appears live, and nothing is saved.
    page.fill("#skills-0-description", "")
    expect(page.get_by_test_id("live-errors")).to_contain_text("skills[0].description")
    shot("03-live-error", full_page=False)

    # A valid edit: the rendered prompt updates before anything is saved.
    page.fill("#skills-0-description", NEW_DESCRIPTION)
    expect(page.get_by_test_id("live-valid")).to_be_visible()
    expect(system_text).to_contain_text(NEW_DESCRIPTION)
    body = page.locator("#skills-0-body")
    body.fill(body.input_value() + NEW_BODY_LINE + "\n")
    expect(page.get_by_test_id("preview")).to_contain_text(NEW_BODY_LINE)
    assert NEW_DESCRIPTION not in HarnessVersion.objects.get(pk=v3.pk).manifest_json  # still unsaved
    shot("04-live-preview", full_page=False)

    page.get_by_role("button", name="Save").first.click()
    expect(page.locator(".messages")).to_contain_text("Saved v3")
    saved = HarnessVersion.objects.get(pk=v3.pk)
    assert saved.lock_version == v3.lock_version + 1
    assert saved.manifest.skills[0].description == NEW_DESCRIPTION
    assert saved.manifest.skills[0].body.endswith(NEW_BODY_LINE + "\n")
    shot("05-saved", full_page=False)

    page.goto(f"/harnesses/{SLUG}/v3/")
    page.get_by_role("button", name="Submit for review").click()
    expect(page.get_by_test_id("status")).to_have_text("Submitted")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    assert HarnessVersion.objects.get(pk=v3.pk).status == "submitted"
    shot("06-submitted")


def _submit_edited_v3(h, manager):
    v3 = h["v3"]
    manifest = v3.manifest.model_copy(deep=True)
    manifest.skills[0].description = NEW_DESCRIPTION
    services.version_save_draft(user=manager, version=v3, manifest=manifest, lock_version=v3.lock_version,
                                change_note="price skill reworded")
    services.version_submit(user=manager, version=v3)


def test_reviewer_opens_diff_sees_changed_skill_and_approves(page, login, shot, harness_with_history, manager,
                                                             reviewer):
    _submit_edited_v3(harness_with_history, manager)
    login(reviewer)
    expect(page.get_by_test_id("review-queue")).to_contain_text("glow-gadget v3")

    page.goto(f"/harnesses/{SLUG}/")
    page.get_by_label("a = v2").check()
    page.get_by_label("b = v3").check()
    page.get_by_role("button", name="Compare a → b").click()
    page.wait_for_url(re.compile(r"/diff/\?(b=3&a=2|a=2&b=3)$"))
    diff = page.get_by_test_id("diff")
    changed_skill = diff.locator(".change[data-component=skill]").filter(has_text="description")
    expect(changed_skill.first).to_be_visible()
    expect(changed_skill.first.locator(".diff .add")).to_contain_text(NEW_DESCRIPTION)
    expect(page.get_by_test_id("breaking-alert")).to_be_visible()  # v3 renames a tool
    shot("01-diff")

    page.get_by_role("link", name="Open v3 to review").click()
    page.fill("#id_comment", "Reworded skill is fine; the rename is covered by the new tool map.")
    shot("02-review")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("status")).to_have_text("Approved")
    expect(page.get_by_test_id("decision")).to_contain_text("cr_carol")
    assert HarnessVersion.objects.get(pk=harness_with_history["v3"].pk).status == "approved"
    shot("03-approved")


def test_author_sees_no_approve_button_on_own_submitted_version(page, login, shot, harness_with_history, manager):
    login(manager)
    page.goto(f"/harnesses/{SLUG}/v2/")
    expect(page.get_by_test_id("status")).to_have_text("Submitted")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_have_count(0)
    expect(page.get_by_test_id("review")).to_have_count(0)
    expect(page.get_by_role("button", name="New draft from this version")).to_be_visible()
    shot("01-author-view")
