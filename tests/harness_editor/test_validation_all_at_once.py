"""Validation that tells everything at once (issue 13, section 3): one pass reports the structural errors, the
control characters and the semantic errors of every part that is valid on its own (name errors, type errors and
duplicates together), each once, in document order; and the API and the pages show all of them in one answer."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rest_framework.test import APIClient

from harness_editor.models import Harness, HarnessVersion
from harness_editor.schemas import (
    Manifest,
    ManifestError,
    control_character_errors,
    load_yaml,
    manifest_from_json,
    parse_manifest,
)
from harness_editor.schemas.errors import path_parts
from harness_editor.schemas.loading import _measure

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
_V1 = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))


def v1() -> dict[str, Any]:
    return copy.deepcopy(_V1)


def errors_of(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(data)
    return [(e.path, e.message) for e in caught.value.errors]


def broken() -> dict[str, Any]:
    """Name errors, type errors and duplicates, each of a kind that used to wait for the previous to be fixed."""
    d = v1()
    d["skills"][2]["id"] = "chit chat!"                                  # name error (structural)
    d["skills"][4]["id"] = "price_stock_qa"                              # duplicate skill id (semantic)
    d["tools"][1]["name"] = "check stock"                                # name error (structural) ...
    for skill in d["skills"]:                                            # ... its references follow it
        skill["allowed_tools"] = ["check stock" if t == "check_stock" else t for t in skill["allowed_tools"]]
    d["tools"].append(copy.deepcopy(d["tools"][0]))                      # duplicate tool name (semantic)
    d["tools"][0]["parameters"]["properties"]["link_id"]["type"] = "int"  # type error (tool schema)
    d["hooks"][3]["id"] = "tool-args"                                    # duplicate hook id (semantic)
    d["prompt"]["blocks"][5]["id"] = "persona"                           # duplicate block id (semantic)
    d["constraints"]["turn_limit"] = "six"                               # type error (structural)
    return d


EXPECTED_PATHS = [
    "skills[2].id",
    "skills[4].id",
    "tools[0].parameters.properties.link_id.type",
    "tools[1].name",
    "tools[6].name",
    "hooks[3].id",
    "prompt.blocks[5].id",
    "constraints.turn_limit",
]


# --- one pass ------------------------------------------------------------------------------------------------


def test_name_errors_type_errors_and_duplicates_come_together_in_document_order():
    errors = errors_of(broken())
    assert [p for p, _ in errors] == EXPECTED_PATHS
    by_path = dict(errors)
    assert "is not valid" in by_path["skills[2].id"]
    assert by_path["skills[4].id"] == "duplicate skill id 'price_stock_qa' (first at skills[0])"
    assert by_path["tools[6].name"] == "duplicate tool name 'lookup_product' (first at tools[0])"
    assert "'int' is not valid" in by_path["tools[0].parameters.properties.link_id.type"]
    assert by_path["hooks[3].id"] == "duplicate hook id 'tool-args' (first at hooks[1])"
    assert by_path["prompt.blocks[5].id"] == "duplicate block id 'persona' (first at prompt.blocks[0])"
    assert "valid integer" in by_path["constraints.turn_limit"]


def test_fixing_the_reported_errors_leaves_nothing_for_a_second_round():
    d = broken()
    d["skills"][2]["id"], d["skills"][4]["id"] = "chit_chat", "flash_sale_push"
    d["tools"][1]["name"] = "check_stock"
    for skill in d["skills"]:
        skill["allowed_tools"] = ["check_stock" if t == "check stock" else t for t in skill["allowed_tools"]]
    d["tools"].pop()
    d["tools"][0]["parameters"]["properties"]["link_id"]["type"] = "integer"
    d["hooks"][3]["id"], d["prompt"]["blocks"][5]["id"] = "speakable-reply", "format"
    d["constraints"]["turn_limit"] = 6
    assert parse_manifest(d) == parse_manifest(v1())


def test_document_order_follows_the_text_not_the_model():
    d = v1()
    d = {"constraints": d["constraints"], **{k: v for k, v in d.items() if k != "constraints"}}
    d["constraints"]["reply_min_chars"] = 900  # semantic, written first
    d["name"] = ""                              # structural, written later
    assert [p for p, _ in errors_of(d)] == ["constraints.reply_min_chars", "name"]


def test_each_error_once():
    d = v1()
    d["tools"][0]["parameters"]["properties"]["link_id"]["items"] = [{"type": "string"}, {"type": "integer"}]
    errors = errors_of(d)
    assert len(errors) == len(set(errors)) == 1


def test_an_invalid_item_still_counts_for_references_and_duplicates():
    d = v1()
    d["tools"][0]["description"] = ""            # lookup_product is invalid, but it is there
    d["tools"].append({**d["tools"][4], "name": "lookup_product"})  # ... and has a duplicate
    errors = errors_of(d)
    assert [p for p, _ in errors] == ["tools[0].description", "tools[6].name"]
    assert not any("unknown tool" in m for _, m in errors)  # skills' allowed_tools still find lookup_product


def test_semantic_checks_of_valid_items_run_beside_a_broken_list():
    d = v1()
    d["hooks"] = "not a list"
    d["tools"][2]["binding"] = "coupons.nope"
    assert [p for p, _ in errors_of(d)] == ["tools[2].binding", "hooks"]


def test_a_reply_skill_is_still_required_and_unreadable_parts_are_not_judged():
    d = v1()
    for s in d["skills"]:
        s["kind"] = "strategy"
    d["skills"][0]["body"] = 3
    errors = errors_of(d)
    assert ("skills", "at least one skill must have kind 'reply' (a reply skill must be loaded before every "
            "final reply)") in errors and "skills[0].body" in [p for p, _ in errors]
    d = v1()
    d["skills"] = {"not": "a list"}
    d["tools"][0]["name"] = "lookup_product"
    assert [p for p, _ in errors_of(d)] == ["skills"]  # no reply-skill or allowed_tools verdict on unreadable skills


def test_control_characters_come_with_the_other_errors():
    d = v1()
    d["description"] = "bell\x07"
    d["skills"][0]["id"] = "price_stock_qa"
    d["skills"][1]["id"] = "price_stock_qa"
    d["constraints"]["language"] = "??"
    assert [p for p, _ in errors_of(d)] == ["description", "skills[1].id", "constraints.language"]


def test_a_manifest_instance_is_always_valid():
    with pytest.raises(ValidationError):
        Manifest.model_validate(broken())
    d = v1()
    d["hooks"][3]["id"] = "tool-args"
    with pytest.raises(ValidationError, match=r"hooks\[3\]\.id: duplicate hook id"):
        Manifest.model_validate(d)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.text(alphabet=st.sampled_from("ab\\\"\x00\x01\x07\x08\x0c\x1f\t\n\r\u00e9bfu0"), max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                 max_size=3), max_leaves=12))
def test_the_size_dump_screens_for_control_characters_exactly(value):
    too_large, may_have_control = _measure({"x": value})
    assert not too_large
    assert may_have_control == bool(control_character_errors({"x": value}))


@pytest.mark.parametrize("path", ["tools[3].parameters.properties.sku.type", "", 'a["odd key"].b[2]',
                                  'tools[0].parameters.properties["$ref"]', '["x y"].z'])
def test_paths_parse_back_to_their_parts(path):
    from harness_editor.schemas.errors import _path

    assert _path(path_parts(path)) == path


# --- the API and the pages show them all -------------------------------------------------------------------


@pytest.mark.django_db
def test_api_validate_and_create_answer_with_every_error(manager):
    api = APIClient()
    api.force_login(manager)
    response = api.post("/api/validate", {"manifest": broken()}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_manifest"
    assert [e["path"] for e in response.json()["errors"]] == EXPECTED_PATHS
    as_yaml = yaml.safe_dump(broken(), sort_keys=False, allow_unicode=True)
    response = api.post("/api/harnesses/", {"slug": "all-at-once", "name": "n", "manifest_yaml": as_yaml},
                        format="json")
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == EXPECTED_PATHS
    assert not Harness.objects.filter(slug="all-at-once").exists()


@pytest.mark.django_db
def test_new_harness_page_lists_every_error(client, manager):
    client.force_login(manager)
    text = json.dumps(broken(), ensure_ascii=False)
    response = client.post("/harnesses/new/", {"slug": "all-at-once", "name": "n", "source": "paste",
                                               "manifest_text": text})
    assert response.status_code == 400
    body = response.content.decode()
    assert f"({len(EXPECTED_PATHS)} problems)" in body
    positions = [body.index(f"<code>{p}</code>") for p in EXPECTED_PATHS]
    assert positions == sorted(positions)
    assert not Harness.objects.filter(slug="all-at-once").exists()


@pytest.mark.django_db
def test_editor_yaml_tab_lists_every_error(harness_with_history, client, manager):
    v3 = harness_with_history["v3"]
    data = v3.manifest.model_dump(mode="json")
    data["skills"][0]["id"] = "bad id!"
    data["tools"][1]["name"] = data["tools"][0]["name"]
    first = next(iter(data["tools"][2]["parameters"]["properties"]))
    data["tools"][2]["parameters"]["properties"][first]["type"] = "int"
    client.force_login(manager)
    response = client.post(f"/harnesses/glow-gadget/v{v3.number}/edit/", {
        "component": "yaml", "lock_version": v3.lock_version, "change_note": v3.change_note,
        "yaml": yaml.safe_dump(data, sort_keys=False, allow_unicode=True)})
    assert response.status_code == 400
    body = response.content.decode()
    for path in ["skills[0].id", "tools[1].name", f"tools[2].parameters.properties.{first}.type"]:
        assert f"<code>{path}</code>" in body, path
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_json_text_gets_the_same_errors_as_data():
    assert [(e.path, e.message) for e in _raised(lambda: manifest_from_json(json.dumps(broken())))] == \
        errors_of(broken())


def _raised(call) -> list:
    with pytest.raises(ManifestError) as caught:
        call()
    return caught.value.errors


MUTATIONS = [
    ("skills", 1, "priority", 1), ("skills", 0, "id", "bad id!"), ("tools", 0, "name", "x y"),
    ("tools", 2, "binding", {"kind": "http"}), ("hooks", 0, "max_chars", "x"), ("hooks", 6, "kind", "nope"),
    ("tools", 1, "description", ""), ("skills", 3, "kind", "answer"),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=4), st.booleans())
def test_skipping_items_the_structural_pass_flagged_changes_nothing(mutations, break_constraints):
    from harness_editor.schemas import Manifest as M
    from harness_editor.schemas.semantics import semantic_errors_of_data

    d = v1()
    for section, index, key, value in mutations:
        d[section][index][key] = value
    if break_constraints:
        d["constraints"]["reply_min_chars"] = "many"
    with pytest.raises(ValidationError) as caught:
        M.model_validate(d)
    flagged = [tuple(e["loc"]) for e in caught.value.errors()]
    assert semantic_errors_of_data(d, flagged) == semantic_errors_of_data(d)
