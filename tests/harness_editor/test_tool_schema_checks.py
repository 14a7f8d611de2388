"""Tool parameter schemas beyond the meta-schema (issue 13, section 3): Draft-07 list-form ``items`` is one error
with a ``prefixItems`` hint, unknown keywords (typos) get a did-you-mean, ``required`` naming an undeclared
property is reported at its own path, and ``parameters: {}`` gets a fix-it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from harness_editor.schemas import ManifestError, load_yaml, parse_manifest
from harness_editor.schemas.tool_schema import LIST_ITEMS_MESSAGE, tool_schema_problems

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
_V1 = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))
GET_CAMPAIGN_STATE = 4  # bound to campaign.state: no argument_map, free to take any parameters


def with_parameters(parameters: Any, tool: int = GET_CAMPAIGN_STATE) -> dict[str, Any]:
    data = copy.deepcopy(_V1)
    data["tools"][tool]["parameters"] = parameters
    return data


def errors_of(data: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        parse_manifest(data)
    except ManifestError as exc:
        return [(e.path, e.message) for e in exc.errors]
    return []


AT = f"tools[{GET_CAMPAIGN_STATE}].parameters"


def test_draft07_list_items_is_one_error_with_the_prefixitems_hint():
    params = {"type": "object", "properties": {"point": {"type": "array", "items": [
        {"type": "number"}, {"type": "number"}, {"type": "strin"}]}}}
    assert errors_of(with_parameters(params)) == [(f"{AT}.properties.point.items", LIST_ITEMS_MESSAGE)]
    assert "prefixItems" in LIST_ITEMS_MESSAGE
    fixed = {"type": "object", "properties": {"point": {"type": "array", "prefixItems": [
        {"type": "number"}, {"type": "number"}], "items": False}}}
    assert errors_of(with_parameters(fixed)) == []


def test_additional_items_is_draft07_too():
    params = {"type": "object", "properties": {"p": {"type": "array", "prefixItems": [{"type": "string"}],
                                                     "additionalItems": False}}}
    ((path, message),) = errors_of(with_parameters(params))
    assert path == f"{AT}.properties.p.additionalItems" and "prefixItems" in message


@pytest.mark.parametrize(("typo", "meant"), [("requried", "required"), ("properites", "properties"),
                                             ("maxLenght", "maxLength"), ("descripton", "description")])
def test_an_unknown_keyword_is_reported_with_did_you_mean(typo, meant):
    params = {"type": "object", "properties": {"q": {"type": "string"}}, typo: ["q"] if meant == "required" else {}}
    if meant in ("maxLength", "description"):
        params = {"type": "object", "properties": {"q": {"type": "string", typo: 3}}}
    errors = errors_of(with_parameters(params))
    path = f"{AT}.{typo}" if meant in ("required", "properties") else f"{AT}.properties.q.{typo}"
    assert [p for p, _ in errors] == [path]
    assert f"unknown JSON Schema keyword {typo!r}; did you mean {meant!r}?" in errors[0][1]


def test_keywords_of_ones_own_and_of_the_whole_vocabulary_pass():
    params = {"type": "object", "x-source": "erp", "$comment": "c", "title": "t", "examples": [{}],
              "properties": {"q": {"type": "string", "x-ui": {"widget": "textarea"}, "format": "email",
                                   "deprecated": False, "readOnly": False, "contentMediaType": "text/plain"},
                             "n": {"type": "integer", "multipleOf": 2, "exclusiveMinimum": 0}},
              "dependentRequired": {"q": ["n"]}, "$defs": {"id": {"type": "string"}}}
    assert errors_of(with_parameters(params)) == []


def test_a_keyword_without_a_near_match_still_says_what_it_is():
    ((_, message),) = errors_of(with_parameters({"type": "object", "properties": {}, "nullable": True}))
    assert message.startswith("unknown JSON Schema keyword 'nullable'") and "did you mean" not in message
    assert "'x-'" in message


def test_property_names_and_values_are_not_keywords():
    params = {"type": "object", "properties": {"requried": {"type": "string", "enum": ["a"],
                                                            "default": "a", "const": "a"}},
              "required": ["requried"]}
    assert errors_of(with_parameters(params)) == []


def test_required_naming_a_missing_property_is_reported_at_its_index():
    params = {"type": "object", "properties": {"order_id": {"type": "string"}, "email": {"type": "string"}},
              "required": ["order_id", "emial"]}
    assert errors_of(with_parameters(params)) == [
        (f"{AT}.required[1]", "required property 'emial' is not in properties; did you mean 'email'? "
                              "(properties: 'order_id', 'email')")]


def test_required_in_nested_objects_and_without_properties():
    params = {"type": "object", "properties": {"address": {"type": "object", "properties": {"zip": {
        "type": "string"}}, "required": ["city"]}}, "required": ["address"]}
    assert [p for p, _ in errors_of(with_parameters(params))] == [f"{AT}.properties.address.required[0]"]
    assert [p for p, _ in errors_of(with_parameters({"type": "object", "required": ["q"]}))] == [f"{AT}.required[0]"]


def test_required_that_another_keyword_can_satisfy_is_fine():
    branches = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    pattern = {"type": "object", "patternProperties": {"^x_": {"type": "string"}}, "required": ["x_1"]}
    additional = {"type": "object", "properties": {}, "additionalProperties": {"type": "string"},
                  "required": ["anything"]}
    for params in (branches, pattern, additional):
        assert errors_of(with_parameters(params)) == [], params


def test_empty_parameters_get_a_fix_it():
    ((path, message),) = errors_of(with_parameters({}))
    assert path == AT and '{"type": "object", "properties": {}}' in message
    assert errors_of(with_parameters({"type": "object", "properties": {}})) == []


def test_a_typo_does_not_hide_the_binding_checks():
    data = copy.deepcopy(_V1)
    data["tools"][0]["parameters"]["requried"] = ["link_id"]
    data["tools"][0]["parameters"]["properties"]["link_id"]["type"] = "string"  # catalog.product_info: integer
    paths = [p for p, _ in errors_of(data)]
    assert paths == ["tools[0].parameters.requried", "tools[0].argument_map.link_id"]


def test_problems_are_in_document_order_and_each_once():
    schema = {"zzz": 1, "type": "object", "properties": {"a": {"type": "int"}}, "required": ["b"], "aaa": 2}
    problems = tool_schema_problems(schema)
    assert [p for p, _ in problems] == [("zzz",), ("properties", "a", "type"), ("required", 0), ("aaa",)]
    assert len(problems) == len(set(problems))
