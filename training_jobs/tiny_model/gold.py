"""Gold turns for the tiny demo model, written by the REFERENCE POLICY (a rule-based gold-data tool, not a
model) over seeded live rooms and templated viewer comments.

Every sample is exactly what the serving path sees: :func:`harness_editor.render.render_prompt` on the lean
demo manifest (``harness_editor/demo/tiny_room.yaml``) and a room, then the gold assistant/tool turns from
:func:`streams.reference_policy.gold_trajectory` with tool results from the real bindings.

Rooms vary (link ids, prices, stock, coupons, shipping) so the model has to *copy* ids and numbers from the
comment and the tool result instead of memorising one catalog. Some rooms are the demo room itself.

Split: ``train`` and ``heldout`` use disjoint comment phrasings, disjoint viewer names and disjoint link ids
(held-out rooms use only reserved link ids), so held-out metrics measure generalisation, not recall.
``heldout_ids`` keeps the training phrasings and viewers but uses held-out rooms and link ids: it separates
"copies unseen ids and values" from "understands unseen phrasings". Everything is a pure function of
``seed`` (each split has its own random stream).

Other harnesses (issue 14: the flagship ``glow-gadget``, seeded by seed_demo from ``skincare_v1..v3``) come from the
same generator with their own manifest and random stream (:func:`generate_mix`); the tiny room's stream is unchanged,
so its held-out sets are the ones the earlier stages were measured on. A harness with a dialogue history
(``constraints.history_turns`` > 0, as the preview room sends it) gets earlier turns in a share of its samples.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any, Literal

import yaml

from harness_editor.render import render_comments
from harness_editor.schemas import Manifest, manifest_from_yaml

# How a viewer may name each product of a room ("the dryer"): one implementation, shared with the reply rules.
from streams.engine.rules.entities import product_aliases
from streams.reference_policy import GoldComment, GoldTrajectory, gold_trajectory, short_title  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = REPO / "harness_editor" / "demo"
TINY_MANIFEST = DEMO_DIR / "tiny_room.yaml"
DEMO_ROOM = DEMO_DIR / "room.yaml"

Split = Literal["train", "heldout", "heldout_ids"]

TINY_ROOM = "tiny_room"
# The flagship harness as seed_demo seeds it: glow-gadget v1 (production), v2 (staging), v3 (in review).
GLOW_GADGET_MANIFESTS = ("skincare_v1", "skincare_v2", "skincare_v3")
TINY_ONLY_MIX: dict[str, float] = {TINY_ROOM: 1.0}
# Share of samples, on a harness that sends a dialogue history, that carry 1-3 earlier turns (the preview room's
# second and later comments): without them the model has only ever seen a first comment.
HISTORY_SHARE = 0.3
MAX_HISTORY_TURNS = 3

# --- comment templates (train and held-out never share a phrasing) --------------------------------------

LINK_FORMATS = ("#{id}", "link {id}", "number {id}", "item {id}", "link #{id}", "no. {id}")

# Comment = optional lead-in + CORE + optional tail. The model has to find the link id (or the product a viewer
# names) wherever it sits in the sentence, so cores put it at the start, middle and end; lead-ins and tails
# shift it further. Held-out cores are whole phrasings never seen in training (built from the same everyday
# words: a viewer's vocabulary is shared, their sentences are not).
CORES: dict[str, dict[str, tuple[str, ...]]] = {
    "price": {
        "train": (
            "how much is {link}", "price of {link}", "what does {link} cost", "{link} price please",
            "how much for {link}", "is {link} on sale? how much", "what's the price on {link}", "cost of {link}",
            "{link} how much", "{link} price", "how much does {link} cost", "what is the price of {link}",
            "{link} cost?", "price on {link}", "how much is {link} today", "price check on {link}",
            "{link} is how much", "what's {link} selling for", "current price of {link}", "{link} price now",
            "how much is {link} right now", "what do you charge for {link}", "{link}, what's the price",
            "price for {link} please", "how much would {link} be", "{link} price today?", "what's the deal price of {link}",
            "is {link} cheap today? price", "so how much is {link} now", "{link} how much is it",
            "what's {link} going for today", "still on sale? {link} price",
        ),
        "heldout": (
            "what is {link} going for",
            "tell me the price for {link}",
            "{link} how much now?",
            "how much are you selling {link} for",
            "{link} what does it cost today",
        ),
    },
    "stock": {
        "train": (
            "how many {link} left?", "is {link} in stock", "any {link} left?", "stock on {link}?",
            "is {link} sold out", "how many left of {link}", "{link} in stock?", "{link} sold out?",
            "{link} how many left", "{link} stock please", "is {link} still available", "how many units of {link}",
            "still have {link}?", "{link} still in stock?", "how many {link} do you have", "is there stock of {link}",
            "{link} any left", "can I still buy {link}", "{link} available? how many", "units left on {link}",
            "do you have {link} in stock", "how much stock for {link}", "{link} left in stock?",
            "is {link} gone already", "stock check {link}", "are there any {link} left",
        ),
        "heldout": (
            "do you still have {link}",
            "{link} still available? how many",
            "how many pieces of {link} remain",
            "{link} is it sold out yet",
        ),
    },
    "shipping": {
        "train": (
            "how long is shipping{to}?", "delivery time{to}?", "when will it arrive{to}", "is shipping free{to}?",
            "shipping{to} please", "how fast is delivery{to}", "do you ship{to}?", "shipping cost{to}?",
            "how long does delivery take{to}", "what's the shipping time{to}", "when does it ship{to}",
            "free shipping{to}?", "shipping info{to}", "how long to get it{to}", "delivery{to} how long",
            "how many days is shipping{to}", "returns and shipping{to}?",
        ),
        "heldout": (
            "how many days to deliver{to}",
            "what about delivery{to}?",
            "how soon would it get here{to}",
        ),
    },
    "coupon": {
        "train": (
            "any coupons?", "is there a coupon code", "discount code please", "any deals today?",
            "coupon code?", "any discount codes", "do you have a coupon", "is there a promo",
            "any coupon for tonight", "what deals are on", "any codes today", "is there a discount",
            "any vouchers?", "coupon please", "what coupon can I use",
        ),
        "heldout": (
            "got a promo code?",
            "can I get a discount",
            "is there any code I can use",
        ),
    },
    "chit_chat": {
        "train": (
            "hi!", "hello Mia", "love this show", "just joined, hey", "good evening everyone", "hey Mia",
            "hello from Texas", "love your stream", "hi everyone", "good morning", "you are so nice",
            "thanks Mia", "watching from home", "hello hello", "great show today",
        ),
        "heldout": (
            "hey there",
            "first time here",
            "greetings from Ohio",
        ),
    },
    "compliance": {
        "train": (
            "does {link} cure {cond}?", "will {link} fix my {cond}", "is {link} good for {cond}?",
            "can {link} get rid of {cond}", "{link} for {cond}?", "will {link} treat {cond}",
            "does {link} work on {cond}", "can {link} cure my {cond}", "{link} good for {cond}?",
            "is {link} a treatment for {cond}", "does {link} remove {cond}", "my {cond} is bad, will {link} fix it",
        ),
        "heldout": (
            "will {link} heal {cond}?",
            "does {link} help with {cond}",
            "{link} clears {cond}, right?",
        ),
    },
}
LEAD_INS = ("", "", "", "", "hi ", "hey Mia ", "ok ", "wait ", "so ", "quick question: ", "Mia, ", "hello, ")
TAILS = ("", "", "", "?", "??", " please", " pls", " thanks", "!", " :)")
# Share of product questions that name the product ("the serum") instead of giving its link id: scenario
# comments mostly do, so the model has to find the link id in the room block itself.
NAME_MENTION_SHARE = 0.3

VIEWERS = {
    "train": ("ann", "bo", "cara", "dev", "eli", "fay", "gus", "hana", "ivo", "jo", "kim", "lea"),
    "heldout": ("max", "nia", "oli", "pia"),
}
CONDITIONS = {"train": ("acne", "eczema", "wrinkles", "dark circles"), "heldout": ("rosacea", "hair loss")}
REGIONS = ("Alaska", "Hawaii", "Puerto Rico")
INTENT_WEIGHTS = {"price": 30, "stock": 22, "shipping": 14, "coupon": 10, "chit_chat": 9, "compliance": 15}

PRODUCT_POOL = (
    ("HydraGlow Serum", "skincare"),
    ("Ceramide Moisturizer", "skincare"),
    ("Mineral Sunscreen SPF 50", "skincare"),
    ("Amino Cleanser", "skincare"),
    ("Vitamin C Toner", "skincare"),
    ("Retinol Night Cream", "skincare"),
    ("Clay Mask", "skincare"),
    ("Lip Balm Trio", "skincare"),
    ("NanoMist Steamer", "appliance"),
    ("AirSilk Hair Dryer", "appliance"),
    ("LumiRoll Eye Massager", "appliance"),
    ("Curl Wand", "appliance"),
    ("LED Mirror", "appliance"),
    ("Sonic Face Brush", "appliance"),
)
COUPON_CODES = ("GLOW5", "SAVE10", "GADGET15", "MIA20", "LIVE8", "FLASH12", "HELLO3", "VIP25")


def load_tiny_manifest() -> Manifest:
    return manifest_from_yaml(TINY_MANIFEST.read_text(encoding="utf-8"))


def load_demo_manifest(name: str) -> Manifest:
    """``harness_editor/demo/<name>.yaml`` (``tiny_room``, ``skincare_v1``, …)."""
    path = DEMO_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"no demo manifest {name!r} (harness_editor/demo/{name}.yaml)")
    return manifest_from_yaml(path.read_text(encoding="utf-8"))


def parse_mix(text: str) -> dict[str, float]:
    """``"tiny_room=0.4,skincare_v1=0.3"`` → shares of each demo manifest (normalised to sum 1)."""
    mix: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, share = part.partition("=")
        try:
            value = float(share) if share else 1.0
        except ValueError:
            raise ValueError(f"mix: {part!r} is not name=share") from None
        if value <= 0:
            raise ValueError(f"mix: the share of {name.strip()!r} must be > 0")
        load_demo_manifest(name.strip())  # an unknown name fails here, with its path
        mix[name.strip()] = value
    if not mix:
        raise ValueError("mix: no manifest named")
    total = sum(mix.values())
    return {k: v / total for k, v in mix.items()}


def format_mix(mix: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in mix.items())


def load_demo_room() -> dict[str, Any]:
    return yaml.safe_load(DEMO_ROOM.read_text(encoding="utf-8"))


def heldout_link_ids(seed: int = 0, n: int = 80) -> frozenset[int]:
    """Link ids reserved for held-out rooms (never used in training rooms). Independent of the demo room."""
    demo = {p["link_id"] for p in load_demo_room()["products"]}
    rng = random.Random(f"heldout-ids-{seed}")
    pool = [i for i in range(100, 1000) if i not in demo]
    return frozenset(rng.sample(pool, n))


def _price(rng: random.Random) -> float:
    whole = rng.randint(5, 99)
    return float(whole) if rng.random() < 0.5 else round(whole + rng.choice((0.5, 0.9, 0.99, 0.25)), 2)


def random_room(rng: random.Random, link_ids: list[int]) -> dict[str, Any]:
    """A small live room: one product per link id, 0-2 coupons, maybe a flash sale, a shipping policy."""
    titles = rng.sample(PRODUCT_POOL, len(link_ids))
    products = []
    for lid, (title, category) in zip(link_ids, titles, strict=True):
        price = _price(rng)
        stock_units = rng.choice((0, rng.randint(1, 12), rng.randint(1, 300), rng.randint(13, 500)))
        products.append(
            {
                "link_id": lid,
                "title": title,
                "price": price,
                "list_price": float(int(price) + rng.randint(3, 30)),
                "stock": stock_units,
                "attributes": {"category": category},
                "compliance_notes": ["Cosmetic claims only."] if category == "skincare" else ["Not a medical device."],
            }
        )
    clock = rng.randint(1, 80)
    coupons = []
    for code in rng.sample(COUPON_CODES, rng.choice((1, 1, 2))):
        coupons.append(
            {
                "code": code,
                "discount": float(rng.randint(2, 25)),
                "min_spend": float(rng.randint(10, 120)),
                "expires_at_minute": clock + rng.randint(5, 60),
                "remaining": rng.randint(1, 300),
            }
        )
    campaign: dict[str, Any] = {"phase": "live", "flash_sale": None}
    if rng.random() < 0.3:
        p = rng.choice(products)
        campaign = {
            "phase": "flash_sale",
            "flash_sale": {
                "link_id": p["link_id"],
                "price": round(p["price"] * 0.8, 1),
                "ends_at_minute": clock + rng.randint(3, 30),
            },
        }
    lo = rng.randint(2, 5)
    regions = {r: {"delivery_days": f"{lo + 3}-{lo + 6} business days", "free_over": float(rng.randint(40, 90))}
               for r in rng.sample(REGIONS, rng.randint(0, 2))}
    return {
        "room_id": f"room-{rng.randint(0, 10**6)}",
        "title": "Live room",
        "currency": "$",
        "clock_minute": clock,
        "low_stock_threshold": 10,
        "products": products,
        "coupons": coupons,
        "campaign": campaign,
        "shipping": {
            "free_over": float(rng.randint(19, 60)),
            "delivery_days": f"{lo}-{lo + rng.randint(1, 4)} business days",
            "return_days": rng.choice((7, 14, 30)),
            "regions": regions,
        },
        "pinned": None,
    }


def _room_for(rng: random.Random, split: Split, reserved: frozenset[int]) -> tuple[dict[str, Any], list[int]]:
    """A room and the link ids a comment may ask about."""
    if split == "train" and rng.random() < 0.2:
        room = load_demo_room()
        return room, [p["link_id"] for p in room["products"]]
    n = rng.randint(3, 6)
    if split == "train":
        pool = [i for i in range(100, 1000) if i not in reserved]
        ids = rng.sample(pool, n)
        askable = ids
    else:
        ids = rng.sample(sorted(reserved), n)
        askable = ids
    return random_room(rng, ids), askable


def make_comment(rng: random.Random, split: Split, intent: str, room: dict[str, Any], askable: list[int]) -> GoldComment:
    split = "train" if split == "heldout_ids" else split
    core = rng.choice(CORES[intent][split])
    viewer = rng.choice(VIEWERS[split])
    link_id = region = cond = None
    fields: dict[str, str] = {}
    if "{link}" in core:
        link_id = rng.choice(askable)
        aliases = product_aliases(room).get(link_id) or []
        if aliases and rng.random() < NAME_MENTION_SHARE:
            fields["link"] = ("the " if rng.random() < 0.8 else "") + rng.choice(aliases)
        else:
            fields["link"] = rng.choice(LINK_FORMATS).format(id=link_id)
    if "{to}" in core:
        regions = list((room.get("shipping") or {}).get("regions") or {})
        region = rng.choice(regions) if regions and rng.random() < 0.6 else ""
        fields["to"] = f" to {region}" if region else ""
    if "{cond}" in core:
        cond = rng.choice(CONDITIONS[split])
        fields["cond"] = cond
    body = core.format(**fields)
    tail = rng.choice(TAILS)
    if body.endswith(("?", "!")) and tail in ("?", "??", "!"):
        tail = ""
    text = rng.choice(LEAD_INS) + body + tail
    if rng.random() < 0.2:
        text = text[0].upper() + text[1:]
    elif rng.random() < 0.1:
        text = text.lower()
    return GoldComment(
        text=text, intent=intent, viewer=viewer, link_id=link_id, region=region or "", condition=cond or ""  # type: ignore[arg-type]
    )


def _history(rng: random.Random, split: Split, manifest: Manifest, room: dict[str, Any],
             askable: list[int]) -> list[dict[str, Any]]:
    """1-3 earlier turns in this room as the preview room sends them: the comment line, then the final reply."""
    intents = list(INTENT_WEIGHTS)
    weights = [INTENT_WEIGHTS[i] for i in intents]
    turns = rng.randint(1, min(MAX_HISTORY_TURNS, manifest.constraints.history_turns))
    messages: list[dict[str, Any]] = []
    for _ in range(turns):
        comment = make_comment(rng, split, rng.choices(intents, weights)[0], room, askable)
        earlier = gold_trajectory(manifest, room, comment)
        line = render_comments([{"viewer": comment.viewer, "text": comment.text}],
                               speaker_label=manifest.conventions.speaker_label)
        messages += [{"role": "user", "content": line}, {"role": "assistant", "content": earlier.reply}]
    return messages


def generate(n: int, *, seed: int = 0, split: Split = "train", manifest: Manifest | None = None, stream: str = "",
             history_share: float = 0.0) -> list[GoldTrajectory]:
    """``n`` gold trajectories for ``split``, deterministic in ``seed``. ``stream`` names another random stream (one
    per harness: "" is the tiny room's, unchanged since the first stage); ``history_share``: see :data:`HISTORY_SHARE`
    (only on a manifest with ``history_turns`` > 0)."""
    manifest = manifest or load_tiny_manifest()
    reserved = heldout_link_ids(seed)
    rng = random.Random(f"gold-{split}-{seed}" + (f"-{stream}" if stream else ""))
    intents = list(INTENT_WEIGHTS)
    weights = [INTENT_WEIGHTS[i] for i in intents]
    with_history = history_share > 0 and manifest.constraints.history_turns > 0
    out = []
    for _ in range(n):
        room, askable = _room_for(rng, split, reserved)
        intent = rng.choices(intents, weights)[0]
        comment = make_comment(rng, split, intent, room, askable)
        history = _history(rng, split, manifest, room, askable) if with_history and rng.random() < history_share \
            else []
        traj = gold_trajectory(manifest, copy.deepcopy(room), comment, history)
        traj.meta.update(
            {"split": split, "seed": seed, "comment": comment.text, "viewer": comment.viewer,
             "link_id": comment.link_id, "room": room, "harness": stream or TINY_ROOM,
             "history_turns": len(history) // 2,
             # how the viewer pointed at the product: by its link id, or by name ("the serum")
             "mention": None if comment.link_id is None else (
                 "link" if str(comment.link_id) in comment.text else "name")}
        )
        out.append(traj)
    return out


def generate_harness(name: str, n: int, *, seed: int = 0, split: Split = "train",
                     history_share: float = HISTORY_SHARE) -> list[GoldTrajectory]:
    """``n`` gold trajectories on the demo manifest ``name``, on that harness's own random stream."""
    stream = "" if name == TINY_ROOM else name
    return generate(n, seed=seed, split=split, manifest=load_demo_manifest(name), stream=stream,
                    history_share=history_share)


def mix_counts(n: int, mix: dict[str, float]) -> dict[str, int]:
    """``n`` samples shared out by ``mix`` (largest remainders, in the mix's order on ties)."""
    raw = {k: n * v / sum(mix.values()) for k, v in mix.items()}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: counts[k] - raw[k])[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def generate_mix(n: int, *, seed: int = 0, split: Split = "train", mix: dict[str, float] | None = None,
                 history_share: float = HISTORY_SHARE) -> list[GoldTrajectory]:
    """``n`` gold trajectories over several demo manifests (shares in ``mix``), shuffled together. A tiny-room-only
    mix is exactly :func:`generate` (the earlier stages' data)."""
    mix = mix or TINY_ONLY_MIX
    if list(mix) == [TINY_ROOM]:
        return generate(n, seed=seed, split=split)
    out: list[GoldTrajectory] = []
    for name, count in mix_counts(n, mix).items():
        out += generate_harness(name, count, seed=seed, split=split, history_share=history_share)
    random.Random(f"gold-mix-{split}-{seed}").shuffle(out)
    return out


def to_record(t: GoldTrajectory) -> dict[str, Any]:
    """A dataset row for TRL: ``messages`` + ``tools`` (tool-call arguments stay JSON strings)."""
    return {"messages": t.messages, "tools": t.tools}
