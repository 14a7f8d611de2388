"""Reading the live-room state (the plain dict the bindings work on and the renderer shows): the clock, the flash
sale still running, the coupons still claimable. Shared by the renderer (here, in the registry) and the runtime's
bindings (:mod:`streams.bindings`), so the prompt and the tools never disagree. Plain Python, no Django."""

from __future__ import annotations

from typing import Any


def as_int(value: Any) -> int | None:
    """Accept ints and integer-looking strings (models often quote numbers); reject bools and floats with
    a fraction."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def room_clock(room: dict) -> int:
    return as_int(room.get("clock_minute", 0)) or 0


def active_flash_sale(room: dict) -> dict | None:
    """The flash sale still running at the room's clock, or None (shared with the prompt renderer)."""
    sale = (room.get("campaign") or {}).get("flash_sale")
    if not sale:
        return None
    ends = as_int(sale.get("ends_at_minute"))
    if ends is not None and room_clock(room) >= ends:
        return None
    return sale


def coupon_active(room: dict, coupon: dict) -> bool:
    """Claimable now: not expired at the room's clock and uses left."""
    return room_clock(room) < (as_int(coupon.get("expires_at_minute")) or 0) and (coupon.get("remaining") or 0) > 0
