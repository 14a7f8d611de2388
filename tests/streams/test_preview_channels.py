"""The preview room's WebSocket through the real ASGI stack (session auth, origin check, URL router) with
channels' WebsocketCommunicator, on the configured channel layer: Redis when REDIS_URL is set (as in CI),
else the in-memory layer, where the consumer also polls the database.
Turns run in the real Celery worker (a separate process on the test database), so everything the
consumer sends came through the database, the channel layer and the worker."""

from __future__ import annotations

import asyncio
import collections
import os
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from console.asgi import application
from streams import services
from streams.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from streams.events import EVENT_MESSAGE_TYPE, events_frame
from streams.models import PreviewEvent, PreviewRoom
from tests.streams.preview_helpers import GOOD, price_script
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply

pytestmark = pytest.mark.django_db(transaction=True)

REDIS = settings.CHANNEL_LAYERS["default"]["BACKEND"].startswith("channels_redis")
# the worker is another process: it needs a database both can open (the PostgreSQL test database)
needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="the Celery worker needs the PostgreSQL test database")


_COOKIES: dict[int, bytes] = {}


def login_cookie(user) -> bytes:
    """A real session (sync: call it outside the event loop); the ASGI stack authenticates from it."""
    client = Client()
    client.force_login(user)
    _COOKIES[user.pk] = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    return _COOKIES[user.pk]


def communicator(room_id, user=None, after: int | None = None, origin: bytes = b"http://localhost"):
    headers = [(b"origin", origin), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", _COOKIES[user.pk]))
    path = f"/ws/preview/{room_id}/" + (f"?after={after}" if after is not None else "")
    return WebsocketCommunicator(application, path, headers=headers)


def _held(comm) -> collections.deque:
    """Events received in a frame but not consumed yet (a frame carries a run of events)."""
    return comm.__dict__.setdefault("held_events", collections.deque())


async def events_until(comm, pred, timeout: float = 20.0) -> list[dict]:
    """Receive events until ``pred(event)`` is true (inclusive); other messages are skipped."""
    out = []
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    held = _held(comm)
    while True:
        while not held:
            msg = await comm.receive_json_from(timeout=max(0.1, end - loop.time()))
            if msg.get("type") == "events":
                seqs = [e["seq"] for e in msg["events"]]
                assert seqs and seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # a run, oldest first
                held.extend(msg["events"])
        out.append(held.popleft())
        if pred(out[-1]):
            return out


async def receive_type(comm, kind: str, timeout: float = 10.0, events: list | None = None) -> dict:
    """The next message of type ``kind``; events received meanwhile (and held ones) go to ``events``."""
    held = _held(comm)
    while True:
        if events is not None:
            events.extend(held)
            held.clear()
        msg = await comm.receive_json_from(timeout=timeout)
        if msg.get("type") == kind:
            return msg
        if msg.get("type") == "events":
            held.extend(msg["events"])


@pytest.fixture(autouse=True)
def _fresh_channel_layer():
    """Each test runs its own event loop (asyncio.run); a Redis channel layer is bound to the loop it first
    ran in, so every test gets a new layer instance."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
    # the consumer's database calls ran in asgiref's shared sync thread: close that thread's connections,
    # or they outlive the test and block dropping the test database
    from asgiref.sync import sync_to_async
    from django.db import connections

    asyncio.run(sync_to_async(connections.close_all)())


@pytest.fixture
def room(manager, harness_with_history, scripted_model):
    return services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)


def test_refused_without_login_role_or_room(room, operator, outsider, manager):
    for u in (operator, outsider, manager):
        login_cookie(u)
    async def go():
        results = {}
        for name, comm in {
            "anonymous": communicator(room.pk),
            "outsider": communicator(room.pk, outsider),
            "operator": communicator(room.pk, operator),
            "unknown room": communicator(uuid.uuid4(), manager),
        }.items():
            results[name] = await comm.connect(timeout=5)
            await comm.disconnect()
        foreign = communicator(room.pk, manager, origin=b"http://evil.example")
        results["foreign origin"] = await foreign.connect(timeout=5)
        await foreign.disconnect()
        return results

    r = asyncio.run(go())
    assert r["anonymous"] == (False, CLOSE_UNAUTHENTICATED)
    assert r["outsider"] == (False, CLOSE_FORBIDDEN)
    assert r["operator"] == (False, CLOSE_FORBIDDEN)
    assert r["unknown room"] == (False, CLOSE_NOT_FOUND)
    assert r["foreign origin"][0] is False


@needs_shared_db
def test_comment_streams_tokens_tool_calls_and_reply(room, manager, scripted_endpoint, celery_worker_process):
    login_cookie(manager)
    if os.environ.get("REDIS_URL"):
        assert REDIS  # CI: the worker publishes through Redis to this process
    price_script(scripted_endpoint)

    async def go():
        comm = communicator(room.pk, manager)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        opened = await events_until(comm, lambda e: e["type"] == "room_opened")
        await comm.send_json_to({"type": "comment", "text": "how much is #101?"})
        ack = await receive_type(comm, "ack")
        events = await events_until(comm, lambda e: e["type"] == "timings", timeout=30)
        await comm.disconnect()
        return opened, ack, events

    opened, ack, events = asyncio.run(go())
    assert [e["seq"] for e in opened] == [1]
    turn_id = ack["turn_id"]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(2, 2 + len(events)))  # no loss, no duplicates, in order
    assert {e["turn_id"] for e in events} == {turn_id}
    types = [e["type"] for e in events]
    assert types[:3] == ["viewer_comment", "turn_queued", "turn_started"] and types[-2:] == ["reply", "timings"]
    tokens = [e["payload"]["delta"] for e in events if e["type"] == "token"]
    assert len(tokens) >= 5 and GOOD in "".join(tokens)
    calls = [e["payload"] for e in events if e["type"] == "tool_call"]
    assert [(c["name"], c["valid"]) for c in calls] == [("load_skill", True), ("lookup_product", True)]
    assert [e for e in events if e["type"] == "reply"][0]["payload"]["text"] == GOOD
    stored = list(PreviewEvent.objects.filter(room=room).order_by("seq").values_list("seq", "type"))
    assert stored == [(1, "room_opened")] + [(e["seq"], e["type"]) for e in events]


@needs_shared_db
def test_reconnect_mid_turn_resumes_without_loss_or_duplication(room, manager, scripted_endpoint,
                                                                celery_worker_process):
    login_cookie(manager)
    slow = reply(GOOD, size=4)
    slow.stall_after, slow.stall_s = 6, 1.5  # the reply pauses mid-stream while we reconnect
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
                          native_calls(("lookup_product", {"link_id": 101})), slow)

    async def go():
        first = communicator(room.pk, manager)
        assert (await first.connect(timeout=5))[0]
        await first.send_json_to({"type": "comment", "text": "how much is #101?"})
        seen = []
        tokens = 0
        while tokens < 3:  # a few tokens of the final reply, then drop the connection mid-turn
            e = (await events_until(first, lambda e: True, timeout=30))[0]
            seen.append(e)
            if e["type"] == "token" and seen[-2]["type"] in ("token", "model_request"):
                tokens += 1
        await first.disconnect()
        last = seen[-1]["seq"]
        second = communicator(room.pk, manager, after=last)
        assert (await second.connect(timeout=5))[0]
        rest = await events_until(second, lambda e: e["type"] == "timings", timeout=30)
        assert await second.receive_nothing(timeout=0.3)
        await second.disconnect()
        # a third client resuming after the end gets nothing old again
        third = communicator(room.pk, manager, after=rest[-1]["seq"])
        assert (await third.connect(timeout=5))[0]
        assert await third.receive_nothing(timeout=0.3)
        await third.disconnect()
        return seen, rest

    seen, rest = asyncio.run(go())
    assert rest[0]["seq"] == seen[-1]["seq"] + 1
    combined = [e["seq"] for e in seen + rest]
    assert combined == list(range(1, len(combined) + 1))
    stored = list(PreviewEvent.objects.filter(room=room).order_by("seq").values_list("seq", flat=True))
    assert combined == stored
    assert "".join(e["payload"]["delta"] for e in seen + rest if e["type"] == "token").endswith(GOOD)
    assert any(e["type"] == "token" for e in rest)  # the turn was still streaming after the reconnect


def test_live_gap_is_filled_from_the_database_and_duplicates_skipped(room, manager):
    login_cookie(manager)
    async def go():
        comm = communicator(room.pk, manager)
        assert (await comm.connect(timeout=5))[0]
        first = await events_until(comm, lambda e: e["seq"] == 1)

        def store_unpublished():  # seq 2 and 3 committed; only 3 is published (out-of-order workers)
            PreviewEvent.objects.create(room=room, seq=2, type="paused", payload={"by": "x", "minute": 0})
            three = PreviewEvent.objects.create(room=room, seq=3, type="resumed", payload={"by": "x", "minute": 0})
            PreviewRoom.objects.filter(pk=room.pk).update(last_seq=3)
            return three.as_message(), PreviewEvent.objects.get(room=room, seq=2).as_message()

        three, two = await database_sync_to_async(store_unpublished)()
        layer = get_channel_layer()

        def message(*events):  # as streams.events publishes a run of stored events
            return {"type": EVENT_MESSAGE_TYPE, "first": events[0]["seq"], "last": events[-1]["seq"],
                    "text": events_frame(events)}

        await layer.group_send(f"preview.{room.pk}", message(three))
        got = await events_until(comm, lambda e: e["seq"] == 3)
        await layer.group_send(f"preview.{room.pk}", message(two))  # late duplicate
        await layer.group_send(f"preview.{room.pk}", message(two, three))  # a late run, all of it sent already
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        return first, got

    first, got = asyncio.run(go())
    assert [e["seq"] for e in first] == [1]
    assert [(e["seq"], e["type"]) for e in got] == [(2, "paused"), (3, "resumed")]


def test_viewers_of_a_room_share_one_group_membership_per_process(room, manager):
    from streams.consumers import RoomFeed

    login_cookie(manager)

    async def go():
        layer = get_channel_layer()
        group = f"preview.{room.pk}"
        viewers = [communicator(room.pk, manager) for _ in range(3)]
        for comm in viewers:
            assert (await comm.connect(timeout=5))[0]
            await events_until(comm, lambda e: e["seq"] == 1)
        feed = RoomFeed._feeds[layer][group]
        assert len(feed.consumers) == 3

        def store(seq):
            PreviewEvent.objects.create(room=room, seq=seq, type="paused", payload={"by": "x", "minute": 0})
            PreviewRoom.objects.filter(pk=room.pk).update(last_seq=seq)
            return PreviewEvent.objects.get(room=room, seq=seq).as_message()

        two = await database_sync_to_async(store)(2)
        await layer.group_send(group, {"type": EVENT_MESSAGE_TYPE, "first": 2, "last": 2, "text": events_frame([two])})
        got = [await events_until(comm, lambda e: e["seq"] == 2) for comm in viewers]
        await viewers[0].disconnect()
        three = await database_sync_to_async(store)(3)
        await layer.group_send(group, {"type": EVENT_MESSAGE_TYPE, "first": 3, "last": 3,
                                       "text": events_frame([three])})
        got += [await events_until(comm, lambda e: e["seq"] == 3) for comm in viewers[1:]]
        assert RoomFeed._feeds[layer][group] is feed and len(feed.consumers) == 2
        for comm in viewers[1:]:
            await comm.disconnect()
        assert group not in RoomFeed._feeds[layer]
        return got

    got = asyncio.run(go())
    assert [[e["seq"] for e in g] for g in got] == [[2], [2], [2], [3], [3]]


def test_actions_step_pause_resume_switch_and_errors(manager, harness_with_history, scripted_model, demo_scenarios):
    login_cookie(manager)
    h = harness_with_history
    room = services.preview_open(user=manager, version=h["v1"], endpoint=scripted_model,
                                 scenario=demo_scenarios["after-sales-faults"])

    async def go():
        comm = communicator(room.pk, manager, after=room.last_seq)
        assert (await comm.connect(timeout=5))[0]
        out = {}
        events: list = []
        await comm.send_json_to({"type": "step", "minutes": 0.5})  # no comment due before minute 1
        out["step"] = await receive_type(comm, "ack", events=events)
        await comm.send_json_to({"type": "pause"})
        await receive_type(comm, "ack", events=events)
        await comm.send_json_to({"type": "resume"})
        await receive_type(comm, "ack", events=events)
        await comm.send_json_to({"type": "switch_version", "version_id": h["v3"].pk})
        await receive_type(comm, "ack", events=events)
        if not events or events[-1]["type"] != "version_switched":
            events += await events_until(comm, lambda e: e["type"] == "version_switched")
        out["events"] = events
        await comm.send_json_to({"type": "comment", "text": "   "})
        out["empty"] = await receive_type(comm, "error")
        await comm.send_json_to({"type": "switch_version", "version_id": 10**9})
        out["bad version"] = await receive_type(comm, "error")
        await comm.send_json_to({"type": "dance"})
        out["unknown"] = await receive_type(comm, "error")
        await comm.disconnect()
        return out

    out = asyncio.run(go())
    assert out["step"]["minute"] == 0.5 and out["step"]["turn_ids"] == []
    assert [e["type"] for e in out["events"]] == ["clock", "paused", "resumed", "version_switched"]
    assert out["events"][-1]["payload"]["to"]["number"] == 3
    assert out["empty"]["message"] == "the comment is empty"
    assert "no such version" in out["bad version"]["message"]
    assert "unknown action" in out["unknown"]["message"]
    room.refresh_from_db()
    assert room.scenario_minute == 0.5 and room.harness_version == h["v3"] and not room.paused
