"""The subtitle overlay shows only words that passed the before-reply hooks (issue 26, section 5): a live turn
run by the runner's own steps (claim, batch, :func:`streams.services.live_turns.live_turn_run`) on a scripted model
whose first reply the relevance rule refuses. Its tokens are stored and published as every turn's are; the overlay's
socket (connected before the turn, so it reads the live run) gets none of the refused words and gets the reply that
passed (or the fallback line), while the operator's socket still sees the draft as it streamed."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from streams.engine import hooks as H
from streams.engine.client import ChatDelta
from streams.engine.turn import ScriptedBackend
from streams.models import LiveEvent
from streams.services import live_turns as T
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)
from tests.streams.live_page_helpers import (
    comment_add,
    live_communicator,
    live_session_for,
    login_cookie,
    overlay_secret,
)
from tests.streams.test_live_consumers import _fresh_channel_layer, events_until  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

ASKED = "how much is the dryer?"
REFUSED = "Welcome to the live room everyone, shipping is free this weekend."  # not what ann asked
PASSED = "AirSilk Ionic Hair Dryer is $59 right now, down from $89."


def _call(name: str, args: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def _streamed_as(text: str, size: int = 4) -> list[ChatDelta]:
    """A reply as a model server streams it: a few characters a delta."""
    return [ChatDelta(content=text[i:i + size]) for i in range(0, len(text), size)] + [ChatDelta(finish_reason="stop")]


def _turn_in_a_thread(session_id, runner: str, turn_id: str) -> None:
    """The runner's turn, off the event loop (the sockets keep reading meanwhile)."""
    from django.db import connection

    try:
        T.live_turn_run(session_id=session_id, runner=runner, turn_id=turn_id, backends=T.Backends())
    finally:
        connection.close()  # this thread's own connection: the test database can be dropped after


def _run_turn(session, operator, monkeypatch, replies: list[str]):
    """One live turn answering ann on the scripted model; returns (overlay events, operator events, the turn's
    stored events), both sockets connected before the turn started."""
    secret = overlay_secret(session, operator)
    outputs = [_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 202}),
               *[_streamed_as(r) for r in replies]]
    monkeypatch.setattr(T.Backends, "for_in_force", lambda self, in_force: ScriptedBackend(outputs))
    runner = T.runner_name()
    assert T.live_runner_claim(session_id=session.pk, runner=runner) is not None
    comment_add(session, viewer="ann", text=ASKED)
    turn_id, _wait = T.live_batch_claim(session_id=session.pk, runner=runner)
    assert turn_id
    login_cookie(operator)

    async def go():
        overlay = live_communicator(session.pk, overlay_token=secret, after=0)
        watcher = live_communicator(session.pk, operator, after=0)
        assert (await overlay.connect(timeout=5))[0] and (await watcher.connect(timeout=5))[0]
        await sync_to_async(_turn_in_a_thread, thread_sensitive=False)(session.pk, runner, turn_id)
        spoken = await sync_to_async(lambda: LiveEvent.objects.get(session_id=session.pk, type="reply_spoken").seq)()
        shown = await events_until(overlay, lambda e: e["seq"] >= spoken)
        assert await overlay.receive_nothing(timeout=0.3)
        seen = await events_until(watcher, lambda e: e["seq"] >= spoken)
        await overlay.disconnect()
        await watcher.disconnect()
        return shown, seen

    shown, seen = asyncio.run(go())
    stored = list(LiveEvent.objects.filter(session_id=session.pk, turn_id=turn_id).order_by("seq"))
    return shown, seen, stored


def _streamed(events) -> str:
    return "".join(e["payload"]["delta"] for e in events if e["type"] == "token")


def _overlay_text(events) -> str:
    """Every word the overlay got: streamed deltas joined (a word spans deltas), then whatever text it was sent."""
    return _streamed(events) + " " + json.dumps([e["payload"] for e in events if e["type"] != "token"])


@pytest.fixture
def session(deployed, operator):
    return live_session_for(deployed["deployment"], operator,
                            handling={"batch_window_s": 0.0, "max_comments_per_turn": 2, "per_viewer_per_minute": 60})


def test_a_reply_the_hooks_refused_never_reaches_the_overlay(session, operator, monkeypatch):
    shown, seen, stored = _run_turn(session, operator, monkeypatch, [REFUSED, PASSED])
    # the turn as the hooks judged it: the first reply refused by the relevance rule, the second spoken
    refused = [e.payload for e in stored if e.type == "hook_result" and not e.payload["passed"]]
    assert H.RELEVANCE_HOOK_ID in {v["hook_id"] for v in refused}, refused
    assert [e.payload["text"] for e in stored if e.type == "reply_spoken"] == [PASSED]
    # the operator still sees the draft as it streamed (it was stored and published)
    assert REFUSED in _streamed(seen) and PASSED in _streamed(seen)
    # the overlay: not one word of the refused reply, and the reply that passed
    text = _overlay_text(shown)
    assert not any(word in text for word in ("Welcome", "shipping", "weekend")), text
    assert [(e["type"], e["payload"]) for e in shown] == [("reply_spoken", {"text": PASSED})]


def test_when_every_reply_is_refused_the_overlay_shows_the_fallback_line(session, operator, monkeypatch):
    shown, seen, stored = _run_turn(session, operator, monkeypatch, [REFUSED] * 8)
    reply = next(e.payload for e in stored if e.type == "reply")
    assert reply["fallback"] and reply["text"] and REFUSED not in reply["text"], reply
    assert REFUSED in _streamed(seen)
    assert "shipping" not in _overlay_text(shown), _overlay_text(shown)
    assert [(e["type"], e["payload"]) for e in shown] == [("reply_spoken", {"text": reply["text"]})]
