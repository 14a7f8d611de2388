"""The preview room with a REAL model: the project's tiny local model behind its OpenAI-compatible server on
loopback (the session fixture ``local_model_server`` from tests/conftest.py). The scripted endpoint pins
edge cases elsewhere; here the same path runs end to end on real tokens: service → Celery worker → engine →
HTTP streaming → stored events → channel layer → WebSocket.

Skipped only when the ``local_model_server`` fixture does not exist (yet)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streams import services
from streams.models import ModelEndpoint, PreviewEvent
from tests.streams.preview_helpers import event_types

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
QUESTION = "how much is #101?"


def local_model_endpoint(request) -> ModelEndpoint:
    """A ModelEndpoint row for the session's local model server (skip if there is no such fixture)."""
    try:
        server = request.getfixturevalue("local_model_server")
    except pytest.FixtureLookupError:
        pytest.skip("no local_model_server fixture in tests/conftest.py")
    if isinstance(server, (tuple, list)):
        base_url, model = server[0], server[1]
    else:
        base_url = getattr(server, "openai_base_url", None) or server.base_url
        model = server.model
    base_url = base_url.rstrip("/")
    if not base_url.endswith("/v1"):
        base_url += "/v1"
    return ModelEndpoint.objects.create(name="local-test", base_url=base_url, model=model, kind="local",
                                        timeout_s=120, connect_timeout_s=5)


def tiny_version(user, demo_manifest):
    """The harness the tiny model is trained on when it exists, else the demo skincare harness."""
    from harness_editor import services as editor
    from harness_editor.schemas import manifest_from_yaml

    tiny = DEMO / "tiny_room.yaml"
    manifest = manifest_from_yaml(tiny.read_text(encoding="utf-8")) if tiny.exists() else demo_manifest("skincare_v1")
    return editor.harness_create(user=user, slug="tiny-room", name="Tiny demo room", manifest=manifest)


def assert_real_turn(room, turn_id) -> dict:
    types = event_types(room.pk, turn_id)
    assert types[:3] == ["viewer_comment", "turn_queued", "turn_started"] and types[-2:] == ["reply", "timings"], types
    assert "model_request" in types and ("token" in types or "tool_call" in types)
    errors = [e.payload for e in PreviewEvent.objects.filter(room=room, turn_id=turn_id, type="error")]
    assert not [e for e in errors if e["stage"] == "model" and e["kind"] in ("connect", "timeout")], errors
    timings = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="timings").payload
    assert timings["model_calls"] >= 1 and timings["ttft_ms"] is not None
    return timings


def test_turn_with_the_local_model(request, manager, demo_manifest, django_capture_on_commit_callbacks):
    endpoint = local_model_endpoint(request)
    room = services.preview_open(user=manager, version=tiny_version(manager, demo_manifest), endpoint=endpoint)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text=QUESTION)
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert result.reply
    assert_real_turn(room, turn_id)


@pytest.mark.django_db(transaction=True)
def test_websocket_streams_the_local_model(request, manager, demo_manifest, celery_worker_process):
    from tests.streams.test_preview_channels import communicator, events_until, login_cookie, receive_type

    endpoint = local_model_endpoint(request)
    room = services.preview_open(user=manager, version=tiny_version(manager, demo_manifest), endpoint=endpoint)
    login_cookie(manager)

    async def go():
        from channels.layers import channel_layers

        channel_layers.backends.clear()
        comm = communicator(room.pk, manager)
        assert (await comm.connect(timeout=5))[0]
        await comm.send_json_to({"type": "comment", "text": QUESTION})
        ack = await receive_type(comm, "ack")
        events = await events_until(comm, lambda e: e["type"] == "timings", timeout=180)
        await comm.disconnect()
        return ack, events

    try:
        ack, events = asyncio.run(go())
    finally:
        from asgiref.sync import sync_to_async
        from channels.layers import channel_layers
        from django.db import connections

        channel_layers.backends.clear()
        asyncio.run(sync_to_async(connections.close_all)())
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert any(e["type"] in ("token", "tool_call") for e in events)
    assert_real_turn(room, ack["turn_id"])
