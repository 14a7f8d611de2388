"""HAT stage-3 rewards (training_jobs.hat.rewards) on hand-made turns: scripted model outputs run through the one
turn engine on the tiny harness and the demo room, judged against the reference policy's gold turn. Each reward
has its pass, fail and partial-credit cases; renamed harnesses (HSA operators) are judged by binding, not name;
combine() normalises per reward before the weighted sum."""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from streams.bindings import BINDINGS
from streams.engine.client import ChatDelta
from streams.engine.faults import ToolFault
from streams.engine.turn import ScriptedBackend, run_turn
from streams.reference_policy import GoldComment, gold_trajectory
from training_jobs.hat.rewards import (
    REWARDS,
    ROOM_ACTIONS,
    RewardScore,
    accuracy,
    combine,
    effectiveness,
    forbidden_claims,
    normalise,
    reasoning_length_penalty,
    reasoning_text,
    score_rollout,
    skill_selection,
    tool_rationality,
    unbacked_claims,
)
from training_jobs.hsa.operators import apply_chain, harness_state, operator, relabel_target, validate_state
from training_jobs.hsa.regenerate import turn_target
from training_jobs.hsa.samples import LoadSkill, ToolCall, from_gold_trajectory, load_demo_manifest
from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest

PRICE_102 = "Barrier Repair Ceramide Moisturizer is $29 right now, down from $39."
PRICE_101 = "HydraGlow Hyaluronic Serum is $19.9 in the flash sale until minute 55."


def _call(name, args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>"


def reference(text, intent, link_id=None, *, manifest=None, room=None, viewer="max", **kw):
    manifest, room = manifest or load_tiny_manifest(), room or load_demo_room()
    traj = gold_trajectory(manifest, copy.deepcopy(room), GoldComment(text, intent, viewer, link_id=link_id, **kw))
    return from_gold_trajectory(traj, manifest, room, [{"viewer": viewer, "text": text}], source="test")


def rollout(outputs, ref, *, manifest=None, faults=None):
    """One turn with scripted model outputs on a copy of the reference's room."""
    manifest = manifest or ref.manifest
    return run_turn(manifest=manifest, room=copy.deepcopy(dict(ref.room)), comments=[dict(c) for c in ref.comments],
                    backend=ScriptedBackend(outputs), faults=faults)


def scores(outputs, ref, *, manifest=None, faults=None):
    manifest = manifest or ref.manifest
    result = rollout(outputs, ref, manifest=manifest, faults=faults)
    return result, score_rollout(result, manifest, ref.room, ref)


def values(s):
    return {k: v.value for k, v in s.items()}


def without_hook(manifest, kind):
    """The harness without its hooks of one kind: rollouts under harness variants may lack a check, the reward
    must not."""
    state = harness_state(manifest)
    return validate_state({**state, "hooks": [h for h in state["hooks"] if h["kind"] != kind]})


@pytest.fixture(scope="module")
def price():
    return reference("how much is #102?", "price", 102)


RIGHT = [_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 102}), PRICE_102]


def test_the_gold_turn_earns_every_reward(price):
    result, s = scores(RIGHT, price)
    assert result.reason == "ok" and result.reply == PRICE_102
    assert values(s) == {name: 1.0 for name in REWARDS}
    assert set(s) == set(REWARDS) and all(isinstance(v, RewardScore) and v.reason for v in s.values())


@pytest.mark.parametrize("text,intent,kw", [
    ("how many #102 left?", "stock", {"link_id": 102}),
    ("price of 101", "price", {"link_id": 101}),
    ("shipping to Alaska?", "shipping", {"region": "Alaska"}),
    ("any coupon?", "coupon", {}),
    ("hi Mia", "chit_chat", {}),
    ("does #102 cure eczema?", "compliance", {"link_id": 102, "condition": "eczema"}),
    ("how much is #999?", "price", {"link_id": 999}),
])
@pytest.mark.parametrize("harness", ["tiny", "skincare_v1"])
def test_gold_turns_of_every_intent_earn_every_reward(text, intent, kw, harness):
    manifest = load_tiny_manifest() if harness == "tiny" else load_demo_manifest(harness)
    ref = reference(text, intent, manifest=manifest, **kw)
    outputs = [_call("load_skill", {"skill_id": s.skill_id}) if isinstance(s, LoadSkill) else
               _call(s.name, dict(s.arguments)) if isinstance(s, ToolCall) else s.text for s in ref.target]
    result, s = scores(outputs, ref)
    assert result.reason == "ok"
    assert values(s) == {name: 1.0 for name in REWARDS}, {k: v.reason for k, v in s.items()}


# --- accuracy ---------------------------------------------------------------------------------------------------


def test_accuracy_fails_a_price_no_tool_returned(price):
    manifest = without_hook(price.manifest, "factual_risk")  # the engine would otherwise retry it away
    result, s = scores(RIGHT[:2] + ["Barrier Repair Ceramide Moisturizer is $25 right now."], price, manifest=manifest)
    assert result.reason == "ok"
    assert s["accuracy"].value == 0 and "$25" in s["accuracy"].reason
    # the same figure without the lookup: nothing backs it this turn
    result, s = scores([RIGHT[0], PRICE_102], price, manifest=manifest)
    assert result.reason == "ok" and s["accuracy"].value == 0


def test_accuracy_matches_claims_kind_for_kind(price):
    # "102 left": 102 is the link id in the result, not a stock figure. The factual-risk hook (the same rules)
    # now retries it; without that hook the reply is spoken and the reward still fails it.
    bad = RIGHT[:2] + ["Barrier Repair Ceramide Moisturizer is $29, only 102 left!"]
    result, s = scores(bad, price)
    assert result.fallback and s["accuracy"].value == 1 and s["effectiveness"].value == 0
    assert any(e.type == "hook_result" and e.kind == "factual_risk" and not e.passed and "facts.unbacked" in e.detail
               for e in result.events)
    result, s = scores(bad, price, manifest=without_hook(price.manifest, "factual_risk"))
    assert result.reason == "ok"
    assert s["accuracy"].value == 0 and "stock" in s["accuracy"].reason
    result, s = scores(RIGHT[:2] + ["Barrier Repair Ceramide Moisturizer is $29, only 8 left, $10 off today."], price)
    assert values(s)["accuracy"] == 1, s["accuracy"].reason  # 8 is the stock, $10 is list price minus price


def test_unbacked_claims_match_kind_for_kind(price):
    result = [dict(price.tool_calls()[0].result)]  # #102: price 29, list price 39, stock 8
    assert unbacked_claims("You save 26% today, only 8 left.", result) == []
    assert unbacked_claims("You save $10 today, that is 25 percent off.", result) == []
    assert unbacked_claims("You save $26 today.", result) == ["discount 'save $26'"]
    assert unbacked_claims("It is $25 now.", result) == ["price '$25'"]  # 25 is only the share off, floored
    assert unbacked_claims("Only 29 left!", result) == ["stock '29 left'"]


def test_accuracy_fails_an_invented_discount_the_hook_does_not_check(price):
    result, s = scores(RIGHT[:2] + ["Barrier Repair Ceramide Moisturizer is $29, that is 40% off today."], price)
    assert result.reason == "ok"  # the tiny harness checks prices and stock only
    assert s["accuracy"].value == 0 and "discount" in s["accuracy"].reason
    _, s = scores(RIGHT[:2] + ["Barrier Repair Ceramide Moisturizer is $29, that is 26% off today."], price)
    assert s["accuracy"].value == 1  # (39 - 29) / 39 = 25.6%, rounded


def test_accuracy_fails_a_forbidden_efficacy_claim():
    ref = reference("does #102 cure eczema?", "compliance", 102, condition="eczema")
    head = [_call("load_skill", {"skill_id": "efficacy"}), _call("lookup_product", {"link_id": 102})]
    claim = head + ["Barrier Repair Ceramide Moisturizer treats eczema, you will love it."]
    assert scores(claim, ref)[0].fallback  # the factual-risk hook retries a forbidden claim now
    result, s = scores(claim, ref, manifest=without_hook(ref.manifest, "factual_risk"))
    assert result.reason == "ok"
    assert s["accuracy"].value == 0 and "treats eczema" in s["accuracy"].reason
    _, s = scores(head + ["It supports the skin barrier, but I cannot say it treats eczema; ask a dermatologist."],
                  ref)
    assert s["accuracy"].value == 1, s["accuracy"].reason


def test_forbidden_claims_rule():
    room = load_demo_room()
    cleanser = [p for p in room["products"] if p["link_id"] == 104]
    assert forbidden_claims("It removes makeup gently.", cleanser) == []
    assert forbidden_claims("It removes acne in days.", cleanser) == ["It removes acne in days"]
    assert forbidden_claims("Treat yourself, it is a treat for dry skin.", cleanser) == []
    assert forbidden_claims("Results guaranteed!", cleanser) == ["Results guaranteed"]
    assert forbidden_claims("It never cures anything, it cleans.", cleanser) == []
    assert forbidden_claims("Not a medicine, it heals rashes fast.", cleanser) == ["it heals rashes fast"]
    free = [{"link_id": 1, "title": "Plain Mug", "compliance_notes": []}]  # no notes: nothing is restricted
    assert forbidden_claims("It cures boredom.", free) == []


def test_accuracy_fails_a_coupon_promise_nothing_issued():
    ref = reference("any coupon?", "coupon")
    head = [_call("load_skill", {"skill_id": "price_stock"}), _call("get_deals", {})]
    sent = head + ["I just sent you coupon GLOW5 for $5 off orders from $30."]
    assert scores(sent, ref)[0].fallback  # the factual-risk hook retries a false promise now
    unhooked = without_hook(ref.manifest, "factual_risk")
    result, s = scores(sent, ref, manifest=unhooked)
    assert result.reason == "ok"
    assert s["accuracy"].value == 0 and "without issuing" in s["accuracy"].reason
    _, s = scores(head + ["Use code VIP50 for $5 off orders from $30."], ref, manifest=unhooked)
    assert s["accuracy"].value == 0 and "VIP50" in s["accuracy"].reason  # a code no tool returned
    _, s = scores(head + ["Use code GLOW5 for $5 off orders from $30."], ref)
    assert s["accuracy"].value == 1


def test_a_fallback_line_is_accurate_only_without_facts(price):
    result, s = scores(["**bold**"], price)  # reply_format fails on every retry
    assert result.fallback and result.reason == "retries_exhausted"
    assert s["accuracy"].value == 1 and "fallback" in s["accuracy"].reason
    assert s["effectiveness"].value == 0
    state = harness_state(price.manifest)
    retry = {"id": "retry", "kind": "retry_control", "message": "Fix it.", "max_retries": 0,
             "fallback_reply": "It is only $29 today, grab it!"}
    manifest = validate_state({**state, "hooks": state["hooks"] + [retry]})
    result, s = scores(RIGHT[:2] + ["**" + PRICE_102 + "**"], price, manifest=manifest)
    assert result.fallback and result.reply == "It is only $29 today, grab it!"
    assert s["accuracy"].value == 0  # the lookup returned 29, but no result stands behind a fixed line


# --- effectiveness -----------------------------------------------------------------------------------------------


VAGUE = "Barrier Repair Ceramide Moisturizer has a lovely price today, grab it now."  # on topic, no figure
CHECK_CARD = "Sorry max, please check the card for the price."  # an honest non-answer, no product named


def test_effectiveness_half_when_the_right_tool_was_called_but_the_fact_is_missing(price):
    _, s = scores(RIGHT[:2] + [VAGUE], price)
    assert s["effectiveness"].value == 0.5 and "29" in s["effectiveness"].reason
    assert s["tool_rationality"].value == 1 and s["accuracy"].value == 1


def test_effectiveness_zero_for_the_wrong_product_and_off_topic(price):
    _, s = scores([RIGHT[0], _call("lookup_product", {"link_id": 101}), CHECK_CARD], price)
    assert s["effectiveness"].value == 0 and "wrong product" in s["effectiveness"].reason
    assert s["accuracy"].value == 1
    # the serum's true price for a question about #102: the relevance hook retries it (the same rules)
    result, s = scores([RIGHT[0], _call("lookup_product", {"link_id": 101}), PRICE_101], price)
    assert result.fallback and s["effectiveness"].value == 0
    assert any(e.type == "hook_result" and e.kind == "relevance" and "intent.wrong_product" in e.detail
               for e in result.events)
    # a greeting for a price question: not an answer (the relevance hook), and off topic for the reference
    result, s = scores([_call("load_skill", {"skill_id": "chit_chat"}), "Hi max, welcome to the room!"], price)
    assert result.fallback and s["effectiveness"].value == 0
    assert any(e.type == "hook_result" and "intent.unaddressed" in e.detail for e in result.events)
    _, s = scores([_call("load_skill", {"skill_id": "chit_chat"}), "Hi max, the price is on the card!"], price)
    assert s["effectiveness"].value == 0 and "off topic" in s["effectiveness"].reason
    chat = reference("hi Mia", "chit_chat")
    _, s = scores([_call("load_skill", {"skill_id": "chit_chat"}), "Hello, welcome to the room!"], chat)
    assert s["effectiveness"].value == 0.5  # on topic, but the greeting misses the viewer's name


def test_effectiveness_needs_the_lookup_when_there_is_no_fact_to_state():
    ref = reference("does #102 cure eczema?", "compliance", 102, condition="eczema")
    safe = "It is a cosmetic, so I cannot promise anything for eczema; please ask a dermatologist."
    _, s = scores([_call("load_skill", {"skill_id": "efficacy"}), _call("lookup_product", {"link_id": 102}), safe], ref)
    assert s["effectiveness"].value == 1
    _, s = scores([_call("load_skill", {"skill_id": "efficacy"}), _call("get_deals", {}), safe], ref)
    assert s["effectiveness"].value == 0  # neither a fact nor the reference's lookup: off topic


@pytest.fixture(scope="module")
def coupon():
    """A strategy reference on skincare_v1: the coupon is issued to the viewer (a regenerated target: the
    reference policy answers coupon questions without issuing)."""
    manifest, room = load_demo_manifest("skincare_v1"), load_demo_room()
    base = reference("can I get a coupon?", "coupon", manifest=manifest, room=room)
    issued = [_call("load_skill", {"skill_id": "coupon_strategy"}) + _call("load_skill", {"skill_id": "price_stock_qa"}),
              _call("get_campaign_state", {}), _call("issue_coupon", {"coupon_code": "GLOW5", "viewer_id": "max"}),
              "Done, max: GLOW5 is yours, $5 off orders from $30."]
    result = rollout(issued, base)
    prompt = next(e.message_count for e in result.events if e.type == "prompt_built")
    target, why = turn_target(result, prompt)
    assert target is not None, why
    issue = [s for s in target if isinstance(s, ToolCall) and s.name == "issue_coupon"]
    assert len(issue) == 1 and issue[0].result["issued"] is True
    return base.with_target(target), issued


def test_effectiveness_needs_the_strategy_carried_out(coupon):
    ref, issued = coupon
    assert "coupons.issue" in ROOM_ACTIONS and ROOM_ACTIONS <= set(BINDINGS)
    _, s = scores(issued, ref)
    assert values(s) == {name: 1.0 for name in REWARDS}, {k: v.reason for k, v in s.items()}
    talked = issued[:2] + ["Use code GLOW5 for $5 off orders from $30."]  # the code said, never issued
    _, s = scores(talked, ref)
    assert s["effectiveness"].value == 0.5 and "coupons.issue" in s["effectiveness"].reason
    assert s["accuracy"].value == 1 and s["tool_rationality"].value == 0.5  # right 1 of 2 calls


def test_effectiveness_counts_only_an_issue_that_succeeded(coupon):
    ref, issued = coupon
    faults = {"issue_coupon": ToolFault(binding="issue_coupon", kind="timeout")}
    result, s = scores(issued[:3] + ["Sorry max, the coupon desk is slow, GLOW5 is on the card."], ref, faults=faults)
    assert result.reason == "ok"
    assert s["effectiveness"].value == 0.5
    assert s["tool_rationality"].value == 1  # the model did the right thing; the tool failed


# --- tool rationality ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("outputs,expected,why", [
    ([RIGHT[0], _call("lookup_product", {"link_id": 101}), CHECK_CARD], 0.5, "right 0.5/1"),
    ([RIGHT[0], _call("lookup_product", {"link_id": 101}), RIGHT[1], PRICE_102], 0.5, "wrong arguments after"),
    ([RIGHT[0], RIGHT[1], RIGHT[1], PRICE_102], 0.5, "1 repeated"),
    ([RIGHT[0], _call("get_deals", {}), RIGHT[1], PRICE_102], 0.5, "campaign.state"),
    ([RIGHT[0], _call("lookup_product", {"link_id": "abc"}), RIGHT[1], PRICE_102], 0.5, "1 invalid"),
    ([RIGHT[0], _call("lookup_product", {"link_id": "abc"}) + _call("get_deals", {}), RIGHT[1], PRICE_102],
     pytest.approx(1 / 3), "1 invalid"),
    ([RIGHT[0], _call("find_price", {"link_id": 102}), RIGHT[1], PRICE_102], 0.5, "unknown tool"),
    ([RIGHT[0], RIGHT[0], RIGHT[1], PRICE_102], 0.5, "1 repeated"),
    ([RIGHT[0], CHECK_CARD], 0.0, "right 0/1"),
])
def test_tool_rationality_partial_credit(price, outputs, expected, why):
    result, s = scores(outputs, price)
    assert result.reason == "ok", result.reason
    assert s["tool_rationality"].value == expected
    assert why in s["tool_rationality"].reason


def test_tool_rationality_when_no_tool_is_needed():
    chat = reference("hi Mia", "chit_chat")
    greet = [_call("load_skill", {"skill_id": "chit_chat"}), "Hi max, welcome to the room!"]
    assert scores(greet, chat)[1]["tool_rationality"].value == 1
    needless = [greet[0], _call("get_deals", {}), greet[1]]
    assert scores(needless, chat)[1]["tool_rationality"].value == 0.5


def test_a_retry_after_a_tool_fault_is_not_wasted(price):
    faults = {"lookup_product": ToolFault(binding="lookup_product", kind="timeout")}
    sorry = "Sorry max, I cannot reach the catalog right now, please check the card."
    result, s = scores([RIGHT[0], RIGHT[1], RIGHT[1], sorry], price, faults=faults)
    assert result.reason == "ok"
    assert s["tool_rationality"].value == 1, s["tool_rationality"].reason
    assert s["effectiveness"].value == 0.5  # it tried, but the viewer did not get the price


# --- skill selection ------------------------------------------------------------------------------------------


def test_skill_selection(price):
    assert scores(RIGHT, price)[1]["skill_selection"].value == 1
    wrong = [_call("load_skill", {"skill_id": "chit_chat"})] + RIGHT[1:]
    _, s = scores(wrong, price)
    assert s["skill_selection"].value == 0 and "did not load price_stock" in s["skill_selection"].reason
    both = [RIGHT[0], _call("load_skill", {"skill_id": "chit_chat"})] + RIGHT[1:]
    _, s = scores(both, price)
    assert s["skill_selection"].value == 0 and "chit_chat" in s["skill_selection"].reason


# --- renamed harnesses -----------------------------------------------------------------------------------------

RENAMES = ("rename_skills", "rename_tools", "rename_tool_params", "wrap_tool_arguments", "switch_id_types")


@pytest.fixture(scope="module", params=[0, 1])
def renamed(request, price):
    ops = [operator(name, share=1.0) for name in RENAMES]
    state, out, rename, applied = apply_chain(ops, harness_state(price.manifest), price, random.Random(request.param))
    assert applied == list(RENAMES)
    manifest = validate_state(state)
    ref = price.with_target(relabel_target(price.target, rename))
    assert ref.target == out.target  # the operator relabels the sample the same way
    return manifest, ref, rename


def test_a_renamed_harness_is_judged_by_binding_not_by_name(renamed, price):
    manifest, ref, rename = renamed
    skill = rename.skill("price_stock")
    tool = rename.tool("lookup_product")
    args = dict(ref.tool_calls()[0].arguments)
    assert skill != "price_stock" and tool != "lookup_product" and args != {"link_id": 102}
    _, s = scores([_call("load_skill", {"skill_id": skill}), _call(tool, args), PRICE_102], ref, manifest=manifest)
    assert values(s) == {name: 1.0 for name in REWARDS}, {k: v.reason for k, v in s.items()}

    # the memorised harness: old skill id and tool name are unknown here
    result, s = scores(RIGHT, ref, manifest=manifest)
    assert (s["skill_selection"].value, s["tool_rationality"].value, s["effectiveness"].value) == (0, 0, 0)
    assert "invalid" in s["tool_rationality"].reason

    # the new name with the wrong product: half credit for the right tool
    wrong = json.loads(json.dumps(args).replace('"102"', '"101"'))
    _, s = scores([_call("load_skill", {"skill_id": skill}), _call(tool, wrong), CHECK_CARD], ref, manifest=manifest)
    assert s["tool_rationality"].value == 0.5 and s["effectiveness"].value == 0


def test_a_reference_not_relabelled_into_the_harness_is_refused(renamed, price):
    manifest, _, _ = renamed
    result = rollout(RIGHT, price, manifest=manifest)
    with pytest.raises(ValueError, match="relabel"):
        tool_rationality(result, manifest, price.room, price)
    with pytest.raises(ValueError, match="relabel"):
        skill_selection(result, manifest, price.room, price)


# --- combine and the length penalty ------------------------------------------------------------------------------


def test_combine_normalises_each_reward_before_the_weighted_sum():
    weights = {"accuracy": 1.0, "effectiveness": 1.0}
    # the same weighted totals per rollout (1, 0, 0, 0) from different mixes
    only_accuracy = [{"accuracy": 1, "effectiveness": 0}] + [{"accuracy": 0, "effectiveness": 0}] * 3
    both = [{"accuracy": 0.5, "effectiveness": 0.5}] + [{"accuracy": 0, "effectiveness": 0}] * 3
    a, b = combine([only_accuracy], weights), combine([both], weights)
    assert a != pytest.approx(b)
    assert b == pytest.approx([2 * x for x in a], rel=1e-4)  # two rewards carry the signal, not one
    sum_first = [normalise([sum(r.values()) for r in g]) for g in (only_accuracy, both)]
    assert sum_first[0] == pytest.approx(sum_first[1])  # what normalising the sum would have collapsed
    assert a[0] > 0 > a[1] and sum(a) == pytest.approx(0, abs=1e-9)


def test_combine_groups_are_independent_and_flat_variance_gives_nothing():
    weights = {"accuracy": 2.0, "tool_rationality": 1.0}
    same = [{"accuracy": 1, "tool_rationality": 0.5}] * 3
    mixed = [{"accuracy": 1, "tool_rationality": 1}, {"accuracy": 0, "tool_rationality": 1}]
    out = combine([same, mixed], weights)
    assert out[:3] == [0.0, 0.0, 0.0]
    assert out[3:] == pytest.approx([2.0, -2.0], rel=1e-4)  # weight 2 on a +/-1 normalised accuracy
    with pytest.raises(ValueError, match="tool_rationality"):
        combine([[{"accuracy": 1}]], weights)


def test_combine_takes_scored_rollouts(price):
    turns = [RIGHT, RIGHT[:2] + [VAGUE], [RIGHT[0], _call("lookup_product", {"link_id": 101}), CHECK_CARD],
             ["**bold**"]]
    group = [scores(t, price)[1] for t in turns]
    adv = combine([group])
    assert adv[0] > adv[1] > adv[2] and adv[0] == max(adv)


def test_reasoning_length_penalty():
    assert reasoning_length_penalty(0, 200, 0.5) == 0
    assert reasoning_length_penalty(200, 200, 0.5) == 0
    assert reasoning_length_penalty(300, 200, 0.5) == pytest.approx(-0.25)
    assert reasoning_length_penalty(5000, 200, 0.5) == -0.5  # capped at coef
    for bad in [(-1, 200, 0.5), (10, 0, 0.5), (10, 200, -1), (math.nan, 200, 0.5)]:
        with pytest.raises(ValueError):
            reasoning_length_penalty(*bad)


def test_length_penalties_are_centred_within_the_group():
    same = [{"accuracy": 1}] * 2
    out = combine([same], {"accuracy": 1.0}, length_penalties=[[0.0, -0.5]])
    assert out == pytest.approx([0.25, -0.25])
    with pytest.raises(ValueError, match="shape"):
        combine([same], {"accuracy": 1.0}, length_penalties=[[0.0]])


def test_reasoning_is_read_from_the_reasoning_channel_and_think_blocks(price):
    thought = "The viewer wants #102, so I look it up."
    outputs = [
        [ChatDelta(reasoning=thought[:20]), ChatDelta(reasoning=thought[20:]), ChatDelta(content=RIGHT[0]),
         ChatDelta(finish_reason="stop")],
        RIGHT[1],
        "<think>price is 29, list 39</think>" + PRICE_102,
    ]
    result = rollout(outputs, price)
    assert result.reason == "ok" and result.reply == PRICE_102
    text = reasoning_text(result)
    assert text == thought + "price is 29, list 39"
    assert reasoning_length_penalty(len(text), 40, 1.0) == pytest.approx(-(len(text) - 40) / 40)
    assert reasoning_text(rollout(RIGHT, price)) == ""
    assert values(score_rollout(result, price.manifest, price.room, price)) == {name: 1.0 for name in REWARDS}


def test_each_reward_has_the_same_signature(price):
    result = rollout(RIGHT, price)
    for fn in (accuracy, effectiveness, tool_rationality, skill_selection):
        assert fn(result, price.manifest, price.room, price).value == 1
