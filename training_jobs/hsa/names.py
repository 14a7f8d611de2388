"""Names, phrasings and settings the HSA operators draw from, split into TRAIN and HELD-OUT pools.

Harness-Variant evaluation (DESIGN.md section 8, T2) must test harness states the model never saw, so every
table below has two disjoint halves: ``train`` (augmented training data) and ``heldout`` (reserved for
evaluation). :func:`heldout_registry` lists everything that is held out; the leakage test checks that none of
it appears in a training row. Each pool is a tuple so draws are deterministic for a seeded ``random.Random``.

Tool names must be ASCII (``schemas.TOOL_NAME_RE``), so "other languages" for tools are romanised; skill ids
may use any letters (``schemas.SKILL_ID_RE``), so they include Chinese.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Pool = Literal["train", "heldout"]
POOLS: tuple[Pool, ...] = ("train", "heldout")

# --- skill identifiers --------------------------------------------------------------------------------------

# Topic of a skill, guessed from its id/description words (first hit wins); unknown topics get generic names.
SKILL_TOPIC_HINTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bundle", ("bundle",)),
    ("flash", ("flash",)),
    ("coupon", ("coupon", "voucher")),
    ("price", ("price", "stock", "deal")),
    ("shipping", ("ship", "deliver", "return")),
    ("efficacy", ("effic", "complian", "skin problem", "health")),
    ("chat", ("chat", "greet", "small talk")),
)

SKILL_SYNONYMS: dict[Pool, dict[str, tuple[str, ...]]] = {
    "train": {
        "price": ("pricing_questions", "price_and_stock", "deal_answers", "cost_help", "stock_price_qa"),
        "shipping": ("delivery_help", "shipping_questions", "after_sales_care", "logistics_qa"),
        "efficacy": ("product_claims", "safe_efficacy_answers", "skin_concern_qa"),
        "chat": ("small_talk", "greetings", "room_banter"),
        "flash": ("flash_deal_run", "limited_sale_push"),
        "coupon": ("voucher_play", "coupon_issuing"),
        "bundle": ("bundle_pitch", "set_suggestion"),
        "generic": ("{id}_skill", "{id}_module", "handle_{id}"),
    },
    "heldout": {
        "price": ("quote_desk", "value_enquiries"),
        "shipping": ("parcel_desk", "fulfilment_enquiries"),
        "efficacy": ("claims_guardrail", "wellness_enquiries"),
        "chat": ("audience_warmup", "hello_desk"),
        "flash": ("countdown_offer",),
        "coupon": ("promo_grant",),
        "bundle": ("pairing_offer",),
        "generic": ("{id}_playbook",),
    },
}
SKILL_FOREIGN: dict[Pool, dict[str, tuple[str, ...]]] = {
    "train": {
        "price": ("preis_fragen", "precio_stock", "价格库存"),
        "shipping": ("versand", "envio", "物流售后"),
        "efficacy": ("wirksamkeit", "eficacia", "功效合规"),
        "chat": ("plaudern", "charla", "闲聊"),
        "flash": ("blitzangebot", "限时秒杀"),
        "coupon": ("gutschein", "优惠券"),
        "bundle": ("paket_angebot", "组合套装"),
        "generic": ("fertigkeit_{id}",),
    },
    "heldout": {
        "price": ("prix_et_stock", "価格在庫"),
        "shipping": ("livraison", "配送"),
        "efficacy": ("efficacite", "効能"),
        "chat": ("bavardage", "雑談"),
        "flash": ("vente_eclair",),
        "coupon": ("bon_de_reduction",),
        "bundle": ("lot_offre",),
        "generic": ("competence_{id}",),
    },
}
# Opaque codes: the train and held-out formats differ, so an evaluation code never looks like a training one.
OPAQUE_SKILL_FORMAT: dict[Pool, str] = {"train": "sk{hex4}", "heldout": "K-{digits4}"}
OPAQUE_SKILL_RE: dict[Pool, re.Pattern[str]] = {
    "train": re.compile(r"^sk[0-9a-f]{4}$"),
    "heldout": re.compile(r"^K-[0-9]{4}$"),
}

# What a masked skill description says: nothing about the topic.
MASKED_DESCRIPTIONS: dict[Pool, tuple[str, ...]] = {
    "train": ("See the skill body.", "Load this skill to read it.", "No summary available."),
    "heldout": ("Details inside.",),
}

# Distractor skills: plausible for a live room, never the one a demo task needs (no tool mentions).
DISTRACTOR_SKILLS: dict[Pool, tuple[tuple[str, str, str, str], ...]] = {
    "train": (
        ("loyalty_points", "reply", "Explain how loyalty points are earned and redeemed.",
         "1. Points are earned on paid orders only.\n2. Never promise a points balance; the account page shows it."),
        ("gift_wrapping", "reply", "Answer questions about gift wrapping and gift notes.",
         "1. Gift wrapping is chosen at checkout.\n2. A gift note can hold up to 100 characters."),
        ("live_schedule", "reply", "Tell viewers when the next live shows are on.",
         "1. Point viewers to the follow button for show reminders.\n2. Do not promise products for future shows."),
        ("size_guide", "reply", "Help with clothing sizes and fit.",
         "1. Ask for height and usual size.\n2. Recommend the size chart on the product page."),
        ("giveaway_rules", "strategy", "Run the end-of-show giveaway.",
         "1. Announce the giveaway once, at the end of the show.\n2. Winners are drawn by the platform."),
        ("payment_methods", "reply", "List the payment methods the shop accepts.",
         "1. Cards and the platform wallet are accepted at checkout.\n2. Never ask for card details in chat."),
    ),
    "heldout": (
        ("host_playlist", "reply", "Share what music is playing in the room.",
         "1. Name the playlist shown on screen.\n2. Do not share links."),
        ("packaging_recycling", "reply", "Explain how to recycle the packaging.",
         "1. Boxes are paper; bottles follow local rules.\n2. Point to the recycling icon on the pack."),
        ("gift_cards", "strategy", "Promote gift cards before holidays.",
         "1. Mention gift cards once per show.\n2. Gift cards cannot be combined with coupons."),
    ),
}

# --- tools ----------------------------------------------------------------------------------------------------

TOOL_NAMES: dict[Pool, dict[str, tuple[str, ...]]] = {  # by binding id
    "train": {
        "catalog.product_info": ("get_product", "product_lookup", "fetch_item", "item_info", "query_product",
                                 "productDetails", "shangpin_xinxi", "produkt_info", "info_producto"),
        "catalog.stock": ("stock_level", "get_inventory", "units_left", "inventoryCheck", "kucun_chaxun",
                          "lagerbestand"),
        "coupons.issue": ("grant_coupon", "give_voucher", "send_coupon", "gutschein_ausgeben"),
        "policy.shipping": ("shipping_info", "delivery_policy", "get_delivery_terms", "versand_info",
                            "politica_envio"),
        "campaign.state": ("current_promotions", "get_live_deals", "campaign_status", "huodong_zhuangtai"),
        "room.pin_product": ("feature_item", "show_product_card", "pin_card", "zhiding_shangpin"),
    },
    "heldout": {
        "catalog.product_info": ("describe_listing", "sku_profile", "artikel_details", "ficha_producto"),
        "catalog.stock": ("on_hand_count", "existencias"),
        "coupons.issue": ("apply_promo_grant", "bon_emettre"),
        "policy.shipping": ("fulfilment_terms", "livraison_regles"),
        "campaign.state": ("promo_snapshot", "estado_campana"),
        "room.pin_product": ("spotlight_listing", "epingler_produit"),
    },
}
PARAM_NAMES: dict[Pool, dict[str, tuple[str, ...]]] = {  # by parameter name
    "train": {
        "link_id": ("item_id", "product_id", "link", "listing_no", "sku_ref", "artikel_nr"),
        "region": ("area", "destination", "ship_to", "zone"),
        "coupon_code": ("code", "voucher_code", "promo"),
        "viewer_id": ("viewer", "user_name", "customer"),
        "duration_s": ("seconds", "pin_seconds", "length_s"),
    },
    "heldout": {
        "link_id": ("catalog_ref", "lot_number"),
        "region": ("province",),
        "coupon_code": ("grant_token",),
        "viewer_id": ("audience_member",),
        "duration_s": ("hold_for",),
    },
}
WRAP_KEYS: dict[Pool, tuple[str, ...]] = {"train": ("args", "request", "params", "input"),
                                          "heldout": ("payload", "query")}
# Optional parameters a tool may gain (never mapped to the implementation, never used by the gold call).
OPTIONAL_PARAMS: dict[Pool, tuple[tuple[str, dict], ...]] = {
    "train": (
        ("locale", {"type": "string", "description": "Language of the answer, for example en."}),
        ("verbose", {"type": "boolean", "description": "Return extra details."}),
        ("currency", {"type": "string", "enum": ["USD", "EUR", "CNY"], "description": "Currency for prices."}),
        ("max_results", {"type": "integer", "minimum": 1, "maximum": 10, "description": "At most this many."}),
        ("trace_id", {"type": "string", "description": "Optional id for logs."}),
    ),
    "heldout": (
        ("dry_run", {"type": "boolean", "description": "Validate without side effects."}),
        ("channel_tag", {"type": "string", "description": "Which stream channel asks."}),
    ),
}
# Decoy tools: plausible, bound to the read-only campaign state (harmless if called), never in a gold call.
DECOY_TOOLS: dict[Pool, tuple[tuple[str, str, dict], ...]] = {
    "train": (
        ("get_viewer_count", "Number of viewers watching the live room now.", {}),
        ("get_live_poll", "Results of the audience poll running on screen.", {}),
        ("list_upcoming_shows", "Dates and themes of the next live shows.", {}),
        ("get_gift_leaderboard", "Viewers who sent the most gifts in this show.",
         {"top": {"type": "integer", "minimum": 1, "maximum": 20}}),
        ("check_loyalty_points", "Loyalty points balance of a viewer.",
         {"viewer_name": {"type": "string", "description": "The viewer's display name."}}),
        ("translate_comment", "Translate a viewer comment into English.",
         {"text": {"type": "string"}, "source_language": {"type": "string"}}),
    ),
    "heldout": (
        ("get_follower_milestones", "Follower milestones reached during this show.", {}),
        ("list_bundle_history", "Bundles sold in earlier shows.", {"days": {"type": "integer", "minimum": 1}}),
    ),
}

# --- wording --------------------------------------------------------------------------------------------------

# Word-level synonyms for rules and descriptions: whole words, case of the first letter kept.
WORD_SYNONYMS: dict[Pool, dict[str, tuple[str, ...]]] = {
    "train": {
        "viewer": ("customer", "audience member", "shopper"),
        "viewers": ("customers", "audience members", "shoppers"),
        "call": ("use", "invoke", "run"),
        "answer": ("reply to", "respond to", "handle"),
        "questions": ("queries", "asks", "enquiries from viewers"),
        "product": ("item", "listing"),
        "products": ("items", "listings"),
        "never": ("do not ever", "under no circumstances"),
        "say": ("state", "tell them"),
        "exact": ("precise", "literal"),
        "get": ("fetch", "retrieve", "look up"),
        "briefly": ("in a few words", "shortly"),
        "short": ("brief", "compact"),
        "number": ("figure", "value"),
        "suggest": ("recommend", "propose"),
    },
    "heldout": {
        "viewer": ("patron", "watcher"),
        "viewers": ("patrons", "watchers"),
        "call": ("trigger",),
        "answer": ("tackle",),
        "questions": ("inquiries",),
        "product": ("article",),
        "products": ("articles",),
        "never": ("at no point",),
        "say": ("voice",),
        "exact": ("verbatim",),
        "get": ("obtain",),
        "briefly": ("tersely",),
        "short": ("terse",),
        "number": ("tally",),
        "suggest": ("advise",),
    },
}
# Sentence frames around a description: "{d}" is the (reworded) description with its first letter lowered.
DESCRIPTION_FRAMES: dict[Pool, tuple[str, ...]] = {
    "train": ("{D}", "Use this to {d}", "Purpose: {d}", "{D} (live room)", "When needed: {d}"),
    "heldout": ("Intended for: {d}", "Scope — {d}"),
}

BLOCK_TITLES: dict[Pool, dict[str, tuple[str, ...]]] = {  # by block role
    "train": {
        "persona": ("Who you are", "Your role", "Persona", "About you", "Host profile"),
        "room_context": ("The room right now", "Live room", "Room", "Current room state", "What is on sale"),
        "business_rules": ("Business rules", "Shop rules", "Selling rules", "House rules"),
        "compliance": ("Compliance", "Legal and safety", "What you must not claim", "Compliance rules"),
        "output_format": ("How to reply", "Output", "Reply format", "Answer style"),
        "skills_index": ("Skills", "Available skills", "Skill list", "Playbooks"),
        "custom": (),
    },
    "heldout": {
        "persona": ("Character sheet",),
        "room_context": ("Storefront snapshot",),
        "business_rules": ("Commercial policy",),
        "compliance": ("Regulatory guardrails",),
        "output_format": ("Delivery constraints",),
        "skills_index": ("Capability catalogue",),
        "custom": (),
    },
}
LAYOUTS: tuple[str, ...] = ("markdown", "xml", "json", "plain")  # only four exist: none is held out

# Hook messages: structures ({m} = the original message) the wording operator chooses from.
HOOK_MESSAGE_FRAMES: dict[Pool, tuple[str, ...]] = {
    "train": ("{m}", "Problem: {m}", "Check failed. {m}", "Please fix this: {m}", "{m} Then answer again.",
              "Rule: {m}"),
    "heldout": ("Guardrail notice — {m}", "{m} (automated review)"),
}
FALLBACK_REPLIES: dict[Pool, tuple[str, ...]] = {
    "train": ("Let me check that for you, the product card on screen has the details!",
              "Good question, please look at the product card on screen for the latest details.",
              "One moment, the card on screen shows the current details."),
    "heldout": ("Hang tight, the listing on screen has everything you need.",),
}

# --- any domain: names from the harness's own words ---------------------------------------------------------
# A harness outside the live room (an order desk, a help desk, public function definitions) is renamed from its
# own words (the tokens of its tool, parameter and skill names) and these generic pools, never from the
# live-commerce tables above (those stay for tools bound to the built-in live-commerce catalog). The held-out
# halves use their own verbs and suffixes, so a generated evaluation name never equals a generated training name,
# and :data:`HELDOUT_NAME_PATTERNS` finds them in text.

# Verbs that read (any read verb can stand for another) and action verbs with their synonyms (an action keeps its
# meaning: cancel_order never becomes fetch_order).
READ_VERBS: dict[Pool, tuple[str, ...]] = {
    "train": ("get", "fetch", "lookup", "find", "read", "retrieve", "show", "load", "view"),
    "heldout": ("pull", "peek", "grab"),
}
ACTION_VERBS: dict[Pool, dict[str, tuple[str, ...]]] = {
    "train": {
        "cancel": ("void", "call_off", "abort"), "create": ("open", "new", "make", "add"),
        "update": ("change", "edit", "modify", "set"), "start": ("begin", "open", "initiate"),
        "request": ("submit", "ask_for", "raise"), "issue": ("grant", "give", "award"),
        "escalate": ("hand_over", "transfer", "route"), "verify": ("confirm", "validate", "authenticate"),
        "track": ("trace", "follow"), "list": ("list_all", "enumerate", "browse"), "search": ("find", "browse"),
        "check": ("test", "inspect", "assess"), "send": ("dispatch", "deliver"), "delete": ("remove", "drop"),
        "apply": ("use", "redeem"), "book": ("reserve", "schedule"), "close": ("resolve", "finish"),
    },
    "heldout": {
        "cancel": ("rescind",), "create": ("spawn",), "update": ("amend",), "start": ("launch",),
        "request": ("petition",), "issue": ("bestow",), "escalate": ("kick_up",), "verify": ("attest",),
        "track": ("locate",), "list": ("tabulate",), "search": ("scour",), "check": ("vet",), "send": ("relay",),
        "delete": ("purge",), "apply": ("invoke",), "book": ("pencil_in",), "close": ("wrap_up",),
    },
}
# Object words a name may drop, add or swap (the rest of a name's words are its own and stay).
GENERIC_NOUNS: dict[Pool, tuple[str, ...]] = {
    "train": ("item", "record", "entry", "info", "details", "data"),
    "heldout": ("dossier", "ledger"),
}
# Last-word synonyms for parameter names ("order_id" -> "order_ref"); a word not listed keeps itself and the name
# changes style instead (camelCase, or the tool's object word in front).
PARAM_WORD_SYNONYMS: dict[Pool, dict[str, tuple[str, ...]]] = {
    "train": {
        "id": ("ref", "no", "number", "key"), "name": ("title", "label"), "email": ("email_address", "mail"),
        "reason": ("cause", "motive"), "quantity": ("qty", "count"), "address": ("addr", "location"),
        "comment": ("note", "remark"), "summary": ("synopsis", "overview"), "priority": ("urgency", "level"),
        "sku": ("item_code", "variant_code"), "status": ("state",), "items": ("lines", "entries"),
        "text": ("content", "body"), "date": ("day", "on"), "amount": ("sum", "value"), "limit": ("cap", "at_most"),
    },
    "heldout": {
        "id": ("handle",), "name": ("moniker",), "email": ("inbox",), "reason": ("rationale",),
        "quantity": ("tally_of",), "address": ("whereabouts",), "comment": ("annotation",), "summary": ("precis",),
        "priority": ("precedence",), "sku": ("stock_handle",), "status": ("standing",), "items": ("manifest_lines",),
        "text": ("verbiage",), "date": ("datum",), "amount": ("quantum",), "limit": ("ceiling_of",),
    },
}
# Skill id templates for any domain ({id}: the skill's own id).
GENERIC_SKILL_IDS: dict[Pool, tuple[str, ...]] = {
    "train": ("{id}_skill", "{id}_module", "handle_{id}", "{id}_help", "{id}_guide"),
    "heldout": ("{id}_playbook", "{id}_casebook"),
}
# Distractor skills and decoy tools for any domain, from the harness's own nouns ({noun}): plausible next to its
# real skills and tools, never what a task needs (no tool mentions in a distractor; a decoy's fixture finds
# nothing).
DOMAIN_DISTRACTORS: dict[Pool, tuple[tuple[str, str, str, str], ...]] = {
    "train": (
        ("{noun}_glossary", "reply", "Explain the words used on {noun} pages.",
         "1. Define the term in one plain sentence.\n2. Nothing needs looking up for this."),
        ("{noun}_feedback", "reply", "Collect feedback about the {noun} experience.",
         "1. Ask one short question at a time.\n2. Thank the person and change nothing."),
        ("{noun}_announcements", "strategy", "Mention news about {noun}s once per conversation.",
         "1. Mention news only when the conversation is over.\n2. Never mention news twice."),
        ("{noun}_survey", "reply", "Invite people to the yearly {noun} survey.",
         "1. The survey link is sent by e-mail.\n2. Taking part is optional."),
    ),
    "heldout": (
        ("{noun}_casebook", "reply", "Past {noun} cases kept for reference.",
         "1. Past cases may be out of date.\n2. The current policy wins."),
        ("{noun}_etiquette_casebook", "strategy", "Tone guidance for {noun} conversations.",
         "1. Stay calm and brief.\n2. Never argue."),
    ),
}
DOMAIN_DECOYS: dict[Pool, tuple[tuple[str, str, dict], ...]] = {  # (name, description, properties)
    "train": (
        ("get_{noun}_history", "History of changes to one {noun}.",
         {"{noun}_ref": {"type": "string", "description": "Which {noun}."}}),
        ("list_{noun}_notes", "Internal notes attached to one {noun}.",
         {"{noun}_ref": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 20}}),
        ("count_{noun}_entries", "How many {noun} entries match a filter.", {"filter": {"type": "string"}}),
        ("show_{noun}_settings", "Display settings of {noun} pages.", {}),
    ),
    "heldout": (
        ("peek_{noun}_audit_trail", "Audit trail of one {noun}.", {"{noun}_handle": {"type": "string"}}),
        ("pull_{noun}_metrics", "Weekly metrics about {noun}s.", {}),
    ),
}
# Where a decoy is bound: a fixture with no cases that answers nothing found (harmless if called).
DECOY_FIXTURE: dict = {"kind": "fixture", "cases": [], "default": {"found": False, "items": []}}


def _verb_alternation(pool: Pool) -> str:
    verbs = set(READ_VERBS[pool]) | {v for vs in ACTION_VERBS[pool].values() for v in vs}
    verbs |= {v.split("_")[0] + "".join(w.title() for w in v.split("_")[1:]) for v in verbs}  # kick_up, kickUp
    return "|".join(sorted((re.escape(v) for v in verbs), key=len, reverse=True))


# Generated held-out names, as they show in text: a held-out verb first, or a held-out word last.
_ID_HEAD, _ID_TAIL = r"(?<![\w\-])", r"(?![\w\-])"
HELDOUT_NAME_PATTERNS: tuple[str, ...] = (
    _ID_HEAD + rf"(?:{_verb_alternation('heldout')})(?:_[A-Za-z0-9]+)+" + _ID_TAIL,
    _ID_HEAD + rf"(?:{_verb_alternation('heldout')})[A-Z][A-Za-z0-9]*" + _ID_TAIL,
    _ID_HEAD + r"[A-Za-z][A-Za-z0-9_]*_(?:"
    + "|".join(sorted({re.escape(w) for ws in PARAM_WORD_SYNONYMS["heldout"].values() for w in ws}
                      | {re.escape(n) for n in GENERIC_NOUNS["heldout"]} | {"casebook", "playbook"}))
    + r")" + _ID_TAIL,
)


# Fallback lines for any domain (the live-room ones point at a product card on screen).
GENERIC_FALLBACK_REPLIES: dict[Pool, tuple[str, ...]] = {
    "train": ("Sorry, I could not finish that just now. Let me look into it and get back to you.",
              "I am having trouble with that request right now, please try again in a moment.",
              "Something went wrong on my side. Could you send that again in a minute?"),
    "heldout": ("Apologies, this needs a colleague's review; expect an update shortly.",),
}


# --- numeric settings ---------------------------------------------------------------------------------------

# reply_max_chars values reserved for evaluation: training draws skip them.
HELDOUT_REPLY_MAX_CHARS: frozenset[int] = frozenset({137, 173, 229})


@dataclass(frozen=True)
class HeldOutRegistry:
    """What Harness-Variant evaluation holds out: names (tool, parameter, skill ids, wrap keys), phrasings
    (titles, descriptions, hook frames), patterns (opaque codes, generated names of any domain) and numeric
    settings. ``words`` are the held-out word synonyms ("obtain", "patron"): ordinary English that any harness,
    policy or comment may use for its own reasons, so they are no leak signal (the pools are disjoint, so a
    training draw never picks one) and no leak check looks for them."""

    names: frozenset[str]
    phrasings: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]
    reply_max_chars: frozenset[int]
    words: frozenset[str] = frozenset()


def _frame_text(frame: str) -> str:
    """The fixed words of a frame (what would show in a row), without its slot."""
    return frame.replace("{m}", "").replace("{d}", "").replace("{D}", "").strip(" .—-:()")


@lru_cache(maxsize=1)
def heldout_registry() -> HeldOutRegistry:
    names: set[str] = set()
    for by_topic in (SKILL_SYNONYMS["heldout"], SKILL_FOREIGN["heldout"]):
        for values in by_topic.values():
            names.update(v for v in values if "{id}" not in v)
    for values in TOOL_NAMES["heldout"].values():
        names.update(values)
    for values in PARAM_NAMES["heldout"].values():
        names.update(values)
    names.update(WRAP_KEYS["heldout"])
    names.update(n for n, _ in OPTIONAL_PARAMS["heldout"])
    names.update(n for n, _, _ in DECOY_TOOLS["heldout"])
    names.update(s[0] for s in DISTRACTOR_SKILLS["heldout"])
    phrasings: set[str] = (set(MASKED_DESCRIPTIONS["heldout"]) | set(FALLBACK_REPLIES["heldout"])
                           | set(GENERIC_FALLBACK_REPLIES["heldout"]))
    for d in DOMAIN_DISTRACTORS["heldout"]:  # their fixed words (the {noun} slot left out)
        phrasings.update(p.strip() for p in d[2].split("{noun}") if len(p.split()) >= 3)
    for _, desc, _ in DOMAIN_DECOYS["heldout"]:
        phrasings.update(p.strip() for p in desc.split("{noun}") if len(p.split()) >= 3)
    for titles in BLOCK_TITLES["heldout"].values():
        phrasings.update(titles)
    phrasings.update(_frame_text(f) for f in DESCRIPTION_FRAMES["heldout"] + HOOK_MESSAGE_FRAMES["heldout"])
    phrasings.update(s[2] for s in DISTRACTOR_SKILLS["heldout"])
    phrasings.update(d for _, d, _ in DECOY_TOOLS["heldout"])
    words = {w for values in WORD_SYNONYMS["heldout"].values() for w in values}
    generic = ("competence_", "_playbook")
    patterns = (
        re.compile(r"(?<![\w-])K-[0-9]{4}(?![\w-])"),  # held-out opaque skill codes
        *(re.compile(re.escape(g)) for g in generic),
        *(re.compile(p) for p in HELDOUT_NAME_PATTERNS),  # generated names of any domain
    )
    return HeldOutRegistry(frozenset(names), frozenset(p for p in phrasings if p and p not in words), patterns,
                           HELDOUT_REPLY_MAX_CHARS, frozenset(words))


def is_heldout_name(name: str) -> bool:
    """Is ``name`` a held-out name: listed, or shaped like a generated held-out one (a training draw skips it)."""
    reg = heldout_registry()
    return name in reg.names or any(p.search(name) for p in reg.patterns)


def _check_disjoint() -> None:
    """Train and held-out pools must not share a value (a shared one would leak); run at import."""
    reg = heldout_registry()
    train: set[str] = set()
    for by_topic in (SKILL_SYNONYMS["train"], SKILL_FOREIGN["train"], TOOL_NAMES["train"], PARAM_NAMES["train"]):
        for values in by_topic.values():
            train.update(values)
    train.update(WRAP_KEYS["train"])
    train.update(n for n, _ in OPTIONAL_PARAMS["train"])
    train.update(n for n, _, _ in DECOY_TOOLS["train"])
    train.update(s[0] for s in DISTRACTOR_SKILLS["train"])
    shared = train & reg.names
    # the generated names of any domain: training verbs, nouns and suffixes are never held-out ones
    words = {p: set(READ_VERBS[p]) | {v for vs in ACTION_VERBS[p].values() for v in vs} | set(GENERIC_NOUNS[p])
             | {w for ws in PARAM_WORD_SYNONYMS[p].values() for w in ws} for p in POOLS}
    shared |= words["train"] & words["heldout"]
    shared |= {w for w in words["train"] if any(pat.search(f"x_{w}") or pat.search(f"{w}_x") for pat in reg.patterns)}
    if shared:
        raise RuntimeError(f"HSA name pools overlap between train and held-out: {sorted(shared)}")


_check_disjoint()
