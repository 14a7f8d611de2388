"""Claims a reply must not make: efficacy claims the products' compliance notes forbid, false coupon promises,
and a harness's banned phrases.

- ``claims.forbidden`` (:func:`forbidden_claims`) — when any product of the turn restricts claims
  (:func:`restricts_claims`: its notes call it a cosmetic or not a medical device, or name a medical verb, a
  change of a condition or an absolute promise), a clause of the reply (split at punctuation and
  but/however/though) with no negation before the claim in that clause holding a medical verb (cure, treat,
  heal, detox; not "treat yourself" or "a treat"), a change verb (remove, repair, clear, fix, eliminate,
  reverse, get rid of) with a condition (acne, eczema, wrinkles, dark circles, scars, ...), or an absolute
  promise (guarantee(d), clinically proven, permanent(ly), 100%). The products of the turn: those its tool
  results and comments are about and those the reply names; every product of the room when none can be told.
- ``coupon.unknown_code`` — a coupon code (one of the room's, or a capitalised token after "code", "coupon"
  or "voucher") that no tool result of this turn returned;
- ``coupon.not_issued`` — says a coupon was sent, issued, given, added or applied while no tool result of this
  turn shows one issued (``"issued": true``, what ``coupons.issue`` returns);
- ``claims.banned`` — a banned phrase of the harness (:func:`banned_found`).

Plain Python.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from streams.engine.rules.base import Problem, TurnView, check, word_pattern
from streams.engine.rules.entities import (
    Mention,
    build_catalogue,
    catalogue_of,
    comment_products,
    find_mentions,
    reply_mentions,
)

MEDICAL_RE = re.compile(r"\b(?:cur(?:e|es|ed|ing)|heal(?:s|ed|ing)?|detox(?:es|ed|ing)?|"
                        r"treat(?:s|ed|ing|ments?)?)\b", re.I)
_NOT_A_CLAIM_RE = re.compile(r"\btreat\s+(?:yourself|yourselves|you)\b|\ba\s+(?:little\s+|real\s+)?treat\b", re.I)
CHANGE_RE = re.compile(r"\b(?:remov(?:e|es|ed|ing)|repair(?:s|ed|ing)?|clear(?:s|ed|ing)?|"
                       r"fix(?:es|ed|ing)?|eliminat(?:e|es|ed|ing)|revers(?:e|es|ed|ing)|get(?:s)?\s+rid\s+of)\b",
                       re.I)
CONDITION_RE = re.compile(r"\b(?:acne|eczema|dermatitis|rosacea|psoriasis|rash(?:es)?|wrinkles?|dark\s+circles|"
                          r"sinus(?:es)?|damaged\s+hair|hair\s+loss|scars?|diseases?|conditions?|infections?)\b",
                          re.I)
PROMISE_RE = re.compile(r"\b(?:guarantee(?:s|d)?|clinically\s+proven|permanent(?:ly)?)\b|\b100\s?%", re.I)
_RESTRICTING_NOTE_RE = re.compile(r"\b(?:cosmetic|medical)\b", re.I)
_CLAUSE_RE = re.compile(r"[.!?;:,]|\bbut\b|\bhowever\b|\bthough\b", re.I)
_NEGATION_RE = re.compile(r"\b(?:not|never|no|cannot|nor|without)\b|n't\b|\bcan\s+not\b", re.I)
_ISSUED_RE = re.compile(
    r"\b(?:sent|issued|given|added|applied)\b(?:\W+\w+){0,5}?\W+(?:coupons?|codes?|vouchers?)\b"
    r"|\b(?:coupons?|codes?|vouchers?)\b(?:\W+\w+){0,4}?\W+(?:sent|issued|added|applied)\b", re.I)
_CODE_WORD_RE = re.compile(r"\b(?:[Cc]odes?|[Cc]oupons?|[Vv]ouchers?)\s+([A-Z][A-Z0-9]{3,})\b")  # "code VIP50"


def clauses(text: str) -> list[str]:
    return [c for c in _CLAUSE_RE.split(text) if c.strip()]


def _mentions(text: str, code: str) -> bool:
    return word_pattern(code).search(text) is not None


def _result_text(results: Sequence[Any]) -> str:
    return " ".join(json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) for r in results)


def coupon_issued(results: Iterable[Any]) -> bool:
    """Whether a result of this turn shows a coupon issued (``coupons.issue`` answers ``"issued": true``)."""
    return any(isinstance(r, Mapping) and r.get("issued") is True for r in results)


def false_promises(reply: str, room: Mapping[str, Any] | None, results: Sequence[Any], issued: bool
                   ) -> list[tuple[str, str]]:
    """(rule, what) for coupon codes no result returned and coupons said to be issued without an issue."""
    out = []
    returned = _result_text(results)
    codes = [str(c.get("code") or "") for c in (room or {}).get("coupons") or [] if isinstance(c, Mapping)]
    said = [code for code in codes if code and _mentions(reply, code)]
    said += [m.group(1) for m in _CODE_WORD_RE.finditer(reply) if not any(_mentions(m.group(1), c) for c in said)]
    for code in dict.fromkeys(said):
        if not _mentions(returned, code):
            out.append(("coupon.unknown_code", f"coupon code {code} that no tool returned"))
    if not issued:
        for clause in clauses(reply):
            m = _ISSUED_RE.search(clause)
            if m and not _NEGATION_RE.search(clause[:m.start()]):
                out.append(("coupon.not_issued", f"{m.group(0)!r} without issuing a coupon"))
    return out


def restricts_claims(product: Mapping[str, Any]) -> bool:
    """Whether a product's compliance notes forbid efficacy claims (module docstring)."""
    for note in product.get("compliance_notes") or []:
        note = str(note)
        if (_RESTRICTING_NOTE_RE.search(note) or MEDICAL_RE.search(note) or PROMISE_RE.search(note)
                or (CHANGE_RE.search(note) and CONDITION_RE.search(note))):
            return True
    return False


def turn_products(room: Mapping[str, Any] | None, reply: str, link_ids: Iterable[int],
                  mentions: Sequence[Mention] | None = None) -> list[Mapping[str, Any]]:
    """The products a turn is about: those of ``link_ids`` (tools called with them, the comment names them) and
    those the reply names (``mentions``: the reply's, when the caller has them); every product of the room when
    none can be told."""
    products = [p for p in (room or {}).get("products") or [] if isinstance(p, Mapping)]
    wanted = set(link_ids)
    if mentions is None:
        mentions = find_mentions(reply, build_catalogue(room), bare_ids=True)
    wanted |= {m.link_id for m in mentions if m.link_id is not None}
    named = [p for p in products if p.get("link_id") in wanted]
    return named or products


def forbidden_claims(reply: str, products: Sequence[Mapping[str, Any]]) -> list[str]:
    """The clauses of the reply that make a claim the products' notes forbid (module docstring)."""
    if not any(restricts_claims(p) for p in products):
        return []
    out = []
    for clause in clauses(reply):
        hits = [m for m in MEDICAL_RE.finditer(clause) if not _exempt(clause, m)]
        hits += list(PROMISE_RE.finditer(clause))
        if CONDITION_RE.search(clause):
            hits += list(CHANGE_RE.finditer(clause))
        for m in sorted(hits, key=lambda m: m.start()):
            if not _NEGATION_RE.search(clause[:m.start()]):
                out.append(clause.strip())
                break
    return out


def _exempt(clause: str, m: re.Match[str]) -> bool:
    return any(n.start() <= m.start() < n.end() for n in _NOT_A_CLAIM_RE.finditer(clause))


def _result_link_ids(results: Iterable[Any]) -> set[int]:
    out: set[int] = set()
    for r in results:
        if isinstance(r, Mapping):
            lid = r.get("link_id")
            if isinstance(lid, int) and not isinstance(lid, bool):
                out.add(lid)
            sale = r.get("flash_sale")
            if isinstance(sale, Mapping) and isinstance(sale.get("link_id"), int):
                out.add(sale["link_id"])
    return out


def _span(text: str, part: str) -> tuple[int, int] | None:
    i = text.find(part)
    return (i, i + len(part)) if i >= 0 else None


@check("compliance")
def compliance_problems(turn: TurnView, link_ids: Iterable[int] = ()) -> list[Problem]:
    """``claims.forbidden`` for the products of the turn (``link_ids``: products the caller knows the turn is
    about, e.g. those its tools were called with, besides those of the results and comments)."""
    ids = set(link_ids) | _result_link_ids(turn.tool_results)
    ids |= {lid for lid in comment_products(turn) if lid is not None}
    products = turn_products(turn.room, turn.reply, ids, reply_mentions(turn))
    return [Problem("claims.forbidden", f"forbidden claim {c!r}", _span(turn.reply, c),
                    "Make no medical, efficacy or absolute claims: these products are not medicines")
            for c in forbidden_claims(turn.reply, products)]


@check("coupons")
def coupon_problems(turn: TurnView, issued: bool | None = None) -> list[Problem]:
    """``coupon.unknown_code`` and ``coupon.not_issued`` (``issued``: whether a coupon was issued this turn, when
    the caller knows it from the calls; else read from the results)."""
    issued = coupon_issued(turn.tool_results) if issued is None else issued
    room = turn.room if turn.room is not None else {"coupons": [{"code": c} for c in catalogue_of(turn).coupon_codes]}
    hint = "Give only coupon codes a tool returned this turn, and say a coupon is sent only after issuing it"
    return [Problem(rule, what, hint=hint)
            for rule, what in false_promises(turn.reply, room, list(turn.tool_results), issued)]


def banned_found(text: str, phrases: Sequence[str], case_sensitive: bool = False) -> list[str]:
    if case_sensitive:
        return [p for p in phrases if p in text]
    low = text.casefold()
    return [p for p in phrases if p.casefold() in low]


@check("banned")
def banned_problems(turn: TurnView, phrases: Sequence[str] = (), case_sensitive: bool = False) -> list[Problem]:
    """``claims.banned``: a banned phrase of the harness in the reply."""
    return [Problem("claims.banned", f"banned phrase {p!r}")
            for p in banned_found(turn.reply, phrases, case_sensitive)]
