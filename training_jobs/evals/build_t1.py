"""T1 Live-Stream QA: viewer questions as viewers write them, against rooms the project owns, with the answers
read from the real bindings.

Rooms: the demo room (``harness_editor/demo/room.yaml``), the demo scenarios at chosen minutes (flash sales
running or over, stock running low or sold out, coupons expired; ``streams.simulator.ScenarioRun``), and a few
seeded rooms of the tiny model's generator on its held-out link ids (``training_jobs.tiny_model.gold``).
Comments: :mod:`training_jobs.evals.t1_comments`, hand-written for evaluation. For each comment the builder
asks the bindings of :mod:`streams.bindings` what a correct host would look up and writes down

- ``expected_tools``: the binding calls (implementation arguments), as the reference policy would make them;
- ``gold_facts``: the figures those calls return that the reply must state (price, flash price, stock, days,
  coupon code and discount, spec values);
- ``expected_skills``: the reply skills of ``skincare_v1`` for the comment's intents
  (:func:`streams.reference_policy.pick_reply_skill`);
- ``forbidden_claims``: invented prices (with the figures that are backed), false stock, efficacy promises,
  refunds the host cannot promise, products the room does not sell, moving the sale off the platform;
- ``gold_reply``: a short reply that states every gold fact.

:func:`verify_case` re-runs every binding on the case's room and checks each fact, call and skill; the
builder refuses a case that fails it, and a test runs it over the committed set. Everything is a pure
function of the templates and :data:`SEED`: rebuilding gives the same content hash.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness_editor.schemas import Manifest
from streams.bindings import active_flash_sale, coupon_active
from streams.reference_policy import num, pick_reply_skill
from training_jobs.evals import t1_comments as W
from training_jobs.evals.cases import EvalCase
from training_jobs.evals.t1_labels import ASK_INTENT, AskContext, product_category, answer, call, field_value

__all__ = ["build_t1", "call", "demo_manifest", "eval_rooms", "field_value", "harness_manifest", "verify_case"]

SEED = "t1-live-stream-qa-v1"
HARNESS = "skincare_v1"
DEMO_HARNESSES = ("skincare_v1", "skincare_v2", "skincare_v3", "tiny_room")  # harness_editor/demo/<name>.yaml
INSTANCES_PER_TEMPLATE = 2  # rooms each comment template is asked in (fewer where fewer rooms fit)
CHATTER_SHARE = 0.15  # cases whose question comes after other viewers' chatter (tag multi_comment)

PRODUCT_ASKS = frozenset({"price", "stock", "eff", "spec", "warranty"})
ROOM_NEEDS = frozenset({"regions", "coupons", "nocoupons", "expired", "flashroom", "noflashroom", "p2"})
PRODUCT_NEEDS = frozenset({"any", "in_stock", "sold_out", "low", "flash", "noflash", "skin", "app", "cond"})

# --- rooms ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalRoom:
    source: str
    room: dict[str, Any]


SCENARIO_MINUTES: tuple[tuple[str, int], ...] = (
    ("evening-flash-sale", 8),  # serum flash sale running, early-bird coupon still open
    ("evening-flash-sale", 14),  # serum running low, early-bird expired
    ("evening-flash-sale", 25),  # sale over, hair dryer price cut, late-night coupon
    ("multi-intent-rush", 4),  # hair dryer flash sale, eye massager sold out
    ("multi-intent-rush", 8),  # hair dryer sold out during its own flash sale
    ("compliance-traps", 8),  # moisturizer flash sale
    ("compliance-traps", 20),  # every coupon expired
    ("after-sales-faults", 25),  # every coupon expired, dryer nearly gone
)
RANDOM_ROOM_SEEDS: tuple[int, ...] = (101, 202, 303)


def eval_rooms() -> list[EvalRoom]:
    """The rooms T1 asks in (deep copies; deterministic)."""
    from streams.scenarios import SCENARIO_DIR, load_scenario
    from streams.simulator import ScenarioRun
    from training_jobs.tiny_model.gold import heldout_link_ids, load_demo_room, random_room

    rooms = [EvalRoom("demo-room", load_demo_room())]
    for scenario_id, minute in SCENARIO_MINUTES:
        run = ScenarioRun(load_scenario(SCENARIO_DIR / f"{scenario_id}.yaml"))
        run.advance_to(minute)
        rooms.append(EvalRoom(f"scenario:{scenario_id}@{minute}", run.snapshot()))
    reserved = sorted(heldout_link_ids(0))
    for seed in RANDOM_ROOM_SEEDS:
        rng = random.Random(f"{SEED}:room:{seed}")
        room = random_room(rng, rng.sample(reserved, rng.randint(4, 6)))
        room["room_id"] = f"eval-room-{seed}"
        rooms.append(EvalRoom(f"random-room:{seed}", room))
    return rooms


def conditions_for(p: dict[str, Any]) -> tuple[str, ...]:
    if "skincare" in product_category(p):
        return W.CONDITIONS_SKIN
    title = p.get("title", "").lower()
    for word, conds in W.CONDITIONS_BY_WORD:
        if word in title:
            return conds
    return ()


def names_for(room: dict[str, Any], p: dict[str, Any]) -> list[str]:
    """How a viewer names a product so that only it fits: the tail of its short title ("the serum", "hair
    dryer") or its brand word ("HydraGlow"), each checked to appear in no other title of the room."""
    from training_jobs.tiny_model.gold import product_aliases

    titles = [q.get("title", "").lower() for q in room.get("products") or []]
    out = list(product_aliases(room).get(p["link_id"], []))
    brand = p.get("title", "").split()[0] if p.get("title") else ""
    if len(brand) >= 4 and any(c.isupper() for c in brand[1:]) and sum(brand.lower() in t for t in titles) == 1:
        out.append(brand)
    return [n for n in out if sum(n.lower() in t for t in titles) == 1]


def _product_ok(need: str, room: dict[str, Any], p: dict[str, Any]) -> bool:
    sale = active_flash_sale(room)
    stock = p.get("stock") or 0
    threshold = room.get("low_stock_threshold", 10)
    if need == "any":
        return True
    if need == "in_stock":
        return stock > 0
    if need == "sold_out":
        return stock == 0
    if need == "low":
        return 0 < stock <= threshold
    if need == "flash":
        return bool(sale) and sale.get("link_id") == p["link_id"]
    if need == "noflash":
        return not (sale and sale.get("link_id") == p["link_id"])
    if need == "skin":
        return "skincare" in product_category(p)
    if need == "app":
        return "appliance" in product_category(p) and bool(conditions_for(p))
    if need == "cond":
        return bool(conditions_for(p))
    if need.startswith("attr:"):
        return need[5:] in (p.get("attributes") or {})
    raise ValueError(f"unknown product need {need!r}")


def _expired_codes(room: dict[str, Any]) -> list[str]:
    clock = room.get("clock_minute", 0)
    return [c["code"] for c in room.get("coupons") or [] if clock >= c.get("expires_at_minute", 0)]


def _room_ok(need: str, room: dict[str, Any]) -> bool:
    active = [c for c in room.get("coupons") or [] if coupon_active(room, c)]
    if need == "regions":
        return bool((room.get("shipping") or {}).get("regions"))
    if need == "coupons":
        return bool(active)
    if need == "nocoupons":
        return not active
    if need == "expired":
        return bool(_expired_codes(room)) and bool(active)
    if need == "flashroom":
        return active_flash_sale(room) is not None
    if need == "noflashroom":
        return active_flash_sale(room) is None
    if need == "p2":
        return len(room.get("products") or []) >= 2
    raise ValueError(f"unknown room need {need!r}")


# --- comments ---------------------------------------------------------------------------------------------------


_LINK_FORMS = ("#{id}", "link {id}", "{id}", "no.{id}", "item {id}", "the {id}")


def typo(word: str, rng: random.Random) -> str:
    """One keyboard slip in the longest word: a letter dropped, two swapped, or one doubled."""
    parts = word.split(" ")
    i = max(range(len(parts)), key=lambda k: len(parts[k]))
    w = parts[i]
    if len(w) < 4:
        return word
    k = rng.randrange(1, len(w) - 2)
    how = rng.choice(("drop", "swap", "double"))
    if how == "drop":
        new = w[:k] + w[k + 1:]
    elif how == "swap" and w[k] != w[k + 1]:
        new = w[:k] + w[k + 1] + w[k] + w[k + 2:]
    else:
        new = w[:k] + w[k] + w[k:]
    parts[i] = new
    return " ".join(parts)


def _mention(room: dict[str, Any], p: dict[str, Any], rng: random.Random) -> str:
    names = names_for(room, p)
    if not names:
        return f"link {p['link_id']}"
    name = rng.choice(names)
    if name[0].islower() and rng.random() < 0.7:
        return "the " + name
    return name


def _fill(text: str, ctx: AskContext, rng: random.Random) -> str:
    room = ctx.room
    slots: dict[str, str] = {}
    if ctx.p is not None:
        slots["n"] = _mention(room, ctx.p, rng)
        slots["nt"] = typo(slots["n"], rng)
        slots["l"] = rng.choice(_LINK_FORMS).format(id=ctx.p["link_id"])
        slots["L"] = rng.choice(("LINK {id}", "#{id}", "NUMBER {id}")).format(id=ctx.p["link_id"])
    if ctx.p2 is not None:
        slots["n2"] = _mention(room, ctx.p2, rng)
        slots["l2"] = rng.choice(_LINK_FORMS).format(id=ctx.p2["link_id"])
    slots.update(r=ctx.region, rl=ctx.region.lower(), c=ctx.condition, x=ctx.not_sold, b=str(ctx.bad_link),
                 xc=ctx.expired_code)
    return text.format(**slots)


def _uses(text: str, slot: str) -> bool:
    return "{" + slot + "}" in text


def _instances(template: W.Template, rooms: Sequence[EvalRoom], rng: random.Random) -> list[AskContext]:
    asks, needs, text, _ = template
    kinds = [a.partition(":")[0].rstrip("2") for a in asks.split("+")]
    tokens = needs.split(",")
    product_need = next((t for t in tokens if t in PRODUCT_NEEDS or t.startswith("attr:")), None)
    room_needs = [t for t in tokens if t in ROOM_NEEDS]
    wants_product = any(_uses(text, s) for s in ("n", "nt", "l", "L")) or any(k in PRODUCT_ASKS for k in kinds)
    fits: list[tuple[EvalRoom, list[dict[str, Any]]]] = []
    for er in rooms:
        room = er.room
        if not all(_room_ok(t, room) for t in room_needs):
            continue
        products = [p for p in room["products"] if _product_ok(product_need or "any", room, p)]
        if wants_product and not products:
            continue
        if wants_product and (_uses(text, "n") or _uses(text, "nt")):
            products = [p for p in products if names_for(room, p)]
            if not products:
                continue
        fits.append((er, products))
    out = []
    for er, products in rng.sample(fits, min(INSTANCES_PER_TEMPLATE, len(fits))):
        room = copy.deepcopy(er.room)
        ctx = AskContext(room=room, viewer=rng.choice(W.VIEWERS), source=er.source)
        if wants_product:
            lid = rng.choice(products)["link_id"]  # the product of the case's own copy of the room
            ctx.p = next(q for q in room["products"] if q["link_id"] == lid)
        if "p2" in tokens:
            others = [q for q in room["products"] if q is not ctx.p and names_for(room, q)]
            ctx.p2 = rng.choice(others)
        if any(_uses(text, s) for s in ("r", "rl")):
            ctx.region = rng.choice(sorted((room.get("shipping") or {}).get("regions") or {}))
        if _uses(text, "c"):
            ctx.condition = rng.choice(conditions_for(ctx.p))
        if any(k == "notsold" for k in kinds):
            titles = " ".join(p["title"].lower() for p in room["products"])
            ctx.not_sold = rng.choice([x for x in W.NOT_SOLD if not any(w in titles for w in x.split())])
        if any(k in ("badlink", "badstock") for k in kinds):
            ids = {p["link_id"] for p in room["products"]}
            ctx.bad_link = rng.choice([i for i in range(100, 400) if i not in ids and i - 1 not in ids
                                       and i + 1 not in ids])
        if _uses(text, "xc"):
            ctx.expired_code = rng.choice(_expired_codes(room))
        ctx.text = _fill(text, ctx, rng)
        out.append(ctx)
    return out


# --- cases ------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def demo_manifest(name: str = HARNESS) -> Manifest:
    from training_jobs.hsa.samples import load_demo_manifest

    return load_demo_manifest(name)


def harness_manifest(name: str, overrides: Mapping[str, Manifest] | None = None) -> Manifest:
    """The harness a case names: from ``overrides`` (e.g. harness versions by 'slug@version') or the demo
    manifests."""
    if overrides is not None and name in overrides:
        return overrides[name]
    return demo_manifest(name)


def _dedupe(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _case(i: int, template: W.Template, ctx: AskContext, rng: random.Random, manifest: Manifest) -> EvalCase:
    asks, _, text, style = template
    answers = [answer(a, ctx) for a in asks.split("+")]
    intents = _dedupe(ASK_INTENT[a.partition(":")[0].rstrip("2")] for a in asks.split("+"))
    tags = [*style.split(), *(t for a in answers for t in a.tags)]
    if len(answers) > 1:
        tags.append("multi_question")
    comments = [{"viewer": ctx.viewer, "text": ctx.text}]
    if rng.random() < CHATTER_SHARE:
        others = [v for v in W.VIEWERS if v != ctx.viewer]
        chatter = [{"viewer": rng.choice(others), "text": rng.choice(W.CHATTER)} for _ in range(rng.randint(1, 2))]
        comments = chatter + comments
        tags.append("multi_comment")
    tools = _dedupe(t for a in answers for t in a.tools)
    # a call that is required by one ask and optional for another is required
    tools = [t for t in tools if not (t.optional and any(u.binding == t.binding and u.arguments == t.arguments
                                                         and not u.optional for u in tools))]
    return EvalCase(
        id=f"t1-{i:04d}", kind="t1", harness=HARNESS, room=ctx.room, comments=comments, intents=intents,
        gold_facts=_dedupe(f for a in answers for f in a.facts), expected_tools=tools,
        expected_skills=_dedupe(pick_reply_skill(manifest, it) for it in intents),
        forbidden_claims=_dedupe(c for a in answers for c in a.forbidden),
        gold_reply=" ".join(a.sentence for a in answers), tags=sorted(set(tags)),
        source=f"t1:{ctx.source}",
    )


def build_t1(rooms: Sequence[EvalRoom] | None = None) -> list[EvalCase]:
    """Every T1 case, in a fixed order; each passes :func:`verify_case` (AssertionError otherwise)."""
    rooms = list(rooms) if rooms is not None else eval_rooms()
    rng = random.Random(SEED)
    manifest = demo_manifest()
    cases: list[EvalCase] = []
    for template in W.TEMPLATES:
        for ctx in _instances(template, rooms, rng):
            case = _case(len(cases) + 1, template, ctx, rng, manifest)
            problems = verify_case(case)
            if problems:
                raise AssertionError(f"{case.id} ({ctx.text!r}): " + "; ".join(problems))
            cases.append(case)
    return cases


# --- verification ------------------------------------------------------------------------------------------------


def verify_case(case: EvalCase, manifest: Manifest | None = None) -> list[str]:
    """Why the case's labels are not what the room says ([] = right): every gold fact is what its binding
    returns on the room and comes from an expected call, every expected call runs (only a wrong-link case
    expects not_found), expected skills are reply skills of the harness, the gold reply states every fact."""
    problems: list[str] = []
    room = case.room
    for i, t in enumerate(case.expected_tools):
        result = call(t.binding, room, **t.arguments)
        if "error" in result and not (result.get("code") == "not_found" and "wrong_link" in case.tags):
            problems.append(f"expected_tools[{i}]: {t.binding} fails on the room: {result['error']}")
    calls = {(t.binding, tuple(sorted(t.arguments.items()))) for t in case.expected_tools}
    for i, f in enumerate(case.gold_facts):
        if (f.binding, tuple(sorted(f.arguments.items()))) not in calls:
            problems.append(f"gold_facts[{i}]: no expected call {f.binding}({f.arguments}) backs it")
        found, value = field_value(call(f.binding, room, **f.arguments), f.field)
        if not found:
            problems.append(f"gold_facts[{i}]: {f.binding} returns no {f.field}")
        elif value != f.value or type(value) is not type(f.value):
            problems.append(f"gold_facts[{i}]: {f.field} is {value!r} on the room, not {f.value!r}")
        spoken = num(f.value) if not isinstance(f.value, str) else f.value
        if f.say != spoken and f.say.lower() not in str(f.value).lower():
            problems.append(f"gold_facts[{i}]: say {f.say!r} is not how {f.value!r} is said")
        if case.gold_reply and f.say.lower() not in case.gold_reply.lower():
            problems.append(f"gold_facts[{i}]: the gold reply does not say {f.say!r}")
    if manifest is None and case.harness in DEMO_HARNESSES:
        manifest = demo_manifest(case.harness)
    if manifest is not None:
        kinds = {s.id: s.kind for s in manifest.skills}
        for s in case.expected_skills:
            if kinds.get(s) != "reply":
                problems.append(f"expected_skills: {s!r} is not a reply skill of {case.harness}")
    return problems
