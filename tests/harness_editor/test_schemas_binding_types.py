"""Tool parameter types against binding parameter types: anyOf/oneOf/allOf/$ref cannot smuggle in a type the
binding cannot take (every branch is checked, errors point at the branch), and a digit string is accepted for
an integer binding parameter only where the binding declares (and really does) coerce digit strings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_editor.schemas import ManifestError, load_yaml, parse_manifest
from streams.bindings import BINDINGS
from streams.engine.hooks import validate_arguments
from streams.engine.turn import ScriptedBackend, run_turn

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
_V1 = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))
DIGITS = {"type": "string", "pattern": "^[0-9]+$"}


def v1_with(tool_index: int, prop: str, schema: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(_V1)
    data["tools"][tool_index]["parameters"]["properties"][prop] = schema
    return data


def errors_of(data: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        parse_manifest(data)
    except ManifestError as exc:
        return [(e.path, e.message) for e in exc.errors]
    return []


def room() -> dict[str, Any]:
    return yaml.safe_load((DEMO / "room.yaml").read_text(encoding="utf-8"))


# --- the loophole: combinators --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_a_string_branch_for_a_string_binding_parameter_via_anyof_is_rejected_with_the_branch_path(key):
    # tools[3] get_shipping_policy: region is a *string* binding parameter; an integer branch sneaks in.
    data = v1_with(3, "region", {key: [{"type": "string"}, {"type": "integer"}]})
    errs = errors_of(data)
    assert [p for p, _ in errs] == [f"tools[3].parameters.properties.region.{key}[1].type"]
    assert "admits integer through this branch" in errs[0][1] and "needs string" in errs[0][1]


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_a_number_branch_for_an_integer_parameter_is_rejected(key):
    data = v1_with(0, "link_id", {key: [{"type": "integer"}, {"type": "number"}]})
    assert errors_of(data) == [(f"tools[0].parameters.properties.link_id.{key}[1].type",
                                "tool parameter 'link_id' admits number through this branch, but binding "
                                "'catalog.product_info' parameter 'link_id' needs integer; every branch must fit "
                                "the binding")]


def test_every_bad_branch_is_reported_nested_branches_and_enum_branches_too():
    schema = {"anyOf": [{"type": "integer"}, {"oneOf": [{"type": "boolean"}, {"enum": [1.5]}]},
                        {"type": "string"}]}
    errs = dict(errors_of(v1_with(0, "link_id", schema)))
    base = "tools[0].parameters.properties.link_id"
    assert set(errs) == {f"{base}.anyOf[1].oneOf[0].type", f"{base}.anyOf[1].oneOf[1]", f"{base}.anyOf[2].type"}
    assert "digits-only pattern" in errs[f"{base}.anyOf[2].type"]  # the hint: link_id coerces digit strings


def test_allof_and_local_refs_are_followed():
    data = v1_with(3, "region", {"allOf": [{"type": "string"}, {"$ref": "#/$defs/num"}]})
    data["tools"][3]["parameters"]["$defs"] = {"num": {"type": "number"}}
    errs = errors_of(data)
    assert [p for p, _ in errs] == ['tools[3].parameters.properties.region.allOf[1]["$ref"].type']


def test_a_nested_argument_path_gets_the_nested_branch_path():
    data = copy.deepcopy(_V1)
    data["tools"][0]["parameters"] = {"type": "object", "properties": {"args": {"type": "object", "properties": {
        "link_id": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}}}}}
    data["tools"][0]["argument_map"] = {"link_id": "args.link_id"}
    assert [p for p, _ in errors_of(data)] == [
        "tools[0].parameters.properties.args.properties.link_id.anyOf[1].type"]


def test_compatible_unions_are_fine():
    assert errors_of(v1_with(0, "link_id", {"anyOf": [{"type": "integer", "minimum": 1}, {"enum": [101, 102]}]})) == []
    assert errors_of(v1_with(3, "region", {"oneOf": [{"type": "string"}, {"const": "Alaska"}]})) == []
    # a branch that names no type is not judged (as a plain untyped parameter is not)
    assert errors_of(v1_with(3, "region", {"anyOf": [{"type": "string"}, {"description": "anything"}]})) == []


# --- digit strings for coercing integer parameters ----------------------------------------------------------------


def test_coercion_flags_are_declared_where_the_implementation_uses_as_int():
    flagged = {(b.id, p.name) for b in BINDINGS.values() for p in b.params.values() if p.coerces_digit_strings}
    assert flagged == {("catalog.product_info", "link_id"), ("catalog.stock", "link_id"),
                       ("room.pin_product", "link_id"), ("room.pin_product", "duration_s")}
    for b in BINDINGS.values():
        for p in b.params.values():
            assert not p.coerces_digit_strings or p.json_type == "integer"


@pytest.mark.parametrize("binding_id,param", [("catalog.product_info", "link_id"), ("catalog.stock", "link_id"),
                                              ("room.pin_product", "link_id"), ("room.pin_product", "duration_s")])
def test_flagged_bindings_really_coerce_digit_strings(binding_id, param):
    b = BINDINGS[binding_id]
    kwargs = {"link_id": 102} if "link_id" in b.params else {}
    if param == "duration_s":
        kwargs["duration_s"] = 30
    as_int = b.func(room(), **kwargs)
    as_str = b.func(room(), **{**kwargs, param: str(kwargs[param])})
    assert "error" not in as_int and as_str == as_int
    assert "error" in b.func(room(), **{**kwargs, param: "10x"})  # not digits: refused by the binding


@pytest.fixture
def non_coercing_binding(monkeypatch):
    """A binding with an integer parameter that does NOT coerce digit strings."""
    from streams.bindings import _binding

    def take_count(room: dict, count: int) -> dict[str, Any]:
        return {"count": count} if isinstance(count, int) else {"error": "count must be an integer"}

    from harness_editor.schemas.bindings import BUILTIN_BINDINGS, BindingSignature

    implemented = _binding("test.count", "Counts.", take_count)
    monkeypatch.setitem(BINDINGS, "test.count", implemented)
    monkeypatch.setitem(BUILTIN_BINDINGS, "test.count", BindingSignature("test.count", "Counts.", implemented.params))
    data = copy.deepcopy(_V1)
    data["tools"].append({"name": "count_things", "description": "Count.", "binding": "test.count",
                        "parameters": {"type": "object", "properties": {"count": {"type": "integer"}}},
                        "argument_map": {"count": "count"}})
    return data


def test_a_digit_string_is_refused_for_a_parameter_that_does_not_coerce(non_coercing_binding):
    data = non_coercing_binding
    assert errors_of(data) == []
    for schema, path in ((dict(DIGITS), "tools[6].argument_map.count"),
                         ({"anyOf": [dict(DIGITS), {"type": "integer"}]},
                          "tools[6].parameters.properties.count.anyOf[0].type")):
        data["tools"][6]["parameters"]["properties"]["count"] = schema
        errs = errors_of(data)
        assert [p for p, _ in errs] == [path]
        assert "needs integer" in errs[0][1] and "digits-only" not in errs[0][1]


def test_digit_string_schema_accepted_only_for_coercing_parameters():
    assert errors_of(v1_with(0, "link_id", dict(DIGITS))) == []  # lookup_product -> product_info.link_id
    pin = v1_with(5, "duration_s", {**DIGITS, "pattern": r"^\d{1,4}$"})
    pin["tools"][5]["argument_map"]["duration_s"] = "duration_s"
    assert errors_of(pin) == []
    assert errors_of(v1_with(0, "link_id", {"type": "string", "enum": ["101", "102"]})) == []
    assert errors_of(v1_with(0, "link_id", {"anyOf": [dict(DIGITS), {"type": "integer"}]})) == []
    assert errors_of(v1_with(0, "link_id", {"pattern": "^[0-9]+$", "anyOf": [{"type": "string"},
                                                                          {"type": "integer"}]})) == []
    # a string that is not held to digits is still refused, at the argument_map entry as before
    errs = errors_of(v1_with(0, "link_id", {"type": "string"}))
    assert [p for p, _ in errs] == ["tools[0].argument_map.link_id"]
    assert "has type string but binding 'catalog.product_info' parameter 'link_id' needs integer" in errs[0][1]
    assert "digits-only pattern" in errs[0][1]
    for pattern in ("^[0-9]*$", "[0-9]+", "^[a-z0-9]+$", "^[0-9]{0,3}$"):
        assert errors_of(v1_with(0, "link_id", {"type": "string", "pattern": pattern})), pattern
    assert errors_of(v1_with(0, "link_id", {"type": "string", "enum": ["101", "x"]}))
    # a string binding parameter is unaffected; so is any non-integer type for a coercing one
    assert errors_of(v1_with(0, "link_id", {"type": "number"}))


def test_a_digit_string_call_reaches_the_binding_through_the_engine():
    """The turn engine validates the call against the digit-string schema and the binding coerces it: the
    tool result equals the integer call's."""
    from harness_editor.schemas import parse_manifest as parse

    data = v1_with(0, "link_id", {**DIGITS, "description": "The link id, as digits."})
    manifest = parse(data)
    tool = manifest.tool("lookup_product")
    assert validate_arguments(tool, {"link_id": "102"}) == []
    assert validate_arguments(tool, {"link_id": 102})  # the schema now says string
    call = '<tool_call>{"name": "lookup_product", "arguments": {"link_id": "102"}}</tool_call>'
    result = run_turn(manifest=manifest, room=room(), comments=[{"viewer": "a", "text": "price of 102?"}],
                      backend=ScriptedBackend([call, "Done."]), deadline_s=10)
    shown = [e for e in result.events if e.type == "tool_result" and e.name == "lookup_product"]
    assert shown and shown[0].error is None
    assert shown[0].result == BINDINGS["catalog.product_info"].func(room(), link_id=102)
