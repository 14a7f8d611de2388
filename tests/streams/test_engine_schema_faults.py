"""A stored tool schema that cannot be run safely is a tool fault in the turn (issue 26, points 1-3): the call is
refused with ``schema_fault`` before its binding runs, nothing is fetched, no exception escapes the turn, and the
turn goes on. The same engine runs preview and live turns in the interactive worker."""

from __future__ import annotations

import json
import time

import pytest

from harness_editor.schemas import manifest_to_json, parse_manifest
from harness_editor.schemas.tool_schema import without_schema_lint
from streams.engine.turn import run_turn
from tests.harness_editor.test_safe_schema import _laughs
from tests.streams.scripted_endpoint import native_calls, reply

COMMENT = [{"viewer": "amy", "text": "how much is #101?"}]


def _stored_with(manifest, note_schema: dict):
    """The manifest as a version saved before the save-time checks could hold it (loaded as stored versions are),
    its product tool with an optional ``note`` parameter of ``note_schema``."""
    data = json.loads(manifest_to_json(manifest))
    tool = next(t for t in data["tools"] if t["name"] == "lookup_product")
    tool["parameters"] = {**tool["parameters"], **note_schema.pop("_root", {})}
    tool["parameters"]["properties"] = {**tool["parameters"]["properties"], "note": note_schema}
    with without_schema_lint():
        return parse_manifest(data)


def _turn(scripted_endpoint, engine_client, manifest, room):
    scripted_endpoint.add(native_calls(("lookup_product", {"link_id": 101, "note": "price"})),
                          reply("Let me check that for you in a moment, stay with us!"))
    start = time.monotonic()
    result = run_turn(manifest=manifest, room=room, comments=COMMENT, backend=engine_client())
    return result, time.monotonic() - start


def _refused(result, scripted_endpoint):
    call = next(e for e in result.events if e.type == "tool_call")
    seen = json.loads(next(m for m in scripted_endpoint.requests[1]["messages"] if m["role"] == "tool")["content"])
    ran = [e for e in result.events if e.type == "tool_result" and e.error is None and e.name == "lookup_product"]
    tool_args = [e for e in result.events if e.type == "hook_result" and e.kind == "tool_args" and not e.passed]
    return call, seen, ran, tool_args


@pytest.mark.parametrize("where", ["remote", "file"])
def test_a_stored_reference_outside_the_schema_is_refused_without_a_request(
        where, scripted_endpoint, engine_client, engine_manifest, engine_room, upstream, tmp_path) -> None:
    secret = tmp_path / "key.json"
    secret.write_text('{"enum": ["TOP-SECRET-KEY-MATERIAL"]}', encoding="utf-8")
    ref = f"{upstream.base_url}/link.json" if where == "remote" else secret.as_uri()
    manifest = _stored_with(engine_manifest, {"$ref": ref})
    result, took = _turn(scripted_endpoint, engine_client, manifest, engine_room)
    call, seen, ran, tool_args = _refused(result, scripted_endpoint)
    assert not call.valid and "schema is at fault" in call.error
    assert seen["code"] == "schema_fault" and "nothing is fetched" in seen["error"]
    assert ran == [] and tool_args == []  # the binding never ran; the model is not blamed for the harness
    assert upstream.requests == []
    assert "TOP-SECRET" not in json.dumps([e.model_dump(mode="json") for e in result.events])
    assert took < 10


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/nowhere"},
    {"type": "string", "pattern": "[0-9"},
    {"$ref": "#/$defs/d0", "_root": {"$defs": _laughs()["$defs"]}},
], ids=["dangling", "invalid-pattern", "exponential"])
def test_a_stored_schema_that_cannot_run_is_a_tool_fault_and_the_turn_goes_on(
        schema, scripted_endpoint, engine_client, engine_manifest, engine_room) -> None:
    manifest = _stored_with(engine_manifest, dict(schema))
    result, took = _turn(scripted_endpoint, engine_client, manifest, engine_room)
    call, seen, ran, _ = _refused(result, scripted_endpoint)
    assert seen["code"] == "schema_fault" and not call.valid and ran == []
    assert len(scripted_endpoint.requests) >= 2 and result.reply  # the model was asked again and the turn ended
    assert took < 10


def test_a_catastrophic_pattern_on_model_output_does_not_stall_the_turn(
        scripted_endpoint, engine_client, engine_manifest, engine_room) -> None:
    manifest = _stored_with(engine_manifest, {"type": "string", "pattern": "^(a+)+$"})
    scripted_endpoint.add(native_calls(("lookup_product", {"link_id": 101, "note": "a" * 40 + "!"})),
                          reply("Let me check that for you in a moment, stay with us!"))
    start = time.process_time()
    result = run_turn(manifest=manifest, room=engine_room, comments=COMMENT, backend=engine_client())
    assert time.process_time() - start < 5  # Python's re: hours at 40 characters
    call = next(e for e in result.events if e.type == "tool_call")
    assert not call.valid and "does not match" in call.error
