"""Entity-aware facts: a figure the reply states is backed only by a tool result of this turn that gives that
figure, for that product, as that field.

Results are read as *figures*: (field, value, product, coupon, region). The field is the key the value sits
under — ``price`` (a product's price or its flash-sale price), ``list_price``, ``stock``, ``remaining`` (uses
left of a coupon), ``discount`` (a coupon's amount off), ``min_spend`` and ``free_over`` (thresholds) — plus
``return_days``, ``delivery_days`` (a "3-5 business days" text, read as its range of days), plus
the savings of a price below a list price in the same object or an enclosing one (``saving``: list - price;
``percent_off``: the share off, rounded, to one decimal, and floored). The product, coupon and region are those
of the object the value sits in or an enclosing one (``link_id``, ``code``/``coupon_code``, ``region``).

A claim (:mod:`streams.engine.rules.claims`) of field F, value v about product P (coupon C, region R) is backed
when some figure has value v, a field F accepts (:data:`ACCEPTS`), and does not belong to another product,
coupon or region than the claim names (a figure that belongs to none — a shipping threshold, a coupon's
discount — fits any product). Otherwise the claim is

- ``facts.wrong_field`` — the value is there, for a fitting entity, but as another field (the free-shipping
  threshold said as a price, the list price said as the price);
- ``facts.wrong_entity`` — the value is there as that field, but for another product, coupon or region;
- ``facts.unbacked`` — no result of this turn gives it.

Failed results (errors, faults) are left out by the caller: they back nothing. Plain Python.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.engine.rules.base import Problem, TurnView, check
from streams.engine.rules.claims import Claim, attribute, days_key, turn_claims
from streams.engine.rules.entities import catalogue_of

FIELD_KEYS: frozenset[str] = frozenset({"price", "list_price", "stock", "remaining", "discount", "min_spend",
                                        "free_over", "return_days"})
# The same fields under the names other harnesses give them (an order desk's ``in_stock``, a catalogue's
# ``unit_price``): a figure read under its alias is that field, so one set of rules judges every harness.
FIELD_ALIASES: Mapping[str, str] = {
    "in_stock": "stock", "stock_level": "stock", "stock_count": "stock", "quantity_available": "stock",
    "qty_available": "stock", "available_quantity": "stock", "units_available": "stock", "units_left": "stock",
    "inventory": "stock", "unit_price": "price", "sale_price": "price", "current_price": "price",
    "regular_price": "list_price", "original_price": "list_price", "msrp": "list_price",
    # an order desk's money figures (an order's total, a refund): a sum in the reply is backed by them
    "amount": "price", "refund_amount": "price", "total": "price", "order_total": "price",
}
ACCEPTS: Mapping[str, frozenset[str]] = {
    "price": frozenset({"price"}),
    "list_price": frozenset({"list_price"}),
    "threshold": frozenset({"min_spend", "free_over"}),
    "amount_off": frozenset({"discount", "saving"}),
    "percent_off": frozenset({"percent_off"}),
    "stock": frozenset({"stock", "remaining"}),
    "delivery_days": frozenset({"delivery_days"}),
    "return_days": frozenset({"return_days"}),
}
FIELD_WORDS = {"price": "price", "list_price": "list price", "threshold": "spend threshold",
               "amount_off": "amount off", "percent_off": "share off", "stock": "stock",
               "remaining": "coupon uses left", "discount": "coupon discount", "min_spend": "coupon minimum spend",
               "free_over": "free-shipping threshold", "saving": "saving", "delivery_days": "delivery time",
               "return_days": "return window"}
# Legacy names (the RL accuracy reward documented these): money keys and stock keys of a result.
MONEY_KEYS: frozenset[str] = frozenset({"price", "list_price", "discount", "min_spend", "free_over"})
STOCK_KEYS: frozenset[str] = frozenset({"stock", "remaining"})


def key(v: float) -> float:
    return round(v, 2)


def finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


@dataclass(frozen=True, slots=True)
class Figure:
    field: str
    value: float
    link_id: int | None = None
    coupon: str | None = None
    region: str | None = None
    days: str = ""  # a delivery time as "lo-hi" (field delivery_days)


def _id(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def result_figures(results: Iterable[Any]) -> list[Figure]:
    """Every figure of the results (module docstring), with the entities it belongs to."""
    out: list[Figure] = []

    def walk(v: Any, depth: int, ctx: tuple[int | None, str | None, str | None], list_price: float | None) -> None:
        if depth > 12:
            return
        if isinstance(v, Mapping):
            lid, coupon, region = ctx
            lid = _id(v.get("link_id")) if _id(v.get("link_id")) is not None else lid
            code = v.get("code") if isinstance(v.get("code"), str) else v.get("coupon_code")
            coupon = code.strip().upper() if isinstance(code, str) and code.strip() else coupon
            reg = v.get("region")
            region = reg.strip() if isinstance(reg, str) and reg.strip() else region
            here = (lid, coupon, region)
            lp = finite(v.get("list_price"))
            lp = lp if lp is not None else list_price
            p = finite(v.get("price"))
            if lp and p is not None and 0 < p < lp:
                out.append(Figure("saving", key(lp - p), *here))
                pct = (lp - p) / lp * 100
                for x in {key(float(round(pct))), key(round(pct, 1)), key(float(math.floor(pct)))}:
                    out.append(Figure("percent_off", x, *here))
            for k, x in v.items():
                n = finite(x)
                field = k if k in FIELD_KEYS else FIELD_ALIASES.get(k) if isinstance(k, str) else None
                if n is not None and field is not None:
                    out.append(Figure(field, key(n), *here))
                elif k == "delivery_days" and isinstance(x, str) and (d := days_key(x)):
                    out.append(Figure(k, key(float(d.split("-")[-1])), *here, days=d))
                elif isinstance(x, (Mapping, list, tuple)):
                    walk(x, depth + 1, here, lp)
        elif isinstance(v, (list, tuple)):
            for x in v[:500]:
                walk(x, depth + 1, ctx, list_price)

    for r in results:
        walk(r, 0, (None, None, None), None)
    return out


def _fits(claim: Claim, fig: Figure) -> bool:
    """The figure belongs to no other product, coupon or region than the claim names."""
    if claim.link_id is not None and fig.link_id is not None and claim.link_id != fig.link_id:
        return False
    if claim.coupon is not None and fig.coupon is not None and claim.coupon.upper() != fig.coupon:
        return False
    if claim.region is not None and fig.region is not None and claim.region.lower() != fig.region.lower():
        return False
    return True


def verdict(claim: Claim, figures: Sequence[Figure]) -> str | None:
    """None when backed, else the rule id that fails (module docstring)."""
    v = key(claim.value)
    same = [f for f in figures if f.value == v and f.days == claim.days]
    accepted = ACCEPTS.get(claim.field, frozenset())
    if any(f.field in accepted and _fits(claim, f) for f in same):
        return None
    if any(_fits(claim, f) for f in same):
        return "facts.wrong_field"
    if any(f.field in accepted for f in same):
        return "facts.wrong_entity"
    return "facts.unbacked"


def _describe(claim: Claim, rule: str, figures: Sequence[Figure], turn: TurnView) -> str:
    cat = catalogue_of(turn)
    about = f" for {cat.title(claim.link_id)}" if claim.link_id is not None else ""
    as_field = f" (as the {FIELD_WORDS[claim.field]})" if claim.field not in (claim.category, "stock") else ""
    what = f"{claim.category} {claim.text!r}{as_field}{about}"
    v = key(claim.value)
    if rule == "facts.wrong_field":
        got = sorted({FIELD_WORDS.get(f.field, f.field) for f in figures
                      if f.value == v and f.days == claim.days and _fits(claim, f)})
        return f"{what}: that figure is the {', '.join(got)} in the tool results, not the {FIELD_WORDS[claim.field]}"
    if rule == "facts.wrong_entity":
        owners = sorted({cat.title(f.link_id) if f.link_id is not None else (f.coupon or f.region or "?")
                         for f in figures
                         if f.value == v and f.days == claim.days and f.field in ACCEPTS.get(claim.field, ())})
        return f"{what}: the tool results give that figure for {', '.join(owners)}"
    return f"{what} is not in any tool result this turn"


def figures_of(turn: TurnView) -> list[Figure]:
    return turn.cached("figures", lambda: result_figures(turn.tool_results))


@check("facts")
def fact_problems(turn: TurnView, categories: Iterable[str] = ("price", "stock", "discount", "delivery"),
                  claims: Sequence[Claim] | None = None) -> list[Problem]:
    """Claims of ``categories`` that no figure backs (module docstring). ``claims``: the reply's
    :func:`~streams.engine.rules.claims.extract_claims` when the caller already has them."""
    wanted = set(categories)
    if claims is not None and "claims" not in turn._cache:  # the reply's claims, extracted by the caller
        turn._cache["claims"] = attribute(turn, list(claims))
    chosen = [c for c in turn_claims(turn) if c.category in wanted]
    if not chosen:
        return []
    figures = figures_of(turn)
    out = []
    for c in chosen:
        rule = verdict(c, figures)
        if rule is not None:
            hint = "" if rule == "facts.unbacked" else (
                "Say only the figure a tool result gives for that product and field, or leave the number out")
            out.append(Problem(rule, _describe(c, rule, figures, turn), c.span, hint))
    return out


# --- legacy readers of results (kept importable from streams.engine.hooks and training_jobs.hat.rewards) -------


def walk_results(results: Iterable[Any], leaf: Callable[[Any, Any], None]) -> tuple[set[float], set[float]]:
    """Visit every scalar of the tool results (``leaf(key, value)``: the key it sits under in its object, None in a
    list) and return the savings the results back, from a price below a list price in the same object or an
    enclosing one: (amounts: list price - price, percentages off: rounded, to one decimal, floored)."""
    amounts: set[float] = set()
    percents: set[float] = set()

    def walk(v: Any, k: Any, depth: int, list_price: float | None) -> None:
        if depth > 12:
            return
        if isinstance(v, dict):
            lp = finite(v.get("list_price"))
            lp = lp if lp is not None else list_price
            p = finite(v.get("price"))
            if lp and p is not None and 0 < p < lp:
                amounts.add(key(lp - p))
                pct = (lp - p) / lp * 100
                percents.update({key(float(round(pct))), key(round(pct, 1)), key(float(math.floor(pct)))})
            for kk, x in v.items():
                walk(x, kk, depth + 1, lp)
        elif isinstance(v, (list, tuple)):
            for x in v[:500]:
                walk(x, None, depth + 1, list_price)
        else:
            leaf(k, v)

    for r in results:
        walk(r, None, 0, None)
    return amounts, percents


_NUM_IN_TEXT = re.compile(r"\d+(?:\.\d+)?")


def backed_numbers(results: Iterable[Any]) -> set[float]:
    """Every number in the tool results (values and numbers inside strings), plus savings derivable from a
    price / list price pair. Not a backing rule any more (that is :func:`fact_problems`, entity by entity):
    what a caller uses to pick a number that is surely unbacked."""
    out: set[float] = set()

    def leaf(k: Any, v: Any) -> None:
        if isinstance(v, str):
            out.update(key(float(m)) for m in _NUM_IN_TEXT.findall(v[:2000]))
        elif (n := finite(v)) is not None:
            out.add(key(n))

    amounts, percents = walk_results(results, leaf)
    return out | amounts | percents


def money_figures(results: Iterable[Any]) -> tuple[set[float], set[float]]:
    """(amounts, percentages) the results give: the figures under :data:`MONEY_KEYS` and the savings of a price
    below a list price (any product)."""
    amounts: set[float] = set()
    percents: set[float] = set()
    for f in result_figures(results):
        if f.field in MONEY_KEYS or f.field == "saving":
            amounts.add(f.value)
        elif f.field == "percent_off":
            percents.add(f.value)
    return amounts, percents


def unbacked_claims(reply: str, results: Sequence[Any], *, room: Mapping[str, Any] | None = None,
                    comments: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """``"{category} {text!r}"`` for each claim of the reply that :func:`fact_problems` finds unbacked (any
    category), with the room and comments when given (they name the products claims are about)."""
    turn = TurnView(reply, comments, room, list(results))
    figures = figures_of(turn)
    return [f"{c.category} {c.text!r}" for c in turn_claims(turn) if verdict(c, figures) is not None]
