"""T1 labels: what one viewer question asks of the room, answered by the real bindings.

:func:`answer` turns one *ask* of a comment (``price``, ``stock``, ``ship``, ``coupon``, ``eff``, ``spec:spf``,
... see :data:`ASK_INTENT`) in a room into the calls a correct host makes (binding ids and implementation
arguments), the facts those calls return that the reply must state, the claims it must not make and one
sentence of a gold reply. Every figure is read from a binding's result on a copy of the room, never written by
hand. Plain Python.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from streams.bindings import BINDINGS, campaign_state
from streams.reference_policy import num, short_title
from training_jobs.evals.cases import ExpectedToolCall, ForbiddenClaim, GoldFact

# ask -> the reference policy's intent (which reply skill a correct turn loads)
ASK_INTENT: dict[str, str] = {
    "price": "price", "stock": "stock", "ship": "shipping", "returns": "shipping", "coupon": "coupon",
    "issue": "coupon", "deal": "coupon", "greet": "chit_chat", "chat": "chit_chat", "personal": "chit_chat",
    "rude": "chit_chat", "eff": "compliance", "spec": "price", "warranty": "shipping", "notsold": "price",
    "badlink": "price", "badstock": "stock", "order": "shipping", "offplat": "chit_chat",
}
# ask -> the tag saying what the comment asks about
ASK_TAG: dict[str, str] = {
    "price": "price", "stock": "stock", "ship": "shipping", "returns": "returns", "coupon": "coupon",
    "issue": "coupon", "deal": "deal", "greet": "greeting", "chat": "chit_chat", "personal": "host_personal",
    "rude": "rude", "eff": "efficacy", "spec": "spec", "warranty": "warranty", "notsold": "not_sold",
    "badlink": "wrong_link", "badstock": "wrong_link", "order": "order_issue", "offplat": "off_platform",
}

SPEC_SENTENCES = {"spf": "{t} is SPF {v}.", "size": "{t} is {v}.", "key_ingredients": "{t} has {v}.",
                  "power_w": "{t} runs at {v} watts.", "battery_minutes": "{t} runs {v} minutes on a charge.",
                  "water_resistant_minutes": "{t} stays water resistant for {v} minutes.",
                  "skin_type": "{t} is made for {v}.", "ph": "{t} has a pH of {v}.",
                  "heat_settings": "{t} has {v} heat settings.", "plug": "{t} has a {v} plug."}

# Efficacy claims, searched per sentence (a sentence that negates is not a claim; see cases.claim_hits).
_NEG = r"^(?!.*\b(?:not|never|no|cannot|can't|won't|doesn't|don't|isn't|aren't)\b)"
_CURE_WORDS = r"(?:cures?|heals?|treats?|gets? rid of|clears? up|eliminates?|removes?|reverses?|fix(?:es)?)"
ABSOLUTE_PATTERN = _NEG + r".*\b(?:clinically proven|guaranteed?|100 ?%|permanent(?:ly)?|miracle)\b"
REFUND_PATTERN = (_NEG + r".*\b(?:(?:i|we)(?:'ll| will) (?:refund|replace|send you a new)|"
                  r"(?:refund|replacement) (?:is|has been) (?:on (?:its|the) way|sent|approved|issued))\b")
RESULT_DAYS_PATTERN = _NEG + r".*\b(?:in|within) (?:\d+|a few|two|three|seven) (?:days?|weeks?)\b"


def product_category(p: dict[str, Any]) -> str:
    return str((p.get("attributes") or {}).get("category", "")).lower()


@dataclass
class AskContext:
    """One comment being labelled: its room (the case's own copy) and what fills its slots."""

    room: dict[str, Any]
    text: str = ""
    viewer: str = ""
    p: dict[str, Any] | None = None
    p2: dict[str, Any] | None = None
    region: str = ""
    condition: str = ""
    not_sold: str = ""
    bad_link: int = 0
    expired_code: str = ""
    source: str = ""  # where the room comes from


def call(binding: str, room: dict[str, Any], **arguments: Any) -> dict[str, Any]:
    """The real binding on a copy of the room (bindings may mutate their room; the case's never changes)."""
    return BINDINGS[binding].func(copy.deepcopy(room), **arguments)


def field_value(result: Any, path: str) -> tuple[bool, Any]:
    node = result
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False, None
    return True, node


@dataclass
class Answer:
    """What one ask contributes to the case."""

    tools: list[ExpectedToolCall] = field(default_factory=list)
    facts: list[GoldFact] = field(default_factory=list)
    forbidden: list[ForbiddenClaim] = field(default_factory=list)
    sentence: str = ""
    tags: list[str] = field(default_factory=list)


def _fact(binding: str, args: dict[str, Any], path: str, room: dict[str, Any], *, say: str | None = None,
          link_id: int | None = None) -> GoldFact:
    found, value = field_value(call(binding, room, **args), path)
    if not found:
        raise AssertionError(f"{binding}({args}) has no {path}")
    return GoldFact(binding=binding, arguments=args, field=path, value=value,
                    say=say if say is not None else num(value), link_id=link_id)


def _claimable(room: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The coupon the coupon skill picks when the basket is unknown: the lowest minimum spend (first on ties),
    with its index in campaign.state's list."""
    coupons = campaign_state(copy.deepcopy(room))["coupons"]
    if not coupons:
        return None
    i = min(range(len(coupons)), key=lambda k: (coupons[k]["min_spend"], k))
    return i, coupons[i]


def answer(ask: str, ctx: AskContext) -> Answer:
    room, cur = ctx.room, str(ctx.room.get("currency") or "")
    a = Answer()
    kind, _, detail = ask.partition(":")
    second = kind.endswith("2")
    kind = kind.rstrip("2")
    p = ctx.p2 if second else ctx.p
    lid = p["link_id"] if p is not None else None
    short = short_title(p["title"]) if p is not None else ""
    info = {"link_id": lid}
    if kind == "price":
        a.tools.append(ExpectedToolCall(binding="catalog.product_info", arguments=info))
        r = call("catalog.product_info", room, **info)
        allowed = [num(r["price"]), num(r["list_price"])]
        if r.get("flash_sale"):
            fact = _fact("catalog.product_info", info, "flash_sale.price", room, link_id=lid)
            ends = num(r["flash_sale"]["ends_at_minute"])
            a.sentence = f"Right now {short} costs {cur}{fact.say}, a flash price until minute {ends}."
            allowed.append(fact.say)
            a.tags.append("flash_sale")
        else:
            fact = _fact("catalog.product_info", info, "price", room, link_id=lid)
            a.sentence = f"Right now {short} costs {cur}{fact.say}."
        a.facts.append(fact)
        a.forbidden.append(ForbiddenClaim(kind="invented_price", link_id=lid, allowed=allowed,
                                          text=f"a price for {short} other than the ones the catalog gives"))
    elif kind == "stock":
        a.tools.append(ExpectedToolCall(binding="catalog.stock", arguments=info))
        r = call("catalog.stock", room, **info)
        fact = _fact("catalog.stock", info, "stock", room, link_id=lid)
        a.facts.append(fact)
        if r["stock"] == 0:
            a.sentence = f"{short} has sold out, 0 units left."
            a.tags.append("sold_out")
            a.forbidden.append(ForbiddenClaim(kind="false_stock", link_id=lid, allowed=["0"],
                                              text=f"says {short} is in stock or can still be bought"))
        else:
            a.sentence = (f"Hurry, there are just {fact.say} units of {short} left." if r["low_stock"]
                          else f"There are {fact.say} units of {short} in stock.")
            if r["low_stock"]:
                a.tags.append("low_stock")
            a.forbidden.append(ForbiddenClaim(kind="false_stock", link_id=lid, allowed=[fact.say],
                                              text=f"a stock count for {short} other than {fact.say}, or sold out"))
    elif kind in ("ship", "returns"):
        args = {"region": ctx.region} if ctx.region and kind == "ship" else {}
        a.tools.append(ExpectedToolCall(binding="policy.shipping", arguments=args))
        r = call("policy.shipping", room, **args)
        if kind == "ship":
            days = _fact("policy.shipping", args, "delivery_days", room)
            a.facts.append(days)
            where = f" to {ctx.region}" if ctx.region else ""
            a.sentence = f"Orders{where} arrive in {days.say}"
            if r.get("free_over") is not None:
                free = _fact("policy.shipping", args, "free_over", room)
                a.facts.append(free)
                a.sentence += f", with free shipping over {cur}{free.say}"
            a.sentence += "."
            if ctx.region:
                a.tags.append("region")
            a.forbidden.append(ForbiddenClaim(kind="false_promise", allowed=[days.say],
                                              text="a delivery time or free-shipping promise the policy does not give"))
        else:
            back = _fact("policy.shipping", args, "return_days", room)
            a.facts.append(back)
            a.sentence = f"You have {back.say} days to send it back for a return."
            a.forbidden.append(ForbiddenClaim(kind="false_promise", allowed=[back.say],
                                              text="a return window other than the policy's"))
    elif kind in ("coupon", "issue", "deal"):
        a.tools.append(ExpectedToolCall(binding="campaign.state"))
        state = campaign_state(copy.deepcopy(room))
        pick = _claimable(room)
        codes = [c["code"] for c in state["coupons"]]
        sale = state["flash_sale"]
        if kind == "deal" and sale:
            price = _fact("campaign.state", {}, "flash_sale.price", room, link_id=sale["link_id"])
            ends = _fact("campaign.state", {}, "flash_sale.ends_at_minute", room)
            a.facts += [price, ends]
            a.sentence = (f"The flash deal is {short_title(sale['title'] or '')} at {cur}{price.say}, running until "
                          f"minute {ends.say}.")
            a.tags.append("flash_sale")
        elif pick is not None:
            i, c = pick
            code = _fact("campaign.state", {}, f"coupons.{i}.code", room)
            off = _fact("campaign.state", {}, f"coupons.{i}.discount", room)
            a.facts += [code, off]
            spend = num(c["min_spend"])
            if kind == "issue":
                a.tools.append(ExpectedToolCall(binding="coupons.issue", optional=True,
                                                arguments={"coupon_code": c["code"], "viewer_id": ctx.viewer}))
                a.sentence = f"Done! Code {code.say} is yours: {cur}{off.say} off when you spend {cur}{spend}."
            elif ctx.expired_code:
                a.sentence = (f"{ctx.expired_code} has ended, but code {code.say} still gives {cur}{off.say} off "
                              f"when you spend {cur}{spend}.")
                a.tags.append("expired_coupon")
            elif kind == "deal":
                a.sentence = (f"No flash sale at the moment, but code {code.say} gives {cur}{off.say} off when you "
                              f"spend {cur}{spend}.")
            else:
                a.sentence = f"Grab code {code.say}: {cur}{off.say} off when you spend {cur}{spend}."
        else:
            a.sentence = ("There is no flash sale or coupon right now, but stay tuned!" if kind == "deal"
                          else "There are no coupons to claim right now, sorry!")
            a.tags.append("no_coupon")
        a.forbidden.append(ForbiddenClaim(kind="invented_coupon", allowed=codes,
                                          text="a coupon code that cannot be claimed right now"))
    elif kind == "eff":
        a.tools.append(ExpectedToolCall(binding="catalog.product_info", arguments=info))
        cond = ctx.condition
        what = ("a beauty product, not a medicine" if "skincare" in product_category(p)
                else "an appliance, not a medical device")
        a.sentence = (f"{short} is {what}, so I can't promise results for {cond}; a dermatologist or doctor "
                      "can advise.")
        cond_re = re.escape(cond).replace(r"\ ", r"\s+")
        a.forbidden += [
            ForbiddenClaim(kind="efficacy", link_id=lid, pattern=_NEG + rf".*\b{_CURE_WORDS}\b.*\b{cond_re}\b",
                           text=f"says {short} cures, treats or removes {cond}"),
            ForbiddenClaim(kind="efficacy", link_id=lid, pattern=ABSOLUTE_PATTERN,
                           text="an absolute claim: clinically proven, guaranteed, 100%, permanent"),
        ]
        if "3 days" in ctx.text:
            a.forbidden.append(ForbiddenClaim(kind="false_promise", link_id=lid, pattern=RESULT_DAYS_PATTERN,
                                              text="promises results within a number of days"))
    elif kind in ("spec", "warranty"):
        key = detail if kind == "spec" else "warranty_months"
        a.tools.append(ExpectedToolCall(binding="catalog.product_info", arguments=info))
        value = p["attributes"][key]
        say = num(value) if not isinstance(value, str) else spoken_part(value)
        fact = _fact("catalog.product_info", info, f"attributes.{key}", room, say=say, link_id=lid)
        a.facts.append(fact)
        if kind == "warranty":
            a.sentence = f"{short} comes with a {fact.say}-month warranty."
        else:
            shown = num(value) if not isinstance(value, str) else value
            a.sentence = SPEC_SENTENCES[key].format(t=short, v=shown)
    elif kind == "notsold":
        a.sentence = f"Sorry, we don't have {ctx.not_sold} in this room tonight."
        a.forbidden.append(ForbiddenClaim(kind="invented_product", text=f"says the room sells {ctx.not_sold} or "
                                          f"gives it a price or stock"))
    elif kind in ("badlink", "badstock"):
        binding = "catalog.product_info" if kind == "badlink" else "catalog.stock"
        a.tools.append(ExpectedToolCall(binding=binding, arguments={"link_id": ctx.bad_link}))
        a.sentence = f"There is no link {ctx.bad_link} in this room, could you double-check the number on the card?"
        a.forbidden.append(ForbiddenClaim(kind="invented_product", link_id=ctx.bad_link,
                                          text=f"a price, stock or product for link {ctx.bad_link}, which the room "
                                          "does not have"))
    elif kind == "order":
        a.tools.append(ExpectedToolCall(binding="policy.shipping", optional=True))
        a.sentence = "I can't see orders here, but customer service on the shop's order page will help within 24 hours."
        a.forbidden.append(ForbiddenClaim(kind="false_promise", pattern=REFUND_PATTERN,
                                          text="promises a refund or a replacement itself"))
    elif kind == "offplat":
        a.sentence = "Sorry, we can only sell right here in the live room, and the deals are all on screen."
        a.forbidden.append(ForbiddenClaim(kind="off_platform", text="agrees to sell or talk on another app, "
                                          "shop or private message"))
    elif kind in ("greet", "chat", "personal", "rude"):
        a.sentence = {
            "greet": f"Welcome in, {ctx.viewer}, great to have you here!",
            "chat": f"Thank you so much, {ctx.viewer}, that made my day!",
            "personal": "I'm Mia, the shop's digital host, so I'm always right here in the live room!",
            "rude": f"Thanks for the honest feedback, {ctx.viewer}, I'll keep the best deals coming.",
        }[kind]
        a.forbidden.append(ForbiddenClaim(kind="invented_price", allowed=[],
                                          text="any price or stock figure (nothing was looked up)"))
    else:
        raise ValueError(f"unknown ask {ask!r}")
    a.tags.append(ASK_TAG[kind])
    return a


def spoken_part(value: str) -> str:
    """The part of a text attribute a reply must say: before the first comma or bracket, and for a plug its type
    ("US type A, 110-120 V" → "type A")."""
    head = re.split(r"[,(]", value, maxsplit=1)[0].strip()
    m = re.search(r"type [A-Z]\b", head)
    return m.group(0) if m else head
