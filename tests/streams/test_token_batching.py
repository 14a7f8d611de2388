"""A turn's events are stored a few per transaction and published as runs (streams.events.EventBatcher,
the preview room's emit): nothing is merged, reordered or lost, what a viewer waits for (the request to the
model, the first token of every model call, the end of the turn) is stored at once, the rest within a
short window even while the model stalls, and a client resuming in the middle of a run gets exactly the
rest."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from streams import selectors, services
from streams.engine.events import events_adapter
from streams.engine.turn import ReplayBackend, run_turn
from streams.events import EventBatcher
from streams.models import PreviewEvent
from tests.streams.preview_helpers import GOOD
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply
from tests.streams.test_preview_channels import (  # noqa: F401  (the autouse fixture resets the layer)
    _fresh_channel_layer,
    communicator,
    events_until,
    login_cookie,
    needs_shared_db,
)

# --- the batcher on its own ----------------------------------------------------------------------------------


class Store:
    def __init__(self, fail: bool = False):
        self.batches: list[list[str]] = []
        self.threads: list[str] = []
        self.fail = fail

    def __call__(self, batch):
        if self.fail:
            raise RuntimeError("database down")
        self.batches.append([t for t, _ in batch])
        self.threads.append(threading.current_thread().name)


def test_held_events_go_with_the_next_urgent_one_in_order():
    store = Store()
    b = EventBatcher(store, window_s=10, background=False)
    b.add("comment_received", {})
    b.add("prompt_built", {})
    assert store.batches == []
    b.add("model_request", {}, urgent=True)
    b.add("token", {"delta": "a"}, urgent=True)
    b.add("token", {"delta": "b"})
    b.add("tool_call", {})
    b.close()
    assert store.batches == [["comment_received", "prompt_built", "model_request"], ["token"], ["token", "tool_call"]]


def test_window_and_size_bound_what_is_held():
    store = Store()
    b = EventBatcher(store, window_s=0.05, max_events=3, background=False)
    for t in ("a", "b", "c", "d"):
        b.add(t, {})
    assert store.batches == [["a", "b", "c"]]  # max_events
    time.sleep(0.06)
    b.add("e", {})  # the oldest held one is older than the window
    assert store.batches == [["a", "b", "c"], ["d", "e"]]
    b.close()
    assert store.batches[-1] == ["d", "e"]  # nothing left to store


def test_a_stalled_stream_is_stored_by_the_background_thread():
    store = Store()
    b = EventBatcher(store, window_s=0.05)
    b.add("token", {"delta": "x"})
    b.add("token", {"delta": "y"})
    deadline = time.monotonic() + 2
    while not store.batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.batches == [["token", "token"]] and store.threads == ["preview-batcher"]
    b.add("timings", {}, urgent=True)
    b.close()
    assert store.batches == [["token", "token"], ["timings"]]
    assert b._thread is None or not b._thread.is_alive()


def test_a_failed_background_store_is_raised_by_the_next_add():
    store = Store(fail=True)
    b = EventBatcher(store, window_s=0.02)
    b.add("token", {})
    time.sleep(0.2)
    with pytest.raises(RuntimeError, match="database down"):
        b.add("token", {})  # not taken: the caller's emit fails (the turn fails)
    store.fail = False
    b.add("timings", {}, urgent=True)
    b.close()
    assert store.batches == [["timings"]]  # the failed batch is not stored again, nor is it half stored


# --- a turn through the preview room ---------------------------------------------------------------------------


def stalled_price_script(ep, stall_s: float = 1.0):
    """load_skill (Hermes text) → lookup_product (native) → the reply, stalling mid-stream."""
    slow = reply(GOOD, size=4)
    slow.stall_after, slow.stall_s = 6, stall_s
    ep.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
           native_calls(("lookup_product", {"link_id": 101})), slow)


@pytest.mark.django_db(transaction=True)
def test_turn_events_are_stored_as_emitted_in_few_transactions(manager, harness_with_history, scripted_model,
                                                               enqueued,
                                                               scripted_endpoint, monkeypatch):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    stalled_price_script(scripted_endpoint)
    writes: list[tuple[float, list[str]]] = []
    append = services.preview_event_append

    def recording(**kw):
        writes.append((time.monotonic(), [t for t, _ in kw["events"]] if kw.get("events") else [kw["type"]]))
        return append(**kw)

    monkeypatch.setattr(services.preview, "preview_event_append", recording)
    assert not connection.in_atomic_block  # so held events are also stored in the background
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert (result.reply, result.reason) == (GOOD, "ok")

    # every engine event stored exactly as emitted, in order, with gapless room seqs
    rows = list(PreviewEvent.objects.filter(room=room).order_by("seq"))
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    stored = [r.payload for r in rows if r.turn_id == turn_id][3:]  # after viewer_comment, turn_queued, turn_started
    assert stored == [e.model_dump(mode="json") for e in result.events]
    content = "".join(p["delta"] for p in stored if p["type"] == "token" and p["channel"] == "content")
    assert content.endswith(GOOD)

    # ... in fewer transactions than events; the urgent ones end their transaction
    batches = [types for _, types in writes][1:]  # the first write is turn_started
    assert sum(len(b) for b in batches) == len(result.events)
    assert len(batches) < len(result.events) / 2, (len(batches), len(result.events))
    urgent, streaming = set(), False  # the request to the model, its first token, the end of the turn
    for i, e in enumerate(result.events):
        if e.type in ("model_request", "timings") or (e.type == "token" and not streaming):
            urgent.add(i)
        streaming = (streaming or e.type == "token") and e.type != "model_request"
    position = 0
    for batch in batches:  # an urgent event is never held: it always ends its transaction
        end = position + len(batch) - 1
        assert not any(i in urgent for i in range(position, end)), batch
        position = end + 1
    assert batches[-1][-1] == "timings"
    # while the reply stalled (1 s), the tokens before the stall were stored in the background: a write of
    # tokens only, then nothing for as long as the stall
    assert any(set(b) == {"token"} and later - t > 0.5 for (t, b), (later, _) in zip(writes, writes[1:]))


@pytest.mark.django_db(transaction=True)
def test_stored_tokens_replay_and_fold_into_the_same_turn(manager, harness_with_history, scripted_model,
                                                          scripted_endpoint, enqueued):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    stalled_price_script(scripted_endpoint, stall_s=0.3)
    first = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    recorded = events_adapter.validate_python(
        [e.payload for e in PreviewEvent.objects.filter(room=room, turn_id=turn_id).order_by("seq")][3:])
    comments = selectors.preview_turn_comments(room_id=room.pk, turn_id=turn_id)
    again = run_turn(manifest=harness_with_history["v1"].manifest, room=dict(room.room_state), comments=comments,
                     backend=ReplayBackend(recorded), turn_id=turn_id)
    assert again.reply == first.reply == GOOD
    assert [e.type for e in again.events] == [e.type for e in first.events]
    (t,) = selectors.preview_transcript(room_id=room.pk)
    assert t["reply"]["text"] == GOOD and [c["name"] for c in t["tools"]] == ["load_skill", "lookup_product"]


# --- over the WebSocket ----------------------------------------------------------------------------------------


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_live_runs_arrive_as_frames_and_a_client_resumes_inside_one(manager, harness_with_history,
                                                                     scripted_model, scripted_endpoint,
                                                                     celery_worker_process):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    login_cookie(manager)
    stalled_price_script(scripted_endpoint, stall_s=1.5)

    async def go():
        first = communicator(room.pk, manager)
        assert (await first.connect(timeout=5))[0]
        frames = [await events_until(first, lambda e: e["type"] == "room_opened")]
        await first.send_json_to({"type": "comment", "text": "how much is #101?"})
        while True:  # raw frames until one carries a run of several tokens (held, then stored together)
            msg = await first.receive_json_from(timeout=30)
            if msg.get("type") != "events":
                continue
            frames.append(msg["events"])
            if sum(e["type"] == "token" for e in msg["events"]) >= 2 and msg["events"][0]["type"] == "token":
                break
        await first.disconnect()
        # the client rendered only the first event of that run: it resumes inside it
        after = frames[-1][0]["seq"]
        second = communicator(room.pk, manager, after=after)
        assert (await second.connect(timeout=5))[0]
        rest = await events_until(second, lambda e: e["type"] == "timings", timeout=30)
        assert await second.receive_nothing(timeout=0.3)
        await second.disconnect()
        return frames, after, rest

    frames, after, rest = asyncio.run(go())
    seen = [e for f in frames for e in f if e["seq"] <= after]
    combined = [e["seq"] for e in seen + rest]
    assert combined == list(range(1, len(combined) + 1))  # no loss, no duplicate, in order
    stored = list(PreviewEvent.objects.filter(room=room).order_by("seq"))
    assert combined == [r.seq for r in stored]
    assert [e["payload"] for e in seen + rest] == [r.payload for r in stored]
    text = "".join(e["payload"]["delta"] for e in seen + rest
                   if e["type"] == "token" and e["payload"]["channel"] == "content")
    assert text.endswith(GOOD)
    assert any(e["type"] == "token" for e in rest)  # still streaming when the client came back
