"""The registry owns the binding contract (harness_editor.schemas.bindings); the runtime implements it.

Every built-in implementation in streams.bindings must take exactly the parameters its signature in the contract
declares (names, JSON types, required or not, digit-string coercion), and nothing may exist on one side only."""

from __future__ import annotations

import pytest

from harness_editor.schemas.bindings import BUILTIN_BINDINGS, binding_catalog, binding_kind, binding_label
from harness_editor.schemas.bindings import FixtureBinding, HttpBinding, McpBinding
from streams.bindings import BINDINGS


def test_every_builtin_signature_has_an_implementation_and_back() -> None:
    assert list(BINDINGS) == list(BUILTIN_BINDINGS)


@pytest.mark.parametrize("binding_id", list(BUILTIN_BINDINGS))
def test_implementation_takes_what_the_contract_declares(binding_id: str) -> None:
    implemented, declared = BINDINGS[binding_id], BUILTIN_BINDINGS[binding_id]
    assert implemented.params == declared.params
    assert implemented.description == declared.description


def test_catalog_lists_signatures_for_the_api() -> None:
    rows = {r["id"]: r for r in binding_catalog()}
    assert rows["room.pin_product"]["params"] == [
        {"name": "link_id", "type": "integer", "required": True, "coerces_digit_strings": True},
        {"name": "duration_s", "type": "integer", "required": False, "coerces_digit_strings": True}]


def test_kinds_and_labels() -> None:
    assert binding_kind(None) == "unbound" and binding_label(None) == "unbound"
    assert binding_kind("catalog.stock") == "builtin" and binding_label("catalog.stock") == "catalog.stock"
    http = HttpBinding(kind="http", endpoint="orders-api", path="/orders/{order_id}")
    assert binding_label(http) == "http:orders-api"
    assert binding_label(McpBinding(kind="mcp", server="files", tool="read")) == "mcp:files/read"
    assert binding_kind(FixtureBinding(kind="fixture")) == "fixture"
