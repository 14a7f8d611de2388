"""How a live session handles viewer comments: which come first, which are the same comment sent twice, who is
sending too fast, and which comments the next turn answers. Plain Python, no Django: the ingest
(:mod:`streams.services.live_sessions`) and the session runner call it with what they read from the database.

- :func:`comment_priority` — questions about the product on screen (the pinned card, the flash-sale product) first,
  then other product questions, then coupon and shipping questions, then other questions, then chit-chat. What a
  comment asks and which products it names are read by the turn engine's own rules
  (:func:`streams.engine.rules.intent.comment_topics`, :func:`streams.engine.rules.entities.find_mentions`), the
  same reading the relevance hook judges replies by.
- :func:`dedupe_keys` — the key a comment is stored under when the platform sends no id of its own.
- :func:`rate_limit` — the per-viewer, per-token and per-session limits (a sliding minute).
- :func:`next_batch` — the comments the next turn answers: priority, then arrival; too old ones expire; the
  batching window waits for more after the first queued comment, never longer.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.engine.rules.entities import build_catalogue, find_mentions
from streams.engine.rules.intent import PRODUCT_TOPICS, comment_topics
from streams.live.schemas import CommentHandling

# Priority tiers (LiveComment.priority: higher first). Gaps leave room for finer tiers later.
ON_SCREEN = 30  # a product question about the product on screen (pinned, or on flash sale)
PRODUCT = 20  # a product question about another product, or about none in particular with nothing on screen
SHOPPING = 15  # coupons, shipping, returns: questions about buying, not about one product
QUESTION = 10  # another question ("what's your routine?")
CHAT = 0  # greetings, compliments, chit-chat

_SHOPPING_TOPICS = frozenset({"coupon", "shipping"})
_QUESTION_RE = re.compile(r"\?|^\s*(?:what|how|when|where|which|who|why|is|are|do|does|can|could|will|would)\b",
                          re.I)


@dataclass(frozen=True)
class Priority:
    score: int
    reason: str  # for the operator's queue: "on screen: link 101 (price)"
    topics: tuple[str, ...] = ()
    link_ids: tuple[int, ...] = ()


def on_screen(room: Mapping[str, Any] | None) -> set[int]:
    """The link ids on screen: the pinned product card and the product on flash sale."""
    out: set[int] = set()
    if not isinstance(room, Mapping):
        return out
    pinned = room.get("pinned")
    if isinstance(pinned, Mapping) and isinstance(pinned.get("link_id"), int):
        out.add(pinned["link_id"])
    campaign = room.get("campaign")
    sale = campaign.get("flash_sale") if isinstance(campaign, Mapping) else None
    if isinstance(sale, Mapping) and isinstance(sale.get("link_id"), int):
        out.add(sale["link_id"])
    return out


def comment_priority(text: str, room: Mapping[str, Any] | None) -> Priority:
    """The comment's place in the reply queue (module docstring)."""
    cat = build_catalogue(room)
    topics = comment_topics(text, cat.coupon_codes)
    named = {m.link_id for m in find_mentions(text, cat, bare_ids=True)}
    known = tuple(sorted(i for i in named if i is not None))
    screen = on_screen(room)
    asked = ", ".join(sorted(topics))
    if topics & PRODUCT_TOPICS:
        # a product question naming no product is about what the viewer is looking at ("how much?")
        about = set(known) if named else screen
        if about & screen:
            ids = ", ".join(str(i) for i in sorted(about & screen))
            return Priority(ON_SCREEN, f"on screen: link {ids} ({asked})", tuple(sorted(topics)), known)
        return Priority(PRODUCT, f"product question ({asked})", tuple(sorted(topics)), known)
    if topics & _SHOPPING_TOPICS:
        return Priority(SHOPPING, f"shopping question ({asked})", tuple(sorted(topics)), known)
    if known and _QUESTION_RE.search(text):
        # names a product and asks something the topic rules do not cover ("is the dryer loud?")
        about = set(known) & screen
        if about:
            return Priority(ON_SCREEN, f"on screen: link {', '.join(map(str, sorted(about)))} (question)", (),
                            known)
        return Priority(PRODUCT, "product question", (), known)
    if _QUESTION_RE.search(text) and "greeting" not in topics:
        return Priority(QUESTION, "question", tuple(sorted(topics)), known)
    return Priority(CHAT, "chat", tuple(sorted(topics)), known)


# --- dedupe ------------------------------------------------------------------------------------------------------

DEDUPE_WINDOW_S = 60  # without an id or a timestamp, the same viewer's same text within about a minute is one


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:40]


def dedupe_keys(*, viewer_id: str, text: str, ts: float | None, now: float,
                window_s: int = DEDUPE_WINDOW_S) -> list[str]:
    """For a comment that came without the platform's id: ``[key it is stored under, *other keys that make it a
    duplicate]``. With the viewer's timestamp the key is exact (a redelivery carries the same one). Without it,
    the key holds the minute-long slot the comment arrived in, and the slot before counts too, so a redelivery a
    few seconds later is a duplicate even across a slot's edge, while the viewer saying "hi" again later is not."""
    if ts is not None:
        return [f"ts:{_digest(viewer_id, f'{ts:.3f}', _norm(text))}"]
    slot = int(now // window_s)
    base = _digest(viewer_id, _norm(text))
    return [f"tx:{base}:{slot}", f"tx:{base}:{slot - 1}"]


# --- rate limit --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after_s: float = 0.0


def rate_limit(recent: Sequence[float], now: float, per_minute: int, wanted: int = 1) -> RateDecision:
    """``recent``: when the counted comments (of a viewer, a token, a session) arrived (epoch seconds). ``wanted``
    more are allowed while they and those of the last 60 s are at most ``per_minute``; otherwise, how long until
    enough of those leave the window (never, for more than ``per_minute`` at once: a minute is reported)."""
    inside = sorted(t for t in recent if t > now - 60.0)  # one stored by a host whose clock runs ahead counts too
    over = len(inside) + wanted - per_minute
    if over <= 0:
        return RateDecision(True)
    if wanted > per_minute:
        return RateDecision(False, 60.0)
    return RateDecision(False, round(inside[over - 1] + 60.0 - now, 3))


# --- the next batch ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queued:
    """A queued comment as the runner sees it: ``at`` is when it arrived (epoch seconds)."""

    id: int
    priority: int
    at: float


@dataclass
class Batch:
    """What the runner does now: answer ``take`` (highest priority first, then arrival) in one turn, mark
    ``expired`` as expired, and if ``take`` is empty but comments wait, look again in ``wait_s`` seconds (None:
    nothing queued)."""

    take: list[Queued] = field(default_factory=list)
    expired: list[Queued] = field(default_factory=list)
    wait_s: float | None = None


def queue_order(items: Sequence[Queued]) -> list[Queued]:
    """The reply queue's order: priority, then arrival (then id: arrival ties keep the order they were stored)."""
    return sorted(items, key=lambda q: (-q.priority, q.at, q.id))


def next_batch(queue: Sequence[Queued], now: float, handling: CommentHandling) -> Batch:
    """The next turn's comments from the queued ones (module docstring). The window runs from the oldest queued
    comment's arrival: once it has passed, or the batch is already full, the batch goes now, so a turn never waits
    longer than ``batch_window_s`` for company and a busy session never waits at all."""
    expired = [q for q in queue if now - q.at > handling.max_age_s]
    gone = {q.id for q in expired}
    live = [q for q in queue if q.id not in gone]
    if not live:
        return Batch([], queue_order(expired), None)
    due = min(q.at for q in live) + handling.batch_window_s
    if now >= due or len(live) >= handling.max_comments_per_turn:
        return Batch(queue_order(live)[: handling.max_comments_per_turn], queue_order(expired), 0.0)
    return Batch([], queue_order(expired), round(due - now, 3))
