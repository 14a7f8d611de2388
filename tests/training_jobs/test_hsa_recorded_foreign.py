"""Recorded turns of a harness the reference policy does not know (the order desk, fixture- and http-bound tools):
kept when they are right by the one set of rules alone (training_jobs.hsa.recorded: every call valid and answered
without a fault, no problem for the rules judge, the harness's hooks and limits accept the turn), left out with
their reason otherwise; open bindings are never called again to replay a turn."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness_editor.schemas import manifest_from_yaml, parse_manifest
from streams.engine.client import ChatDelta, NativeToolCall
from streams.engine.turn import ScriptedBackend, run_turn
from streams.tool_bindings import EMPTY_RUNTIME, ToolRuntime
from streams.tool_bindings.http import HttpEndpoint
from training_jobs.hsa.recorded import RecordedTurn, recorded_samples, reference_applies
from training_jobs.hsa.samples import LoadSkill, Reply, Retry, ToolCall, target_problems
from training_jobs.tiny_model.gold import load_tiny_manifest

ORDER_DESK = Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / "order_desk.yaml"
WHERE_IS_A1002 = ("Order A1002 has shipped with ParcelCo, tracking number PC7781234. The latest scan says it "
                  "arrived at the Oakland delivery hub.")


def _call(name, args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture(scope="module")
def desk():
    return manifest_from_yaml(ORDER_DESK.read_text(encoding="utf-8"))


def record(manifest, outputs, text="Hi, where is my order A1002?", *, comments=None, tools=EMPTY_RUNTIME,
           **kw) -> RecordedTurn:
    """Run a turn with scripted model outputs and keep its events as the console stores them."""
    comments = comments or [{"viewer": "dana", "viewer_id": "v1", "text": text}]
    events = []
    run_turn(manifest=manifest, room={}, comments=copy.deepcopy(comments), backend=ScriptedBackend(outputs),
             tools=tools, emit=lambda e: events.append(e.model_dump(mode="json")))
    return RecordedTurn(id=kw.pop("id", "run-1:turn-1"), manifest=manifest, room={}, comments=comments,
                        events=events, source="run:run-1", **kw)


STATUS = _call("load_skill", {"skill_id": "order_status"})
LOOKUP_AND_TRACK = _call("lookup_order", {"order_id": "A1002"}) + _call("track_shipment", {"order_id": "A1002"})
RIGHT = [STATUS, LOOKUP_AND_TRACK, WHERE_IS_A1002]


def test_the_reference_policy_applies_to_the_live_room_only(desk):
    assert reference_applies(load_tiny_manifest())
    assert not reference_applies(desk)


def test_a_right_turn_of_a_foreign_harness_becomes_a_sample(desk):
    (sample,), stats = recorded_samples([record(desk, RIGHT)])
    assert stats.to_dict() == {"considered": 1, "kept": 1, "rejected": {}, "examples": []}
    assert sample.id == "recorded-run-1:turn-1" and sample.source == "run:run-1"
    assert [type(s) for s in sample.target] == [LoadSkill, ToolCall, ToolCall, Reply]
    assert [s.name for s in sample.tool_calls()] == ["lookup_order", "track_shipment"]
    assert sample.target[2].result["tracking_number"] == "PC7781234" and sample.reply == WHERE_IS_A1002
    assert sample.comments == ({"viewer": "dana", "text": "Hi, where is my order A1002?"},)
    assert sample.meta["judged_by"] == "rules" and sample.meta["skill"] == "order_status"
    assert target_problems(desk, sample, full=True) == []


def test_a_retry_the_hooks_asked_for_is_kept_as_a_retry_step(desk):
    promise = WHERE_IS_A1002 + " It should arrive by Friday."  # the order desk's banned phrase
    (sample,), _ = recorded_samples([record(desk, [STATUS, LOOKUP_AND_TRACK, promise, WHERE_IS_A1002])])
    assert [type(s) for s in sample.target] == [LoadSkill, ToolCall, ToolCall, Retry, Reply]


def test_several_comments_answered_together_are_judged_like_one(desk):
    two = [{"viewer": "dana", "text": "where is my order A1002?"}, {"viewer": "dana", "text": "has it shipped?"}]
    (sample,), _ = recorded_samples([record(desk, RIGHT, comments=two)])
    assert [c["text"] for c in sample.comments] == ["where is my order A1002?", "has it shipped?"]


@pytest.mark.parametrize("outputs,reason", [
    # a call its tool's schema refuses, even when the model recovers from it
    ([STATUS, _call("lookup_order", {"order_id": 1002}), LOOKUP_AND_TRACK, WHERE_IS_A1002], "invalid_tool_call"),
    # a binding's own fault: no fixture knows this order
    ([STATUS, _call("lookup_order", {"order_id": "A9999"}), "I could not find order A9999, could you check it?"],
     "tool_error"),
    # a figure no tool result backs: the rules judge finds it though the order desk's hooks let it through
    ([STATUS, LOOKUP_AND_TRACK, "Order A1002 has shipped with ParcelCo, tracking number PC7781234. The refund of "
      "99 dollars is on its way."], "inaccurate"),
    # no reply skill loaded: the harness's hooks retry it to the fallback line
    ([LOOKUP_AND_TRACK, WHERE_IS_A1002], "not_ok"),
])
def test_wrong_turns_of_a_foreign_harness_are_left_out_with_their_reason(desk, outputs, reason):
    samples, stats = recorded_samples([record(desk, outputs)])
    assert samples == [] and stats.kept == 0
    assert stats.rejected == {reason: 1}, stats.examples
    assert stats.examples[0]["reason"] == reason and stats.examples[0]["detail"]


def test_a_turn_beyond_the_harness_limits_is_not_representable(desk):
    """A turn recorded under a looser version of the harness is judged by the harness it is a sample of."""
    turn = record(desk, RIGHT)
    data = desk.model_dump(mode="json")
    data["constraints"]["max_tool_rounds"] = 2  # the turn made three rounds: load_skill, then two calls
    tight = RecordedTurn(**{**turn.__dict__, "manifest": parse_manifest(data)})
    samples, stats = recorded_samples([tight, turn])
    assert [s.id for s in samples] == ["recorded-run-1:turn-1"]
    assert stats.rejected == {"not_representable": 1}, stats.examples
    assert "max_tool_rounds" in stats.examples[0]["detail"]


def _native(*calls):
    """One response of native tool calls whose ids start again at call_0 (as some servers number them)."""
    return [ChatDelta(tool_calls=tuple(NativeToolCall(i, f"call_{i}", name, json.dumps(args))
                                       for i, (name, args) in enumerate(calls))), ChatDelta(finish_reason="tool_calls")]


def test_call_ids_reused_across_requests_replay_each_answer_with_its_own_call(desk):
    cancelled = "Order A1003 is cancelled. The refund of 54 dollars goes to your original payment method."
    who = {"order_id": "A1003", "email": "dana@example.com", "postal_code": "94110"}
    turn = record(desk, [_call("load_skill", {"skill_id": "cancellations"}),
                         _native(("verify_identity", who), ("lookup_order", {"order_id": "A1003"})),
                         _native(("cancel_order", {"order_id": "A1003", "reason": "ordered_by_mistake"})),
                         cancelled], text="Please cancel A1003. dana@example.com, 94110.")
    ids = [e["call_id"] for e in turn.events if e["type"] == "tool_call"]
    assert len(ids) > len(set(ids))  # the last request's call_0 is not the first's
    (sample,), stats = recorded_samples([turn])
    assert [s.name for s in sample.tool_calls()] == ["verify_identity", "lookup_order", "cancel_order"]
    assert sample.tool_calls()[2].result["refund_amount"] == 54.0 and sample.reply == cancelled


def test_injected_faults_are_left_out(desk):
    faulted = record(desk, RIGHT, faults={"track_shipment": "timeout"}, id="r:faulted")
    samples, stats = recorded_samples([faulted, record(desk, RIGHT, id="r:ok")])
    assert [s.id for s in samples] == ["recorded-r:ok"] and stats.rejected == {"tool_faults": 1}


def test_a_scenario_fixture_answers_the_replay_as_it_answered_the_run(desk):
    """A scenario's own fixtures are not stored with the turn: the replay answers from what was recorded."""
    a7777 = {"order_id": "A7777", "status": "processing", "items": [{"sku": "SCARF-WOOL-GRY", "quantity": 1}],
             "total": 35.0, "ship_to_city": "Denver"}
    runtime = ToolRuntime(fixtures={"lookup_order": [{"when": {"order_id": "A7777"}, "result": a7777}]})
    turn = record(desk, [STATUS, _call("lookup_order", {"order_id": "A7777"}),
                         "Order A7777 is still processing, so it has not shipped yet."],
                  text="has A7777 shipped?", tools=runtime)
    (recorded,) = [e for e in turn.events if e["type"] == "tool_result" and e["name"] == "lookup_order"]
    assert recorded["result"]["ship_to_city"] == "Denver"
    (sample,), stats = recorded_samples([turn])
    assert sample.tool_calls()[0].result == a7777 and stats.kept == 1



def test_an_http_bound_tool_is_not_called_again_to_replay_its_turn(desk, upstream):
    data = desk.model_dump(mode="json")
    tool = next(t for t in data["tools"] if t["name"] == "lookup_order")
    tool["binding"] = {"kind": "http", "endpoint": "orders", "path": "/orders/{order_id}", "result": "data.order"}
    manifest = parse_manifest(data)
    runtime = ToolRuntime(http_endpoints={"orders": HttpEndpoint(name="orders", base_url=upstream.base_url)})
    turn = record(manifest, [STATUS, _call("lookup_order", {"order_id": "A1002"}), "Order A1002 has shipped."],
                  tools=runtime)
    assert upstream.paths() == ["/api/orders/A1002"]
    (sample,), stats = recorded_samples([turn])
    assert stats.kept == 1 and sample.tool_calls()[0].result["status"] == "shipped"
    assert upstream.paths() == ["/api/orders/A1002"]  # once, when the turn ran; never for the replay
    assert sample.manifest is manifest  # the sample keeps the harness's own binding
