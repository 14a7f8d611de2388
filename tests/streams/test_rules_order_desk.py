"""The one set of rules on an order desk's replies (streams.engine.rules): a name the turn's tools gave (a carrier)
is not an unknown product of the shop's closed catalogue, and a sum stated in the reply is backed by an order's
total or a refund's amount. The live room's checks stay as they were."""

from __future__ import annotations

from streams.engine.rules import judge_turn

SHOP = {"currency": "$", "products": [{"link_id": 1, "title": "Organic cotton tee", "price": 24.0, "stock": 120},
                                      {"link_id": 2, "title": "Wool-lined boots", "price": 129.0, "stock": 18}]}
TRACKING = {"order_id": "A1002", "carrier": "ParcelCo", "tracking_number": "PC7781234",
            "last_scan": "arrived at the Oakland delivery hub"}
REFUND = {"status": "sent", "amount": 72.0, "sent_on": "2026-11-20"}
RETURN = {"return_id": "R-5521", "refund_amount": 48.0}


def judge(reply, results):
    return judge_turn(reply=reply, comments=[{"viewer": "dana", "text": "where is it?"}], room=SHOP,
                      tool_results=results)


def test_a_carrier_the_tools_named_is_not_an_unknown_product():
    j = judge("Order A1002 has shipped with ParcelCo, tracking number PC7781234.", [TRACKING])
    assert "products.unknown" not in j.rules() and j.accuracy == 1, j.problems


def test_a_brand_no_tool_named_is_still_an_unknown_product():
    j = judge("Order A1002 has shipped with ParcelCo. You might also like our HydraGlow serum.", [TRACKING])
    assert [p.message for p in j.problems if p.rule == "products.unknown"] == [
        "names 'HydraGlow', which is not a product of this room"]


def test_refund_sums_are_backed_by_the_refund_results():
    assert judge("The refund of 72 dollars was sent on 2026-11-20.", [REFUND]).accuracy == 1
    assert judge("Your return R-5521 is open; the refund of 48 dollars follows.", [RETURN]).accuracy == 1
    wrong = judge("The refund of 75 dollars was sent on 2026-11-20.", [REFUND])
    assert wrong.accuracy == 0 and "facts.unbacked" in wrong.rules()
