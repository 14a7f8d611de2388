"""Reads of the catalog and the stored scenarios."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from streams.models import LiveRoom, Scenario


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
