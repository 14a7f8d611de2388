"""The reference policy (a rule-based gold-data tool, not a model): right skill, tool, link id and the exact
numbers from the real bindings, for every intent, also under a renamed tool."""

from __future__ import annotations

import json

import pytest

from harness_editor.render import render_prompt, render_skill_body
from harness_editor.schemas import Manifest
from streams import bindings
from streams.reference_policy import (
    INTENTS,
    REFERENCE_POLICY_LABEL,
    GoldComment,
    ReferencePolicyError,
    call_tool,
    gold_trajectory,
)
from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest


@pytest.fixture(scope="module")
def tiny():
    return load_tiny_manifest()


@pytest.fixture
def room():
    return load_demo_room()


def _calls(t):
    return [m["tool_calls"][0]["function"] for m in t.messages if m.get("tool_calls")]


def test_price_uses_flash_sale_price_from_real_binding(tiny, room):
    t = gold_trajectory(tiny, room, GoldComment("how much is #101?", "price", "ann", link_id=101))
    calls = _calls(t)
    assert calls[0] == {"name": "load_skill", "arguments": json.dumps({"skill_id": "price_stock"})}
    assert calls[1]["name"] == "lookup_product" and json.loads(calls[1]["arguments"]) == {"link_id": 101}
    assert t.tool_result == bindings.product_info(load_demo_room(), 101)
    assert t.facts == ["19.9"] and "$19.9" in t.reply  # flash sale price, not list price
    # the prompt is exactly the renderer's
    rendered = render_prompt(tiny, room=load_demo_room(), comments=[{"viewer": "ann", "text": "how much is #101?"}])
    assert t.messages[: len(rendered.messages)] == rendered.messages and t.tools == rendered.tools
    # the skill body is exactly what load_skill returns
    assert t.messages[3]["content"] == render_skill_body(tiny, "price_stock")
    assert t.meta["source"] == REFERENCE_POLICY_LABEL


def test_price_without_flash_sale(tiny, room):
    t = gold_trajectory(tiny, room, GoldComment("price of link 202", "price", "bo", link_id=202))
    assert t.facts == ["59"] and "$59 " in t.reply


@pytest.mark.parametrize(("link_id", "units"), [(102, "8"), (104, "230"), (203, "0")])
def test_stock(tiny, room, link_id, units):
    t = gold_trajectory(tiny, room, GoldComment(f"how many #{link_id} left", "stock", "cara", link_id=link_id))
    assert t.tool_name == "check_stock" and t.tool_arguments == {"link_id": link_id}
    assert t.facts == [units] and units in t.reply


def test_shipping_with_region(tiny, room):
    t = gold_trajectory(tiny, room, GoldComment("delivery to Alaska?", "shipping", "dev", region="Alaska"))
    assert t.skill_id == "shipping" and t.tool_name == "get_shipping" and t.tool_arguments == {"region": "Alaska"}
    assert "7-10 business days" in t.reply and "$60" in t.reply


def test_coupon(tiny, room):
    t = gold_trajectory(tiny, room, GoldComment("any coupons?", "coupon", "eli"))
    assert t.tool_name == "get_deals" and t.tool_arguments == {}
    assert "GLOW5" in t.reply and "$5 off" in t.reply  # EARLYBIRD expired at minute 30, clock is 42


def test_chit_chat_has_no_product_tool(tiny, room):
    t = gold_trajectory(tiny, room, GoldComment("hi!", "chit_chat", "fay"))
    assert [c["name"] for c in _calls(t)] == ["load_skill"] and t.tool_name is None
    assert "fay" in t.reply


def test_compliance_trap_is_safe(tiny, room):
    t = gold_trajectory(tiny, room, GoldComment("does #101 cure acne?", "compliance", "gus", 101, condition="acne"))
    assert t.skill_id == "efficacy" and t.tool_name == "lookup_product"
    low = t.reply.lower()
    assert "dermatologist" in low and not any(w in low for w in ("cures", "heals", "guaranteed", "100%"))


def test_every_intent_under_the_full_demo_harness(demo_manifest, room):
    m = demo_manifest("skincare_v1")
    for intent in INTENTS:
        c = GoldComment("q", intent, "hana", link_id=103, region="Hawaii", condition="acne")
        t = gold_trajectory(m, room, c)
        assert t.messages[-1]["role"] == "assistant" and t.reply


def test_renamed_tool_and_nested_argument_path(tiny, room):
    data = tiny.model_dump()
    for tool in data["tools"]:
        if tool["binding"] == "catalog.product_info":
            tool["name"] = "fetch_item"
            tool["parameters"] = {
                "type": "object",
                "properties": {"item": {"type": "object", "properties": {"ref": {"type": "integer"}}}},
            }
            tool["argument_map"] = {"link_id": "item.ref"}
    for skill in data["skills"]:
        skill["allowed_tools"] = ["fetch_item" if n == "lookup_product" else n for n in skill["allowed_tools"]]
    renamed = Manifest.model_validate(data)
    t = gold_trajectory(renamed, room, GoldComment("price #102", "price", "ivo", link_id=102))
    assert t.tool_name == "fetch_item" and t.tool_arguments == {"item": {"ref": 102}}
    assert t.tool_result["price"] == 29.0 and "$29" in t.reply
    assert call_tool(renamed, load_demo_room(), "fetch_item", {"item": {"ref": 102}})["title"].startswith("Barrier")


def test_missing_link_id_and_unknown_link(tiny, room):
    with pytest.raises(ReferencePolicyError):
        gold_trajectory(tiny, room, GoldComment("how much?", "price", "jo"))
    t = gold_trajectory(tiny, room, GoldComment("price #999", "price", "jo", link_id=999))
    assert t.tool_result["code"] == "not_found" and "could not find" in t.reply and t.facts == []


def test_room_is_not_mutated(tiny, room):
    before = json.dumps(room, sort_keys=True)
    gold_trajectory(tiny, room, GoldComment("any coupons?", "coupon", "kim"))
    assert json.dumps(room, sort_keys=True) == before


@pytest.mark.parametrize("name", ["skincare_v1", "skincare_v2", "skincare_v3"])
def test_glow_gadget_gold_turns_use_its_own_skills_tools_and_argument_names(name, demo_manifest, room):
    """The flagship harness's gold turns (the demo model's third stage trains on them): its reply skills, its product
    tools by binding id (v3 renames them and asks for stock by item_id), the exact figures."""
    m = demo_manifest(name)
    price = gold_trajectory(m, room, GoldComment("how much is #102?", "price", "ann", link_id=102))
    stock = gold_trajectory(m, room, GoldComment("how many #202 left?", "stock", "ann", link_id=202))
    product_tool = "get_product_details" if name == "skincare_v3" else "lookup_product"
    assert [c["name"] for c in _calls(price)] == ["load_skill", product_tool]
    assert json.loads(_calls(price)[0]["arguments"]) == {"skill_id": "price_stock_qa"}
    assert json.loads(_calls(stock)[1]["arguments"]) == ({"item_id": 202} if name == "skincare_v3" else {"link_id": 202})
    assert price.facts == ["29"] and "$29" in price.reply and stock.facts == ["6"] and "6 left" in stock.reply
    shipping = gold_trajectory(m, room, GoldComment("shipping to Alaska?", "shipping", "ann", region="Alaska"))
    assert [c["name"] for c in _calls(shipping)] == ["load_skill", "get_shipping_policy"]
    assert json.loads(_calls(shipping)[0]["arguments"]) == {"skill_id": "shipping_after_sales"}


def test_history_goes_between_the_system_message_and_the_comment(demo_manifest, room):
    history = [{"role": "user", "content": "[bo] hi"}, {"role": "assistant", "content": "Hi bo, welcome to the room!"}]
    t = gold_trajectory(demo_manifest("skincare_v1"), room, GoldComment("price of #101", "price", "ann", link_id=101),
                        history=history)
    assert [m["role"] for m in t.messages[:4]] == ["system", "user", "assistant", "user"]
    assert t.messages[1:3] == history and t.messages[3]["content"] == "[ann] price of #101"
    assert t.messages[-1]["content"] == t.reply and "19.9" in t.reply
