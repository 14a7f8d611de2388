"""Scenario schema: the demo scenarios load, structure and semantic errors carry precise paths. Pure
Python: no Django, no database."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.scenarios import (
    EVENT_KINDS,
    PERSONA_KINDS,
    Scenario,
    ScenarioError,
    demo_scenario_paths,
    load_scenario,
    parse_room,
    parse_scenario,
    scenario_from_yaml,
    scenario_hash,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO_ROOM = yaml.safe_load((ROOT / "harness_editor" / "demo" / "room.yaml").read_text(encoding="utf-8"))


def with_attribute_order(room: dict[str, Any]) -> dict[str, Any]:
    """A room dict as parsing gives it back: each product's attribute order written beside its attributes."""
    room = copy.deepcopy(room)
    for p in room["products"]:
        p["attribute_order"] = list(p.get("attributes") or {})
    return room


def minimal() -> dict[str, Any]:
    room = copy.deepcopy(DEMO_ROOM)
    room["clock_minute"] = 0
    return {
        "id": "tiny",
        "title": "Tiny",
        "seed": 1,
        "duration_minutes": 10,
        "room": room,
        "timeline": [{"at_minute": 2, "kind": "flash_sale_start", "params": {"link_id": 102, "price": 25.0}}],
        "personas": [{"id": "p", "kind": "price_asker", "names": ["ann"],
                      "comments": [{"at_minute": 1, "text": "price of the serum?", "link_id": 101}]}],
        "faults": [{"binding": "catalog.stock", "kind": "timeout", "from_minute": 1, "to_minute": 3}],
    }


def errors_of(data: Any) -> dict[str, str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    return {e.path: e.message for e in info.value.errors}


# --- the demo scenarios -------------------------------------------------------------------------------


def test_there_are_at_least_four_demo_scenarios():
    ids = {load_scenario(p).id for p in demo_scenario_paths()}
    assert {"evening-flash-sale", "compliance-traps", "after-sales-faults", "multi-intent-rush"} <= ids


@pytest.mark.parametrize("path", demo_scenario_paths(), ids=lambda p: p.stem)
def test_demo_scenario_is_valid_and_named_after_its_file(path: Path):
    s = load_scenario(path)
    assert s.id == path.stem
    assert s.personas and s.timeline
    # only products of the demo catalog, with the demo catalog's facts
    demo = {p["link_id"]: p for p in DEMO_ROOM["products"]}
    for p in s.room.products:
        assert p.link_id in demo and p.title == demo[p.link_id]["title"]
        assert p.compliance_notes == demo[p.link_id]["compliance_notes"]


def test_demo_scenarios_cover_every_persona_kind_and_fault_kind():
    scenarios = [load_scenario(p) for p in demo_scenario_paths()]
    kinds = {persona.kind for s in scenarios for persona in s.personas}
    assert kinds == set(PERSONA_KINDS)
    assert {f.kind for s in scenarios for f in s.faults} == {"timeout", "malformed", "permission_denied", "slow"}
    assert {"flash_sale_start", "flash_sale_end", "stock_change", "coupon_expire", "coupon_add",
            "restock", "price_change", "phase_change"} == {e.kind for s in scenarios for e in s.timeline}


def test_evening_flash_sale_has_the_issue_timeline():
    s = load_scenario(ROOT / "streams" / "scenarios" / "evening-flash-sale.yaml")
    sale = next(e for e in s.timeline if e.kind == "flash_sale_start")
    assert sale.at_minute == 5
    assert any(e.kind == "coupon_expire" for e in s.timeline)
    assert any(e.kind == "stock_change" and e.params.stock is not None and e.params.stock <= s.room.low_stock_threshold
               for e in s.timeline)


def test_load_scenario_accepts_a_path_a_path_string_or_text():
    path = demo_scenario_paths()[0]
    text = path.read_text(encoding="utf-8")
    assert load_scenario(path) == load_scenario(str(path)) == load_scenario(text)


def test_initial_room_is_the_bindings_shape_and_defaults_to_scenario_names():
    data = minimal()
    del data["room"]["room_id"], data["room"]["title"]
    s = parse_scenario(data)
    room = s.initial_room()
    assert room["room_id"] == "tiny" and room["title"] == "Tiny"
    expected = copy.deepcopy(DEMO_ROOM)
    expected.update(clock_minute=0, room_id="tiny", title="Tiny")
    assert room == with_attribute_order(expected)
    room["products"][0]["stock"] = 0
    assert s.initial_room()["products"][0]["stock"] == 180  # a fresh copy each call


def test_content_hash_ignores_yaml_formatting_but_not_content():
    path = demo_scenario_paths()[0]
    text = path.read_text(encoding="utf-8")
    a = scenario_from_yaml(text)
    b = scenario_from_yaml("# a new comment\n" + text)
    assert scenario_hash(a) == scenario_hash(b)
    c = scenario_from_yaml(text.replace(f"seed: {a.seed}\n", f"seed: {a.seed + 1}\n"))
    assert scenario_hash(c) != scenario_hash(a)


# --- structural errors --------------------------------------------------------------------------------


def test_unknown_fields_are_errors_with_paths():
    data = minimal()
    data["colour"] = "red"
    data["room"]["products"][1]["prise"] = 3
    data["personas"][0]["comments"][0]["txt"] = "x"
    errs = errors_of(data)
    assert errs["colour"] == "unknown field 'colour'"
    assert errs["room.products[1].prise"] == "unknown field 'prise'"
    assert errs["personas[0].comments[0].txt"] == "unknown field 'txt'"


def test_event_params_are_checked_per_kind_without_the_union_tag_in_the_path():
    data = minimal()
    data["timeline"] = [
        {"at_minute": 1, "kind": "price_change", "params": {"link_id": 101}},
        {"at_minute": 2, "kind": "restock", "params": {"link_id": 101, "quantity": 0}},
        {"at_minute": 3, "kind": "phase_change", "params": {"phase": "x", "price": 1}},
    ]
    errs = errors_of(data)
    assert errs["timeline[0].params.price"] == "field required"
    assert "timeline[1].params.quantity" in errs
    assert errs["timeline[2].params.price"] == "unknown field 'price'"


def test_unknown_event_kind_lists_the_known_ones():
    data = minimal()
    data["timeline"] = [{"at_minute": 1, "kind": "happy_hour", "params": {}}]
    errs = errors_of(data)
    assert "happy_hour" in errs["timeline[0].kind"]
    assert all(k in errs["timeline[0].kind"] for k in EVENT_KINDS)


def test_bad_persona_and_fault_kinds():
    data = minimal()
    data["personas"][0]["kind"] = "stalker"
    data["faults"][0]["kind"] = "explode"
    data["faults"][0]["probability"] = 1.5
    errs = errors_of(data)
    assert "stalker" in errs["personas[0].kind"]
    assert "explode" in errs["faults[0].kind"]
    assert "faults[0].probability" in errs


@pytest.mark.parametrize("data,message", [(None, "got null"), ([], "got list"), ("text", "got str")])
def test_top_level_must_be_a_mapping(data, message):
    assert message in errors_of(data)[""]


def test_yaml_problems_are_located():
    with pytest.raises(ScenarioError) as info:
        scenario_from_yaml("id: a\nid: b\n")
    assert "duplicate key 'id'" in info.value.errors[0].message
    with pytest.raises(ScenarioError) as info:
        scenario_from_yaml("id: [unclosed\n")
    assert info.value.errors[0].message.startswith("invalid YAML at line")


# --- semantic errors ----------------------------------------------------------------------------------


def test_unknown_link_ids_everywhere():
    data = minimal()
    data["timeline"] = [
        {"at_minute": 1, "kind": "flash_sale_start", "params": {"link_id": 999, "price": 1.0}},
        {"at_minute": 2, "kind": "stock_change", "params": {"link_id": 998, "stock": 3}},
    ]
    data["personas"][0]["comments"][0]["link_id"] = 997
    data["personas"][0]["focus_link_ids"] = [101, 996]
    data["room"]["campaign"]["flash_sale"]["link_id"] = 995
    errs = errors_of(data)
    assert errs["timeline[0].params.link_id"].startswith("no product with link id 999")
    assert "101, 102" in errs["timeline[0].params.link_id"]
    assert "timeline[1].params.link_id" in errs
    assert "personas[0].comments[0].link_id" in errs
    assert "personas[0].focus_link_ids[1]" in errs
    assert "room.campaign.flash_sale.link_id" in errs


def test_times_past_the_duration():
    data = minimal()
    data["duration_minutes"] = 10
    data["timeline"][0]["at_minute"] = 11
    data["personas"][0]["comments"][0]["at_minute"] = 10.5
    data["personas"][0]["to_minute"] = 12
    data["faults"][0]["to_minute"] = 20
    errs = errors_of(data)
    assert errs["timeline[0].at_minute"] == "minute 11 is past the scenario's end (10)"
    assert "personas[0].comments[0].at_minute" in errs
    assert "personas[0].to_minute" in errs
    assert "faults[0].to_minute" in errs


def test_duplicates_in_the_room_and_personas():
    data = minimal()
    data["room"]["products"][1]["link_id"] = 101
    data["room"]["coupons"][1]["code"] = "glow5"
    data["personas"].append(copy.deepcopy(data["personas"][0]))
    errs = errors_of(data)
    assert errs["room.products[1].link_id"].startswith("duplicate link id 101")
    assert "room.coupons[1].code" in errs
    assert errs["personas[1].id"].startswith("duplicate persona id")


def test_coupon_references_follow_the_timeline_order():
    data = minimal()
    data["timeline"] = [
        {"at_minute": 2, "kind": "coupon_expire", "params": {"code": "LATE"}},  # before it exists
        {"at_minute": 4, "kind": "coupon_add", "params": {"code": "LATE", "discount": 2, "expires_at_minute": 9,
                                                          "remaining": 5}},
        {"at_minute": 6, "kind": "coupon_expire", "params": {"code": "late"}},  # fine: exists now
        {"at_minute": 7, "kind": "coupon_add", "params": {"code": "GLOW5", "discount": 1, "expires_at_minute": 9,
                                                          "remaining": 1}},
    ]
    errs = errors_of(data)
    assert set(errs) == {"timeline[0].params.code", "timeline[3].params.code"}
    assert "already exists" in errs["timeline[3].params.code"]


def test_event_specific_rules():
    data = minimal()
    data["timeline"] = [
        {"at_minute": 5, "kind": "flash_sale_start", "params": {"link_id": 101, "price": 50.0, "ends_at_minute": 5}},
        {"at_minute": 6, "kind": "stock_change", "params": {"link_id": 101}},
        {"at_minute": 7, "kind": "stock_change", "params": {"link_id": 101, "stock": 1, "delta": -1}},
    ]
    errs = errors_of(data)
    assert "must be after the start" in errs["timeline[0].params.ends_at_minute"]
    assert "above the list price" in errs["timeline[0].params.price"]
    assert "exactly one" in errs["timeline[1].params"]
    assert "exactly one" in errs["timeline[2].params"]


def test_template_slots_are_checked():
    data = minimal()
    data["personas"][0].update(templates=["how much is {product}?", "ship to {planet}?", "bad {brace"],
                               rate_per_minute=1)
    data["personas"][0]["comments"][0] = {"at_minute": 1, "text": "is {product_short} on sale?"}
    errs = errors_of(data)
    assert errs["personas[0].templates[1]"].startswith("unknown slot {planet}")
    assert "personas[0].templates[2]" in errs
    assert errs["personas[0].comments[0].link_id"] == "a scripted comment with product slots needs a link_id"
    assert "personas[0].templates[0]" not in errs


def test_persona_needs_something_to_say_and_rates_need_templates():
    data = minimal()
    data["personas"] = [
        {"id": "mute", "kind": "troll", "names": ["x"]},
        {"id": "norate", "kind": "troll", "names": ["x"], "templates": ["lol"]},
        {"id": "notpl", "kind": "troll", "names": ["x"], "rate_per_minute": 2,
         "comments": [{"at_minute": 1, "text": "hi", "name": "y"}]},
    ]
    errs = errors_of(data)
    assert "personas[0]" in errs
    assert "personas[1].rate_per_minute" in errs
    assert "personas[2].templates" in errs
    assert "not one of this persona's names" in errs["personas[2].comments[0].name"]


def test_faults_name_real_bindings_and_windows_make_sense():
    data = minimal()
    data["faults"] = [
        {"binding": "catalog.teleport", "kind": "timeout"},
        {"binding": "catalog.stock", "kind": "slow", "from_minute": 5, "to_minute": 4},
    ]
    errs = errors_of(data)
    assert errs["faults[0].binding"].startswith("unknown binding 'catalog.teleport'")
    assert "catalog.product_info" in errs["faults[0].binding"]
    assert "must be after from_minute" in errs["faults[1].to_minute"]
    assert "needs a delay_ms" in errs["faults[1].delay_ms"]
    data["faults"] = [{"binding": "catalog.stock", "kind": "timeout", "delay_ms": 999_999}]  # ToolFault's limit
    assert "faults[0].delay_ms" in errors_of(data)


def test_all_errors_of_a_pass_are_reported_together():
    data = minimal()
    data["timeline"][0]["params"]["link_id"] = 1234
    data["faults"][0]["binding"] = "nope"
    assert len(errors_of(data)) == 2


def test_parse_room_validates_a_bindings_room():
    room = parse_room(copy.deepcopy(DEMO_ROOM))
    assert room.to_dict() == with_attribute_order(DEMO_ROOM)
    bad = copy.deepcopy(DEMO_ROOM)
    bad["products"][0]["stock"] = -1
    bad["pinned"] = {"link_id": 5, "title": "x", "duration_s": 10, "pinned_at_minute": 1}
    with pytest.raises(ScenarioError) as info:
        parse_room(bad)
    paths = {e.path for e in info.value.errors}
    assert paths == {"products[0].stock"}  # structure first; the reference check runs on a valid room
    del bad["products"][0]["stock"]
    bad["products"][0]["stock"] = 3
    with pytest.raises(ScenarioError) as info:
        parse_room(bad)
    assert [e.path for e in info.value.errors] == ["pinned.link_id"]


def test_scenario_model_is_a_plain_pydantic_model():
    s = parse_scenario(minimal())
    assert isinstance(s, Scenario)
    assert Scenario.model_validate_json(s.model_dump_json()) == s
