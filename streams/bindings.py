"""Tool bindings: the real implementations a manifest tool is bound to.

A manifest tool exposes a name and a JSON Schema to the model; its ``binding`` names one entry of
:data:`BINDINGS` and its ``argument_map`` maps each implementation parameter to a tool parameter path.
So HSA (and staff) can rename tools and reshape their schemas while the code below stays the same.

Every binding takes the live-room state as its first positional argument, a plain dict (the simulation
state; bindings may mutate it, e.g. issuing a coupon decrements ``remaining``), and keyword parameters
whose annotations (``int``, ``float``, ``str``, ``bool``) define their JSON types. A parameter with a
default is optional. Bindings return JSON-able dicts and never raise for bad business input: they return
``{"error": "...", "code": "not_found" | "invalid_argument" | "expired" | "exhausted" | "already_issued"}``.

Room dict shape (keys other than ``products`` may be missing; sensible defaults apply)::

    {
      "room_id": str, "title": str,
      "currency": str,                 # optional display prefix for prices, e.g. "$"
      "clock_minute": int,             # minutes since the broadcast started
      "low_stock_threshold": int,      # default 10
      "products": [{"link_id": int, "title": str, "price": float, "list_price": float, "stock": int,
                    "attributes": {...}, "attribute_order": [str], "compliance_notes": [str]}],
      "coupons": [{"code": str, "discount": float, "min_spend": float, "expires_at_minute": int,
                   "remaining": int}],
      "campaign": {"phase": str, "flash_sale": {"link_id": int, "price": float, "ends_at_minute": int} | None},
      "shipping": {"free_over": float, "delivery_days": str, "return_days": int,
                   "regions": {name: {...overrides of the keys above}}},
      "pinned": None | {"link_id": int, "title": str, "duration_s": int, "pinned_at_minute": int},
      "issued_coupons": [{"code": str, "viewer_id": str, "minute": int}],   # written by coupons.issue
    }

Plain Python on purpose: the turn engine, GPU workers and the CLI import this module, so no Django here.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness_editor.room_state import active_flash_sale, coupon_active
from harness_editor.room_state import as_int as _as_int
from harness_editor.room_state import room_clock as _clock
from harness_editor.schemas.bindings import BindingParam, JsonType

_PY_TO_JSON: dict[Any, JsonType] = {str: "string", int: "integer", float: "number", bool: "boolean"}

DEFAULT_LOW_STOCK_THRESHOLD = 10


@dataclass(frozen=True)
class Binding:
    """A named implementation a manifest tool can bind to."""

    id: str
    description: str
    func: Callable[..., dict[str, Any]]
    params: dict[str, BindingParam] = field(default_factory=dict)


def _error(message: str, code: str = "not_found") -> dict[str, Any]:
    return {"error": message, "code": code}


def _find_product(room: dict, link_id: Any) -> tuple[dict | None, dict | None]:
    """Return (product, None) or (None, error dict)."""
    lid = _as_int(link_id)
    if lid is None:
        return None, _error(f"link_id must be an integer, got {link_id!r}", "invalid_argument")
    for product in room.get("products") or []:
        if product.get("link_id") == lid:
            return product, None
    return None, _error(f"no product with link id {lid} in this room")


# --- implementations -------------------------------------------------------------------------------


def ordered_attribute_keys(attributes: dict[str, Any], order: Any) -> list[str]:
    """A product's attribute keys in their written order: the known keys of ``order`` (the product's
    ``attribute_order``) first, then any others as the dict has them. A stored room loses its dicts' key order
    (PostgreSQL's jsonb sorts keys) but keeps lists."""
    known = [k for k in (order if isinstance(order, list) else []) if isinstance(k, str) and k in attributes]
    seen = set(known)
    return known + [k for k in attributes if k not in seen]


def product_info(room: dict, link_id: int) -> dict[str, Any]:
    """Facts about one product; the source the factual-risk hook trusts for prices and stock."""
    product, err = _find_product(room, link_id)
    if err:
        return err
    assert product is not None
    attributes = product.get("attributes") if isinstance(product.get("attributes"), dict) else {}
    result: dict[str, Any] = {
        "link_id": product["link_id"],
        "title": product.get("title", ""),
        "price": product.get("price"),
        "list_price": product.get("list_price"),
        "stock": product.get("stock"),
        "attributes": {k: attributes[k] for k in ordered_attribute_keys(attributes, product.get("attribute_order"))},
        "compliance_notes": list(product.get("compliance_notes") or []),
    }
    sale = active_flash_sale(room)
    if sale and sale.get("link_id") == product["link_id"]:
        result["flash_sale"] = {"price": sale.get("price"), "ends_at_minute": sale.get("ends_at_minute")}
    return result


def stock(room: dict, link_id: int) -> dict[str, Any]:
    """Current stock and whether it is low (worth an urgency line, never an invented number)."""
    product, err = _find_product(room, link_id)
    if err:
        return err
    assert product is not None
    threshold = _as_int(room.get("low_stock_threshold"))
    threshold = DEFAULT_LOW_STOCK_THRESHOLD if threshold is None else threshold
    units = product.get("stock") or 0
    return {
        "link_id": product["link_id"],
        "title": product.get("title", ""),
        "stock": units,
        "low_stock": units <= threshold,
    }


def issue_coupon(room: dict, coupon_code: str, viewer_id: str) -> dict[str, Any]:
    """Issue a coupon to a viewer; mutates the room (remaining count, issued list)."""
    if not isinstance(coupon_code, str) or not coupon_code.strip():
        return _error("coupon_code must be a non-empty string", "invalid_argument")
    if not isinstance(viewer_id, str) or not viewer_id.strip():
        return _error("viewer_id must be a non-empty string", "invalid_argument")
    code = coupon_code.strip()
    coupon = next((c for c in room.get("coupons") or [] if str(c.get("code", "")).lower() == code.lower()), None)
    if coupon is None:
        return _error(f"no coupon with code {code!r} in this room")
    expires = _as_int(coupon.get("expires_at_minute")) or 0
    if _clock(room) >= expires:
        return _error(f"coupon {coupon['code']} expired at minute {expires}", "expired")
    if (coupon.get("remaining") or 0) <= 0:
        return _error(f"coupon {coupon['code']} has no more uses left", "exhausted")
    issued = room.setdefault("issued_coupons", [])
    if any(i.get("code") == coupon["code"] and i.get("viewer_id") == viewer_id for i in issued):
        return _error(f"viewer {viewer_id} already has coupon {coupon['code']}", "already_issued")
    coupon["remaining"] = coupon["remaining"] - 1
    issued.append({"code": coupon["code"], "viewer_id": viewer_id, "minute": _clock(room)})
    return {
        "issued": True,
        "coupon_code": coupon["code"],
        "viewer_id": viewer_id,
        "discount": coupon.get("discount"),
        "min_spend": coupon.get("min_spend"),
        "expires_at_minute": expires,
        "remaining": coupon["remaining"],
    }


def shipping_policy(room: dict, region: str = "") -> dict[str, Any]:
    """Shipping and returns; a known region's overrides replace the defaults."""
    if not isinstance(region, str):
        return _error(f"region must be a string, got {region!r}", "invalid_argument")
    base = dict(room.get("shipping") or {})
    regions = base.pop("regions", None) or {}
    result: dict[str, Any] = {
        "region": region.strip() or "default",
        "free_over": base.get("free_over"),
        "delivery_days": base.get("delivery_days"),
        "return_days": base.get("return_days"),
    }
    result.update({k: v for k, v in base.items() if k not in result})
    wanted = region.strip().lower()
    match = next((name for name in regions if wanted and name.lower() == wanted), None)
    if match is not None:
        result.update(regions[match])
        result["region"] = match
    result["region_override"] = match is not None
    return result


def campaign_state(room: dict) -> dict[str, Any]:
    """What is on right now: phase, the running flash sale, the coupons still claimable."""
    campaign = room.get("campaign") or {}
    sale = active_flash_sale(room)
    flash = None
    if sale:
        product, _ = _find_product(room, sale.get("link_id"))
        flash = {
            "link_id": sale.get("link_id"),
            "title": product.get("title") if product else None,
            "price": sale.get("price"),
            "ends_at_minute": sale.get("ends_at_minute"),
        }
    coupons = [
        {k: c.get(k) for k in ("code", "discount", "min_spend", "expires_at_minute", "remaining")}
        for c in room.get("coupons") or []
        if coupon_active(room, c)
    ]
    return {
        "clock_minute": _clock(room),
        "phase": campaign.get("phase", "idle"),
        "flash_sale": flash,
        "coupons": coupons,
    }


MAX_PIN_SECONDS = 3600


def pin_product(room: dict, link_id: int, duration_s: int = 60) -> dict[str, Any]:
    """Pin a product card on screen; mutates ``room["pinned"]``."""
    product, err = _find_product(room, link_id)
    if err:
        return err
    assert product is not None
    seconds = _as_int(duration_s)
    if seconds is None or not 1 <= seconds <= MAX_PIN_SECONDS:
        return _error(
            f"duration_s must be an integer between 1 and {MAX_PIN_SECONDS}, got {duration_s!r}", "invalid_argument"
        )
    room["pinned"] = {
        "link_id": product["link_id"],
        "title": product.get("title", ""),
        "duration_s": seconds,
        "pinned_at_minute": _clock(room),
    }
    return {"pinned": True, "link_id": product["link_id"], "title": product.get("title", ""), "duration_s": seconds}


# --- registry ----------------------------------------------------------------------------------------


def _params_of(func: Callable[..., Any], digit_strings: tuple[str, ...] = ()) -> dict[str, BindingParam]:
    """Derive the keyword parameters (all but the leading ``room``) from signature and annotations;
    ``digit_strings`` names the integer parameters the implementation coerces from digit strings."""
    hints = typing.get_type_hints(func)
    params = list(inspect.signature(func).parameters.values())
    if not params or params[0].name != "room":
        raise TypeError(f"{func.__name__}: the first parameter must be `room: dict`")
    out: dict[str, BindingParam] = {}
    for p in params[1:]:
        json_type = _PY_TO_JSON.get(hints.get(p.name))
        if json_type is None:
            raise TypeError(f"{func.__name__}: parameter {p.name!r} needs an str/int/float/bool annotation")
        coerces = p.name in digit_strings
        if coerces and json_type != "integer":
            raise TypeError(f"{func.__name__}: only integer parameters coerce digit strings, not {p.name!r}")
        out[p.name] = BindingParam(p.name, json_type, p.default is inspect.Parameter.empty, coerces)
    unknown = set(digit_strings) - set(out)
    if unknown:
        raise TypeError(f"{func.__name__}: no parameter(s) {sorted(unknown)} to coerce")
    return out


def _binding(binding_id: str, description: str, func: Callable[..., dict[str, Any]], *,
             digit_strings: tuple[str, ...] = ()) -> Binding:
    return Binding(binding_id, description, func, _params_of(func, digit_strings))


BINDINGS: dict[str, Binding] = {
    b.id: b
    for b in (
        _binding(
            "catalog.product_info",
            "Title, price, list price, stock, attributes and compliance notes of the product with a link id.",
            product_info,
            digit_strings=("link_id",),  # _find_product -> _as_int
        ),
        _binding("catalog.stock", "Stock of the product with a link id, and whether it is low.", stock,
                 digit_strings=("link_id",)),
        _binding(
            "coupons.issue", "Issue a coupon to a viewer if it exists, has not expired and has uses left.", issue_coupon
        ),
        _binding("policy.shipping", "Shipping and returns policy, with per-region overrides.", shipping_policy),
        _binding("campaign.state", "Campaign phase, the active flash sale and the claimable coupons.", campaign_state),
        _binding("room.pin_product", "Pin a product card on screen for a number of seconds.", pin_product,
                 digit_strings=("link_id", "duration_s")),  # both through _as_int
    )
}


def get_binding(binding_id: str) -> Binding | None:
    return BINDINGS.get(binding_id)
