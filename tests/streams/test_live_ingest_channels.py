"""The ingest WebSocket of a live session through the real ASGI app (channels' WebsocketCommunicator on
console.asgi.application, the configured channel layer): token in the Authorization header or ?token=, no Origin
needed (a platform's client), an ack per comment after it is stored, error frames for bad frames with the socket
kept open, and the close codes for every refusal."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from console.asgi import application
from streams.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from streams.live_ingest_consumers import CLOSE_ENDED
from streams.models import LiveComment, LiveEvent, LiveSession, LiveToken
from streams.services import live_sessions as svc
from tests.streams.live_helpers import comment, ingest_secret, live_session, live_world, operator2  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_channel_layer(monkeypatch):
    """Each test runs its own event loop (asyncio.run); a Redis channel layer is bound to the loop it first ran in,
    so every test gets a new layer instance. Sessions started here go to no runner (the runner's own tests start
    them)."""
    from asgiref.sync import sync_to_async
    from channels.layers import channel_layers
    from django.db import connections

    monkeypatch.setattr(svc, "_runner_ensure", lambda session_id: None)
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
    asyncio.run(sync_to_async(connections.close_all)())


def ingest_socket(session_id, secret: str | None = None, *, header: bool = True, origin: bytes | None = None):
    headers = [(b"host", b"localhost")]
    if origin is not None:
        headers.append((b"origin", origin))
    path = f"/ws/live/{session_id}/ingest/"
    if secret is not None and header:
        headers.append((b"authorization", f"Bearer {secret}".encode()))
    elif secret is not None:
        path += f"?token={secret}"
    return WebsocketCommunicator(application, path, headers=headers)


def test_comments_in_over_the_socket_each_acknowledged_after_it_is_stored(live_session, ingest_secret):
    async def go():
        comm = ingest_socket(live_session.pk, ingest_secret)  # no Origin header: a platform's client
        connected, _ = await comm.connect(timeout=10)
        assert connected
        await comm.send_json_to(comment(1, "how many serums are left?", viewer="bob"))
        ack = await comm.receive_json_from(timeout=10)
        stored = await database_sync_to_async(
            lambda: list(LiveComment.objects.filter(session=live_session).values_list("pk", "status", "source")))()
        await comm.send_json_to({"comments": [comment(1), comment(2, "DM me on telegram", viewer="x"),
                                              comment(3, "hi!", viewer="y")]})
        acks = [await comm.receive_json_from(timeout=10) for _ in range(3)]
        await comm.disconnect()
        return ack, stored, acks

    ack, stored, acks = asyncio.run(go())
    assert ack["type"] == "ack" and ack["status"] == "queued" and ack["external_id"] == "c1" and ack["priority"] == 30
    assert stored == [(ack["comment_id"], "queued", "ws")]  # in the database when the ack came
    assert [(a["type"], a["index"], a["status"]) for a in acks] == [("ack", 0, "duplicate"), ("ack", 1, "filtered"),
                                                                    ("ack", 2, "queued")]
    assert acks[0]["comment_id"] == ack["comment_id"]
    assert LiveComment.objects.filter(session=live_session).count() == 3
    assert LiveEvent.objects.filter(session=live_session, type="comment_in").count() == 3


def test_bad_frames_get_an_error_and_the_socket_stays_open(live_session, ingest_secret):
    async def go():
        comm = ingest_socket(live_session.pk, ingest_secret, header=False)  # ?token=
        connected, _ = await comm.connect(timeout=10)
        assert connected
        replies = []
        for frame in ("{not json", "[1, 2]", '{"comments": []}', '{"viewer_id": "v", "text": "", "x": 1}',
                      '{"viewer_id": "v", "text": "a\\u0000b"}'):
            await comm.send_to(text_data=frame)
            replies.append(await comm.receive_json_from(timeout=10))
        await comm.send_to(bytes_data=b"\x00\x01")
        replies.append(await comm.receive_json_from(timeout=10))
        await comm.send_json_to(comment(9))  # still open, still taking comments
        replies.append(await comm.receive_json_from(timeout=10))
        await comm.disconnect()
        return replies

    replies = asyncio.run(go())
    assert [r["type"] for r in replies] == ["error"] * 6 + ["ack"]
    assert {e["path"] for e in replies[3]["errors"]} == {"text", "x"}
    assert replies[2]["errors"][0]["path"] == "comments"
    assert list(LiveComment.objects.values_list("external_id", flat=True)) == ["c9"]


def test_a_frame_past_the_token_limit_gets_a_refused_frame_and_nothing_is_stored(live_session, ingest_secret):
    LiveSession.objects.filter(pk=live_session.pk).update(
        handling={**live_session.handling, "per_token_per_minute": 100})
    flood = {"comments": [comment(n, f"is item {n} in stock?", viewer=f"v{n}") for n in range(100)]}

    async def go():
        comm = ingest_socket(live_session.pk, ingest_secret)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        await comm.send_json_to(flood)
        acks = [await comm.receive_json_from(timeout=10) for _ in range(100)]
        await comm.send_json_to(comment(500, "one more?", viewer="late"))
        refused = await comm.receive_json_from(timeout=10)
        await comm.send_json_to(comment(3, "is item 3 in stock?", viewer="v3"))  # still open; a redelivery is free
        again = await comm.receive_json_from(timeout=10)
        await comm.disconnect()
        return acks, refused, again

    acks, refused, again = asyncio.run(go())
    assert {a["status"] for a in acks} == {"queued"}
    assert refused["type"] == "refused" and refused["code"] == "rate_limited" and refused["limit"] == "token"
    assert 50 < refused["retry_after_s"] <= 61 and "100 new comments a minute" in refused["message"]
    assert again["type"] == "ack" and again["status"] == "duplicate"
    assert LiveComment.objects.filter(session=live_session).count() == 100
    assert LiveSession.objects.get(pk=live_session.pk).comments_refused == 1


def test_the_socket_refuses_every_caller_without_the_right_token(live_session, live_world, operator, ingest_secret):
    _overlay, overlay = svc.live_token_create(user=operator, session=live_session, scope="overlay")
    other = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                   title="other")
    _revoked, revoked = svc.live_token_create(user=operator, session=live_session, scope="ingest")
    svc.live_token_revoke(user=operator, token=_revoked)

    async def go():
        out = {}
        for name, comm in {
            "no token": ingest_socket(live_session.pk),
            "unknown token": ingest_socket(live_session.pk, "hat_nope"),
            "overlay scope": ingest_socket(live_session.pk, overlay),
            "another session": ingest_socket(other.pk, ingest_secret),
            "revoked": ingest_socket(live_session.pk, revoked),
            "no such session": ingest_socket(uuid.uuid4(), ingest_secret),
        }.items():
            out[name] = await comm.connect(timeout=10)
            await comm.disconnect()
        return out

    r = asyncio.run(go())
    assert r == {"no token": (False, CLOSE_UNAUTHENTICATED), "unknown token": (False, CLOSE_UNAUTHENTICATED),
                 "overlay scope": (False, CLOSE_FORBIDDEN), "another session": (False, CLOSE_FORBIDDEN),
                 "revoked": (False, CLOSE_FORBIDDEN), "no such session": (False, CLOSE_NOT_FOUND)}
    assert not LiveComment.objects.exists()


def test_a_token_revoked_or_a_session_ended_while_connected_is_refused_at_the_next_frame(live_session, operator,
                                                                                          ingest_secret):
    token = LiveToken.objects.get(digest=LiveToken.digest_of(ingest_secret))
    _second, second = svc.live_token_create(user=operator, session=live_session, scope="ingest")

    async def go():
        a = ingest_socket(live_session.pk, ingest_secret)
        assert (await a.connect(timeout=10))[0]
        b = ingest_socket(live_session.pk, second, origin=b"http://localhost")
        assert (await b.connect(timeout=10))[0]
        await database_sync_to_async(svc.live_token_revoke)(user=operator, token=token)
        await a.send_json_to(comment(1))
        a_error = await a.receive_json_from(timeout=10)
        a_closed = await a.receive_output(timeout=10)
        await database_sync_to_async(svc.live_session_end)(user=operator, session=live_session)
        await b.send_json_to(comment(2))
        b_error = await b.receive_json_from(timeout=10)
        b_closed = await b.receive_output(timeout=10)
        ended = ingest_socket(live_session.pk, second)
        refused = await ended.connect(timeout=10)
        await ended.disconnect()
        return a_error, a_closed, b_error, b_closed, refused

    a_error, a_closed, b_error, b_closed, refused = asyncio.run(go())
    assert a_error["type"] == "error" and "revoked" in a_error["message"]
    assert a_closed == {"type": "websocket.close", "code": CLOSE_FORBIDDEN}
    assert b_error["type"] == "error" and "ended" in b_error["message"]
    assert b_closed == {"type": "websocket.close", "code": CLOSE_ENDED}
    assert refused == (False, CLOSE_ENDED)
    assert not LiveComment.objects.exists()


def test_the_browser_sockets_still_need_an_allowed_origin(live_session, ingest_secret):
    """Routing the ingest around the origin check left the other sockets behind it: from a foreign origin the
    preview socket is denied before its consumer runs; from the console's own it reaches the consumer (which
    closes 4401: not signed in)."""
    async def attempt(origin: bytes):
        comm = WebsocketCommunicator(application, f"/ws/preview/{uuid.uuid4()}/",
                                     headers=[(b"host", b"localhost"), (b"origin", origin)])
        result = await comm.connect(timeout=10)
        await comm.disconnect()
        return result

    async def go():
        return await attempt(b"http://evil.example"), await attempt(b"http://localhost")

    foreign, own = asyncio.run(go())
    assert own == (False, CLOSE_UNAUTHENTICATED)
    assert foreign[0] is False and foreign[1] != CLOSE_UNAUTHENTICATED
