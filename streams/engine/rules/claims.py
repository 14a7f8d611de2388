"""The figures a reply states — prices, stock counts, discounts — with what each one is (its *field*) and what
it is about (its product, coupon or shipping region).

:func:`extract_claims` finds them (a span is claimed by the first pattern that takes it) and reads the field
from the words around the figure:

- ``price`` — a money figure with no other cue ("is $24.9", "19.9 dollars");
- ``list_price`` — after "down from", "was", "list price", "regularly", "originally", "usually", ...;
- ``threshold`` — a minimum spend or free-shipping line: "free over $35", "orders from $30", "spend $50";
- ``amount_off`` / ``percent_off`` — "$5 off", "save $10", "26% off";
- ``stock`` — "8 left", "stock is 8", "we have 15 of X left", "sold out" (0);
- ``delivery_days`` / ``return_days`` (category ``delivery``) — "takes 3-5 business days", "ships in 2 days",
  "30-day returns" (a number of days with a delivery or returns word before it in its sentence).

:func:`attribute` then ties each claim to the product the reply names nearest to it (same sentence first,
before it, then after it; else an earlier sentence), else to the one product the comments ask about; and to
a coupon code or shipping region named in the same sentence. Plain Python.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from streams.engine.rules.base import TurnView, sentence_bounds, sentence_of
from streams.engine.rules.entities import (
    catalogue_of,
    comment_products,
    coupon_mentions,
    region_mentions,
    reply_mentions,
)

CUR = r"(?:[$¥€£￥]|US\$|RMB\s?)"
NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
UNIT = r"(?:dollars?|bucks|usd|yuan|rmb|euros?|pounds?|元|块)"
_STOCK_TAIL = r"(?:left|remaining|in stock|still available|available)\b"
CLAIM_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("discount", re.compile(rf"(?P<n>{NUM})\s*(?:%|percent)\s*(?:off|discount|cheaper|less|saving)", re.I)),
    ("discount", re.compile(
        rf"\b(?:save|saving|savings of|discount of|knock(?:s|ed)? off)\s+(?:you\s+)?(?:of\s+)?{CUR}?\s*(?P<n>{NUM})",
        re.I)),
    ("discount", re.compile(rf"{CUR}\s*(?P<n>{NUM})\s*(?:off|discount|cheaper|less)\b", re.I)),
    ("discount", re.compile(rf"(?P<n>{NUM})\s*{UNIT}\s*(?:off|discount|cheaper|less)\b", re.I)),
    ("price", re.compile(rf"{CUR}\s*(?P<n>{NUM})", re.I)),
    ("price", re.compile(rf"(?P<n>{NUM})\s*{UNIT}(?![a-z])", re.I)),
    ("stock", re.compile(
        rf"(?P<n>{NUM})\s*(?:units?|pieces?|pcs|items?|bottles?|sets?|of them)?\s*{_STOCK_TAIL}", re.I)),
    ("stock", re.compile(
        rf"\b(?:stock|inventory)\s*(?:of|is|at|level|count|:)?\s*(?:is\s+)?(?:only\s+|just\s+)?(?P<n>{NUM})\b", re.I)),
    # "we have 15 of HydraGlow Serum left", "only 3 of the dryers left": the product sits between
    ("stock", re.compile(
        rf"\b(?:have|has|got|only|just|there(?:'s| is| are))\s+(?:only\s+|just\s+)?(?P<n>{NUM})\s+"
        rf"(?:units?\s+|pieces?\s+|bottles?\s+)?(?:of\s+)?[^\d.!?,;$]{{1,60}}?\s{_STOCK_TAIL}", re.I)),
)
# Delivery and return times: "takes 3-5 business days", "ships in 2 days", "30-day returns".
_DAYS_RE = re.compile(r"(?<![\d.])(?P<d>\d{1,3}(?:\s*(?:-|–|to)\s*\d{1,3})?)[\s-]*(?:business\s+|working\s+|calendar\s+)?"
                      r"days?\b", re.I)
_RETURN_CUE_RE = re.compile(r"\b(?:return\w*|refund\w*|exchange\w*)\b", re.I)
_DELIVERY_CUE_RE = re.compile(r"\b(?:deliver\w*|ship\w*|arriv\w*|takes?|get\s+(?:it|there|to\s+you|here))\b", re.I)
_SOLD_OUT_RE = re.compile(r"\b(?:sold\s+out|out\s+of\s+stock)\b", re.I)
_NEGATION_BEFORE_RE = re.compile(r"\b(?:not|never|isn't|aren't|wasn't|no|nor)\b[^.!?,;]{0,20}$|n't\s+\w*\s*$", re.I)
_QUESTION_BEFORE_RE = re.compile(r"\b(?:if|whether|before|until|when)\b[^.!?,;]{0,25}$", re.I)

_THRESHOLD_BEFORE_RE = re.compile(
    r"(?:\bfree\b[^.!?;]{0,30}?|\b(?:orders?|purchases?|spend(?:ing)?|baskets?|carts?|buy(?:ing)?|minimum)\b"
    r"[^.!?;$]{0,12}?)\b(?:over|above|from|of|at least|more than|past|min(?:imum)?)\s*$"
    r"|\b(?:min(?:imum)?(?:\s+spend)?|spend(?:ing)?|over|above|at least)\s*(?:of\s*)?$", re.I)
_LIST_BEFORE_RE = re.compile(
    r"\b(?:down from|reduced from|cut from|marked down from|was|were|list(?:ed)?(?:\s+price)?(?:\s+(?:is|of|was|at))?|"
    r"regular(?:ly)?(?:\s+price)?(?:\s+(?:is|of))?|original(?:ly)?(?:\s+price)?(?:\s+(?:is|of))?|usually|normally|"
    r"retails?(?:\s+(?:at|for))?|instead of|rrp|msrp|full price(?:\s+(?:is|of))?|compared to)\s*(?:at\s*)?$", re.I)
_LIST_AFTER_RE = re.compile(r"^\s*(?:list(?:\s+price)?|regular(?:\s+price)?|before|originally)\b", re.I)


@dataclass(frozen=True, slots=True)
class Claim:
    """A figure the reply states. ``category``: price / stock / discount (what the factual-risk hook's ``check``
    names); ``field``: what it claims to be (module docstring); ``link_id`` / ``coupon`` / ``region``: what it
    is about, once :func:`attribute` has run (None: not named)."""

    category: str
    text: str
    value: float
    span: tuple[int, int] = (0, 0)
    field: str = ""
    link_id: int | None = None
    coupon: str | None = None
    region: str | None = None
    days: str = ""  # a delivery time as "lo-hi" or "n" (category "delivery")


def number(text: str) -> float | None:
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _field(reply: str, category: str, start: int, end: int, text: str) -> str:
    if category == "stock":
        return "stock"
    if category == "discount":
        percent = re.search(r"%|percent", text, re.I) or re.match(r"\s*(?:%|percent)", reply[end:], re.I)
        return "percent_off" if percent else "amount_off"
    before = reply[max(0, start - 48):start]
    if _THRESHOLD_BEFORE_RE.search(before):
        return "threshold"
    if _LIST_BEFORE_RE.search(before) or _LIST_AFTER_RE.match(reply[end:end + 20]):
        return "list_price"
    return "price"


def days_key(text: str) -> str:
    """'3-5 business days' / '3 to 5 days' -> '3-5'; '2 days' -> '2' ('' when no number of days)."""
    m = re.search(r"(\d{1,3})(?:\s*(?:-|–|to)\s*(\d{1,3}))?", text)
    if not m:
        return ""
    return f"{int(m.group(1))}-{int(m.group(2))}" if m.group(2) else str(int(m.group(1)))


def _day_claims(reply: str) -> list[Claim]:
    out = []
    for m in _DAYS_RE.finditer(reply):
        start = max(0, m.start() - 60)
        before = re.split(r"[.!?;]", reply[start:m.start()])[-1]
        returns = [r.end() for r in _RETURN_CUE_RE.finditer(before)]
        delivery = [d.end() for d in _DELIVERY_CUE_RE.finditer(before)]
        if _RETURN_CUE_RE.match(reply[m.end():m.end() + 12].strip()) or (returns and (not delivery
                                                                               or returns[-1] > delivery[-1])):
            field = "return_days"  # the nearer cue decides: "returns within 30 days, delivery takes 3-5 days"
        elif delivery:
            field = "delivery_days"
        else:
            continue
        key = days_key(m.group("d"))
        value = number(key.split("-")[-1]) or 0.0
        out.append(Claim("delivery", m.group(0).strip(), value, m.span(), field,
                         days=key if field == "delivery_days" else ""))
    return out


def extract_claims(reply: str) -> list[Claim]:
    """Prices, stock counts, discounts and delivery times stated in a reply, each with its field (not yet
    attributed)."""
    claims: list[Claim] = []
    taken: list[tuple[int, int]] = []
    for category, pattern in CLAIM_PATTERNS:
        for m in pattern.finditer(reply):
            s, e = m.span("n")
            if any(s < te and ts < e for ts, te in taken):
                continue
            value = number(m.group("n"))
            if value is None:
                continue
            taken.append((s, e))
            text = m.group(0).strip()
            claims.append(Claim(category, text, value, m.span(), _field(reply, category, m.start(), m.end(), text)))
    for m in _SOLD_OUT_RE.finditer(reply):
        before = reply[max(0, m.start() - 40):m.start()]
        if _NEGATION_BEFORE_RE.search(before) or _QUESTION_BEFORE_RE.search(before):
            continue
        claims.append(Claim("stock", m.group(0), 0.0, m.span(), "stock"))
    claims += [c for c in _day_claims(reply) if not any(c.span[0] < t[1] and t[0] < c.span[1] for t in taken)]
    return sorted(claims, key=lambda c: c.span)


def _nearest(items: list[tuple[int, int, object]], pos: int, bounds: list[tuple[int, int]]) -> object | None:
    """The item of the sentence at ``pos``: the nearest before it, else the first after it; else the nearest
    item of an earlier sentence."""
    k = sentence_of(bounds, pos)
    same = [it for it in items if sentence_of(bounds, it[0]) == k]
    before = [it for it in same if it[0] <= pos]
    if before:
        return before[-1][2]
    if same:
        return same[0][2]
    earlier = [it for it in items if it[0] < bounds[k][0]]
    return earlier[-1][2] if earlier else None


def attribute(turn: TurnView, claims: list[Claim]) -> list[Claim]:
    """Each claim with the product, coupon and region it is about (module docstring)."""
    if not claims:
        return claims
    cat = catalogue_of(turn)
    bounds = sentence_bounds(turn.reply)
    products = [(m.start, m.end, m.link_id) for m in reply_mentions(turn)]
    asked = [lid for lid in comment_products(turn) if lid is not None]
    default = asked[0] if len(asked) == 1 else None
    coupons = [(s, e, c) for s, e, c in coupon_mentions(turn.reply, cat)]
    regions = [(s, e, r) for s, e, r in region_mentions(turn.reply, cat)]
    out = []
    for c in claims:
        pos = c.span[0]
        lid = _nearest(products, pos, bounds) if products else None
        lid = default if lid is None else lid
        k = sentence_of(bounds, pos)
        coupon = next((x[2] for x in coupons if sentence_of(bounds, x[0]) == k), None)
        region = next((x[2] for x in regions if sentence_of(bounds, x[0]) == k), None)
        out.append(replace(c, link_id=lid if isinstance(lid, int) else None, coupon=coupon, region=region))  # type: ignore[arg-type]
    return out


def turn_claims(turn: TurnView) -> list[Claim]:
    """The reply's claims, attributed (computed once per turn view)."""
    return turn.cached("claims", lambda: attribute(turn, extract_claims(turn.reply)))
