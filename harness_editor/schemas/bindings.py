"""The binding contract: what a manifest tool can be bound to and what each binding takes.

The registry owns the contract (validation, the editor, importers, HSA read it); the runtime implements it
(:mod:`streams.bindings` for the built-in live-commerce catalog, :mod:`streams.tool_bindings` for the open kinds),
and a test holds every implementation to its signature here. So ``harness_editor`` imports nothing from
``streams``.

A tool's ``binding`` is one of:

- a string: the id of a built-in binding (:data:`BUILTIN_BINDINGS`), with the tool's ``argument_map`` mapping each
  implementation parameter to a tool parameter path. Stored versions keep this form byte for byte;
- ``{kind: http, ...}`` (:class:`HttpBinding`): an external JSON endpoint. The manifest names an endpoint of the
  administrator's allow-list (``HAT_TOOL_ENDPOINTS``) and a path under it; the base URL and any secret live in the
  allow-list (settings / environment), never in a manifest;
- ``{kind: fixture, ...}`` (:class:`FixtureBinding`): deterministic results from a table of argument patterns
  (simulation, evaluation, previews without a backend; a scenario may bring its own fixtures);
- ``{kind: mcp, ...}`` (:class:`McpBinding`): a tool of a Model Context Protocol server of the allow-list
  (``HAT_MCP_SERVERS``), called with ``tools/call``;
- absent (``null``): unbound. Validation warns, the preview shows it, and a turn that calls it gets the tool fault
  ``unbound`` — never another tool's data.

Plain Python and pydantic, no Django.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

JsonType = Literal["string", "integer", "number", "boolean"]
BINDING_KINDS: tuple[str, ...] = ("builtin", "http", "fixture", "mcp")


@dataclass(frozen=True)
class BindingParam:
    """One keyword parameter of a built-in binding, as the manifest validator sees it."""

    name: str
    json_type: JsonType
    required: bool
    # An integer parameter whose implementation also accepts a string of digits ("102" -> 102), so a tool schema
    # may expose it as a digit string (``type: string`` with a digits-only ``pattern``; the semantic pass checks
    # this). Held to the implementation by a test that calls each one with both forms.
    coerces_digit_strings: bool = False


@dataclass(frozen=True)
class BindingSignature:
    """A built-in binding: its id, what it does, and its keyword parameters (the room comes first, unnamed)."""

    id: str
    description: str
    params: dict[str, BindingParam] = field(default_factory=dict)


def _signature(binding_id: str, description: str, *params: BindingParam) -> BindingSignature:
    return BindingSignature(binding_id, description, {p.name: p for p in params})


# The live-commerce catalog (implemented in streams.bindings; tests/streams/test_binding_contract.py holds the
# implementations to these signatures).
BUILTIN_BINDINGS: dict[str, BindingSignature] = {
    s.id: s
    for s in (
        _signature(
            "catalog.product_info",
            "Title, price, list price, stock, attributes and compliance notes of the product with a link id.",
            BindingParam("link_id", "integer", True, True),
        ),
        _signature("catalog.stock", "Stock of the product with a link id, and whether it is low.",
                   BindingParam("link_id", "integer", True, True)),
        _signature("coupons.issue", "Issue a coupon to a viewer if it exists, has not expired and has uses left.",
                   BindingParam("coupon_code", "string", True), BindingParam("viewer_id", "string", True)),
        _signature("policy.shipping", "Shipping and returns policy, with per-region overrides.",
                   BindingParam("region", "string", False)),
        _signature("campaign.state", "Campaign phase, the active flash sale and the claimable coupons."),
        _signature("room.pin_product", "Pin a product card on screen for a number of seconds.",
                   BindingParam("link_id", "integer", True, True), BindingParam("duration_s", "integer", False, True)),
    )
}


# --- the open kinds -------------------------------------------------------------------------------------------


class _BindingModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


AllowListName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")]


class HttpBinding(_BindingModel):
    """Calls ``<endpoint's base URL><path>`` with the tool's arguments.

    ``path`` and the values of ``query`` are templates: ``{order_id}`` or ``{order.id}`` is the value at that tool
    argument path (URL-encoded). ``body``: ``arguments`` sends the call's arguments as the JSON body (POST, PUT,
    PATCH), ``none`` sends none. ``result`` is a JSON path into the answer (``data.order``, ``items[0].sku``; empty:
    the whole answer). Timeouts, retries and the size cap are bounded by the endpoint's allow-list entry."""

    kind: Literal["http"]
    endpoint: AllowListName
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    path: str = Field(default="", max_length=500)
    query: dict[str, str] = Field(default_factory=dict)
    body: Literal["arguments", "none"] = "none"
    result: str = Field(default="", max_length=200)
    timeout_s: float = Field(default=5.0, gt=0, le=60, allow_inf_nan=False)
    retries: int = Field(default=0, ge=0, le=3)
    max_response_bytes: int = Field(default=262_144, ge=1, le=10_000_000)


# Escapes an upstream (or a proxy in front of it) may decode into a separator or a dot: never in a path template.
_ENCODED_SEPARATOR_RE = re.compile(r"%(2e|2f|5c|25|00)", re.IGNORECASE)
_BROKEN_ESCAPE_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_DECODINGS = 4  # servers and proxies in a chain each may decode once


def http_path_problem(path: str, *, filled: bool = False) -> str | None:
    """Why an http binding's ``path`` could leave its endpoint's base URL on an upstream that decodes it, or None.

    The one rule for both places: a manifest's template when it is validated (``filled=False``; its literal text
    may not percent-encode '.', '/', '\\' or '%'), and the path filled with a call's URL-encoded arguments before
    every request (``filled=True``; an encoded '/' inside one argument is kept). Either way, decoded once or
    several times, with '\\' read as '/' and ';' parameters dropped (``/..;/``), no segment may be '.' or '..'
    (nor a Unicode spelling of them)."""
    if not filled and _ENCODED_SEPARATOR_RE.search(path):
        return ("a percent-encoded '.', '/', '\\' or '%' may be decoded by the upstream and leave the endpoint's "
                "base URL")
    if _BROKEN_ESCAPE_RE.search(path):
        return "a '%' that does not start an escape (%XX)"
    text = path
    for _ in range(_DECODINGS):
        for segment in re.split(r"[/\\]", text):
            if unicodedata.normalize("NFKC", segment.split(";", 1)[0]).strip() in (".", ".."):
                return "'.' and '..' segments would leave the endpoint's base URL"
        try:
            decoded = unquote_to_bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return "percent-escapes that are not UTF-8 text"
        if decoded == text:
            return None
        text = decoded
    return "a path encoded more than a few times over"


class FixtureCase(_BindingModel):
    """``when``: argument path -> value, all equal (an empty ``when`` matches every call); ``result``: the answer."""

    when: dict[str, Any] = Field(default_factory=dict)
    result: Any


class FixtureBinding(_BindingModel):
    """Deterministic answers: the first case whose ``when`` matches, else ``default`` (else a ``not_found``
    error). A scenario's fixtures for this tool, when it has some, come first."""

    kind: Literal["fixture"]
    cases: list[FixtureCase] = Field(default_factory=list, max_length=1000)
    default: Any = None


class McpBinding(_BindingModel):
    """The tool ``tool`` (default: the manifest tool's own name) of the allow-listed MCP server ``server``; the
    call's arguments go to ``tools/call`` as they are."""

    kind: Literal["mcp"]
    server: AllowListName
    tool: str = Field(default="", max_length=128)
    timeout_s: float = Field(default=10.0, gt=0, le=120, allow_inf_nan=False)


OpenBinding = HttpBinding | FixtureBinding | McpBinding
OPEN_BINDING_KINDS: tuple[str, ...] = ("http", "fixture", "mcp")


def _binding_tag(value: Any) -> str | None:
    if value is None:
        return "unbound"
    if isinstance(value, str):
        return "builtin"
    if isinstance(value, dict):
        kind = value.get("kind")
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


# A tool's binding: one member chosen by the value's shape, so an error names only that member's fields
# (``tools[0].binding.path``), never every member's.
ToolBinding = Annotated[
    Annotated[str, Tag("builtin")]
    | Annotated[HttpBinding, Tag("http")]
    | Annotated[FixtureBinding, Tag("fixture")]
    | Annotated[McpBinding, Tag("mcp")]
    | Annotated[None, Tag("unbound")],
    Discriminator(
        _binding_tag,
        custom_error_type="binding_kind",
        custom_error_message="a binding is a built-in binding id (a string), an object with kind http, fixture or "
        "mcp, or null (unbound)",
    ),
]
BINDING_UNION_TAGS = frozenset({"builtin", "http", "fixture", "mcp", "unbound"})


def binding_kind(binding: str | BaseModel | None) -> str:
    """``builtin``, ``http``, ``fixture``, ``mcp``, or ``unbound``."""
    if binding is None:
        return "unbound"
    if isinstance(binding, str):
        return "builtin"
    return binding.kind  # type: ignore[attr-defined]


def binding_label(binding: str | BaseModel | None) -> str:
    """A short name for pages and events: the built-in id, ``http:orders-api``, ``mcp:files/read``, ``fixture``."""
    kind = binding_kind(binding)
    if kind == "builtin":
        return binding  # type: ignore[return-value]
    if kind == "http":
        return f"http:{binding.endpoint}"  # type: ignore[union-attr]
    if kind == "mcp":
        return f"mcp:{binding.server}" + (f"/{binding.tool}" if binding.tool else "")  # type: ignore[union-attr]
    return kind


def binding_catalog() -> list[dict[str, Any]]:
    """Every built-in binding with its signature, and the open kinds (for the API and the editor)."""
    return [{"id": s.id, "kind": "builtin", "description": s.description,
             "params": [{"name": p.name, "type": p.json_type, "required": p.required,
                         "coerces_digit_strings": p.coerces_digit_strings} for p in s.params.values()]}
            for s in BUILTIN_BINDINGS.values()]
