"""Which products (coupons, shipping regions) a text names, against the room's catalogue.

The catalogue is the room's products (a closed list) plus any product a tool result of the turn describes
(link id and title in one object). A text names a product by

- its link id, written as one: ``#101``, ``link 101``, ``item #101``, ``no. 101`` (a comment may also give the
  bare number, when it is one of the room's ids: viewers write "how much is 101");
- a run of capitalised words (``AirSilk Hair Dryer``, ``HydraGlow Serum``) sharing a distinctive word with
  exactly one title (a word no other title has; a brand written with an inner capital, ``AirSilk``, must be
  that product's own), single words only when they are a brand or an alias;
- an alias: the last one or two words of its short title when they point at one product (``the dryer``,
  ``hair dryer``), in any case.

A capitalised run that reads as a product name (a brand with an inner capital, or ending in a product noun:
``Serum``, ``Dryer``, ...) and matches no product of the catalogue is an *unknown* product; so is a link id
the room does not have. :func:`unknown_products` reports them unless the sentence negates ("we don't sell the
GlowMax Pro", "there is no link 105"). Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from streams.engine.rules.base import Problem, TurnView, check, sentence_bounds, sentence_of, word_pattern

_SIZE_WORD_RE = re.compile(r"[\d.+]+|ml|g|W|SPF|PA\+*")


@lru_cache(maxsize=4096)
def short_title(title: str) -> str:
    """'Barrier Repair Ceramide Moisturizer 50 ml' -> 'Barrier Repair Ceramide Moisturizer' (sizes dropped)."""
    words = [w for w in title.split() if not _SIZE_WORD_RE.fullmatch(w)]
    return " ".join(words[:4]) or title


def product_aliases(room: Mapping[str, Any]) -> dict[int, list[str]]:
    """How a viewer may name each product of a room ("the dryer", "the hair dryer"): the last one or two words
    of its short title, kept only where they point at exactly one product of the room."""
    titles = {p["link_id"]: short_title(p["title"]).lower() for p in room.get("products") or []}
    out: dict[int, list[str]] = {}
    for lid, title in titles.items():
        words = title.split()
        candidates = {" ".join(words[-2:]), words[-1]} if words else set()
        out[lid] = sorted(a for a in candidates
                          if all(len(w) >= 3 for w in a.split()) and sum(a in t for t in titles.values()) == 1)
    return out


# Words that end a product's name in this domain (beauty and small appliances): a capitalised run ending in one
# reads as a product ("Retinol Night Cream").
PRODUCT_NOUNS = frozenset("""
serum serums cream creams moisturizer moisturiser sunscreen sunblock cleanser toner mask masks balm balms trio duo
steamer dryer dryers massager wand mirror brush lotion oil gel shampoo conditioner spray mist essence ampoule
foundation lipstick palette perfume straightener curler razor trimmer roller scrub exfoliator primer concealer
powder blush kit set bundle device diffuser iron comb patches patch pads stick tint gloss liner mascara
""".split())

# Capitalised words that never name a product on their own (greetings, sentence starters, the host).
_NOT_NAME_WORDS = frozenset("""
i the a an our your my this that these those it its yes no hi hello hey sorry only we you use get grab just
today now and or but so sure great thanks thank welcome please oh wow okay ok mia there here also what how
""".split())

_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]|[A-Za-z]")
_BRAND_RE = re.compile(r"[A-Z]?[a-z]+[A-Z][A-Za-z]*")  # an inner capital: AirSilk, HydraGlow, NanoMist
_LINK_REF_RE = re.compile(
    r"(?:#\s?|\b(?:link|item|number|no\.|product|listing)\s*(?:id\s*)?#?\s?)(?P<id>\d{2,})(?![\d.%])", re.I)
_BARE_ID_RE = re.compile(r"(?<![\d.$€£¥])\b(?P<id>\d{2,})\b(?![.,]?\d|%)")
# "we don't sell the GlowMax Pro", "there is no link 105", "I could not find X": a product named to say it is not
# here. The negation sits just before the name in its clause, or the name is said not to be here.
_NEGATED_BEFORE_RE = re.compile(
    r"\b(?:no|not|never|none|without|nor|cannot|can't|couldn't|could\s+not|don't|do\s+not|doesn't|does\s+not|"
    r"didn't|did\s+not|isn't|aren't|unfortunately)\b[^.!?,;]{0,40}$", re.I)
_NEGATED_AFTER_RE = re.compile(
    r"^\s*(?:is|are)(?:\s+not|n't)\s+(?:sold|available|stocked|carried|here|in\s+this\s+room|on\s+(?:the|this)\s+list|"
    r"part\s+of|something\s+we|one\s+of\s+ours|in\s+(?:our|the|this)\s+(?:room|catalog\w*|shop|show))", re.I)


def _title_words(title: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(short_title(title))]


@dataclass(frozen=True, slots=True)
class Product:
    link_id: int
    title: str
    words: frozenset[str]  # lower-case words of the short title
    aliases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Mention:
    """A product named in a text: ``link_id`` None for a product the catalogue does not have."""

    start: int
    end: int
    text: str
    link_id: int | None
    how: str  # "link" | "name" | "alias"


@dataclass(frozen=True)
class Catalogue:
    products: Mapping[int, Product]
    closed: bool  # the room's product list is known: a product outside it does not exist here
    owner: Mapping[str, int]  # distinctive word -> the one product whose title has it
    coupon_codes: frozenset[str]
    regions: tuple[str, ...]
    alias_re: re.Pattern[str] | None = None  # every alias, longest first, as a whole word (plural too)
    alias_owner: Mapping[str, int] | None = None

    def title(self, link_id: int | None) -> str:
        p = self.products.get(link_id) if link_id is not None else None
        return short_title(p.title) if p else f"link {link_id}"


def _as_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _result_products(results: Iterable[Any]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 8:
            return
        if isinstance(v, Mapping):
            lid = _as_id(v.get("link_id"))
            if lid is not None and isinstance(v.get("title"), str) and v["title"]:
                out.append((lid, v["title"]))
            for x in v.values():
                walk(x, depth + 1)
        elif isinstance(v, (list, tuple)):
            for x in v[:200]:
                walk(x, depth + 1)

    for r in results:
        walk(r, 0)
    return out


def build_catalogue(room: Mapping[str, Any] | None, results: Sequence[Any] = ()) -> Catalogue:
    titles: dict[int, str] = {}
    products = room.get("products") if isinstance(room, Mapping) else None
    closed = isinstance(products, list)
    for p in products or []:
        if isinstance(p, Mapping):
            lid = _as_id(p.get("link_id"))
            if lid is not None:
                titles[lid] = str(p.get("title") or "")
    for lid, title in _result_products(results):
        titles.setdefault(lid, title)
    prods, owner, alias_re, alias_owner = _products(tuple(titles.items()))
    codes = set()
    regions: list[str] = []
    if isinstance(room, Mapping):
        for c in room.get("coupons") or []:
            if isinstance(c, Mapping) and c.get("code"):
                codes.add(str(c["code"]))
        shipping = room.get("shipping")
        if isinstance(shipping, Mapping) and isinstance(shipping.get("regions"), Mapping):
            regions += [str(r) for r in shipping["regions"]]
    for code in _result_strings(results, ("code", "coupon_code")):
        codes.add(code)
    for region in _result_strings(results, ("region",)):
        if region not in regions and region != "default":
            regions.append(region)
    return Catalogue(prods, closed, owner, frozenset(codes), tuple(regions), alias_re, alias_owner)


@lru_cache(maxsize=1024)
def _products(titles: tuple[tuple[int, str], ...]
              ) -> tuple[Mapping[int, Product], Mapping[str, int], re.Pattern[str] | None, Mapping[str, int]]:
    """The products of (link id, title) pairs, the distinctive words and the aliases as one pattern (remembered:
    a room's catalogue is judged again for every candidate reply)."""
    aliases = product_aliases({"products": [{"link_id": k, "title": t} for k, t in titles]})
    prods = {lid: Product(lid, t, frozenset(_title_words(t)), tuple(aliases.get(lid, ()))) for lid, t in titles}
    count: dict[str, list[int]] = {}
    for p in prods.values():
        for w in p.words:
            count.setdefault(w, []).append(p.link_id)
    owner = {w: ids[0] for w, ids in count.items() if len(ids) == 1 and len(w) >= 3 and w not in _NOT_NAME_WORDS}
    alias_owner = {a: p.link_id for p in prods.values() for a in p.aliases}
    alias_re = None
    if alias_owner:
        alts = "|".join(re.escape(a) for a in sorted(alias_owner, key=len, reverse=True))
        alias_re = re.compile(rf"(?<!\w)({alts})(?:e?s)?(?!\w)", re.I)
    return prods, owner, alias_re, alias_owner


def _result_strings(results: Iterable[Any], keys: tuple[str, ...]) -> list[str]:
    out: list[str] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 8:
            return
        if isinstance(v, Mapping):
            for k, x in v.items():
                if k in keys and isinstance(x, str) and x.strip():
                    out.append(x.strip())
                else:
                    walk(x, depth + 1)
        elif isinstance(v, (list, tuple)):
            for x in v[:200]:
                walk(x, depth + 1)

    for r in results:
        walk(r, 0)
    return out


def catalogue_of(turn: TurnView) -> Catalogue:
    return turn.cached("catalogue", lambda: build_catalogue(turn.room, turn.tool_results))


# --- mentions ---------------------------------------------------------------------------------------------------


def _runs(text: str) -> list[list[re.Match[str]]]:
    """Runs of capitalised words separated by single spaces (or '&'), letters only."""
    runs: list[list[re.Match[str]]] = []
    cur: list[re.Match[str]] = []
    for m in _WORD_RE.finditer(text):
        word = m.group(0)
        joined = bool(cur) and re.fullmatch(r"\s|\s&\s|-", text[cur[-1].end():m.start()]) is not None
        if word[0].isupper():
            if cur and not joined:
                runs.append(cur)
                cur = []
            cur.append(m)
        else:
            if cur:
                runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def _resolve_run(words: list[str], cat: Catalogue) -> tuple[bool, int | None]:
    """(names a product, which one: None when none of the catalogue)."""
    low = [w.lower() for w in words]
    brands = [w for w in words if _BRAND_RE.fullmatch(w)]
    content = [w for w in low if w not in _NOT_NAME_WORDS]
    if not content:
        return False, None
    product_like = bool(brands) or any(w in PRODUCT_NOUNS for w in content)
    for b in brands:  # a brand is its product's own: another product's words do not make it known
        owner = cat.owner.get(b.lower())
        if owner is None:
            return True, None
    scores: dict[int, int] = {}
    distinct: set[int] = set()
    for w in content:
        if w in cat.owner:
            distinct.add(cat.owner[w])
        for p in cat.products.values():
            if w in p.words:
                scores[p.link_id] = scores.get(p.link_id, 0) + 1
    if not distinct:
        return product_like, None
    best = max(scores[i] for i in distinct)
    top = [i for i in distinct if scores[i] == best]
    if len(top) != 1:
        return product_like, None
    lid = top[0]
    if len(content) == 1 and not brands and content[0] not in cat.products[lid].aliases:
        return False, None  # a single capitalised word ("Daily", "Gentle") is too weak a name
    noun = content[-1]
    if noun in PRODUCT_NOUNS and noun not in cat.products[lid].words and noun.rstrip("s") not in cat.products[lid].words:
        return True, None  # "Vitamin C Serum" when the room sells a Vitamin C Toner
    return True, lid


def find_mentions(text: str, cat: Catalogue, *, bare_ids: bool = False) -> list[Mention]:
    """The products ``text`` names, in order (see the module docstring). ``bare_ids``: also plain numbers that
    are link ids of the catalogue (for comments, not replies: a reply's numbers are prices and counts)."""
    found: list[Mention] = []

    def free(s: int, e: int) -> bool:
        return not any(s < m.end and m.start < e for m in found)

    for m in _LINK_REF_RE.finditer(text):
        lid = int(m.group("id"))
        found.append(Mention(m.start(), m.end(), m.group(0), lid if lid in cat.products else None, "link"))
    if bare_ids:
        for m in _BARE_ID_RE.finditer(text):
            lid = int(m.group("id"))
            if lid in cat.products and free(m.start(), m.end()):
                found.append(Mention(m.start(), m.end(), m.group(0), lid, "link"))
    for run in _runs(text):
        s, e = run[0].start(), run[-1].end()
        if not free(s, e):
            continue
        names, lid = _resolve_run([m.group(0) for m in run], cat)
        if names:
            found.append(Mention(s, e, text[s:e], lid, "name"))
    if cat.alias_re is not None:
        for m in cat.alias_re.finditer(text):
            if free(m.start(), m.end()):
                found.append(Mention(m.start(), m.end(), m.group(0), cat.alias_owner[m.group(1).lower()], "alias"))
    return sorted(found, key=lambda m: m.start)


def reply_mentions(turn: TurnView) -> list[Mention]:
    return turn.cached("reply_mentions", lambda: find_mentions(turn.reply, catalogue_of(turn)))


def comment_products(turn: TurnView) -> set[int | None]:
    """The products the comments name (None for a named product or link id the catalogue lacks)."""
    def compute() -> set[int | None]:
        cat = catalogue_of(turn)
        out: set[int | None] = set()
        for text in turn.comment_texts():
            out |= {m.link_id for m in find_mentions(text, cat, bare_ids=True)}
        return out

    return turn.cached("comment_products", compute)


def coupon_mentions(text: str, cat: Catalogue) -> list[tuple[int, int, str]]:
    out = []
    for code in cat.coupon_codes:
        for m in word_pattern(code).finditer(text):
            out.append((m.start(), m.end(), code))
    return sorted(out)


def region_mentions(text: str, cat: Catalogue) -> list[tuple[int, int, str]]:
    out = []
    for region in cat.regions:
        for m in word_pattern(region).finditer(text):
            out.append((m.start(), m.end(), region))
    return sorted(out)


def negated_mention(text: str, start: int, end: int) -> bool:
    """Whether the text names a product only to say it is not here (see the regexes above)."""
    bounds = sentence_bounds(text)
    s, e = bounds[sentence_of(bounds, start)]
    return (_NEGATED_BEFORE_RE.search(text[s:start]) is not None
            or _NEGATED_AFTER_RE.search(text[end:e]) is not None)


def result_strings(turn: TurnView) -> frozenset[str]:
    """The short strings of this turn's tool results, lower-cased (names they give: ``carrier: ParcelCo``)."""
    def compute() -> frozenset[str]:
        out: set[str] = set()

        def walk(v: Any, depth: int) -> None:
            if depth > 12:
                return
            if isinstance(v, str):
                if len(v) <= 80:
                    out.add(v.strip().lower())
            elif isinstance(v, Mapping):
                for x in v.values():
                    walk(x, depth + 1)
            elif isinstance(v, (list, tuple)):
                for x in v[:500]:
                    walk(x, depth + 1)

        for r in turn.tool_results:
            walk(r, 0)
        return frozenset(out)

    return turn.cached("result_strings", compute)


@check("products")
def unknown_products(turn: TurnView) -> list[Problem]:
    """``products.unknown``: the reply names a product or link id the room's catalogue does not have (only when
    the catalogue is the room's closed list; a sentence that negates, "we don't sell X", is fine)."""
    cat = catalogue_of(turn)
    if not cat.closed:
        return []
    out = []
    seen: set[str] = set()
    given = result_strings(turn)
    for m in reply_mentions(turn):
        if m.how == "name" and m.text.lower() in given:
            continue  # a name this turn's tools gave (a carrier, a shop): backed by them, not a product claim
        if m.link_id is None and not negated_mention(turn.reply, m.start, m.end) and m.text.lower() not in seen:
            seen.add(m.text.lower())
            what = f"link {m.text.strip()}" if m.how == "link" else repr(m.text)
            out.append(Problem("products.unknown", f"names {what}, which is not a product of this room",
                               (m.start, m.end), "Name only products of this room"))
    return out
