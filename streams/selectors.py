"""Reads of the catalog and the stored scenarios."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from streams.models import LiveRoom, ModelEndpoint, PreviewEvent, PreviewRoom, Scenario


def _money(value) -> float:
    return float(value)


def room_state(room: LiveRoom) -> dict[str, Any]:
    """The room dict of :mod:`streams.bindings` (see its module docstring) built from the database.

    Two queries (products, coupons), none when the caller loaded the room with
    ``prefetch_related("products", "coupons")``. The dict is a fresh copy: bindings may mutate it freely.
    """
    products = [
        {
            "link_id": p.link_id,
            "title": p.title,
            "price": _money(p.price),
            "list_price": _money(p.list_price),
            "stock": p.stock,
            "attributes": dict(p.attributes or {}),
            "compliance_notes": list(p.compliance_notes or []),
        }
        for p in room.products.all()
    ]
    coupons = [
        {
            "code": c.code,
            "discount": _money(c.discount),
            "min_spend": _money(c.min_spend),
            "expires_at_minute": c.expires_at_minute,
            "remaining": c.remaining,
        }
        for c in room.coupons.all()
    ]
    shipping = dict(room.shipping or {})
    shipping["regions"] = {name: dict(v) for name, v in (shipping.get("regions") or {}).items()}
    return {
        "room_id": room.slug,
        "title": room.title,
        "currency": room.currency,
        "clock_minute": room.clock_minute,
        "low_stock_threshold": room.low_stock_threshold,
        "products": products,
        "coupons": coupons,
        "campaign": {"phase": room.phase, "flash_sale": dict(room.flash_sale) if room.flash_sale else None},
        "shipping": shipping,
        "pinned": dict(room.pinned) if room.pinned else None,
    }


def live_room_list() -> QuerySet[LiveRoom]:
    return LiveRoom.objects.all()


def live_room_get(*, slug: str) -> LiveRoom:
    """With products and coupons prefetched, so :func:`room_state` adds no query."""
    return LiveRoom.objects.prefetch_related("products", "coupons").get(slug=slug)


def scenario_list() -> QuerySet[Scenario]:
    """For pickers and lists: without the YAML text."""
    return Scenario.objects.defer("yaml_text").select_related("created_by")


def scenario_get(*, slug: str) -> Scenario:
    return Scenario.objects.get(slug=slug)


# --- preview rooms --------------------------------------------------------------------------------------

HISTORY_TURNS = 6  # previous turns given to the model as history


def model_endpoint_list() -> QuerySet[ModelEndpoint]:
    return ModelEndpoint.objects.all()


def preview_room_get(*, room_id) -> PreviewRoom:
    return PreviewRoom.objects.select_related("harness_version__harness", "scenario", "endpoint",
                                              "created_by").get(pk=room_id)


def preview_room_list(*, user) -> QuerySet[PreviewRoom]:
    return (PreviewRoom.objects.filter(created_by=user)
            .select_related("harness_version__harness", "scenario", "endpoint"))


def preview_event_list(*, room_id, after: int = 0, up_to: int | None = None, limit: int | None = None
                       ) -> list[dict[str, Any]]:
    """Stored events with ``after < seq (<= up_to)``, in order, as WebSocket messages."""
    qs = PreviewEvent.objects.filter(room_id=room_id, seq__gt=after).order_by("seq")
    if up_to is not None:
        qs = qs.filter(seq__lte=up_to)
    if limit is not None:
        qs = qs[:limit]
    return [e.as_message() for e in qs]


def preview_turn_comments(*, room_id, turn_id: str) -> list[dict[str, str]]:
    """The viewer comments a queued turn answers (stored as ``viewer_comment`` events)."""
    rows = PreviewEvent.objects.filter(room_id=room_id, turn_id=turn_id, type="viewer_comment").order_by("seq")
    return [{"viewer": e.payload.get("viewer", ""), "viewer_id": e.payload.get("viewer_id", ""),
             "text": e.payload.get("text", "")} for e in rows]


def preview_history(*, room_id, before_turn_id: str, turns: int = HISTORY_TURNS) -> list[dict[str, str]]:
    """The previous turns as chat messages: the comments (as the renderer shows them) and the final reply."""
    replies = list(PreviewEvent.objects.filter(room_id=room_id, type="reply").exclude(turn_id=before_turn_id)
                   .order_by("-seq").values_list("turn_id", "payload")[:turns])
    replies.reverse()
    if not replies:
        return []
    by_turn: dict[str, list[str]] = {}
    for turn_id, payload in (PreviewEvent.objects.filter(room_id=room_id, type="viewer_comment",
                                                         turn_id__in=[t for t, _ in replies])
                             .order_by("seq").values_list("turn_id", "payload")):
        by_turn.setdefault(turn_id, []).append(f"[{payload.get('viewer', '')}] {payload.get('text', '')}")
    history: list[dict[str, str]] = []
    for turn_id, payload in replies:
        if by_turn.get(turn_id) and payload.get("text"):
            history.append({"role": "user", "content": "\n".join(by_turn[turn_id])})
            history.append({"role": "assistant", "content": payload["text"]})
    return history


def preview_transcript(*, room_id) -> list[dict[str, Any]]:
    """The stored turns of a room, oldest first: comments, tool calls and results, skills, hook verdicts,
    the reply and the timings of each (token events are folded into the reply)."""
    turns: dict[str, dict[str, Any]] = {}
    for e in PreviewEvent.objects.filter(room_id=room_id).exclude(turn_id="").exclude(type="token").order_by("seq"):
        t = turns.setdefault(e.turn_id, {"turn_id": e.turn_id, "first_seq": e.seq, "comments": [], "tools": [],
                                         "results": [], "skills": [], "hooks": [], "reply": None, "timings": None,
                                         "errors": [], "version": None, "state": "queued"})
        p = e.payload
        if e.type == "viewer_comment":
            t["comments"].append(p)
        elif e.type == "turn_started":
            t["version"], t["state"] = p.get("version"), "running"
        elif e.type == "tool_call":
            t["tools"].append(p)
        elif e.type == "tool_result":
            t["results"].append(p)
        elif e.type == "skill_loaded":
            t["skills"].append(p)
        elif e.type == "hook_result":
            t["hooks"].append(p)
        elif e.type == "reply":
            t["reply"], t["state"] = p, "done"
        elif e.type == "timings":
            t["timings"] = p
        elif e.type in ("error", "turn_failed"):
            t["errors"].append(p)
            if e.type == "turn_failed":
                t["state"] = "failed"
    return sorted(turns.values(), key=lambda t: t["first_seq"])
