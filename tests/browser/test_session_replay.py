"""A session replay in Chromium under the console's CSP: an operator opens a session's replays, launches "Replay
against…" from the form, then reads a finished replay turn by turn (original and new reply side by side, the
regression flagged, the filter to regressions) and saves the session as an eval set as a campaign manager — no CSP
violation (the `page` fixture fails on any)."""

from __future__ import annotations

from streams.models import SessionReplay
from tests.streams.test_session_replay_pages import world  # noqa: F401  (fixture: a session and its replay)


def test_replay_pages_in_chromium(page, login, shot, world, operator, manager, monkeypatch):  # noqa: F811
    monkeypatch.setattr("streams.replay_tasks.session_replay.apply_async", lambda **kw: None)
    s, replay = world["session"], world["replay"]
    login(operator)
    page.goto(f"/live/{s.pk}/replays/")
    assert page.locator("[data-testid=replay-row]").count() == 1
    page.click("[data-testid=replay-new]")
    page.select_option("#id_harness_version", "tiny-room@1")
    page.fill("#id_temperature", "0")
    page.fill("#id_name", "same harness again")
    page.click("[data-testid=launch]")
    page.wait_for_selector("[data-testid=replay-name]")
    assert page.text_content("[data-testid=replay-name]").strip() == "same harness again"
    assert page.text_content("[data-testid=replay-status]").strip() == "queued"
    assert SessionReplay.objects.get(name="same harness again").progress_total == 2

    page.goto(f"/live/{s.pk}/replays/{replay.pk}/")
    rows = page.locator("[data-testid=turn-row]")
    assert rows.count() == 2
    regressed = page.locator("[data-testid=turn-row][data-outcome=regressed]")
    assert "business days" in regressed.locator("[data-testid=reply-original]").text_content()
    assert regressed.locator("[data-testid=side-new] .badge.rejected").first.is_visible()  # the fallback badge
    assert "fallback now" in regressed.locator("[data-testid=why]").text_content()
    assert "1 regressed" in page.text_content("[data-testid=summary-counts]").replace("\n", " ")
    shot("replay")
    page.click("[data-testid=filter-regressed]")
    page.wait_for_url("**show=regressed")
    assert page.locator("[data-testid=turn-row]").count() == 1

    page.context.clear_cookies()  # sign out
    login(manager)
    page.goto(f"/live/{s.pk}/replays/")
    assert page.locator("[data-testid=replay-new]").count() == 0  # campaign managers do not replay
    page.click("[data-testid=save-eval-set]")
    page.fill("#id_set_name", "live-browser")
    page.click("[data-testid=save]")
    page.wait_for_selector("[data-testid=saved-version]")
    assert page.text_content("[data-testid=saved-version]").strip() == "live-browser v1"
    shot("saved")
