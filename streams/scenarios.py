"""Scenarios: a live room over time, written down as YAML.

A scenario is the initial room (exactly the shape :mod:`streams.bindings` works on), a timeline of
campaign events (flash sale at minute 5, a price or stock change, a coupon expiring, ...), viewer
personas whose comments are scripted at given minutes and/or generated from templates at a rate per
minute, tool faults injected into bindings during time windows, and fixtures (answers for fixture-bound tools, by
tool name). :mod:`streams.simulator` runs it.

Plain pydantic, no Django: the turn engine, GPU workers (RL rollouts, gold data, evaluation) and the CLI
import it. Like the manifest (:mod:`harness_editor.schemas`), validation has two passes, strict
structure (``extra="forbid"`` everywhere) then semantics (references between the timeline, the comments
and the room; times past the scenario's duration), and :func:`parse_scenario` reports *all* errors of a
pass as :class:`FieldError` with a path such as ``timeline[2].params.link_id``.

Template slots (filled from the room at the comment's minute, with the scenario seed):
``{product}`` full title, ``{product_short}`` the first words of it, ``{link_id}``, ``{price}`` (the flash
price while that product's flash sale runs), ``{list_price}``, ``{product2}`` / ``{product2_short}`` /
``{link_id2}`` a second, different product, ``{coupon}`` a coupon code, ``{region}`` a shipping region,
``{name}`` the viewer's name.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness_editor.schemas import (
    TOOL_NAME_RE,
    FieldError,
    ManifestError,
    load_yaml,
    pydantic_errors,
)
from harness_editor.schemas.bindings import FixtureCase
from harness_editor.schemas.errors import _path as located_path
from streams.bindings import BINDINGS, ordered_attribute_keys

__all__ = [
    "EVENT_KINDS",
    "FAULT_KINDS",
    "PERSONA_KINDS",
    "TEMPLATE_SLOTS",
    "FieldError",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "parse_room",
    "parse_scenario",
    "scenario_from_yaml",
    "scenario_hash",
    "scenario_to_json",
]

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
MAX_DURATION_MINUTES = 24 * 60
MAX_RATE_PER_MINUTE = 60.0

EVENT_KINDS = ("flash_sale_start", "flash_sale_end", "price_change", "stock_change", "coupon_expire",
               "coupon_add", "phase_change", "restock")
PERSONA_KINDS = ("price_asker", "skeptic", "troll", "after_sales", "compliance_trap", "multi_intent",
                 "chit_chat")
FAULT_KINDS = ("timeout", "malformed", "permission_denied", "slow")  # as streams.engine.faults.ToolFault
TEMPLATE_SLOTS = frozenset({"product", "product_short", "link_id", "price", "list_price", "product2",
                            "product2_short", "link_id2", "coupon", "region", "name"})
PRODUCT_SLOTS = frozenset({"product", "product_short", "link_id", "price", "list_price"})
PRODUCT2_SLOTS = frozenset({"product2", "product2_short", "link_id2"})

Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_\-]{0,63}$")]
Text = Annotated[str, Field(min_length=1, max_length=2000)]
Minute = Annotated[int, Field(ge=0, le=MAX_DURATION_MINUTES)]
FloatMinute = Annotated[float, Field(ge=0, le=MAX_DURATION_MINUTES, allow_inf_nan=False)]
Money = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
LinkId = Annotated[int, Field(ge=1)]


class ScenarioError(ManifestError):
    """Raised with every error found in one validation pass (a ManifestError, so the same views render it)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


# --- the room (the shape of streams.bindings) ---------------------------------------------------------


class Product(_Strict):
    link_id: LinkId
    title: Text
    price: Money
    list_price: Money
    stock: Count
    attributes: dict[str, Any] = Field(default_factory=dict)
    # PostgreSQL's jsonb keeps object keys sorted its own way, and a small model reads a tool result's attributes
    # in the order they were written (the demo model loops on lookup_product when they come reordered): the order
    # travels beside the dict as a list, which jsonb keeps, and streams.bindings.product_info restores it.
    attribute_order: list[str] = Field(default_factory=list,
                                       description="the order of the attributes as written (default: as given)")
    compliance_notes: list[Text] = Field(default_factory=list)

    @model_validator(mode="after")
    def _attribute_order(self) -> Product:
        self.attribute_order = ordered_attribute_keys(self.attributes, self.attribute_order)
        return self


class Coupon(_Strict):
    code: Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-]{1,32}$")]
    discount: Money
    min_spend: Money = 0.0
    expires_at_minute: Minute
    remaining: Count


class FlashSale(_Strict):
    link_id: LinkId
    price: Money
    ends_at_minute: Minute


class Campaign(_Strict):
    phase: Annotated[str, Field(min_length=1, max_length=40)] = "warm_up"
    flash_sale: FlashSale | None = None


class RegionShipping(_Strict):
    free_over: Money | None = None
    delivery_days: Text | None = None
    return_days: Count | None = None


class Shipping(_Strict):
    free_over: Money | None = None
    delivery_days: Text | None = None
    return_days: Count | None = None
    regions: dict[str, RegionShipping] = Field(default_factory=dict)


class Pinned(_Strict):
    link_id: LinkId
    title: Text
    duration_s: Annotated[int, Field(ge=1, le=3600)]
    pinned_at_minute: Minute


class Room(_Strict):
    room_id: str = ""
    title: str = ""
    currency: str = ""
    clock_minute: Minute = 0
    low_stock_threshold: Count = 10
    products: list[Product] = Field(min_length=1)
    coupons: list[Coupon] = Field(default_factory=list)
    campaign: Campaign = Field(default_factory=Campaign)
    shipping: Shipping = Field(default_factory=Shipping)
    pinned: Pinned | None = None

    def to_dict(self) -> dict[str, Any]:
        """The room dict :mod:`streams.bindings` works on (a fresh, independent copy every call)."""
        data = self.model_dump(mode="python")
        data["shipping"] = self.shipping.model_dump(mode="python", exclude={"regions"}, exclude_none=True)
        data["shipping"]["regions"] = {
            name: r.model_dump(mode="python", exclude_none=True) for name, r in self.shipping.regions.items()
        }
        return data


# --- the timeline -------------------------------------------------------------------------------------


class FlashSaleStartParams(_Strict):
    link_id: LinkId
    price: Money
    ends_at_minute: Minute | None = None  # default: the end of the scenario
    phase: Annotated[str, Field(min_length=1, max_length=40)] = "flash_sale"


class FlashSaleEndParams(_Strict):
    phase: Annotated[str, Field(min_length=1, max_length=40)] = "regular"


class PriceChangeParams(_Strict):
    link_id: LinkId
    price: Money
    list_price: Money | None = None


class StockChangeParams(_Strict):
    """Exactly one of ``stock`` (the new level) or ``delta`` (units sold are negative)."""

    link_id: LinkId
    stock: Count | None = None
    delta: int | None = None


class CouponExpireParams(_Strict):
    code: Annotated[str, Field(min_length=1, max_length=32)]


class PhaseChangeParams(_Strict):
    phase: Annotated[str, Field(min_length=1, max_length=40)]


class RestockParams(_Strict):
    link_id: LinkId
    quantity: Annotated[int, Field(ge=1)]


class _Event(_Strict):
    at_minute: Minute
    note: str = ""  # shown in the preview room's timeline ("flash sale on the serum")


class FlashSaleStart(_Event):
    kind: Literal["flash_sale_start"]
    params: FlashSaleStartParams


class FlashSaleEnd(_Event):
    kind: Literal["flash_sale_end"]
    params: FlashSaleEndParams = Field(default_factory=FlashSaleEndParams)


class PriceChange(_Event):
    kind: Literal["price_change"]
    params: PriceChangeParams


class StockChange(_Event):
    kind: Literal["stock_change"]
    params: StockChangeParams


class CouponExpire(_Event):
    kind: Literal["coupon_expire"]
    params: CouponExpireParams


class CouponAdd(_Event):
    kind: Literal["coupon_add"]
    params: Coupon


class PhaseChange(_Event):
    kind: Literal["phase_change"]
    params: PhaseChangeParams


class Restock(_Event):
    kind: Literal["restock"]
    params: RestockParams


CampaignEvent = Annotated[
    FlashSaleStart | FlashSaleEnd | PriceChange | StockChange | CouponExpire | CouponAdd | PhaseChange | Restock,
    Field(discriminator="kind"),
]


# --- viewers ------------------------------------------------------------------------------------------


class ScriptedComment(_Strict):
    at_minute: FloatMinute
    text: Text
    name: str | None = None  # one of the persona's names; default: the first
    link_id: LinkId | None = None  # the product the comment is about (ground truth; fills product slots)


class Persona(_Strict):
    id: Slug
    kind: Literal["price_asker", "skeptic", "troll", "after_sales", "compliance_trap", "multi_intent",
                  "chit_chat"]
    names: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(min_length=1)
    comments: list[ScriptedComment] = Field(default_factory=list)
    templates: list[Text] = Field(default_factory=list)
    rate_per_minute: Annotated[float, Field(ge=0, le=MAX_RATE_PER_MINUTE, allow_inf_nan=False)] = 0.0
    from_minute: Minute = 0
    to_minute: Minute | None = None  # default: the end of the scenario
    focus_link_ids: list[LinkId] = Field(default_factory=list)  # template products come from these if set


# --- faults -------------------------------------------------------------------------------------------


class Fault(_Strict):
    # What the fault hits: a built-in binding id or an open binding's label (``binding``), or a manifest tool by
    # name (``tool``), exactly one of them.
    binding: str = ""
    tool: str = ""
    kind: Literal["timeout", "malformed", "permission_denied", "slow"]
    delay_ms: Annotated[int, Field(ge=0, le=60_000)] = 0  # as ToolFault
    from_minute: FloatMinute = 0.0
    to_minute: FloatMinute | None = None  # exclusive; default: the end of the scenario
    probability: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 1.0


# --- fixtures -----------------------------------------------------------------------------------------

MAX_FIXTURE_CASES = 1000  # per tool, as a fixture binding's own table
FixtureCases = Annotated[list[FixtureCase], Field(max_length=MAX_FIXTURE_CASES)]
_ARGUMENT_PATH_PART = re.compile(r"^[^.\s]+$")


# --- the scenario -------------------------------------------------------------------------------------


class Scenario(_Strict):
    id: Slug
    title: Annotated[str, Field(min_length=1, max_length=120)]
    description: Annotated[str, Field(max_length=4000)] = ""
    seed: int = 0
    duration_minutes: Annotated[int, Field(ge=1, le=MAX_DURATION_MINUTES)]
    room: Room
    timeline: list[CampaignEvent] = Field(default_factory=list)
    personas: list[Persona] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    # Answers for fixture-bound tools, by manifest tool name, tried before the binding's own cases
    # (streams.tool_bindings.fixture): {tool_name: [{when: {argument.path: value}, result: ...}]}.
    fixtures: dict[str, FixtureCases] = Field(default_factory=dict)

    def initial_room(self) -> dict[str, Any]:
        room = self.room.to_dict()
        room["room_id"] = room["room_id"] or self.id
        room["title"] = room["title"] or self.title
        return room

    def persona(self, persona_id: str) -> Persona | None:
        return next((p for p in self.personas if p.id == persona_id), None)


# --- error paths --------------------------------------------------------------------------------------


def _path(parts: Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else (f"{out}.{part}" if out else str(part))
    return out


def _format_loc(loc: tuple[str | int, ...]) -> str:
    """Drop the union tag pydantic puts after a timeline index: ('timeline', 2, 'price_change', 'params')."""
    kept: list[str | int] = []
    for i, part in enumerate(loc):
        if i >= 2 and loc[i - 2] == "timeline" and isinstance(loc[i - 1], int) and part in EVENT_KINDS:
            continue
        kept.append(part)
    return _path(kept)


# --- semantic pass ------------------------------------------------------------------------------------


def template_slots(text: str) -> list[str]:
    """The ``{slot}`` names in a template; raises ValueError on malformed braces."""
    names = []
    for _literal, field, spec, conv in string.Formatter().parse(text):
        if field is None:
            continue
        if spec or conv or not field.isidentifier():
            raise ValueError(f"slot {{{field}}} must be a plain name like {{product}}")
        names.append(field)
    return names


def _check_text(text: str, path: str, errors: list[FieldError]) -> list[str]:
    try:
        slots = template_slots(text)
    except ValueError as exc:
        errors.append(FieldError(path=path, message=f"{exc} (write {{{{ and }}}} for literal braces)"))
        return []
    for slot in slots:
        if slot not in TEMPLATE_SLOTS:
            errors.append(FieldError(path=path, message=f"unknown slot {{{slot}}}; known slots: "
                                                        f"{', '.join(sorted(TEMPLATE_SLOTS))}"))
    return slots


def room_errors(room: Room, prefix: str = "room") -> list[FieldError]:
    """What the structure cannot see in a room: duplicate link ids and coupon codes, dangling references."""
    errors: list[FieldError] = []
    link_ids: dict[int, int] = {}
    for i, p in enumerate(room.products):
        if p.link_id in link_ids:
            errors.append(FieldError(path=f"{prefix}.products[{i}].link_id", message=(
                f"duplicate link id {p.link_id} (first at products[{link_ids[p.link_id]}])")))
        link_ids.setdefault(p.link_id, i)
    codes: dict[str, int] = {}
    for i, c in enumerate(room.coupons):
        if c.code.lower() in codes:
            errors.append(FieldError(path=f"{prefix}.coupons[{i}].code", message=(
                f"duplicate coupon code {c.code!r} (first at coupons[{codes[c.code.lower()]}])")))
        codes.setdefault(c.code.lower(), i)
    refs = [(room.campaign.flash_sale, "campaign.flash_sale.link_id"), (room.pinned, "pinned.link_id")]
    for ref, path in refs:
        if ref is not None and ref.link_id not in link_ids:
            errors.append(FieldError(path=f"{prefix}.{path}", message=(
                f"no product with link id {ref.link_id} in the room (known: {', '.join(map(str, link_ids))})")))
    return errors


def parse_room(data: Any) -> Room:
    """Validate a room dict (the bindings' shape); raises ScenarioError with paths relative to the room."""
    if not isinstance(data, dict):
        raise ScenarioError([FieldError(path="", message="a room must be a mapping")])
    try:
        room = Room.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(pydantic_errors(exc, loc_format=_format_loc, kinds=EVENT_KINDS)) from None
    errors = [FieldError(path=e.path.removeprefix("room."), message=e.message) for e in room_errors(room)]
    if errors:
        raise ScenarioError(errors)
    return room


def validate_semantics(s: Scenario) -> list[FieldError]:
    errors: list[FieldError] = []

    def err(path: str, message: str) -> None:
        errors.append(FieldError(path=path, message=message))

    room, duration = s.room, s.duration_minutes
    errors.extend(room_errors(room))
    link_ids: dict[int, int] = {}
    for i, p in enumerate(room.products):
        link_ids.setdefault(p.link_id, i)
    codes = {c.code.lower() for c in room.coupons}

    def known_link(link_id: int | None, path: str) -> None:
        if link_id is not None and link_id not in link_ids:
            err(path, f"no product with link id {link_id} in the room (known: {', '.join(map(str, link_ids))})")

    if room.clock_minute > duration:
        err("room.clock_minute", f"minute {room.clock_minute} is past the scenario's end ({duration})")

    # The timeline runs in time order; coupon codes can be added by coupon_add before they are used.
    order = sorted(range(len(s.timeline)), key=lambda i: (s.timeline[i].at_minute, i))
    available_codes = set(codes)
    for i in order:
        ev, at = s.timeline[i], f"timeline[{i}]"
        if ev.at_minute > duration:
            err(f"{at}.at_minute", f"minute {ev.at_minute} is past the scenario's end ({duration})")
        params = ev.params
        if hasattr(params, "link_id") and not isinstance(params, Coupon):
            known_link(params.link_id, f"{at}.params.link_id")
        if isinstance(ev, FlashSaleStart):
            if params.ends_at_minute is not None and params.ends_at_minute <= ev.at_minute:
                err(f"{at}.params.ends_at_minute",
                    f"must be after the start (minute {ev.at_minute}), got {params.ends_at_minute}")
            product = room.products[link_ids[params.link_id]] if params.link_id in link_ids else None
            if product is not None and params.price > product.list_price:
                err(f"{at}.params.price",
                    f"flash price {params.price} is above the list price {product.list_price} of {product.link_id}")
        elif isinstance(ev, StockChange):
            if (params.stock is None) == (params.delta is None):
                err(f"{at}.params", "give exactly one of 'stock' (the new level) or 'delta' (the change)")
        elif isinstance(ev, CouponExpire):
            if params.code.lower() not in available_codes:
                err(f"{at}.params.code", f"no coupon {params.code!r} in the room at minute {ev.at_minute}")
        elif isinstance(ev, CouponAdd):
            if params.code.lower() in available_codes:
                err(f"{at}.params.code", f"coupon {params.code!r} already exists at minute {ev.at_minute}")
            available_codes.add(params.code.lower())

    persona_ids: dict[str, int] = {}
    for i, p in enumerate(s.personas):
        at = f"personas[{i}]"
        if p.id in persona_ids:
            err(f"{at}.id", f"duplicate persona id {p.id!r} (first at personas[{persona_ids[p.id]}])")
        persona_ids.setdefault(p.id, i)
        if not p.comments and not p.templates:
            err(at, "a persona needs scripted 'comments', 'templates' with a 'rate_per_minute', or both")
        if p.templates and p.rate_per_minute <= 0:
            err(f"{at}.rate_per_minute", "templates need a rate_per_minute above 0")
        if p.rate_per_minute > 0 and not p.templates:
            err(f"{at}.templates", "a rate_per_minute needs at least one template")
        end = duration if p.to_minute is None else p.to_minute
        if p.to_minute is not None and p.to_minute > duration:
            err(f"{at}.to_minute", f"minute {p.to_minute} is past the scenario's end ({duration})")
        if p.from_minute >= end and p.templates:
            err(f"{at}.from_minute", f"must be before to_minute ({end}), got {p.from_minute}")
        for j, link_id in enumerate(p.focus_link_ids):
            known_link(link_id, f"{at}.focus_link_ids[{j}]")
        for j, c in enumerate(p.comments):
            cat = f"{at}.comments[{j}]"
            if c.at_minute > duration:
                err(f"{cat}.at_minute", f"minute {c.at_minute:g} is past the scenario's end ({duration})")
            if c.name is not None and c.name not in p.names:
                err(f"{cat}.name", f"{c.name!r} is not one of this persona's names: {', '.join(p.names)}")
            known_link(c.link_id, f"{cat}.link_id")
            slots = _check_text(c.text, f"{cat}.text", errors)
            if c.link_id is None and set(slots) & PRODUCT_SLOTS:
                err(f"{cat}.link_id", "a scripted comment with product slots needs a link_id")
        for j, t in enumerate(p.templates):
            slots = _check_text(t, f"{at}.templates[{j}]", errors)
            if set(slots) & PRODUCT2_SLOTS and len(link_ids) < 2:
                err(f"{at}.templates[{j}]", "{product2} needs at least two products in the room")
            if "coupon" in slots and not available_codes:
                err(f"{at}.templates[{j}]", "{coupon} needs at least one coupon in the room")
            if "region" in slots and not room.shipping.regions:
                err(f"{at}.templates[{j}]", "{region} needs shipping regions in the room")

    for i, f in enumerate(s.faults):
        at = f"faults[{i}]"
        if bool(f.binding) == bool(f.tool):
            err(at, "a fault names either a binding (a built-in binding id or http:<endpoint>, mcp:<server>) or a "
                "tool (a manifest tool name)")
        elif f.binding and not fault_target_valid(f.binding):
            err(f"{at}.binding", f"unknown binding {f.binding!r}; known bindings: {', '.join(BINDINGS)}, or an open "
                "binding's label (http:<endpoint>, mcp:<server>, fixture); a manifest tool goes in 'tool'")
        elif f.tool and not TOOL_NAME_RE.match(f.tool):
            err(f"{at}.tool", f"{f.tool!r} is not a tool name (letters, digits, _ and -, starting with a letter or _)")
        if f.from_minute > duration:
            err(f"{at}.from_minute", f"minute {f.from_minute:g} is past the scenario's end ({duration})")
        if f.to_minute is not None:
            if f.to_minute > duration:
                err(f"{at}.to_minute", f"minute {f.to_minute:g} is past the scenario's end ({duration})")
            if f.to_minute <= f.from_minute:
                err(f"{at}.to_minute", f"must be after from_minute ({f.from_minute:g}), got {f.to_minute:g}")
        if f.kind == "slow" and f.delay_ms <= 0:
            err(f"{at}.delay_ms", "a 'slow' fault needs a delay_ms above 0")

    for tool_name, cases in s.fixtures.items():
        if not TOOL_NAME_RE.match(tool_name):
            err(located_path(["fixtures", tool_name]), f"{tool_name!r} is not a tool name (letters, digits, _ and -, "
                "starting with a letter or _; at most 64)")
        for j, case in enumerate(cases):
            for key in case.when:
                if not key or not all(_ARGUMENT_PATH_PART.match(p) for p in key.split(".")):
                    err(located_path(["fixtures", tool_name, j, "when", key]),
                        f"{key!r} is not an argument path (names joined by dots, such as order.id)")
    return errors


_LABEL_RE = re.compile(r"^(http|mcp):[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}(/[^/\s]{1,128})?$")


def fault_target_valid(target: str) -> bool:
    """A fault's ``binding``: a built-in binding id or an open binding's label (``http:orders-api``,
    ``mcp:files/read``, ``fixture``), as :func:`streams.engine.faults.find_fault` matches them."""
    return target in BINDINGS or target == "fixture" or bool(_LABEL_RE.match(target))


# --- parsing ------------------------------------------------------------------------------------------


def parse_scenario(data: Any) -> Scenario:
    """Validate plain data (from YAML or JSON) into a Scenario; raises ScenarioError with all errors."""
    if not isinstance(data, dict):
        got = "null" if data is None else type(data).__name__
        raise ScenarioError([FieldError(path="", message=f"a scenario must be a mapping at the top level, got {got}")])
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(pydantic_errors(exc, loc_format=_format_loc, kinds=EVENT_KINDS)) from None
    errors = validate_semantics(scenario)
    if errors:
        raise ScenarioError(errors)
    return scenario


def scenario_from_yaml(text: str | bytes) -> Scenario:
    try:
        data = load_yaml(text)  # size limit, duplicate keys and alias bombs are errors
    except ManifestError as exc:
        raise ScenarioError([FieldError(path=e.path, message=e.message.replace("manifest text", "scenario text"))
                             for e in exc.errors]) from None
    return parse_scenario(data)


def load_scenario(source: str | Path) -> Scenario:
    """Load a scenario from a path (a ``Path``, or a string naming an existing ``.yaml``/``.yml`` file) or
    from YAML text."""
    if isinstance(source, Path):
        return scenario_from_yaml(source.read_text(encoding="utf-8"))
    if "\n" not in source and source.endswith((".yaml", ".yml")) and Path(source).is_file():
        return scenario_from_yaml(Path(source).read_text(encoding="utf-8"))
    return scenario_from_yaml(source)


def demo_scenario_paths() -> list[Path]:
    return sorted(SCENARIO_DIR.glob("*.yaml"))


def scenario_to_json(s: Scenario) -> str:
    """Canonical JSON: compact, declared field order (comments and whitespace of the YAML do not count). A scenario
    without fixtures or tool faults hashes as it did before they existed (stored scenarios keep their hash)."""
    exclude: dict[str, Any] = {} if s.fixtures else {"fixtures": True}
    plain = {i: {"tool"} for i, f in enumerate(s.faults) if not f.tool}
    if plain:
        exclude["faults"] = plain
    return s.model_dump_json(exclude=exclude or None)


def scenario_hash(s: Scenario) -> str:
    return hashlib.sha256(scenario_to_json(s).encode("utf-8")).hexdigest()
