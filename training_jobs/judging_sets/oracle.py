"""Labels for the demo model's replies from what the labeller knows and the rules do not: the reference policy's
gold answer to the same comment (its intent, product, condition and facts) and the reply templates the demo
model was trained on (:func:`streams.reference_policy._reply`).

Independent of :mod:`streams.engine.rules` on purpose: the labelled sets test the rules against this reading,
not against themselves. A reply is parsed into its template and slots (title, price, list price, stock, days,
threshold, code, name, condition), and compared, slot by slot, with the room, the gold and the tool results the
turn had when it wrote the reply. The first defect found is the label (the rule that must catch it); a reply
that is exactly the gold answer, after the gold's calls, is good; anything the labeller cannot tell is left out.
Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streams.reference_policy import num, short_title
from training_jobs.tiny_model.gold import PRODUCT_POOL, load_demo_room

# (template, intent, pattern): the reference policy's replies, as the demo model learnt them.
TEMPLATES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple((name, intent, re.compile(p)) for name, intent, p in (
    ("sale", "price", r"^(?P<title>.+?) is \$(?P<price>[\d.]+) in the flash sale until minute (?P<minute>\d+)\.$"),
    ("price", "price", r"^(?P<title>.+?) is \$(?P<price>[\d.]+) right now, down from \$(?P<list>[\d.]+)\.$"),
    ("sold_out", "stock", r"^(?P<title>.+?) is sold out right now, (?P<stock>\d+) left\.$"),
    ("low", "stock", r"^Only (?P<stock>\d+) left of (?P<title>.+?), so be quick\.$"),
    ("stock", "stock", r"^We have (?P<stock>\d+) of (?P<title>.+?) left\.$"),
    ("shipping", "shipping",
     r"^Delivery (?:to (?P<region>.+?) )?takes (?P<days>[^,]+?), free over \$(?P<free>[\d.]+)\.$"),
    ("no_coupon", "coupon", r"^No coupons right now, (?P<name>[^,]+), but keep watching\.$"),
    ("coupon", "coupon", r"^Use code (?P<code>\w+) for \$(?P<discount>[\d.]+) off orders from \$(?P<min>[\d.]+)\.$"),
    ("compliance", "compliance",
     r"^(?P<title>.+?) is a cosmetic, so I cannot promise it fixes (?P<cond>[^;]+); please ask a dermatologist\.$"),
    ("not_found", "not_found",
     r"^Sorry (?P<name>[^,]+), I could not find that link, please check the number on the card\.$"),
    ("hello", "chit_chat", r"^Hi (?P<name>[^,]+), welcome to the room!$"),
))
PRODUCT_INTENTS = ("price", "stock", "compliance")


@dataclass(frozen=True)
class Label:
    rule: str | None  # None: a good reply
    note: str


def parse(reply: str) -> tuple[str, str, dict[str, str]] | None:
    for name, intent, pattern in TEMPLATES:
        m = pattern.match(reply.strip())
        if m:
            return name, intent, {k: v for k, v in m.groupdict().items() if v is not None}
    return None


def _known_titles() -> set[str]:
    """Every product name the demo model has seen: the generator's pool and the demo room's short titles."""
    return {t for t, _ in PRODUCT_POOL} | {short_title(p["title"]) for p in load_demo_room()["products"]}


KNOWN_TITLES = _known_titles()


def titles_in(reply: str, room: Mapping[str, Any]) -> list[str]:
    """Product names the reply says (the room's short titles and every name the model knows), longest first."""
    names = sorted(KNOWN_TITLES | {short_title(p["title"]) for p in room.get("products") or []}, key=len,
                   reverse=True)
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for name in names:
        for m in re.finditer(re.escape(name), reply):
            if not any(m.start() < e and s < m.end() for s, e in taken):
                taken.append(m.span())
                found.append((m.start(), name))
    return [n for _, n in sorted(found)]


def _room_titles(room: Mapping[str, Any]) -> dict[str, int]:
    return {short_title(p["title"]): p["link_id"] for p in room.get("products") or []}


def resolve_title(name: str, titles: Mapping[str, int]) -> str | None:
    """The room's title a named product stands for: the same title, or one sharing its brand (a word with an
    inner capital) or two of its words ("Gentle Amino Foaming Cleanser" for "Amino Cleanser"); None: not here."""
    if name in titles:
        return name
    words = {w.lower() for w in name.split() if len(w) >= 3}
    brands = {w for w in name.split() if re.fullmatch(r"[A-Z][a-z]+[A-Z]\w*", w)}
    hits = [t for t in titles if brands & set(t.split()) or len(words & {w.lower() for w in t.split()}) >= 2]
    return hits[0] if len(hits) == 1 else None


def _names_product(text: str, link_id: int, title: str) -> bool:
    """Whether a comment names the product itself (its link id, or a word of its title)."""
    low = text.lower()
    return str(link_id) in text or any(w.lower() in low for w in title.split() if len(w) >= 4)


def _figure_label(value: float, field: str, link_id: int | None, results: Sequence[Mapping[str, Any]],
                  region: str | None = None) -> str | None:
    """None when a result gives ``value`` as ``field`` for the product (region); else which way it is wrong."""
    def values_of(r: Mapping[str, Any], f: str) -> list[float]:
        out = []
        if f == "price":
            for src in (r, r.get("flash_sale") if isinstance(r.get("flash_sale"), Mapping) else {}):
                if isinstance(src.get("price"), (int, float)):
                    out.append(float(src["price"]))
        elif isinstance(r.get(f), (int, float)) and not isinstance(r.get(f), bool):
            out.append(float(r[f]))
        return out

    def owner(r: Mapping[str, Any]) -> Any:
        if "link_id" in r:
            return r["link_id"]
        sale = r.get("flash_sale")
        return sale.get("link_id") if isinstance(sale, Mapping) else None

    fields = ("price", "list_price", "stock", "free_over", "min_spend", "discount", "remaining")
    mine, others = [], []
    for r in results:
        rs = [r] + [c for c in r.get("coupons") or [] if isinstance(c, Mapping)]
        if isinstance(r.get("flash_sale"), Mapping) and "link_id" in r["flash_sale"]:
            rs.append(r["flash_sale"])
        for x in rs:
            who = owner(x)
            is_mine = link_id is None or who is None or who == link_id
            if region is not None and x.get("region") not in (None, region):
                is_mine = False
            (mine if is_mine else others).append(x)
    if any(round(v, 2) == round(value, 2) for x in mine for v in values_of(x, field)):
        return None
    if any(round(v, 2) == round(value, 2) for x in mine for f in fields if f != field for v in values_of(x, f)):
        return "facts.wrong_field"
    if any(round(v, 2) == round(value, 2) for x in others for v in values_of(x, field)):
        return "facts.wrong_entity"
    return "facts.unbacked"


def _repeats(reply: str) -> bool:
    words = re.findall(r"\w+", reply.lower())
    grams = [tuple(words[i:i + 4]) for i in range(len(words) - 3)]
    return any(grams.count(g) > 1 for g in grams)


def label(*, reply: str, room: Mapping[str, Any], comments: Sequence[Mapping[str, str]], gold: Any,
          condition: str, results: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]]) -> Label | None:
    """The label of one candidate reply (module docstring), or None when the labeller cannot tell."""
    titles = _room_titles(room)
    named = titles_in(reply, room)
    unknown = [t for t in named if resolve_title(t, titles) is None]
    if unknown:
        return Label("products.unknown", f"names {unknown[0]!r}, not in this room")
    parsed = parse(reply)
    if parsed is not None and "title" in parsed[2] and resolve_title(parsed[2]["title"], titles) is None:
        parsed = None  # the title slot swallowed more than a name: a mash of templates
    viewer = comments[0]["viewer"]
    if parsed is None:
        return _unparsed(reply, results)
    template, intent, slots = parsed
    if "title" in slots:
        slots["title"] = resolve_title(slots["title"], titles) or slots["title"]
    gold_intent = getattr(gold, "intent", None)
    gold_link = getattr(gold, "tool_arguments", None) or {}
    gold_link = gold_link.get("link_id") if isinstance(gold_link, Mapping) else None
    if gold is not None and intent != gold_intent and not (intent == "not_found" and gold_intent in PRODUCT_INTENTS):
        return Label("intent.unaddressed", f"a {intent} answer to a {gold_intent} question")
    title = slots.get("title")
    asked_title = next((t for t, lid in titles.items() if lid == gold_link), None)
    if (title is not None and asked_title is not None and titles.get(title) != gold_link
            and _names_product(comments[0]["text"], gold_link, asked_title)):  # type: ignore[arg-type]
        return Label("intent.wrong_product", f"about {title}, asked about link {gold_link}")
    lid = titles.get(title) if title is not None else None
    region = slots.get("region")
    checks = [("price", "price"), ("list", "list_price"), ("stock", "stock"), ("free", "free_over"),
              ("discount", "discount"), ("min", "min_spend")]
    for slot, field in checks:
        if slot in slots:
            try:
                value = float(slots[slot])
            except ValueError:
                return None
            if (rule := _figure_label(value, field, lid, results, region if slot == "free" else None)) is not None:
                return Label(rule, f"{field} {slots[slot]} of {title or region or 'the turn'}")
    if "days" in slots:
        days = {str(r.get("delivery_days")) for r in results if r.get("delivery_days")}
        if slots["days"] not in days:
            return Label("facts.unbacked", f"delivery {slots['days']} not in a result")
    if "name" in slots and slots["name"] != viewer:
        return Label("intent.wrong_viewer", f"greets {slots['name']}, the viewer is {viewer}")
    if template == "compliance" and condition and slots.get("cond") != condition:
        return Label("intent.wrong_condition", f"about {slots.get('cond')}, asked about {condition}")
    if gold is not None and reply.strip() == gold.reply and _gold_calls_made(gold, calls):
        return Label(None, "the gold answer")
    return None


def _unparsed(reply: str, results: Sequence[Mapping[str, Any]]) -> Label | None:
    """A reply that is no template: markup, a phrase twice, a template with its start cut off, or a figure no
    result gives."""
    text = reply.strip()
    if re.search(r"[{}<>]|\"\w+\":", text):
        return Label("quality.garbled", "markup or a tool call written as text")
    if _repeats(text):
        return Label("quality.repeated", "says a phrase twice")
    if text[:1].isdigit():
        for head in ("Only ", "X is $"):
            candidate = parse(head + text)
            if candidate is not None:
                return Label("quality.truncated", f"the {candidate[0]} template without {head.strip()!r}")
    for m in re.finditer(r"\$(\d+(?:\.\d+)?)(?![\d.])", text):
        rule = _figure_label(float(m.group(1)), "price", None, results)
        before = text[max(0, m.start() - 12):m.start()].lower()
        if rule is not None and not any(w in before for w in ("from", "over", "off")):
            return Label(rule, f"${m.group(1)} is no price a result gives")
    return None


def _gold_calls_made(gold: Any, calls: Sequence[Mapping[str, Any]]) -> bool:
    if gold.tool_name is None:
        return True
    return any(c.get("ok") and dict(c.get("arguments") or {}) == dict(gold.tool_arguments or {}) for c in calls)


def spoken(value: Any) -> str:
    return num(value)
