"""Tool annotations (MCP's hints) and output schemas in the manifest: stored versions keep their bytes and hashes,
new fields round-trip and are validated at their paths, the effect the console reads from them, the importer
carries and reports them, the diff shows them, and the live-approval setting. Pure Python: no Django, no database."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest

from harness_editor.diff import diff_manifests
from harness_editor.importers import import_tools
from harness_editor.schemas import (
    ManifestError,
    content_hash,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    manifest_to_json,
    manifest_to_yaml,
    parse_manifest,
)
from harness_editor.schemas.manifest import Tool
from harness_editor.schemas.tool_effects import BUILTIN_EFFECTS, tool_effect

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
# sha256 of each committed harness's canonical JSON before tools had annotations (computed at the commit before).
HASHES_BEFORE = {
    "order_desk": "d9cea923486d4164f9c1b429f72a2cbfc8bdf22217490a1e12cf6a1e857689ab",
    "skincare_v1": "5a3d59aecf2da51c7a4fe8d97a05929cb89ffeaa79cfb996457c6c0f9b60fcef",
    "tiny_room": "e6a66f4d5079c89b1578d2f522c0759ecf5df62efdb3eeea39d5feb632f791e0",
}


def _desk() -> dict:
    return copy.deepcopy(load_yaml((DEMO / "order_desk.yaml").read_text(encoding="utf-8")))


def _errors(data: dict) -> dict[str, str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(data)
    return {e.path: e.message for e in caught.value.errors}


@pytest.mark.parametrize("name", sorted(HASHES_BEFORE))
def test_stored_versions_keep_their_canonical_json_and_hash(name):
    m = manifest_from_yaml((DEMO / f"{name}.yaml").read_text(encoding="utf-8"))
    text = manifest_to_json(m)
    assert "annotations" not in text and "output_schema" not in text and "destructive_tools" not in text
    assert content_hash(m) == HASHES_BEFORE[name] == hashlib.sha256(text.encode()).hexdigest()


def test_annotations_and_output_schema_round_trip():
    d = _desk()
    d["tools"][0]["annotations"] = {"title": "Look up an order", "read_only": True, "open_world": False}
    d["tools"][0]["output_schema"] = {"type": "object", "properties": {"status": {"type": "string"}}}
    d["tools"][1]["annotations"] = {"destructive": False, "idempotent": True}
    d["constraints"]["destructive_tools_need_approval"] = True
    m = parse_manifest(d)
    assert m.tools[0].annotations.read_only is True and m.tools[0].annotations.destructive is None
    text = manifest_to_json(m)
    # only what was stated is written down: "says nothing" stays apart from "says false"
    assert '"annotations":{"title":"Look up an order","read_only":true,"open_world":false}' in text
    assert '"annotations":{"destructive":false,"idempotent":true}' in text
    assert '"destructive_tools_need_approval":true' in text
    assert manifest_to_json(manifest_from_json(text)) == text
    assert manifest_to_json(manifest_from_yaml(manifest_to_yaml(m))) == text
    assert content_hash(m) != HASHES_BEFORE["order_desk"]


def test_bad_annotations_and_output_schemas_are_located():
    d = _desk()
    d["tools"][0]["annotations"] = {"readOnlyHint": True, "destructive": "yes"}
    d["tools"][1]["output_schema"] = {"type": "object", "properties": {"x": {"type": "strin"}}}
    d["tools"][2]["output_schema"] = {"type": "object", "requried": ["x"]}
    errors = _errors(d)
    assert "tools[0].annotations.readOnlyHint" in errors  # MCP's spelling is the importer's to translate
    assert "tools[0].annotations.destructive" in errors
    assert "'strin' is not valid" in errors["tools[1].output_schema.properties.x.type"]
    assert "did you mean 'required'" in errors["tools[2].output_schema.requried"]


def _tool(binding=None, **annotations) -> Tool:
    return Tool.model_validate({"name": "t", "description": "d", "parameters": {"type": "object"},
                                "binding": binding, **({"annotations": annotations} if annotations else {})})


MCP = {"kind": "mcp", "server": "git"}


@pytest.mark.parametrize(("tool", "effect", "source"), [
    (_tool(MCP), "unknown", "none"),  # MCP: no hints = not read-only, may be destructive
    (_tool(MCP, title="Status"), "unknown", "none"),  # a title says nothing about effects
    (_tool(MCP, read_only=True), "read_only", "annotations"),
    (_tool(MCP, read_only=False), "destructive", "annotations"),  # destructiveHint defaults to true
    (_tool(MCP, destructive=True), "destructive", "annotations"),
    (_tool(MCP, destructive=False), "writes", "annotations"),
    (_tool(MCP, read_only=True, destructive=True), "read_only", "annotations"),  # MCP: destructive only if not RO
    (_tool({"kind": "fixture", "cases": []}), "read_only", "binding"),
    (_tool({"kind": "http", "endpoint": "orders", "method": "GET"}), "read_only", "binding"),
    (_tool({"kind": "http", "endpoint": "orders", "method": "POST"}), "unknown", "none"),
    (_tool({"kind": "http", "endpoint": "orders", "method": "GET"}, destructive=True), "destructive",
     "annotations"),  # what the tool says wins over the method
    (_tool("catalog.stock"), "read_only", "binding"),
    (_tool("coupons.issue"), "writes", "binding"),
    (_tool(None), "unknown", "none"),
])
def test_tool_effect(tool, effect, source):
    got = tool_effect(tool)
    assert (got.effect, got.source) == (effect, source)
    assert got.may_destroy == (effect in ("destructive", "unknown"))


def test_every_built_in_binding_has_a_known_effect():
    from streams.bindings import BINDINGS

    assert set(BUILTIN_EFFECTS) == set(BINDINGS)


GIT_TOOLS = {"tools": [
    {"name": "git_status", "title": "Git status", "description": "Working tree status",
     "inputSchema": {"type": "object", "properties": {"repo_path": {"type": "string"}}, "required": ["repo_path"]},
     "annotations": {"readOnlyHint": True, "idempotentHint": "yes", "colour": "red"},
     "outputSchema": {"type": "object", "properties": {"clean": {"type": "boolean"}}}},
    {"name": "git_reset", "description": "Unstage all staged changes",
     "inputSchema": {"type": "object", "properties": {"repo_path": {"type": "string"}}},
     "annotations": {"title": "Reset", "readOnlyHint": False, "destructiveHint": True},
     "outputSchema": {"type": "object", "minProperties": -1}},
    {"name": "git_log", "description": "Commit log", "inputSchema": {"type": "object", "properties": {}}},
]}


def test_the_importer_carries_and_reports_mcp_hints():
    result = import_tools(GIT_TOOLS, source="mcp")
    status, reset, log = result.tools
    assert status["annotations"] == {"title": "Git status", "read_only": True}
    assert status["output_schema"] == {"type": "object", "properties": {"clean": {"type": "boolean"}}}
    assert reset["annotations"] == {"title": "Reset", "read_only": False, "destructive": True}
    assert "output_schema" not in reset and "annotations" not in log and "output_schema" not in log
    changes = {(c.path, c.kind): c.message for c in result.changes}
    assert changes[("tools[0].annotations", "annotated")] == \
        "annotations carried: title: 'Git status', read_only: true"
    assert changes[("tools[0].outputSchema", "annotated")] == "output schema carried (output_schema)"
    assert "is not true or false" in changes[("tools[0].annotations.idempotentHint", "dropped_key")]
    assert ("tools[0].annotations.colour", "dropped_key") in changes
    assert "the harness would refuse it" in changes[("tools[1].outputSchema", "dropped_key")]
    assert not any(c.tool == 2 and c.kind in ("annotated", "dropped_key") for c in result.changes)
    # what was carried is a valid manifest tool, and reads as the server said
    effects = [tool_effect(Tool.model_validate(t)).effect for t in result.tools]
    assert effects == ["read_only", "destructive", "unknown"]


def test_the_diff_shows_annotation_and_output_schema_changes():
    base = _desk()
    base["tools"][0]["binding"] = {"kind": "mcp", "server": "orders"}  # a fixture table is read-only anyway
    old = parse_manifest(base)
    d = copy.deepcopy(base)
    d["tools"][0]["annotations"] = {"read_only": True}
    d["tools"][1]["output_schema"] = {"type": "object"}
    d["constraints"]["destructive_tools_need_approval"] = True
    new = parse_manifest(d)
    changes = {c.path: c for c in diff_manifests(old, new).changes}
    name0, name1 = d["tools"][0]["name"], d["tools"][1]["name"]
    ann = changes[f"tools[{name0}].annotations.read_only"]
    assert (ann.before, ann.after, ann.breaking) == (None, True, False)
    assert "unknown: may be destructive → read-only" in ann.summary
    assert changes[f"tools[{name1}].output_schema"].summary == f"tool '{name1}' output schema added"
    assert changes["constraints.destructive_tools_need_approval"].after is True
    # and back: a tool that stops saying it is read-only is reported too
    back = {c.path: c for c in diff_manifests(new, old).changes}
    assert "read-only → unknown: may be destructive" in back[f"tools[{name0}].annotations.read_only"].summary
