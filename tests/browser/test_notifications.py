"""Notifications in a real browser: the header's bell counts unread ones and refreshes itself (htmx polling, no
inline script), the notifications page lists them newest first, opening one marks it read and lands on the version;
and the timeline filters, links and exports."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from playwright.sync_api import expect

from harness_editor import services

pytestmark = pytest.mark.browser


def test_reviewer_sees_the_bell_opens_a_notification_and_marks_all_read(page, login, shot, harness_with_history,
                                                                         manager, reviewer, mail_queue):
    page.clock.install()  # htmx's "every 30s" runs on this clock: the test moves it on instead of waiting
    login(reviewer)
    bell = page.get_by_test_id("bell")
    expect(page.get_by_test_id("bell-count")).to_have_text("2")  # v1 and v2 were submitted for review
    shot("01-bell", full_page=False)

    # a new submission while the page is open: the bell picks it up on its next poll
    mail.outbox.clear()
    mail_queue.clear()
    services.version_submit(user=manager, version=harness_with_history["v3"])
    assert len(mail_queue) == 1 and mail.outbox == []  # queued after commit, sent by the mail task
    mail_queue.run()
    assert [m.to for m in mail.outbox] == [["cr_carol@example.test"]]  # to the reviewer only
    page.clock.fast_forward(31_000)
    expect(page.get_by_test_id("bell-count")).to_have_text("3")

    bell.click()
    expect(page).to_have_url(re.compile(r"/notifications/$"))
    items = page.get_by_test_id("notification")
    expect(items).to_have_count(3)
    expect(items.first).to_contain_text("cm_alice submitted glow-gadget v3 for review")
    expect(items.nth(2)).to_contain_text("cm_alice submitted glow-gadget v1 for review")
    shot("02-notifications")

    items.first.get_by_test_id("notification-open").click()
    expect(page).to_have_url(re.compile(r"/harnesses/glow-gadget/v3/$"))
    expect(page.get_by_test_id("bell-count")).to_have_text("2")

    page.get_by_test_id("bell").click()
    expect(page.locator("li.unread")).to_have_count(2)
    page.get_by_test_id("read-all").click()
    expect(page.locator(".messages")).to_contain_text("2 notifications marked read.")
    expect(page.get_by_test_id("bell-count")).to_have_count(0)
    expect(page.locator("li.unread")).to_have_count(0)

    page.get_by_test_id("email-toggle").click()
    expect(page.get_by_test_id("email-state")).to_have_text("Notifications are not e-mailed to you.")
    shot("03-all-read-email-off")


def test_timeline_filters_links_and_exports(page, login, shot, harness_with_history, operator):
    login(operator)
    expect(page.get_by_test_id("object-link").filter(has_text="glow-gadget v2").first).to_be_visible()  # home
    page.goto("/timeline/")
    page.select_option("#action", "label.moved")
    expect(page).to_have_url(re.compile(r"action=label.moved"))
    expect(page.get_by_test_id("event-count")).to_have_text("1 event")
    rows = page.locator("#events tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("production")
    page.select_option("#user", "cr_carol")
    expect(page).to_have_url(re.compile(r"user=cr_carol"))
    expect(page.get_by_test_id("export-csv")).to_have_attribute("href", re.compile(r"user=cr_carol&action=label.moved"))
    shot("01-filtered")

    with page.expect_download() as download:
        page.get_by_test_id("export-csv").click()
    text = open(download.value.path(), encoding="utf-8").read()
    assert text.startswith("id,at,user,action") and text.count("\n") == 2 and "label.moved" in text

    rows.first.get_by_test_id("object-link").click()
    expect(page).to_have_url(re.compile(r"/harnesses/glow-gadget/$"))
