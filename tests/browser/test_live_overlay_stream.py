"""The subtitle overlay in Chromium (the web process (uvicorn) on the test database and the Redis channel layer) fed stored events the way
the demo model on vLLM-CPU streams them (found by the end-to-end walk, test_live_session_walk.py): the overlay shows
a turn's own words as they stream, without the model's markup, and nothing of a turn silenced by a mute."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_preview_room import asgi_server  # noqa: F401  (fixture: the web process on the test database)
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def test_overlay_shows_only_the_words_a_turn_streams(browser, asgi_server, deployed, operator):
    """The overlay as the demo model on vLLM streams to it (stored events, no runner): an empty ``<think></think>``
    opening every reply and a tool call written as JSON (its ``<tool_call>`` dropped as a special token) are left
    out; an operator's takeover said while a turn streams is not continued by that turn's tokens; a turn in flight
    when the avatar is muted never shows its later words."""
    from streams.services.live_events import live_event_append
    from tests.browser.live_walk import open_overlay, overlay_history, subtitle
    from tests.streams.live_page_helpers import (
        GOOD,
        live_session_for,
        overlay_secret,
        token_events,
        turn_end_events,
        turn_start_events,
    )

    session = live_session_for(deployed["deployment"], operator)
    overlay, problems = open_overlay(browser, asgi_server, session.pk, overlay_secret(session, operator))
    state = overlay.get_by_test_id("overlay")

    def append(turn, events):
        live_event_append(session_id=session.pk, turn_id=turn, events=events)

    try:
        append("t1", [("turn_started", {}), ("model_request", {"round": 0, "call_index": 0, "attempt": 1})])
        append("t1", token_events('<think>\n\n</think>\n\n{"name": "load_skill", "arguments": {"skill_id": "p"}}'
                                  " </tool_call>"))
        append("t1", [("model_request", {"round": 1, "call_index": 1, "attempt": 1})])
        append("t1", token_events("<think>\n\n</thi"))
        append("t1", token_events("nk>\n\n" + GOOD[:30]))
        expect(subtitle(overlay)).to_have_text(GOOD[:30].strip())
        expect(state).to_have_attribute("data-state", "streaming")
        # the operator takes over while t1 streams: his line is not continued by t1's words
        said = "Welcome everyone, ask me anything about the serum."
        append("human-1", [("reply_spoken", {"text": said, "by": "human", "operator": operator.username})])
        expect(subtitle(overlay)).to_have_text(said)
        append("t1", token_events(GOOD[30:]))
        expect(subtitle(overlay)).to_have_text(GOOD)  # t1's own words, all of them
        append("t1", turn_end_events(GOOD))
        expect(state).to_have_attribute("data-state", "final")
        # muted while t2 streams: its later words never show, its reply is withheld
        append("t2", turn_start_events(session) + token_events("Hello there"))
        expect(subtitle(overlay)).to_have_text("Hello there")
        append("", [("muted", {"muted": True, "by": operator.username})])
        expect(state).to_have_attribute("data-state", "idle")
        append("t2", token_events(" and a secret"))
        append("t2", [("reply_rejected", {"text": "Hello there and a secret", "by": "muted"})])
        append("", [("muted", {"muted": False, "by": operator.username})])
        append("t3", turn_start_events(session) + token_events("Back again") + turn_end_events("Back again"))
        expect(subtitle(overlay)).to_have_text("Back again")
        lines = overlay_history(overlay)
        assert not any("<" in line or "{" in line or "think" in line for line in lines), lines
        assert not any(line.startswith(said) and line != said for line in lines), lines
        assert not any("secret" in line for line in lines), lines
    finally:
        overlay.context.close()
    assert not problems, problems
