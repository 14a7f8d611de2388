"""The harness editor does not lose work and shows what changed, in real Chromium (issue 14): leaving with unsaved
edits asks first, a local copy survives a closed tab and can be restored or discarded, the live preview marks the
changed prompt lines and scrolls to the first, and the raw YAML tab is a CodeMirror editor (line numbers, YAML
highlighting, jump to an error's line) whose textarea still submits, also without JavaScript.

Screenshots: test-artifacts/screenshots/test_<name>-<step>.png."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from harness_editor.models import HarnessVersion
from tests.browser.conftest import SCREENSHOTS

pytestmark = pytest.mark.browser

SLUG = "glow-gadget"
EDIT = f"/harnesses/{SLUG}/v3/edit/"
NEW_DESCRIPTION = "Answer price and stock questions from live tool results only, never from memory."
COPIES = "() => Object.keys(localStorage).filter(k => k.startsWith('hat-editor-draft:'))"
CURSOR_LINE = "() => document.querySelector('.CodeMirror').CodeMirror.getCursor().line"


def _copies(page) -> list[str]:
    return page.evaluate(COPIES)


def _wait_for_copy(page) -> None:
    page.wait_for_function(f"() => ({COPIES})().length > 0")


def test_leaving_with_unsaved_edits_asks_first_and_the_copy_is_restored_and_saved(page, login, shot,
                                                                                   harness_with_history, manager):
    v3 = harness_with_history["v3"]
    login(manager)
    page.goto(EDIT + "?tab=skills")
    field = page.locator("#skills-0-description")
    field.click()
    field.fill(NEW_DESCRIPTION)
    expect(page.get_by_test_id("live-valid")).to_be_visible()
    _wait_for_copy(page)

    # Another editor tab: the page asks; cancelling keeps the edit on screen.
    asked: list[tuple[str, str]] = []

    def dismiss(dialog):
        asked.append((dialog.type, dialog.message))
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.locator("nav.tabs").get_by_role("link", name="Tools", exact=True).click()
    expect(field).to_have_value(NEW_DESCRIPTION)
    assert page.url.endswith("?tab=skills")
    assert asked and asked[0][0] == "confirm" and "unsaved changes on the Skills tab" in asked[0][1]
    shot("01-edited-asked-before-leaving", full_page=False)

    # "Done": confirming leaves; nothing is saved, but the browser kept a copy.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("link", name=re.compile(r"^Done")).click()
    page.wait_for_url(f"**/harnesses/{SLUG}/v3/")
    assert NEW_DESCRIPTION not in HarnessVersion.objects.get(pk=v3.pk).manifest_json
    assert len(_copies(page)) == 1

    # Reopening offers the copy; restoring shows it (unsaved), saving keeps it and clears the copy.
    page.goto(EDIT + "?tab=skills")
    banner = page.get_by_test_id("draft-restore")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Restore unsaved edits from")
    expect(page.locator("#skills-0-description")).not_to_have_value(NEW_DESCRIPTION)
    shot("02-restore-offered", full_page=False)
    banner.get_by_role("button", name=re.compile("^Restore unsaved edits from")).click()
    expect(page.locator(".alert.info")).to_contain_text("Restored your unsaved edits")
    expect(page.locator("#skills-0-description")).to_have_value(NEW_DESCRIPTION)
    expect(page.get_by_test_id("draft-restore")).to_be_hidden()
    expect(page.get_by_test_id("system-text").locator(".pl.changed").first).to_contain_text(NEW_DESCRIPTION)
    assert NEW_DESCRIPTION not in HarnessVersion.objects.get(pk=v3.pk).manifest_json
    shot("03-restored", full_page=False)

    page.get_by_role("button", name="Save", exact=True).first.click()
    expect(page.locator(".messages")).to_contain_text("Saved v3")
    assert HarnessVersion.objects.get(pk=v3.pk).manifest.skills[0].description == NEW_DESCRIPTION
    assert _copies(page) == []
    expect(page.get_by_test_id("draft-restore")).to_be_hidden()
    # the saved page is not "unsaved": leaving does not ask
    page.get_by_role("link", name=re.compile(r"^Done")).click()
    page.wait_for_url(f"**/harnesses/{SLUG}/v3/")
    shot("04-saved-and-left")


def test_closing_the_tab_asks_keeps_a_copy_and_discard_drops_it(page, login, harness_with_history, manager):
    v3 = harness_with_history["v3"]
    login(manager)
    page.goto(EDIT + "?tab=constraints")
    field = page.locator("#id_reply_max_chars")
    saved_value = field.input_value()
    field.click()
    field.fill("150")
    _wait_for_copy(page)

    kinds: list[str] = []

    def accept(dialog):
        kinds.append(dialog.type)
        dialog.accept()

    page.on("dialog", accept)
    with page.expect_event("close"):
        page.close(run_before_unload=True)
    assert kinds == ["beforeunload"]

    again = page.context.new_page()
    again.goto(EDIT + "?tab=constraints")
    banner = again.get_by_test_id("draft-restore")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Constraints")
    expect(again.locator("#id_reply_max_chars")).to_have_value(saved_value)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    again.screenshot(path=str(SCREENSHOTS / "test_closing_the_tab_asks_keeps_a_copy_and_discard_drops_it-01-offer.png"))
    banner.get_by_role("button", name="Discard").click()
    expect(banner).to_be_hidden()
    assert _copies(again) == []
    again.reload()
    expect(again.get_by_role("heading", name="Edit glow-gadget v3")).to_be_visible()
    expect(again.get_by_test_id("draft-restore")).to_be_hidden()
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version  # nothing was ever saved

    # Copies under another saved revision are never offered; a month-old one is dropped, a recent one kept.
    again.evaluate("""() => {
        const entry = t => JSON.stringify({skills: {component: 'skills', savedAt: t, fields: [['component', 'skills']]}});
        localStorage.setItem('hat-editor-draft:glow-gadget:v3:0ld', entry(1));
        localStorage.setItem('hat-editor-draft:glow-gadget:v3:recent', entry(Date.now()));
    }""")
    again.reload()
    expect(again.get_by_role("heading", name="Edit glow-gadget v3")).to_be_visible()
    expect(again.get_by_test_id("draft-restore")).to_be_hidden()
    assert _copies(again) == ["hat-editor-draft:glow-gadget:v3:recent"]


def test_another_tabs_copy_is_offered_and_survives_saving_this_tab(page, login, harness_with_history, manager):
    v3 = harness_with_history["v3"]
    login(manager)
    page.goto(EDIT + "?tab=constraints")
    field = page.locator("#id_reply_max_chars")
    field.click()
    field.fill("150")
    _wait_for_copy(page)
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("nav.tabs").get_by_role("link", name="Skills", exact=True).click()
    page.wait_for_url(re.compile(r"tab=skills$"))
    banner = page.get_by_test_id("draft-restore")
    expect(banner).to_contain_text("the Constraints tab")

    # Saving the skills tab keeps the constraints copy: it moves to the new saved revision's key.
    page.locator("#skills-0-description").fill(NEW_DESCRIPTION)
    page.get_by_role("button", name="Save", exact=True).first.click()
    expect(page.locator(".messages")).to_contain_text("Saved v3")
    saved = HarnessVersion.objects.get(pk=v3.pk)
    assert _copies(page) == [f"hat-editor-draft:{SLUG}:v3:{saved.content_hash}"]
    expect(banner).to_contain_text("the Constraints tab")

    banner.get_by_role("button", name=re.compile("^Restore unsaved edits from")).click()
    expect(page.locator("#id_reply_max_chars")).to_have_value("150")
    expect(page.get_by_test_id("system-text").locator(".pl.changed")).to_contain_text("to 150 characters")
    page.get_by_role("button", name="Save", exact=True).first.click()
    expect(page.locator(".messages")).to_contain_text("Saved v3")
    saved = HarnessVersion.objects.get(pk=v3.pk)
    assert saved.manifest.constraints.reply_max_chars == 150
    assert saved.manifest.skills[0].description == NEW_DESCRIPTION
    assert _copies(page) == []


def test_preview_marks_changed_lines_and_scrolls_to_the_first(page, login, shot, harness_with_history, manager):
    login(manager)
    page.goto(EDIT + "?tab=constraints")
    expect(page.get_by_test_id("preview-changes")).to_have_text("Same prompt as the saved revision.")
    system = page.get_by_test_id("system-text")
    assert system.evaluate("el => el.scrollHeight > el.clientHeight"), "the prompt is longer than its box"
    page.locator("#id_reply_max_chars").fill("150")

    changed = system.locator(".pl.changed")
    expect(changed).to_have_count(1)
    expect(changed).to_contain_text(re.compile(r"Reply length: \d+ to 150 characters"))
    expect(system.locator(".pl.removed")).to_have_attribute("data-text", re.compile(r"Reply length: .* characters"))
    expect(page.get_by_test_id("preview-changes")).to_contain_text("1 line of the prompt differ")
    # The change is near the end of the prompt: the box scrolled to it, and it is in view.
    page.wait_for_function("""() => {
        const el = document.querySelector('#live [data-testid=system-text] .pl.changed');
        if (!el) return false;
        const pre = el.closest('pre'), live = document.getElementById('live');
        const r = el.getBoundingClientRect(), p = pre.getBoundingClientRect(), l = live.getBoundingClientRect();
        return pre.scrollTop > 0 && r.top >= p.top && r.bottom <= p.bottom && r.top >= l.top && r.bottom <= l.bottom
            && r.bottom <= window.innerHeight;
    }""")
    shot("01-changed-line-marked", full_page=False)


def test_raw_yaml_editor_numbers_lines_highlights_and_jumps_to_errors(page, login, shot, harness_with_history,
                                                                       manager):
    v3 = harness_with_history["v3"]
    login(manager)
    page.goto(EDIT + "?tab=yaml")
    editor = page.locator(".CodeMirror")
    expect(editor).to_be_visible()
    expect(page.locator("#id_yaml")).to_be_hidden()  # CodeMirror stands in for it; the textarea still submits
    expect(editor.locator(".CodeMirror-linenumber").first).to_be_visible()
    assert editor.locator(".cm-atom").count() > 0  # YAML keys, highlighted by the yaml mode
    shot("01-yaml-editor", full_page=False)

    saved_text = page.evaluate("() => document.querySelector('.CodeMirror').CodeMirror.getValue()")
    lines = saved_text.split("\n")
    target = next(i for i, line in enumerate(lines) if line.strip() == "kind: reply")
    broken = list(lines)
    broken[target] = broken[target].replace("kind: reply", "kind: answer")
    page.evaluate("text => document.querySelector('.CodeMirror').CodeMirror.setValue(text)", "\n".join(broken))

    errors = page.get_by_test_id("live-errors")
    jump = errors.get_by_test_id("jump-line").first
    expect(jump).to_have_text(f"go to line {target + 1}")
    page.evaluate("() => document.querySelector('.CodeMirror').CodeMirror.setCursor({line: 0, ch: 0})")
    jump.click()
    assert page.evaluate(CURSOR_LINE) == target
    shot("02-jumped-to-schema-error", full_page=False)

    # Invalid YAML: one error (the parse error, with its line), not also "must be a mapping".
    page.evaluate("() => document.querySelector('.CodeMirror').CodeMirror.setValue('name: x\\nskills: [unclosed\\n')")
    expect(errors.locator("li")).to_have_count(1)
    expect(errors.locator("li")).to_contain_text("invalid YAML at line")
    expect(errors).not_to_contain_text("must be a mapping")
    line = int(re.search(r"at line (\d+)", errors.locator("li").inner_text()).group(1))
    errors.get_by_test_id("jump-line").click()
    assert page.evaluate(CURSOR_LINE) == min(line, 3) - 1
    shot("03-one-parse-error", full_page=False)

    # Typed edits go through the textarea: back to the saved text, one line changed by the keyboard, saved.
    page.evaluate("text => document.querySelector('.CodeMirror').CodeMirror.setValue(text)", saved_text)
    expect(page.get_by_test_id("live-valid")).to_be_visible()
    note_line = next(i for i, line in enumerate(lines) if line.startswith("name: "))
    page.evaluate("n => { const cm = document.querySelector('.CodeMirror').CodeMirror; cm.focus();"
                  " cm.setCursor({line: n, ch: cm.getLine(n).length}); }", note_line)
    page.keyboard.type(" Edited")
    expect(page.locator("#id_yaml")).to_have_value(re.compile(r"name: [^\n]* Edited\n"))
    page.get_by_role("button", name="Save", exact=True).first.click()
    expect(page.locator(".messages")).to_contain_text("Saved v3")
    assert HarnessVersion.objects.get(pk=v3.pk).manifest.name.endswith(" Edited")
    assert _copies(page) == []


def test_the_editor_works_without_javascript(browser, live_server, harness_with_history, manager):
    from tests.conftest import PASSWORD

    v3 = harness_with_history["v3"]
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False,
                                  viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.fill("#id_username", manager.username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/")
        page.goto(EDIT + "?tab=yaml")
        expect(page.get_by_test_id("draft-restore")).to_be_hidden()
        textarea = page.locator("#id_yaml")
        expect(textarea).to_be_visible()
        text = textarea.input_value()
        textarea.fill(re.sub(r"^name: (.*)$", r"name: \1 (no JS)", text, count=1, flags=re.M))
        page.get_by_role("button", name="Save", exact=True).first.click()
        expect(page.locator(".messages")).to_contain_text("Saved v3")
        assert HarnessVersion.objects.get(pk=v3.pk).manifest.name.endswith("(no JS)")
    finally:
        context.close()
