"""Recorded turns as canonical samples (training_jobs.hsa.recorded): a turn is replayed through the one engine
from its stored events and kept only when the judge's rules agree with the reference policy's gold turn."""

from __future__ import annotations

import copy
import json

import pytest

from streams.engine.turn import ScriptedBackend, run_turn
from training_jobs.hsa.recorded import RecordedTurn, recorded_samples
from training_jobs.hsa.samples import LoadSkill, Reply, Retry, ToolCall, target_problems
from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest

PRICE_102 = "Barrier Repair Ceramide Moisturizer is $29 right now, down from $39."


def _call(name, args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def record(outputs, text="how much is #102?", *, room=None, comments=None, manifest=None, **kw) -> RecordedTurn:
    """Run a turn with scripted model outputs and keep its events as the console stores them."""
    manifest = manifest or load_tiny_manifest()
    room = room or load_demo_room()
    comments = comments or [{"viewer": "max", "viewer_id": "v1", "text": text}]
    events = []
    run_turn(manifest=manifest, room=copy.deepcopy(room), comments=comments, backend=ScriptedBackend(outputs),
             emit=lambda e: events.append(e.model_dump(mode="json")))
    return RecordedTurn(id=kw.pop("id", "room-1:turn-1"), manifest=manifest, room=room, comments=comments,
                        events=events, source="preview:room-1", **kw)


RIGHT = [_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 102}), PRICE_102]


def test_a_right_turn_becomes_a_sample_with_the_replayed_target():
    turn = record(RIGHT)
    (sample,), stats = recorded_samples([turn])
    assert stats.to_dict() == {"considered": 1, "kept": 1, "rejected": {}, "examples": []}
    assert sample.id == "recorded-room-1:turn-1" and sample.source == "preview:room-1"
    assert [type(s) for s in sample.target] == [LoadSkill, ToolCall, Reply]
    assert sample.target[1].name == "lookup_product" and sample.target[1].arguments == {"link_id": 102}
    assert sample.target[1].result["price"] == 29 and sample.reply == PRICE_102
    assert sample.comments == ({"viewer": "max", "text": "how much is #102?"},)
    assert not target_problems(sample.manifest, sample, full=True)


def test_a_product_named_in_words_is_read_from_the_comment():
    (sample,), _ = recorded_samples([record(RIGHT, text="how much is the moisturizer?")])
    assert sample.target[1].arguments == {"link_id": 102}


def test_a_retry_the_hooks_asked_for_is_kept_as_a_retry_step():
    turn = record([_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 102}),
                   f"**{PRICE_102}**", PRICE_102])
    (sample,), _ = recorded_samples([turn])
    assert [type(s) for s in sample.target] == [LoadSkill, ToolCall, Retry, Reply]


@pytest.mark.parametrize("outputs,text,reason", [
    ([_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 101}),
      "Sorry, please check the card for the price."], "how much is #102?", "wrong_arguments"),
    # the serum's price for a question about #102: the hooks (streams.engine.rules) retried it to the fallback
    ([_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 101}),
      "HydraGlow Hyaluronic Serum is $24.9 right now."], "how much is #102?", "not_ok"),
    ([_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 102}),
      "It is on sale right now, grab it."], "how much is #102?", "missing_fact"),
    (RIGHT, "hello everyone, great show", "no_reference"),
    (RIGHT, "is the serum or the moisturizer cheaper?", "no_reference"),
    (["**bold**"] * 8, "how much is #102?", "not_ok"),
])
def test_wrong_or_unreadable_turns_are_left_out_with_their_reason(outputs, text, reason):
    samples, stats = recorded_samples([record(outputs, text=text)])
    assert samples == [] and stats.kept == 0
    assert stats.rejected == {reason: 1} and stats.examples[0]["reason"] == reason


def test_batched_turns_faulted_turns_and_changed_rooms_are_left_out():
    two = [{"viewer": "max", "text": "how much is #102?"}, {"viewer": "ana", "text": "price of #101?"}]
    batched = record(RIGHT, comments=two, id="r:batched")
    faulted = record(RIGHT, faults={"lookup_product": "timeout"}, id="r:faulted")
    changed = record(RIGHT, id="r:changed")
    room = copy.deepcopy(changed.room)
    next(p for p in room["products"] if p["link_id"] == 102)["price"] = 25
    changed = RecordedTurn(**{**changed.__dict__, "room": room})  # the room changed after it was recorded
    samples, stats = recorded_samples([batched, faulted, changed, record(RIGHT, id="r:ok")])
    assert [s.id for s in samples] == ["recorded-r:ok"]
    assert stats.rejected == {"several_comments": 1, "tool_faults": 1, "replay_differs": 1}
    assert stats.considered == 4 and stats.kept == 1
