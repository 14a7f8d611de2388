"""Helpers of the live page, socket and browser tests (and the lead's end-to-end walk): a live session on a deployment
without the runner, comments and turns stored as the ingest and the runner store them (through
:func:`streams.services.live_events.live_event_append`, so they are published to the session's group for real),
overlay tokens, and WebSocket communicators for the live sockets.

A turn is written as the runner writes one: ``turn_started`` (version, revision, endpoint, comments), the engine's
events (``comment_received``, ``model_request``, tokens, a tool call and its result, a skill, hook verdicts, the
reply, timings) with the turn's id, and ``reply_spoken`` — or ``reply_pending`` in approve-before-speak mode.
"""

from __future__ import annotations

import uuid
from typing import Any

GOOD = "The HydraGlow serum is $24.9 right now, list price $34, and we have 180 in stock."


def live_session_for(deployment, user, *, title: str = "Evening show", room=None, **fields):
    """A live session of the demo room (or ``room``) on ``deployment`` as it is in force now, with its
    ``session_started`` event, stored as the session service stores one but handed to no runner."""
    from streams import services as stream_services
    from streams.deployment_selectors import deployment_in_force
    from streams.models import LiveSession
    from streams.selectors import room_state
    from streams.services.live_events import live_event_append

    room = room or stream_services.catalog_seed_demo()
    in_force = deployment_in_force(deployment)
    session = LiveSession.objects.create(title=title, room=room, deployment=deployment, started_by=user,
                                         room_state=room_state(room), revision_in_force=in_force.revision,
                                         version_in_force=in_force.version, **fields)
    described = in_force.describe()
    live_event_append(session_id=session.pk, type="session_started", payload={
        "deployment": deployment.name, "revision": in_force.revision.number, "version": described["version"],
        "label": in_force.label, "title": title, "feed": session.feed, "by": user.get_username()})
    return session


def comment_add(session, *, viewer: str, text: str, priority: int = 0, status: str = "queued",
                source: str = "api"):
    """A stored viewer comment and its ``comment_in`` event."""
    from streams.models import LiveComment
    from streams.services.live_events import live_event_append

    comment = LiveComment.objects.create(session=session, external_id=uuid.uuid4().hex, viewer_id=f"v-{viewer}",
                                         viewer=viewer, text=text, source=source, priority=priority, status=status)
    live_event_append(session_id=session.pk, type="comment_in", payload={
        "comment_id": comment.pk, "external_id": comment.external_id, "viewer": viewer,
        "viewer_id": comment.viewer_id, "text": text, "priority": priority, "status": status, "source": source})
    return comment


def version_of(session) -> dict[str, Any]:
    v = session.version_in_force
    return {"slug": v.harness.slug, "number": v.number, "id": v.pk}


def turn_start_events(session, comments=(), *, version: dict | None = None) -> list[tuple[str, dict]]:
    """What a turn stores before the model streams: turn_started, the engine's copy of each comment, the first
    model request, a skill loaded and a tool called with its result."""
    version = version or version_of(session)
    events: list[tuple[str, dict]] = [("turn_started", {
        "version": version, "revision": session.revision_in_force.number if session.revision_in_force_id else 1,
        "endpoint": "ep-a", "comments": [c.pk for c in comments]})]
    for i, c in enumerate(comments):
        events.append(("comment_received", {"index": i, "viewer": c.viewer, "viewer_id": c.viewer_id,
                                            "text": c.text, "truncated": False}))
    events += [
        ("model_request", {"round": 0, "attempt": 1, "call_index": 0, "message_count": 3}),
        ("tool_call", {"call_id": "c1", "name": "load_skill", "arguments_raw": '{"skill_id": "price_stock_qa"}',
                       "arguments": {"skill_id": "price_stock_qa"}, "source": "native", "valid": True}),
        ("skill_loaded", {"skill_id": "price_stock_qa", "kind": "reply", "ok": True}),
        ("tool_result", {"call_id": "c1", "name": "load_skill", "binding": "load_skill", "result": {"ok": True},
                         "duration_ms": 1.0}),
        ("model_request", {"round": 1, "attempt": 1, "call_index": 1, "message_count": 5}),
    ]
    return events


def token_events(text: str, size: int = 6) -> list[tuple[str, dict]]:
    return [("token", {"delta": text[i:i + size], "channel": "content"}) for i in range(0, len(text), size)]


def turn_end_events(text: str, *, approval: bool = False) -> list[tuple[str, dict]]:
    """The hooks' verdicts, the reply, timings, and then the reply spoken (or pending, in approve-before-speak)."""
    events = [
        ("hook_result", {"hook_id": "reply_format", "kind": "reply_format", "point": "before_reply", "passed": True,
                         "on_fail": "retry", "message": "", "detail": ""}),
        ("reply", {"text": text, "fallback": False, "reason": "ok"}),
        ("timings", {"ttft_ms": 120.0, "model_ms": 800.0, "tool_ms": 2.0, "engine_ms": 5.0, "total_ms": 810.0,
                     "rounds": 1, "retries": 0, "model_calls": 2}),
    ]
    events.append(("reply_pending", {"text": text}) if approval else
                  ("reply_spoken", {"text": text, "by": "avatar", "operator": ""}))
    return events


def play_turn(session, *, text: str = GOOD, comments=(), approval: bool = False, turn_id: str | None = None,
              version: dict | None = None) -> str:
    """A whole turn stored at once (three transactions: start, tokens, end); returns its id."""
    from streams.services.live_events import live_event_append

    turn_id = turn_id or uuid.uuid4().hex[:16]
    live_event_append(session_id=session.pk, turn_id=turn_id, events=turn_start_events(session, comments,
                                                                                       version=version))
    live_event_append(session_id=session.pk, turn_id=turn_id, events=token_events(text))
    live_event_append(session_id=session.pk, turn_id=turn_id, events=turn_end_events(text, approval=approval))
    return turn_id


def overlay_secret(session, user) -> str:
    """A new overlay token of the session (through the session service); returns its secret."""
    from streams.services.live_sessions import live_token_create

    _token, secret = live_token_create(user=user, session=session, scope="overlay")
    return secret


# --- WebSocket clients (channels' communicator through the real ASGI stack) ----------------------------------------

_COOKIES: dict[int, bytes] = {}


def login_cookie(user) -> bytes:
    """A real session (sync: call it outside the event loop); the ASGI stack authenticates from it."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    _COOKIES[user.pk] = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    return _COOKIES[user.pk]


def live_communicator(session_id, user=None, *, after: int | None = None, overlay_token: str | None = None):
    from channels.testing import WebsocketCommunicator

    from console.asgi import application

    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", _COOKIES[user.pk]))
    query = []
    if overlay_token is not None:
        query.append(f"token={overlay_token}")
    if after is not None:
        query.append(f"after={after}")
    path = f"/ws/live/{session_id}/" + ("overlay/" if overlay_token is not None else "")
    return WebsocketCommunicator(application, path + ("?" + "&".join(query) if query else ""), headers=headers)
