"""The reply rules (streams.engine.rules) on hand-made turns: entity-aware facts, products, intent, text quality,
the judge, and that the hooks, the RL rewards and the HSA judge run the very same functions."""

from __future__ import annotations

import copy
import json

import pytest

from streams.bindings import campaign_state, product_info, shipping_policy, stock
from streams.engine import hooks as H
from streams.engine import rules
from streams.engine.rules import CallRecord, Expectation, ExpectedCall, GoldFact, judge_turn
from streams.engine.rules.base import CHECKS, Problem, TurnView, effect_of, run_check
from streams.engine.rules.claims import extract_claims
from streams.engine.turn import ScriptedBackend, run_turn
from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest


@pytest.fixture(scope="module")
def room():
    return load_demo_room()


def fresh(room):
    return copy.deepcopy(room)


def judge(reply, comment, room, results=(), viewer="ann", **kw):
    return judge_turn(reply=reply, comments=[{"viewer": viewer, "text": comment}], room=room,
                      tool_results=list(results), **kw)


def rules_of(j):
    return set(j.rules())


# --- the four examples ------------------------------------------------------------------------------------


def test_a_threshold_said_as_a_price_for_a_coupon_question(room):
    results = [campaign_state(fresh(room)), shipping_policy(fresh(room))]  # free over $35
    j = judge("AirSilk Hair Dryer is $35 in the flash sale until minute 55 in the flash sale until minute 55.",
              "what's the coupon code?", room, results)
    assert {"facts.wrong_field", "intent.unaddressed", "quality.repeated"} <= rules_of(j)
    assert (j.accuracy, j.effectiveness) == (0, 0)
    why = next(p.message for p in j.problems if p.rule == "facts.wrong_field")
    assert "free-shipping threshold" in why and "AirSilk" in why


def test_a_fragment_of_numbers_is_no_greeting(room):
    j = judge(".55 in the flash sale until minute 29.", "hi!", room)
    assert {"quality.truncated", "intent.unaddressed"} <= rules_of(j) and j.effectiveness == 0


def test_another_products_stock_for_an_efficacy_question(room):
    r = fresh(room)
    r["products"][3]["stock"] = 15  # the cleanser, #104
    j = judge("We have 15 of HydraGlow Serum left.", "does link 103 heal scars?", r, [stock(fresh(r), 104)])
    assert {"facts.wrong_entity", "intent.unaddressed", "intent.wrong_product"} <= rules_of(j)
    assert (j.accuracy, j.effectiveness) == (0, 0)


def test_a_product_not_in_the_catalogue(room):
    j = judge("Retinol Night Cream is $49 right now, down from $65.", "how much is the night cream?", room)
    assert "products.unknown" in rules_of(j) and j.accuracy == 0
    assert "products.unknown" in rules_of(judge("Link #105 is $12 today.", "price of #105?", room))
    # saying it is not here is fine
    j = judge("Sorry ann, we don't sell the Retinol Night Cream here, but check the card for our creams.",
              "how much is the night cream?", room)
    assert "products.unknown" not in rules_of(j)


# --- facts ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, comment, link_ids, rule", [
    ("Barrier Repair Ceramide Moisturizer is $29 right now, down from $39.", "how much is #102?", [102], None),
    ("Barrier Repair Ceramide Moisturizer is $39 right now.", "how much is #102?", [102], "facts.wrong_field"),
    ("It is $29 right now.", "how much is #102?", [102], None),  # the comment's one product
    ("It is $24.9 right now.", "how much is #102?", [102, 101], "facts.wrong_entity"),  # #101's price
    ("HydraGlow Hyaluronic Serum is $19.9 in the flash sale.", "how much is #101?", [101], None),
    ("HydraGlow Hyaluronic Serum is $24.9, you save $9.1.", "how much is #101?", [101], None),
    ("HydraGlow Hyaluronic Serum is $19.9 today, that is 41% off.", "how much is #101?", [101], None),
    ("Barrier Repair Ceramide Moisturizer is $24.9 today.", "how much is #102?", [102, 101], "facts.wrong_entity"),
    ("Only 8 left of Barrier Repair Ceramide Moisturizer.", "how many #102 left?", [102], None),
    ("Only 180 left of Barrier Repair Ceramide Moisturizer.", "how many #102 left?", [102, 101], "facts.wrong_entity"),
    ("Barrier Repair Ceramide Moisturizer is sold out right now.", "is #102 sold out?", [102], "facts.unbacked"),
    ("We have 102 of Barrier Repair Ceramide Moisturizer left.", "how many #102 left?", [102], "facts.unbacked"),
])
def test_a_figure_is_backed_only_for_its_product_and_field(room, reply, comment, link_ids, rule):
    results = [product_info(fresh(room), lid) for lid in link_ids]
    facts = run_check("facts", TurnView(reply, [{"viewer": "ann", "text": comment}], room, results))
    assert [p.rule for p in facts] == ([rule] if rule else []), facts


def test_coupon_and_shipping_figures(room):
    deals = [campaign_state(fresh(room))]
    assert not run_check("facts", TurnView("Use code GLOW5 for $5 off orders from $30.", [], room, deals))
    wrong = run_check("facts", TurnView("Use code GLOW5 for $15 off orders from $30.", [], room, deals))
    assert [p.rule for p in wrong] == ["facts.wrong_entity"]  # $15 is GADGET15's discount
    alaska = [shipping_policy(fresh(room), "Alaska")]
    ok = "Delivery to Alaska takes 7-10 business days, free over $60."
    assert not run_check("facts", TurnView(ok, [], room, alaska))
    late = run_check("facts", TurnView("Delivery to Alaska takes 3-5 business days, free over $60.", [], room, alaska))
    assert [p.rule for p in late] == ["facts.unbacked"] and "delivery" in late[0].message
    both = alaska + [shipping_policy(fresh(room))]
    mixed = run_check("facts", TurnView("Delivery to Alaska takes 7-10 business days, free over $35.", [], room, both))
    assert [p.rule for p in mixed] == ["facts.wrong_entity"]  # $35 is the default region's threshold


def test_claims_know_their_field():
    claims = extract_claims("It is $29 right now, down from $39, free over $35, $5 off orders from $30, 26% off and "
                            "only 8 left.")
    assert [(c.text, c.field) for c in claims] == [
        ("$29", "price"), ("$39", "list_price"), ("$35", "threshold"), ("$5 off", "amount_off"), ("$30", "threshold"),
        ("26% off", "percent_off"), ("8 left", "stock")]
    assert [c.field for c in extract_claims("Returns are free within 30 days, delivery takes 3-5 business days.")] == [
        "return_days", "delivery_days"]
    assert not extract_claims("Not sold out yet! Link 102 comes in 3 sizes.")


def test_results_without_a_product_back_any_product():
    assert not run_check("facts", TurnView("The serum is $24.90.", [], None, [{"price": 24.9}]))
    assert run_check("facts", TurnView("The serum is $24.90.", [], None, []))


# --- intent ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, comment, rule", [
    ("HydraGlow Hyaluronic Serum is $19.9 in the flash sale until minute 55.", "what coupon can I use?",
     "intent.unaddressed"),
    ("Use code GLOW5 for $5 off orders from $30.", "any deals today?", None),  # a deal question: a coupon answers
    ("HydraGlow Hyaluronic Serum is $19.9 in the flash sale until minute 55.", "any deals today?", None),
    ("Only 6 left of AirSilk Ionic Hair Dryer, so be quick.", "how much is the dryer?", "intent.unaddressed"),
    ("AirSilk Ionic Hair Dryer is $59 right now, only 6 left.", "how much is the dryer and how many are left?", None),
    ("HydraGlow Hyaluronic Serum is $19.9 in the flash sale.", "how much is the dryer?", "intent.wrong_product"),
    ("HydraGlow Hyaluronic Serum is $19.9 in the flash sale.", "how much is #999?", "intent.wrong_product"),
    ("Sorry ann, I could not find that link, please check the number on the card.", "how much is #999?", None),
    # a shipping cost is not a product's price (the glow-gadget adapter answered this with LumiRoll's price)
    ("LumiRoll Heated Eye Massager is $35 right now, down from $49.", "what does shipping to Alaska cost?",
     "intent.unaddressed"),
    ("LumiRoll Heated Eye Massager is $35 right now.", "how much is shipping to Hawaii?", "intent.unaddressed"),
    ("Delivery to Alaska takes 7-10 business days, free over $60.", "what does shipping to Alaska cost?", None),
    ("AirSilk Ionic Hair Dryer is $59 right now.", "how much is the dryer and does it ship to Alaska?", None),
    ("Hi ann, welcome to the room!", "hello from Texas", None),
    ("Hi ann, welcome to the room!", "how much is #101?", "intent.unaddressed"),
    ("Hi dev, welcome to the room!", "hello from Texas", "intent.wrong_viewer"),
    ("Barrier Repair Ceramide Moisturizer is a cosmetic, so I cannot promise it fixes acne; please ask a "
     "dermatologist.",
     "does #102 cure eczema?", "intent.wrong_condition"),
    ("Barrier Repair Ceramide Moisturizer is a cosmetic, so I cannot promise it fixes eczema; please ask a "
     "dermatologist.", "does #102 cure eczema?", None),
    ("We only sell right here in the live room, friends!", "DM me on telegram for a cheaper deal", None),  # spam
    ("Lovely to see you!", "watching from home", None),  # nothing asked: not judged
])
def test_the_reply_answers_what_was_asked(room, reply, comment, rule):
    results = [product_info(fresh(room), lid) for lid in (101, 102, 202)] + [campaign_state(fresh(room))]
    found = {p.rule for p in judge(reply, comment, room, results).problems if p.rule.startswith("intent.")}
    assert found == ({rule} if rule else set()), found


# --- text quality ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, rule", [
    ("Use code GLOW5 for $5 off orders from $30 for $5 off orders from $30.", "quality.repeated"),
    ("So be quick so be quick so be quick, friends.", "quality.repeated"),
    (", and the serum is lovely.", "quality.truncated"),
    ("ydraGlow Hyaluronic Serum is lovely.", "quality.truncated"),
    ("arrier Repair Ceramide Moisturizer is lovely.", "quality.truncated"),
    ("The serum is lovely and", "quality.truncated"),
    ("The serum is lovely for $", "quality.truncated"),
    ("HydraGlow Hyaluronic Serum is lovely in the fla", "quality.truncated"),
    ("The serum <|im_end|> is lovely.", "quality.garbled"),
    ("The {title} is lovely.", "quality.garbled"),
    ("The serum is $ lovely today.", "quality.garbled"),
    ("The seruuuuuum is lovely.", "quality.garbled"),
    ("... !", "quality.empty"),
    ("", "quality.empty"),
])
def test_broken_text(room, reply, rule):
    found = [p.rule for p in run_check("quality", TurnView(reply, [{"viewer": "ann", "text": "hi"}], room, []))]
    assert rule in found, found


@pytest.mark.parametrize("reply", [
    "Hi ann, welcome to the room!", "hi ann, very very happy to see you", "Hello hello, welcome in!",
    "Daily Shield Mineral Sunscreen SPF 50 PA++++ is $19.5 right now.", "Delivery takes 3-5 business days",
    "Delivery to Alaska takes 7-10 business days, to Hawaii takes 7-10 business days too.",
    "19.9 dollars is the flash price.", "The flash sale is over", "GLOW5 is yours, $5 off orders from $30.",
])
def test_clean_text_passes(room, reply):
    assert run_check("quality", TurnView(reply, [{"viewer": "ann", "text": "hi"}], room, [])) == []


# --- the judge ------------------------------------------------------------------------------------------------------


def test_judge_with_gold(room):
    results = [product_info(fresh(room), 102)]
    gold = Expectation(facts=(GoldFact("29", 102, "price"),),
                       calls=(ExpectedCall("catalog.product_info", {"link_id": 102}),), reply_skills=("price_stock",))
    calls = [CallRecord("catalog.product_info", {"link_id": 102})]
    ok = judge("Barrier Repair Ceramide Moisturizer is $29 right now.", "how much is #102?", room, results,
               expectation=gold, calls=calls, loaded_skills=["price_stock"], manifest=load_tiny_manifest())
    assert (ok.accuracy, ok.effectiveness, ok.problems, ok.skills_ok) == (1, 1.0, (), True)
    vague = judge("Barrier Repair Ceramide Moisturizer has a lovely price today.", "how much is #102?", room,
                  results, expectation=gold, calls=calls)
    assert (vague.accuracy, vague.effectiveness) == (1, 0.5) and "fact 29 not stated" in vague.effectiveness_reason
    other = judge("Sorry ann, please check the card for the price.", "how much is #102?", room,
                  [product_info(fresh(room), 101)], expectation=gold,
                  calls=[CallRecord("catalog.product_info", {"link_id": 101})])
    assert other.effectiveness == 0 and "expect.wrong_product" in other.rules()
    forbidden = judge("Barrier Repair Ceramide Moisturizer is $29, the cheapest in town.", "how much is #102?",
                      room, results, expectation=Expectation(forbidden_claims=("cheapest in town",)))
    assert forbidden.accuracy == 0 and "claims.gold_forbidden" in forbidden.rules()
    contradicts = judge("Barrier Repair Ceramide Moisturizer is $29 right now.", "how much is #102?", room, results,
                        expectation=Expectation(facts=(GoldFact("31", 102, "price"),)))
    assert "facts.gold" in contradicts.rules()
    assert json.loads(json.dumps(ok.as_dict()))["effectiveness"] == 1.0


def test_a_fallback_line_is_judged_with_nothing_behind_it(room):
    j = judge("It is only $29 today, grab it!", "how much is #102?", room, [product_info(fresh(room), 102)],
              outcome="retries_exhausted")
    assert (j.accuracy, j.effectiveness) == (0, 0) and "turn.fallback" in j.rules()
    j = judge(H.DEFAULT_FALLBACK_REPLY, "how much is #102?", room, outcome="retries_exhausted")
    assert (j.accuracy, j.effectiveness) == (1, 0) and j.accuracy_reason == "fallback line states no facts"


def test_effects():
    assert effect_of("facts.wrong_field") == "accuracy" and effect_of("products.unknown") == "accuracy"
    assert effect_of("intent.unaddressed") == "effectiveness" and effect_of("quality.truncated") == "effectiveness"
    assert effect_of("quality.repeated") == "partial" and effect_of("intent.wrong_viewer") == "partial"
    assert effect_of("format") == "partial" and effect_of("skills.reply") == "none"


# --- the hooks guard live replies with the same rules --------------------------------------------------------------


def _call(name, args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def test_a_live_turn_retries_what_the_rules_catch(room):
    manifest = load_tiny_manifest()
    outputs = [_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 202}),
               "AirSilk Hair Dryer is $35 in the flash sale.",  # another figure for the dryer
               "AirSilk Ionic Hair Dryer is $59 right now, down from $89."]
    r = run_turn(manifest=manifest, room=fresh(room), comments=[{"viewer": "ann", "text": "how much is the dryer?"}],
                 backend=ScriptedBackend(outputs))
    assert r.reason == "ok" and r.reply == outputs[-1] and r.timings.retries == 1
    failed = [e for e in r.events if e.type == "hook_result" and not e.passed]
    assert [e.hook_id for e in failed] == ["factual-risk"] and "facts.unbacked" in failed[0].detail
    retry = next(e for e in r.events if e.type == "retry")
    assert "Only say prices and stock" in retry.message


def test_hook_messages_say_what_to_fix(room):
    manifest = load_tiny_manifest()
    state = H.ReplyState("Retinol Night Cream is lovely, welcome!", ["chit_chat"], [],
                         [{"viewer": "ann", "text": "how much is the night cream?"}], room)
    failed = {v.hook_id: v for v in H.run_before_reply(manifest, state) if not v.passed}
    assert "Name only products of this room" in failed["factual-risk"].message
    assert "Answer what the viewer asked: its price" in failed[H.RELEVANCE_HOOK_ID].message
    state = H.ReplyState("Hi ann, welcome welcome welcome!", ["chit_chat"], [], [{"viewer": "ann", "text": "hi"}],
                         room)
    quality = next(v for v in H.run_before_reply(manifest, state) if v.hook_id == H.QUALITY_HOOK_ID)
    assert not quality.passed and "repeating" in quality.message


# --- one implementation ---------------------------------------------------------------------------------------------


def test_hooks_rewards_and_judges_share_one_implementation(room, monkeypatch):
    """Replacing one registered check changes the runtime hook, the judge, the RL rewards and the HSA judge."""
    from streams.reference_policy import GoldComment, gold_trajectory
    from training_jobs.hat import rewards
    from training_jobs.hsa import judging
    from training_jobs.hsa.regenerate import RegenerateSettings, rule_check
    from training_jobs.hsa.samples import from_gold_trajectory

    manifest = load_tiny_manifest()
    traj = gold_trajectory(manifest, fresh(room), GoldComment("how much is #102?", "price", "max", link_id=102))
    ref = from_gold_trajectory(traj, manifest, room, [{"viewer": "max", "text": "how much is #102?"}], source="test")
    outputs = [_call("load_skill", {"skill_id": "price_stock"}), _call("lookup_product", {"link_id": 102}),
               traj.reply]
    result = run_turn(manifest=manifest, room=fresh(room), comments=[dict(c) for c in ref.comments],
                      backend=ScriptedBackend(outputs))
    prompt = next(e.message_count for e in result.events if e.type == "prompt_built")
    state = H.ReplyState(traj.reply, ["price_stock"], [traj.tool_result], list(ref.comments), room)
    assert all(v.passed for v in H.run_before_reply(manifest, state))
    assert rewards.accuracy(result, manifest, room, ref).value == 1
    assert rewards.effectiveness(result, manifest, room, ref).value == 1
    assert rule_check(manifest, ref, result, prompt, RegenerateSettings()).passed

    # every caller reaches the checks through the one registry, at call time
    assert H.run_check is rules.run_check and judging.rules is rules
    calls: list[str] = []

    def invented_fact(turn, **params):
        calls.append(turn.reply)
        return [Problem("facts.unbacked", "replaced rule")]

    def broken_text(turn, **params):
        calls.append(turn.reply)
        return [Problem("quality.garbled", "replaced rule")]

    monkeypatch.setitem(CHECKS, "facts", invented_fact)
    monkeypatch.setitem(CHECKS, "quality", broken_text)
    failed = {v.hook_id for v in H.run_before_reply(manifest, H.ReplyState(
        traj.reply, ["price_stock"], [traj.tool_result], list(ref.comments), room)) if not v.passed}
    assert failed == {"factual-risk", H.QUALITY_HOOK_ID}
    j = judging.judge_result(result, manifest, room, judging.expectation_from_sample(manifest, ref))
    assert (j.accuracy, j.effectiveness) == (0, 0) and "replaced rule" in j.accuracy_reason
    assert rewards.accuracy(result, manifest, room, ref).value == 0
    assert rewards.effectiveness(result, manifest, room, ref).value == 0
    assert "inaccurate" in rule_check(manifest, ref, result, prompt, RegenerateSettings()).reasons
    assert calls and set(calls) == {traj.reply}


@pytest.mark.parametrize(("text", "fact", "stated"), [
    ("It is $19.9 now", "19.9", True), ("It is $119.9", "19.9", False), ("It is 19.95", "19.9", False),
    ("3-5 business days", "3-5 business days", True), ("GLOW5!", "GLOW5", True),
    ("A refund of 54 goes back", "54.0", True), ("It is 19.90 now", "19.9", True), ("12.5 left", "12", False),
])
def test_a_fact_is_stated_in_any_written_form_of_its_number(text, fact, stated):
    from training_jobs.tiny_model.evaluate import _states

    assert rules.states(text, fact) is stated
    assert _states(text, [fact]) is stated  # the tiny model's evaluation reads facts the same way


# --- another harness's field names --------------------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "rule"), [
    ("We have 14 of the Trail Tee in size L in stock.", None),  # the desk's `in_stock`: the stock field
    ("We have 15 of the Trail Tee in size L in stock.", "facts.unbacked"),
    ("The Trail Tee is $24.5 each.", None),  # `unit_price`: the price
    ("The Trail Tee is $30 each.", "facts.wrong_field"),  # `regular_price`: the list price, said as the price
])
def test_figures_under_another_harness_field_names(room, reply, rule):
    result = {"sku": "TEE-L", "title": "Trail Tee", "in_stock": 14, "unit_price": 24.5, "regular_price": 30}
    facts = run_check("facts", TurnView(reply, [{"viewer": "dana", "text": "is the tee in L in stock?"}], room,
                                        [result]))
    assert [p.rule for p in facts] == ([rule] if rule else []), facts
