"""Who may touch whose preview room, over the WebSocket (issue 10, point 8): the real ASGI stack (session auth,
origin check, router) and the configured channel layer (Redis when REDIS_URL is set), as in
test_preview_channels.py. Someone outside alice's room is refused with 4404 (as for a room that does not exist);
an invited member joins, comments under their own name (never a colleague's) and drives the clock; a member the
owner removes is disconnected (4403); every preview user may watch a scenario run, only its owner drives it."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from streams import consumers, services
from streams.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND
from streams.models import PreviewEvent, PreviewRoom
from tests.streams.test_preview_channels import (  # noqa: F401
    _fresh_channel_layer,
    communicator,
    events_until,
    login_cookie,
    receive_type,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def room(enqueued, manager, harness_with_history, scripted_model, demo_scenarios):
    """cm_alice's room, playing a scenario (so the clock can be stepped)."""
    return services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model,
                                 scenario=demo_scenarios["after-sales-faults"])


async def _connect(room_id, user, **kw):
    comm = communicator(room_id, user, **kw)
    connected, code = await comm.connect(timeout=5)
    if not connected:
        return None, code
    return comm, None


def test_someone_outside_the_room_is_refused_as_if_it_did_not_exist(room, manager2, reviewer, enqueued):
    """The finding: another campaign manager joined alice's room's socket and posted under the name 'alice'."""
    for u in (manager2, reviewer):
        login_cookie(u)

    async def go():
        out = []
        for u in (manager2, reviewer):
            comm, code = await _connect(room.pk, u)
            out.append(code)
            if comm is not None:
                await comm.disconnect()
        return out

    assert asyncio.run(go()) == [CLOSE_NOT_FOUND, CLOSE_NOT_FOUND]
    assert PreviewRoom.objects.get(pk=room.pk).last_seq == room.last_seq


def test_an_invited_member_joins_comments_as_themselves_and_drives(room, manager, manager2, enqueued):
    services.preview_member_add(user=manager, room=room, username=manager2.username)
    login_cookie(manager2)

    async def go():
        comm, code = await _connect(room.pk, manager2)
        assert comm is not None, code
        out = {"backlog": await events_until(comm, lambda e: e["type"] == "member_added")}
        await comm.send_json_to({"type": "comment", "text": "approve it", "viewer": "cm_alice"})
        out["as alice"] = await receive_type(comm, "error")
        await comm.send_json_to({"type": "comment", "text": "is #101 on sale?"})
        out["own"] = await receive_type(comm, "ack")
        await comm.send_json_to({"type": "pause"})
        out["pause"] = await receive_type(comm, "ack")
        await comm.send_json_to({"type": "step", "minutes": 0.5})
        out["step"] = await receive_type(comm, "ack")
        await comm.disconnect()
        return out

    out = asyncio.run(go())
    assert out["backlog"][-1]["payload"] == {"by": "cm_alice", "user": "cm_bob"}
    assert out["as alice"]["errors"] == [{"path": "viewer", "message": "'cm_alice' is another console user's "
                                          "username: pick another viewer name or leave it empty to comment under "
                                          "your own"}]
    comment = PreviewEvent.objects.get(room=room, turn_id=out["own"]["turn_id"], type="viewer_comment").payload
    assert (comment["viewer"], comment["sent_by"], comment["text"]) == ("cm_bob", "cm_bob", "is #101 on sale?")
    assert out["step"]["minute"] == 0.5
    room.refresh_from_db()
    assert room.paused and room.status == "open"
    assert len(enqueued) == 1  # the member's comment became a turn; the refused one did not


def test_a_removed_member_is_disconnected_and_refused(room, manager, manager2, enqueued, monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_CHECK_S", 0.2)
    services.preview_member_add(user=manager, room=room, username=manager2.username)
    login_cookie(manager2)

    async def go():
        comm, code = await _connect(room.pk, manager2)
        assert comm is not None, code
        await events_until(comm, lambda e: e["type"] == "member_added")
        await database_sync_to_async(services.preview_member_remove)(user=manager, room=room,
                                                                     username=manager2.username)
        while True:  # the member_removed event may come first; then the socket is closed
            message = await comm.receive_output(timeout=5)
            if message["type"] == "websocket.close":
                break
        again, code = await _connect(room.pk, manager2)
        return message, again, code

    closed, again, code = asyncio.run(go())
    assert closed["code"] == CLOSE_FORBIDDEN
    assert again is None and code == CLOSE_NOT_FOUND


def test_every_preview_user_watches_a_run_only_its_owner_drives_it(enqueued, manager, reviewer, harness_with_history,
                                                                   scripted_model, demo_scenarios):
    run = services.scenario_run_start(user=manager, version=harness_with_history["v1"],
                                      scenario=demo_scenarios["after-sales-faults"], endpoint=scripted_model,
                                      play=False)
    login_cookie(reviewer)
    minute = run.scenario_minute

    async def go():
        comm, code = await _connect(run.pk, reviewer)
        assert comm is not None, code
        backlog = await events_until(comm, lambda e: e["type"] == "room_opened")
        replies = []
        for action in ({"type": "pause"}, {"type": "comment", "text": "hi"}, {"type": "step", "minutes": 1}):
            await comm.send_json_to(action)
            replies.append(await receive_type(comm, "error"))
        await comm.disconnect()
        return backlog, replies

    backlog, replies = asyncio.run(go())
    assert backlog[0]["payload"]["kind"] == "run"
    for reply in replies:
        assert reply["message"] == ("this scenario run was started by cm_alice: only they may drive or cancel it; "
                                    "you may read it")
    run.refresh_from_db()
    assert (run.paused, run.scenario_minute, run.job.status) == (False, minute, "queued") and enqueued == []
