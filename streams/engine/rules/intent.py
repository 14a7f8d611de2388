"""Does the reply answer what the viewer asked?

What a comment asks (:func:`comment_topics`) is read from its words, several topics at once ("how much is the
steamer and how many are left?" asks price and stock): ``price``, ``deal`` (deals, sales, discounts: a price or
a coupon answers it), ``coupon``, ``stock``, ``shipping`` (a cost asked in the same clause is shipping's, not a
product's price), ``compliance`` (efficacy and health questions) and ``greeting`` (only when it asks nothing
else); a coupon code of the room in the comment asks ``coupon``. The
first-hit intent of :func:`infer_intent` (what the HSA gold data answers) is always among them.

What a reply talks about (:func:`reply_topics`): its figures (a price, an amount off, a stock count), coupon
words and codes, shipping words, efficacy and compliance words, greetings and the viewer's name, and
``unavailable`` (it could not find the link, the tool is down, "check the card": an honest non-answer, which
answers any product question).

- ``intent.unaddressed`` — some comment asks something (:data:`ANSWERED_BY` lists the reply topics that answer
  each topic) and the reply talks about none of it: a coupon question answered with a product's price, a
  greeting answered with numbers;
- ``intent.wrong_product`` — the comments ask a product question about some product(s) (link id, name or
  alias; a link id the room does not have counts as asked) and the reply names only other products;
- ``intent.wrong_condition`` — the comments ask about a skin or health condition and the reply talks about
  another one ("does it help with hair loss?" — "I cannot promise it fixes dark circles");
- ``intent.wrong_viewer`` (check ``greeting``) — the reply greets or thanks a name that is not a viewer of
  the comments ("Hi dev, welcome!" to max).

Comments with no readable topic, and spam or off-platform pitches ("DM me on telegram"), are not judged.
Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from streams.engine.rules.base import Problem, TurnView, check, word_pattern
from streams.engine.rules.claims import turn_claims
from streams.engine.rules.entities import catalogue_of, comment_products, coupon_mentions, reply_mentions

# --- the HSA gold data's intent (first hit wins; moved from training_jobs.hsa.samples, unchanged) -------------

INTENT_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("compliance", re.compile(r"\b(cure|cures|treat|treats|heal|acne|eczema|rosacea|wrinkle|sinus|"
                              r"100%|guarantee|dermatolog|medical|rash)", re.I)),
    ("coupon", re.compile(r"\b(coupon|voucher|promo|code|discount code)\b", re.I)),
    ("shipping", re.compile(r"\b(ship|shipping|deliver|delivery|arrive|return|refund|parcel|alaska|hawaii|"
                            r"puerto rico)\b", re.I)),
    ("stock", re.compile(r"\b(left|stock|sold out|available|how many)\b", re.I)),
    ("price", re.compile(r"(\bprice\b|\bhow much\b|\bcost\b|\$|\bdollars?\b|\bcheap|\bdeal\b|\bsale\b)", re.I)),
)
CONDITION_RE = re.compile(r"\b(acne|eczema|rosacea|wrinkles?|dark circles|hair loss|sinus(?:es)?|rash(?:es)?)\b",
                          re.I)


def infer_intent(text: str, persona_kind: str) -> str | None:
    """The one intent the reference policy answers a comment with (None: it cannot tell)."""
    for intent, pattern in INTENT_RULES:
        if pattern.search(text):
            return intent
    if persona_kind in ("chit_chat", "troll") or not text.strip():
        return "chit_chat"
    return None


# --- what a comment asks ------------------------------------------------------------------------------------------

_TOPIC_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("compliance", re.compile(
        r"\b(?:cur(?:e|es|ed|ing)|treat(?:s|ed|ing|ment)?|heal(?:s|ed|ing)?|acne|eczema|rosacea|psoriasis|"
        r"wrinkles?|sinus(?:es)?|scars?|dark\s+circles|hair\s+loss|rash(?:es)?|dermatolog\w*|medic(?:al|ine)|fda|"
        r"clinically|guarantee\w*|detox\w*|damaged\s+hair|younger|anti-?aging)\b|\b100\s?%", re.I)),
    ("coupon", re.compile(r"\b(?:coupons?|vouchers?|promo(?:s|\s+codes?)?|codes?)\b", re.I)),
    ("deal", re.compile(r"\b(?:deals?|discounts?|on\s+sale|sales?|offers?|flash|stack|bargains?)\b", re.I)),
    ("shipping", re.compile(
        r"\b(?:ship(?:s|ped|ping)?|deliver(?:y|ed|s|ing)?|arriv(?:e|es|ed|al)|returns?|refunds?|parcel|"
        r"how\s+long|how\s+soon|get\s+here|tracking|alaska|hawaii|puerto\s+rico)\b", re.I)),
    ("stock", re.compile(
        r"\b(?:left|stock|sold\s+out|available|how\s+many(?!\s+(?:business\s+|working\s+)?(?:days|weeks|hours))|"
        r"remain(?:s|ing)?|still\s+(?:have|buy|get)|gone|"
        r"units?|pieces?|restock\w*|back\s+in)\b", re.I)),
    ("price", re.compile(
        r"\bprices?\b|\bhow\s+much\b|\bcosts?\b|\$|\bdollars?\b|\bbucks\b|\bcheap\w*|\bcharge\b|\bselling\s+for\b|"
        r"\bgoing\s+for\b|\bexpensive\b|\bpaid\b|\bpay\b", re.I)),
)
_GREETING_RE = re.compile(
    r"\b(?:hi+|hello+|hey+|heya|hiya|greetings|good\s+(?:morning|afternoon|evening|night)|thanks?|thank\s+you|"
    r"love\s+(?:this|your|the|you|it)|great\s+show|first\s+time|just\s+joined|welcome|bye|watching)\b", re.I)

# A question besides the greeting that no topic reads ("Hi, where is my order A1002?" to a support desk): the
# comment asks something these rules cannot tell, so it is not judged, rather than judged as a greeting.
_OTHER_QUESTION_RE = re.compile(r"\b(?:where|what|when|which|why|who|whose|can\s+you|could\s+you|"
                                r"would\s+you|is\s+my|has\s+my|did\s+my|does\s+my)\b", re.I)

# Which reply topics answer a comment topic.
ANSWERED_BY: Mapping[str, frozenset[str]] = {
    "price": frozenset({"price", "deal", "unavailable"}),
    "deal": frozenset({"price", "deal", "coupon", "unavailable"}),
    "coupon": frozenset({"coupon", "unavailable"}),
    "stock": frozenset({"stock", "unavailable"}),
    "shipping": frozenset({"shipping", "unavailable"}),
    "compliance": frozenset({"compliance", "unavailable"}),
    "greeting": frozenset({"social"}),
    "chit_chat": frozenset({"social"}),
}
PRODUCT_TOPICS = frozenset({"price", "deal", "stock", "compliance"})
# Spam and off-platform pitches ("DM me on telegram for a cheaper deal"): any polite deflection answers them, so
# they are not judged for intent.
_SPAM_RE = re.compile(r"\b(?:telegram|whats\s?app|wechat|signal|dm\s+me|message\s+me|text\s+me|contact\s+me|"
                      r"follow\s+me|my\s+(?:shop|store|page|channel|profile)|link\s+in\s+(?:my\s+)?bio|"
                      r"click\s+(?:here|my)|cheaper\s+(?:on|at|elsewhere)|giveaway|crypto)\b", re.I)


_TOPIC_PATTERNS = dict(_TOPIC_RES)
# Clauses of a comment: "how much is #102 and does it ship to Alaska?" asks a price in one and shipping in the other.
_CLAUSE_RE = re.compile(r"[.?!;,]+|\b(?:and|but|also|plus)\b", re.I)


def _price_asked_apart_from_shipping(text: str) -> bool:
    """Whether a clause asks a price without asking about shipping: in "what does shipping to Alaska cost?" the cost
    is shipping's, and a product's price does not answer it."""
    return any(_TOPIC_PATTERNS["price"].search(c) and not _TOPIC_PATTERNS["shipping"].search(c)
               for c in _CLAUSE_RE.split(text))


def comment_topics(text: str, coupon_codes: frozenset[str] | set[str] = frozenset()) -> set[str]:
    """What one comment asks (module docstring); empty when nothing readable, or for spam."""
    if _SPAM_RE.search(text):
        return set()
    topics = {name for name, pattern in _TOPIC_RES if pattern.search(text)}
    if {"price", "shipping"} <= topics and not _price_asked_apart_from_shipping(text):
        topics.discard("price")
    if any(word_pattern(c).search(text) for c in coupon_codes):
        topics.add("coupon")
    first = infer_intent(text, "")
    if first is not None:
        topics.add(first)
    if not topics and _GREETING_RE.search(text) and not _OTHER_QUESTION_RE.search(_GREETING_RE.sub(" ", text)):
        topics.add("greeting")
    return topics


# --- what a reply talks about ---------------------------------------------------------------------------------

_REPLY_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("price", re.compile(r"\bprices?d?\b|\bcosts?\b|\bcheap\w*|\bbargain\b|\bexpensive\b", re.I)),
    ("deal", re.compile(r"\b(?:flash\s+(?:sale|price|deal)|on\s+sale|sales?|deals?|discount\w*|save|saving|"
                        r"offers?|off)\b", re.I)),
    ("coupon", re.compile(r"\b(?:coupons?|vouchers?|promo(?:\s+codes?)?|codes?)\b", re.I)),
    ("stock", re.compile(r"\b(?:left|in\s+stock|sold\s+out|out\s+of\s+stock|stock|available|restock\w*|units?|"
                         r"pieces?|remaining|plenty)\b", re.I)),
    ("shipping", re.compile(r"\b(?:ship(?:s|ped|ping)?|deliver(?:y|ed|s|ing)?|arriv(?:e|es|al)|business\s+days|"
                            r"days|returns?|refunds?|free\s+over|warranty|tracking|parcel)\b", re.I)),
    ("compliance", re.compile(
        r"\b(?:cosmetics?|dermatolog\w*|doctors?|physicians?|medic(?:al|ine)|promise\w*|guarantee\w*|claims?|"
        r"treat\w*|cur(?:e|es|ed|ing)|heal\w*|consult|results?|skin|hydrat\w*|frizz|gentle|sooth\w*|spf|uv|"
        r"reapply|fda|clinically|helps?|device|cannot\s+say|can't\s+say|diagnos\w*|conditions?)\b", re.I)),
    ("social", re.compile(r"\b(?:hi+|hello+|hey+|welcome|thanks?|thank\s+you|glad|great|nice|love|enjoy|"
                          r"good\s+(?:morning|afternoon|evening|night)|happy|cheers|bye|see\s+you|sweet|kind|"
                          r"lovely|awesome|fun|stay)\b", re.I)),
    ("unavailable", re.compile(
        r"\b(?:could\s*n[o']t\s+find|can(?:no|')t\s+find|cannot\s+find|not\s+find|no\s+(?:such\s+)?"
        r"(?:product|link|item)|does(?:\s+not|n't)\s+exist|not\s+(?:in|on)\s+(?:this|the)\s+(?:room|list|show|"
        r"catalog\w*)|check\s+the\s+(?:number|link|(?:product\s+)?card)|look\s+at\s+the\s+(?:product\s+)?card|"
        r"(?:do\s+not|don't)\s+(?:sell|have|carry)|not\s+available\s+here|can(?:no|')t\s+reach|cannot\s+reach|"
        r"having\s+trouble|try\s+again|double-check|one\s+moment)\b", re.I)),
)
_TOPIC_WORDS = {"price": "its price", "deal": "deals", "coupon": "coupons", "stock": "stock",
                "shipping": "shipping", "compliance": "whether it works for a condition", "greeting": "a greeting",
                "chit_chat": "a greeting", "social": "a greeting", "unavailable": "not finding it"}


def reply_topics(turn: TurnView) -> set[str]:
    def compute() -> set[str]:
        text = turn.reply
        topics = {name for name, pattern in _REPLY_RES if pattern.search(text)}
        for c in turn_claims(turn):
            if c.field in ("price", "list_price"):
                topics.add("price")
            elif c.field in ("amount_off", "percent_off"):
                topics.add("deal")
            elif c.field == "stock":
                topics.add("stock")
            elif c.field == "threshold":
                topics.update(("shipping", "coupon") if re.search(r"\bfree\b", text, re.I) is None else ("shipping",))
        if coupon_mentions(text, catalogue_of(turn)):
            topics.add("coupon")
        low = text.lower()
        if any(v and word_pattern(v).search(low) for v in turn.viewers()):
            topics.add("social")
        return topics

    return turn.cached("reply_topics", compute)


def asked_topics(turn: TurnView) -> list[set[str]]:
    codes = catalogue_of(turn).coupon_codes
    return turn.cached("asked_topics", lambda: [comment_topics(t, codes) for t in turn.comment_texts()])


# "Hi dev, welcome!" to a viewer called max: a greeting that names someone who did not write.
_GREETED_RE = re.compile(r"\b(?:hi|hello|hey|welcome|thanks|thank\s+you|sorry|done|bye|congrats)[,!]?\s+"
                         r"(?P<name>[^\W\d_][\w.'-]{1,30}?)(?=[,!.:;?]|\s*$)", re.I)
_ADDRESS_WORDS = frozenset("""
everyone everybody all there friends guys folks team dear darling lovely babe again back both hun love beautiful
gorgeous bestie sweetie ya yall y'all you fam lovelies friend chat people mia in on to so much for and ok okay
yes no now here anyway aboard indeed again too a lot lots guys girls ladies gents everyone darling sir madam
the room stream show tonight today
""".split())
_CONDITION_WORD_RE = re.compile(r"\b(acne|eczema|dermatitis|rosacea|psoriasis|rash(?:es)?|wrinkles?|dark\s+circles|"
                                r"sinus(?:es)?|damaged\s+hair|hair\s+loss|scars?|sinus\s+infections?)\b", re.I)


def _conditions(text: str) -> set[str]:
    out = set()
    for m in _CONDITION_WORD_RE.finditer(text):
        w = re.sub(r"\s+", " ", m.group(1).lower())
        out.add(re.sub(r"(?:es|s)$", "", w) if w not in ("dark circles", "hair loss") else w)
    return out


def _words(topics: set[str]) -> str:
    return ", ".join(sorted({_TOPIC_WORDS.get(t, t) for t in topics})) or "nothing the viewer asked"


@check("intent")
def relevance_problems(turn: TurnView) -> list[Problem]:
    """``intent.unaddressed`` and ``intent.wrong_product`` (module docstring)."""
    asked = [t for t in asked_topics(turn) if t]
    if not asked:
        return []
    said = reply_topics(turn)
    out = []
    answering = set().union(*(ANSWERED_BY.get(t, frozenset()) for topics in asked for t in topics))
    if not said & answering:
        wanted = set().union(*asked)
        out.append(Problem("intent.unaddressed",
                           f"the viewer asked about {_words(wanted)}; the reply talks about {_words(said)}",
                           hint=f"Answer what the viewer asked: {_words(wanted)}"))
    if any(t & PRODUCT_TOPICS for t in asked) and "unavailable" not in said:
        products = comment_products(turn)
        named = {m.link_id for m in reply_mentions(turn) if m.link_id is not None}
        if products and named and not named & products:
            cat = catalogue_of(turn)
            asked_names = ", ".join(sorted(cat.title(p) if p is not None else "a link not in this room"
                                           for p in products))
            out.append(Problem(
                "intent.wrong_product",
                f"the viewer asked about {asked_names}; the reply is about "
                f"{', '.join(sorted(cat.title(p) for p in named))}",
                hint=f"Answer about the product the viewer asked about ({asked_names})"))
    asked_conditions = set().union(*(_conditions(t) for t in turn.comment_texts()))
    said_conditions = _conditions(turn.reply)
    if asked_conditions and said_conditions and not asked_conditions & said_conditions:
        out.append(Problem("intent.wrong_condition",
                           f"the viewer asked about {', '.join(sorted(asked_conditions))}; the reply talks about "
                           f"{', '.join(sorted(said_conditions))}",
                           hint=f"Answer about what the viewer asked: {', '.join(sorted(asked_conditions))}"))
    return out


@check("greeting")
def greeting_problems(turn: TurnView) -> list[Problem]:
    """``intent.wrong_viewer``: the reply greets or thanks a name that is not a viewer of the comments."""
    viewers = {v.lower() for v in turn.viewers()}
    viewers |= {str(c.get("viewer_id") or "").lower() for c in turn.comments if isinstance(c, Mapping)}
    if not viewers:
        return []
    out = []
    for m in _GREETED_RE.finditer(turn.reply):
        name = m.group("name")
        low = name.lower().rstrip(".")
        if low in _ADDRESS_WORDS or low in viewers or any(low in v or v in low for v in viewers if len(v) >= 3):
            continue
        if name[0].isupper() and not name[1:].islower():
            continue  # a code or a brand, not a name ("Thanks, GLOW5 is yours")
        out.append(Problem("intent.wrong_viewer", f"greets {name!r}, who did not write (viewers: "
                                                  f"{', '.join(sorted(turn.viewers()))})", m.span("name"),
                           f"Address the viewer by their name ({', '.join(sorted(turn.viewers()))})"))
    return out
