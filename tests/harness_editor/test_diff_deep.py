"""The diff inside tool parameter schemas (any depth), binding changes, and renames paired by likeness.

Pure Python: no Django, no database. Each case asserts the change's exact path and its breaking flag."""

from __future__ import annotations

import copy
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_editor.diff import Change, ManifestDiff, diff_manifests, schema_changes
from harness_editor.diff.matching import name_similarity, schema_similarity
from harness_editor.schemas import Manifest, load_yaml, parse_manifest

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
V1_DATA = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))

FIND_ORDERS: dict[str, Any] = {
    "name": "find_orders",
    "description": "Find a customer's orders by status, and the items in them.",
    "parameters": {
        "type": "object",
        "properties": {
            "customer_id": {"type": "string", "pattern": "^C[0-9]+$"},
            "status": {"type": "string", "enum": ["open", "shipped", "delivered", "cancelled"]},
            "items": {
                "type": "array",
                "maxItems": 20,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "maxLength": 32, "description": "Stock-keeping unit."},
                        "qty": {"type": "integer", "minimum": 1},
                        "gift": {
                            "type": "object",
                            "properties": {"wrap": {"type": "string", "enum": ["paper", "box"]}},
                        },
                    },
                    "required": ["sku"],
                },
            },
            "window": {
                "type": "array",
                "prefixItems": [{"type": "string", "format": "date"}, {"type": "string", "format": "date"}],
            },
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "contact": {"anyOf": [{"type": "string", "format": "email"}, {"$ref": "#/$defs/phone"}]},
            "address": {"$ref": "#/$defs/address"},
        },
        "required": ["customer_id"],
        "$defs": {
            "phone": {
                "type": "object",
                "properties": {"country": {"type": "string"}, "number": {"type": "string"}},
                "required": ["number"],
            },
            "address": {
                "type": "object",
                "properties": {"zip": {"type": "string"}, "country": {"type": "string", "enum": ["US", "CA"]}},
            },
        },
    },
    "binding": {"kind": "http", "endpoint": "orders-api", "path": "/orders", "query": {"customer": "{customer_id}"}},
}

CANCEL_ORDER: dict[str, Any] = {
    "name": "cancel_order",
    "description": "Cancel an open order; a reason is kept for the audit log.",
    "parameters": {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "reason": {"type": "string", "enum": ["customer_request", "out_of_stock", "fraud"]},
            "refund": {"type": "boolean"},
        },
        "required": ["order_id", "reason"],
    },
    "binding": {"kind": "fixture", "cases": [{"when": {"reason": "fraud"}, "result": {"held": True}}],
                "default": {"cancelled": True}},
}

BASE_DATA = copy.deepcopy(V1_DATA)
BASE_DATA["tools"] += [copy.deepcopy(FIND_ORDERS), copy.deepcopy(CANCEL_ORDER)]
BASE = parse_manifest(BASE_DATA)
P = "tools[find_orders].parameters"
ITEM = f"{P}.properties.items.items"


def edited(fn: Callable[[dict[str, Any]], Any]) -> Manifest:
    d = copy.deepcopy(BASE_DATA)
    fn(d)
    return parse_manifest(d)


def tool(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in d["tools"] if t["name"] == name)


def params(d: dict[str, Any], name: str = "find_orders") -> dict[str, Any]:
    return tool(d, name)["parameters"]


def item(d: dict[str, Any]) -> dict[str, Any]:
    return params(d)["properties"]["items"]["items"]


def at(diff: ManifestDiff, path: str) -> Change:
    found = [c for c in diff.changes if c.path == path]
    assert len(found) == 1, (path, [(c.kind, c.path, c.breaking, c.summary) for c in diff.changes])
    return found[0]


def the_change(fn: Callable[[dict[str, Any]], Any]) -> Change:
    """The one change an edit makes."""
    d = diff_manifests(BASE, edited(fn))
    assert len(d.changes) == 1, [(c.kind, c.path, c.breaking, c.summary) for c in d.changes]
    return d.changes[0]


def test_identical_foreign_manifest_has_an_empty_diff() -> None:
    assert diff_manifests(BASE, parse_manifest(copy.deepcopy(BASE_DATA))).is_empty


# --- array items and nested objects --------------------------------------------------------------------------


def test_item_type_changed_is_breaking_with_its_path() -> None:
    c = the_change(lambda d: item(d)["properties"]["sku"].update(type="integer"))
    assert (c.path, c.breaking, c.kind) == (f"{ITEM}.properties.sku.type", True, "changed")
    assert (c.before, c.after) == ("string", "integer")
    assert "items[].sku" in c.summary


def test_item_type_widened_is_not_breaking() -> None:
    c = the_change(lambda d: item(d)["properties"]["qty"].update(type="number"))
    assert (c.path, c.breaking) == (f"{ITEM}.properties.qty.type", False)
    c = the_change(lambda d: item(d)["properties"]["qty"].update(type=["integer", "null"]))
    assert (c.path, c.breaking) == (f"{ITEM}.properties.qty.type", False)
    c = the_change(lambda d: item(d)["properties"]["qty"].pop("type"))
    assert (c.path, c.breaking) == (f"{ITEM}.properties.qty.type", False)


def test_array_item_schema_replaced_by_a_scalar_is_breaking() -> None:
    def scalar(d: dict[str, Any]) -> None:
        params(d)["properties"]["items"]["items"] = {"type": "string"}

    changes = diff_manifests(BASE, edited(scalar))
    assert at(changes, f"{ITEM}.type").breaking
    assert all(c.breaking for c in changes.changes if c.kind == "removed")
    assert {c.path for c in changes.changes if c.kind == "removed"} == {
        f"{ITEM}.properties.sku", f"{ITEM}.properties.qty", f"{ITEM}.properties.gift"}


def test_required_item_field_added_and_removed() -> None:
    c = the_change(lambda d: item(d)["required"].append("qty"))
    assert (c.path, c.breaking, c.after) == (f"{ITEM}.properties.qty.required", True, True)
    c = the_change(lambda d: item(d).update(required=[]))
    assert (c.path, c.breaking, c.after) == (f"{ITEM}.properties.sku.required", False, False)


def test_property_added_at_depth_required_or_optional() -> None:
    def add(required: bool) -> Callable[[dict[str, Any]], None]:
        def fn(d: dict[str, Any]) -> None:
            item(d)["properties"]["price"] = {"type": "number"}
            if required:
                item(d)["required"].append("price")
        return fn

    req = the_change(add(True))
    assert (req.kind, req.path, req.breaking) == ("added", f"{ITEM}.properties.price", True)
    assert "required parameter 'items[].price' added" in req.summary
    opt = the_change(add(False))
    assert (opt.kind, opt.path, opt.breaking) == ("added", f"{ITEM}.properties.price", False)
    # Deeper, inside an optional object: a caller that sends the object must now send the field.
    deep = the_change(lambda d: item(d)["properties"]["gift"].update(
        properties={"wrap": {"type": "string", "enum": ["paper", "box"]}, "note": {"type": "string"}},
        required=["note"]))
    assert (deep.kind, deep.path, deep.breaking) == ("added", f"{ITEM}.properties.gift.properties.note", True)


def test_property_removed_at_depth_is_breaking() -> None:
    c = the_change(lambda d: item(d)["properties"].pop("gift"))
    assert (c.kind, c.path, c.breaking) == ("removed", f"{ITEM}.properties.gift", True)
    assert c.before == FIND_ORDERS["parameters"]["properties"]["items"]["items"]["properties"]["gift"]
    c = the_change(lambda d: item(d)["properties"]["gift"]["properties"].pop("wrap"))
    assert (c.kind, c.path, c.breaking) == ("removed", f"{ITEM}.properties.gift.properties.wrap", True)


def test_enum_value_removed_or_added_at_depth() -> None:
    wrap = f"{ITEM}.properties.gift.properties.wrap.enum"
    gone = the_change(lambda d: item(d)["properties"]["gift"]["properties"]["wrap"].update(enum=["paper"]))
    assert (gone.path, gone.breaking) == (wrap, True) and "removed" in gone.summary
    more = the_change(lambda d: item(d)["properties"]["gift"]["properties"]["wrap"].update(
        enum=["paper", "box", "bag"]))
    assert (more.path, more.breaking) == (wrap, False) and "added" in more.summary
    top = the_change(lambda d: params(d)["properties"]["status"].update(enum=["open", "shipped"]))
    assert (top.path, top.breaking) == (f"{P}.properties.status.enum", True)
    newly = the_change(lambda d: item(d)["properties"]["qty"].update(enum=[1, 2, 3]))
    assert (newly.path, newly.breaking) == (f"{ITEM}.properties.qty.enum", True)
    freed = the_change(lambda d: params(d)["properties"]["status"].pop("enum"))
    assert (freed.path, freed.breaking) == (f"{P}.properties.status.enum", False)


@pytest.mark.parametrize(
    ("edit", "path", "breaking"),
    [
        (lambda d: item(d)["properties"]["sku"].update(maxLength=16), f"{ITEM}.properties.sku.maxLength", True),
        (lambda d: item(d)["properties"]["sku"].update(maxLength=64), f"{ITEM}.properties.sku.maxLength", False),
        (lambda d: item(d)["properties"]["sku"].pop("maxLength"), f"{ITEM}.properties.sku.maxLength", False),
        (lambda d: item(d)["properties"]["sku"].update(minLength=3), f"{ITEM}.properties.sku.minLength", True),
        (lambda d: item(d)["properties"]["qty"].update(minimum=2), f"{ITEM}.properties.qty.minimum", True),
        (lambda d: item(d)["properties"]["qty"].update(minimum=0), f"{ITEM}.properties.qty.minimum", False),
        (lambda d: item(d)["properties"]["qty"].update(maximum=99), f"{ITEM}.properties.qty.maximum", True),
        (lambda d: item(d)["properties"]["qty"].update(exclusiveMinimum=1), f"{ITEM}.properties.qty.exclusiveMinimum",
         True),
        (lambda d: item(d)["properties"]["qty"].update(multipleOf=2), f"{ITEM}.properties.qty.multipleOf", True),
        (lambda d: params(d)["properties"]["items"].update(maxItems=10), f"{P}.properties.items.maxItems", True),
        (lambda d: params(d)["properties"]["items"].update(maxItems=50), f"{P}.properties.items.maxItems", False),
        (lambda d: params(d)["properties"]["items"].update(minItems=1), f"{P}.properties.items.minItems", True),
        (lambda d: params(d)["properties"]["items"].update(uniqueItems=True), f"{P}.properties.items.uniqueItems",
         True),
        (lambda d: params(d)["properties"]["customer_id"].update(pattern="^C[0-9]{6}$"),
         f"{P}.properties.customer_id.pattern", True),
        (lambda d: params(d)["properties"]["customer_id"].pop("pattern"), f"{P}.properties.customer_id.pattern",
         False),
        (lambda d: item(d)["properties"]["sku"].update(pattern="^[A-Z]+$"), f"{ITEM}.properties.sku.pattern", True),
        (lambda d: params(d)["properties"]["tags"].update(maxProperties=5), f"{P}.properties.tags.maxProperties",
         True),
    ],
)
def test_constraints_tightened_are_breaking_loosened_are_not(edit: Callable, path: str, breaking: bool) -> None:
    c = the_change(edit)
    assert (c.path, c.breaking, c.kind) == (path, breaking, "changed")
    assert ("tightened" in c.summary) == breaking or c.path.endswith((".pattern", ".multipleOf", ".uniqueItems"))


def test_description_and_annotations_at_depth_are_not_breaking() -> None:
    c = the_change(lambda d: item(d)["properties"]["sku"].update(description="The SKU printed on the label."))
    assert (c.path, c.breaking) == (f"{ITEM}.properties.sku.description", False)
    assert c.text_diff and c.text_diff[0].startswith(f"--- {ITEM}.properties.sku.description")
    d = diff_manifests(BASE, edited(lambda d: item(d)["properties"]["qty"].update(default=1, title="Quantity")))
    assert {(x.path, x.breaking) for x in d.changes} == {
        (f"{ITEM}.properties.qty.default", False), (f"{ITEM}.properties.qty.title", False)}


def test_prefix_items_position_changes() -> None:
    c = the_change(lambda d: params(d)["properties"]["window"]["prefixItems"][1].update(format="date-time"))
    assert (c.path, c.breaking) == (f"{P}.properties.window.prefixItems[1].format", True)
    c = the_change(lambda d: params(d)["properties"]["window"]["prefixItems"].pop())
    assert (c.kind, c.path, c.breaking) == ("removed", f"{P}.properties.window.prefixItems[1]", True)
    c = the_change(lambda d: params(d)["properties"]["window"]["prefixItems"].append({"type": "string"}))
    assert (c.kind, c.path, c.breaking) == ("added", f"{P}.properties.window.prefixItems[2]", False)


def test_additional_properties() -> None:
    c = the_change(lambda d: params(d)["properties"]["tags"]["additionalProperties"].update(type="integer"))
    assert (c.path, c.breaking) == (f"{P}.properties.tags.additionalProperties.type", True)
    closed = the_change(lambda d: item(d).update(additionalProperties=False))
    assert (closed.path, closed.breaking) == (f"{ITEM}.additionalProperties", True)
    opened = the_change(lambda d: params(d)["properties"]["tags"].update(additionalProperties=True))
    assert (opened.path, opened.breaking) == (f"{P}.properties.tags.additionalProperties", False)


def test_any_of_branches_paired_by_likeness_not_position() -> None:
    def reverse(d: dict[str, Any]) -> None:
        params(d)["properties"]["contact"]["anyOf"].reverse()

    assert diff_manifests(BASE, edited(reverse)).is_empty
    gone = the_change(lambda d: params(d)["properties"]["contact"]["anyOf"].pop(0))
    assert (gone.kind, gone.path, gone.breaking) == ("removed", f"{P}.properties.contact.anyOf[0]", True)
    more = the_change(lambda d: params(d)["properties"]["contact"]["anyOf"].append({"type": "integer"}))
    assert (more.kind, more.path, more.breaking) == ("added", f"{P}.properties.contact.anyOf[2]", False)
    fmt = the_change(lambda d: params(d)["properties"]["contact"]["anyOf"][0].update(format="idn-email"))
    assert (fmt.path, fmt.breaking) == (f"{P}.properties.contact.anyOf[0].format", True)


def test_all_of_and_one_of() -> None:
    def conjunct(d: dict[str, Any]) -> None:
        params(d)["properties"]["status"]["allOf"] = [{"minLength": 2}]

    c = the_change(conjunct)
    assert (c.path, c.breaking) == (f"{P}.properties.status.allOf", True)

    def one_of(d: dict[str, Any]) -> None:
        params(d)["properties"]["status"] = {"oneOf": [{"type": "string"}, {"type": "integer"}]}

    def one_of_narrower(d: dict[str, Any]) -> None:
        params(d)["properties"]["status"] = {"oneOf": [{"type": "string", "maxLength": 9}, {"type": "integer"}]}

    d = diff_manifests(edited(one_of), edited(one_of_narrower))
    assert [(c.path, c.breaking) for c in d.changes] == [(f"{P}.properties.status.oneOf[0].maxLength", True)]


def test_nullable_via_any_of_is_not_breaking() -> None:
    def nullable(d: dict[str, Any]) -> None:
        params(d)["properties"]["customer_id"] = {"anyOf": [{"type": "string", "pattern": "^C[0-9]+$"},
                                                            {"type": "null"}]}

    d = diff_manifests(BASE, edited(nullable))
    assert [(c.kind, c.path, c.breaking) for c in d.changes] == [
        ("added", f"{P}.properties.customer_id.anyOf[1]", False)]
    back = diff_manifests(edited(nullable), BASE)
    assert [(c.kind, c.path, c.breaking) for c in back.changes] == [
        ("removed", f"{P}.properties.customer_id.anyOf[1]", True)]

    def nullable_and_narrower(d: dict[str, Any]) -> None:
        params(d)["properties"]["customer_id"] = {"anyOf": [{"type": "string", "pattern": "^C[0-9]{6}$"},
                                                            {"type": "null"}]}

    d = diff_manifests(BASE, edited(nullable_and_narrower))
    assert {(c.path, c.breaking) for c in d.changes} == {
        (f"{P}.properties.customer_id.anyOf[1]", False), (f"{P}.properties.customer_id.anyOf[0].pattern", True)}

    def any_of_added_on_top(d: dict[str, Any]) -> None:  # the same type, one more condition: narrower
        params(d)["properties"]["customer_id"]["anyOf"] = [{"minLength": 3}, {"maxLength": 1}]

    c = the_change(any_of_added_on_top)
    assert (c.path, c.breaking) == (f"{P}.properties.customer_id.anyOf", True)

    # OpenAPI's ``nullable`` (validation refuses it in a manifest; imported schemas may still carry it)
    [c] = schema_changes("t", {"type": "string"}, {"type": "string", "nullable": True}, "p")
    assert (c.path, c.breaking) == ("p.nullable", False)


def test_local_refs_are_followed_and_reported_where_used() -> None:
    c = the_change(lambda d: params(d)["$defs"]["address"]["properties"]["country"].update(enum=["US"]))
    assert (c.path, c.breaking) == (f'{P}.properties.address["$ref"].properties.country.enum', True)
    c = the_change(lambda d: params(d)["$defs"]["phone"]["required"].append("country"))
    assert (c.path, c.breaking) == (f'{P}.properties.contact.anyOf[1]["$ref"].properties.country.required', True)
    c = the_change(lambda d: params(d)["$defs"]["address"]["properties"].update(street={"type": "string"}))
    assert (c.kind, c.path, c.breaking) == ("added", f'{P}.properties.address["$ref"].properties.street', False)

    def moved(d: dict[str, Any]) -> None:  # the same schema under another definition name
        defs = params(d)["$defs"]
        defs["postal_address"] = defs.pop("address")
        params(d)["properties"]["address"]["$ref"] = "#/$defs/postal_address"

    c = the_change(moved)
    assert (c.path, c.breaking) == (f'{P}.properties.address["$ref"]', False)

    def inlined(d: dict[str, Any]) -> None:
        params(d)["properties"]["address"] = copy.deepcopy(params(d)["$defs"].pop("address"))

    assert diff_manifests(BASE, edited(inlined)).is_empty


def test_recursive_ref_does_not_loop() -> None:
    tree = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#"}}}}
    narrower = copy.deepcopy(tree)
    narrower["properties"]["name"]["maxLength"] = 10
    changes = schema_changes("t", tree, narrower, "tools[t].parameters")
    assert ("tools[t].parameters.properties.name.maxLength", True) in {(c.path, c.breaking) for c in changes}
    assert schema_changes("t", tree, copy.deepcopy(tree), "tools[t].parameters") == []


def test_top_level_property_reorder_is_one_non_breaking_change() -> None:
    def reverse(d: dict[str, Any]) -> None:
        p = params(d)
        p["properties"] = dict(reversed(list(p["properties"].items())))

    c = the_change(reverse)
    assert (c.kind, c.path, c.breaking) == ("reordered", f"{P}.properties", False)


# --- bindings ------------------------------------------------------------------------------------------------


def test_binding_target_fields_are_breaking_call_settings_are_not() -> None:
    endpoint = the_change(lambda d: tool(d, "find_orders")["binding"].update(endpoint="orders-v2"))
    assert (endpoint.path, endpoint.breaking) == ("tools[find_orders].binding.endpoint", True)
    assert (endpoint.before, endpoint.after) == ("orders-api", "orders-v2")
    path = the_change(lambda d: tool(d, "find_orders")["binding"].update(path="/v2/orders"))
    assert (path.path, path.breaking) == ("tools[find_orders].binding.path", True)
    timeout = the_change(lambda d: tool(d, "find_orders")["binding"].update(timeout_s=10.0))
    assert (timeout.path, timeout.breaking) == ("tools[find_orders].binding.timeout_s", False)


def test_binding_kind_change_and_unbound() -> None:
    def to_fixture(d: dict[str, Any]) -> None:
        tool(d, "find_orders")["binding"] = {"kind": "fixture", "default": []}

    c = the_change(to_fixture)
    assert (c.path, c.breaking) == ("tools[find_orders].binding", True)
    assert c.before["kind"] == "http" and c.after == {"kind": "fixture", "cases": [], "default": []}
    assert "http:orders-api → fixture" in c.summary

    def unbind(d: dict[str, Any]) -> None:
        tool(d, "find_orders")["binding"] = None

    off = the_change(unbind)
    assert (off.path, off.breaking, off.after) == ("tools[find_orders].binding", True, None)
    on = diff_manifests(edited(unbind), BASE)
    assert [(c.path, c.breaking) for c in on.changes] == [("tools[find_orders].binding", False)]

    def to_mcp(server: str) -> Callable[[dict[str, Any]], None]:
        def fn(d: dict[str, Any]) -> None:
            tool(d, "find_orders")["binding"] = {"kind": "mcp", "server": server}
        return fn

    c = diff_manifests(edited(to_mcp("orders")), edited(to_mcp("orders-eu")))
    assert [(x.path, x.breaking) for x in c.changes] == [("tools[find_orders].binding.server", True)]


def test_fixture_cases() -> None:
    added = the_change(lambda d: tool(d, "cancel_order")["binding"]["cases"].append(
        {"when": {"reason": "out_of_stock"}, "result": {"cancelled": True, "restock": True}}))
    assert (added.path, added.breaking) == ("tools[cancel_order].binding.cases", False)
    gone = the_change(lambda d: tool(d, "cancel_order")["binding"].update(cases=[]))
    assert (gone.path, gone.breaking) == ("tools[cancel_order].binding.cases", True)
    default = the_change(lambda d: tool(d, "cancel_order")["binding"].update(default={"cancelled": False}))
    assert (default.path, default.breaking) == ("tools[cancel_order].binding.default", True)


# --- renames ----------------------------------------------------------------------------------------------------


def _rename(d: dict[str, Any], old: str, new: str) -> None:
    tool(d, old)["name"] = new
    for s in d["skills"]:
        s["allowed_tools"] = [new if n == old else n for n in s["allowed_tools"]]


def test_two_renamed_tools_that_swap_places_pair_by_likeness() -> None:
    def swap(d: dict[str, Any]) -> None:
        _rename(d, "find_orders", "search_orders")
        _rename(d, "cancel_order", "void_order")
        i, j = len(d["tools"]) - 2, len(d["tools"]) - 1
        d["tools"][i], d["tools"][j] = d["tools"][j], d["tools"][i]

    d = diff_manifests(BASE, edited(swap))
    renames = {(c.before, c.after) for c in d.changes if c.kind == "renamed"}
    assert renames == {("find_orders", "search_orders"), ("cancel_order", "void_order")}
    assert not [c for c in d.changes if c.kind in ("added", "removed")]
    # Nothing but the renames and the new order: the paired tools' schemas are equal.
    assert {c.kind for c in d.changes} == {"renamed", "reordered"}


def test_renamed_tools_pair_by_schema_even_when_names_share_nothing() -> None:
    def rename_all(d: dict[str, Any]) -> None:
        for t in list(d["tools"]):
            _rename(d, t["name"], "fn_" + "".join(reversed(t["name"])))
        d["tools"].reverse()

    d = diff_manifests(BASE, edited(rename_all))
    pairs = {(c.before, c.after) for c in d.changes if c.kind == "renamed"}
    assert pairs == {(t["name"], "fn_" + "".join(reversed(t["name"]))) for t in BASE_DATA["tools"]}


def test_renamed_tool_with_edited_schema_keeps_its_deep_changes_under_the_new_name() -> None:
    def rename_and_narrow(d: dict[str, Any]) -> None:
        item(d)["properties"]["sku"]["type"] = "integer"
        _rename(d, "find_orders", "list_orders")

    d = diff_manifests(BASE, edited(rename_and_narrow))
    assert at(d, "tools[list_orders].name").kind == "renamed"
    assert at(d, "tools[list_orders].parameters.properties.items.items.properties.sku.type").breaking


def test_unrelated_tools_stay_removed_and_added() -> None:
    def replace(d: dict[str, Any]) -> None:
        d["tools"] = [t for t in d["tools"] if t["name"] != "cancel_order"]
        d["tools"].append({
            "name": "weather_now",
            "description": "Current temperature and sky at a city, for small talk.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "units": {
                "type": "string", "enum": ["metric", "imperial"]}}, "required": ["city"]},
            "binding": {"kind": "mcp", "server": "weather"},
        })

    d = diff_manifests(BASE, edited(replace))
    assert at(d, "tools[cancel_order]").kind == "removed" and at(d, "tools[cancel_order]").breaking
    assert at(d, "tools[weather_now]").kind == "added" and not at(d, "tools[weather_now]").breaking
    assert not [c for c in d.changes if c.kind == "renamed"]


def test_two_renamed_skills_that_swap_places_pair_by_likeness() -> None:
    def swap(d: dict[str, Any]) -> None:
        by = {s["id"]: s for s in d["skills"]}
        by["chit_chat"]["id"] = "small_talk"
        by["efficacy_compliance"]["id"] = "claims_guard"
        i = d["skills"].index(by["chit_chat"])
        j = d["skills"].index(by["efficacy_compliance"])
        d["skills"][i], d["skills"][j] = d["skills"][j], d["skills"][i]

    d = diff_manifests(BASE, edited(swap))
    renames = {(c.before, c.after) for c in d.changes if c.kind == "renamed"}
    assert renames == {("chit_chat", "small_talk"), ("efficacy_compliance", "claims_guard")}
    assert not [c for c in d.changes if c.kind in ("added", "removed")]


def test_similarity_measures() -> None:
    assert name_similarity("get_order_details", "getOrderDetails") > 0.7
    assert name_similarity("get_order_details", "weather_now") < 0.3
    assert schema_similarity(CANCEL_ORDER["parameters"], CANCEL_ORDER["parameters"]) == 1.0
    assert schema_similarity(CANCEL_ORDER["parameters"], FIND_ORDERS["parameters"]) < 0.5


def test_deep_diff_serialises_to_json() -> None:
    d = diff_manifests(BASE, edited(lambda d: tool(d, "find_orders").update(binding={"kind": "mcp", "server": "o"})))
    assert ManifestDiff.model_validate_json(d.model_dump_json()) == d


# --- properties ---------------------------------------------------------------------------------------------------

_names = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)
_leaf = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean"])},
    optional={"description": st.text(alphabet=string.ascii_letters + " ", max_size=20),
              "enum": st.lists(st.integers(0, 9), min_size=2, max_size=4, unique=True)},
)


def _object(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.dictionaries(_names, children, min_size=1, max_size=4).flatmap(
        lambda props: st.fixed_dictionaries({
            "type": st.just("object"), "properties": st.just(props),
            "required": st.lists(st.sampled_from(sorted(props)), unique=True, max_size=len(props)),
        }))


def _array(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries({"type": st.just("array"), "items": children})


_schema = st.recursive(_leaf, lambda c: _object(c) | _array(c), max_leaves=12)
_params = _object(_schema)


def _nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every sub-schema with its diff path."""
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _nodes(sub, f"{path}.properties.{name}")
    if isinstance(node.get("items"), dict):
        out += _nodes(node["items"], f"{path}.items")
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_params)
def test_a_schema_against_itself_has_no_changes(schema: dict[str, Any]) -> None:
    assert schema_changes("t", schema, copy.deepcopy(schema), "tools[t].parameters") == []


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_params, st.data())
def test_one_edit_at_any_depth_is_one_change_at_its_path(schema: dict[str, Any], data: st.DataObject) -> None:
    new = copy.deepcopy(schema)
    path, node = data.draw(st.sampled_from(_nodes(new, "tools[t].parameters")))
    edit = data.draw(st.sampled_from(["description", "maxLength", "enum"] if "enum" in node
                                     else ["description", "maxLength"]))
    if edit == "description":
        node["description"] = str(node.get("description", "")) + " (edited)"
        expected = (f"{path}.description", False)
    elif edit == "maxLength":
        node["maxLength"] = 5
        expected = (f"{path}.maxLength", True)
    else:
        node["enum"] = node["enum"][1:]
        expected = (f"{path}.enum", True)
    changes = schema_changes("t", schema, new, "tools[t].parameters")
    assert [(c.path, c.breaking) for c in changes] == [expected]


_tool_names = st.from_regex(r"\A[a-z][a-z0-9_]{2,20}\Z", fullmatch=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_tool_names, min_size=len(BASE_DATA["tools"]), max_size=len(BASE_DATA["tools"]), unique=True),
       st.randoms(use_true_random=False))
def test_renamed_tools_variant_pairs_every_tool(names: list[str], rnd: Any) -> None:
    d = copy.deepcopy(BASE_DATA)
    old_names = [t["name"] for t in d["tools"]]
    fresh = [n for n in names if n not in old_names]
    mapping = dict(zip(old_names, fresh + [f"renamed_{i}" for i in range(len(old_names) - len(fresh))],
                       strict=True))
    for old, new in mapping.items():
        _rename(d, old, new)
    rnd.shuffle(d["tools"])
    diff = diff_manifests(BASE, parse_manifest(d))
    assert {(c.before, c.after) for c in diff.changes if c.kind == "renamed"} == set(mapping.items())
    assert {c.kind for c in diff.changes} <= {"renamed", "reordered"}


def test_same_parameters_alone_do_not_make_a_rename() -> None:
    """Two unbound tools with the same one-id schema but different names and purposes stay removed + added."""
    def order_tool(name: str, description: str) -> dict[str, Any]:
        return {"name": name, "description": description, "binding": None,
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                               "required": ["order_id"]}}

    def before(d: dict[str, Any]) -> None:
        d["tools"].append(order_tool("get_order", "Status, items and totals of one order."))

    def after(d: dict[str, Any]) -> None:
        d["tools"].append(order_tool("cancel_order_now", "Cancel the order right away and refund the payment."))

    d = diff_manifests(edited(before), edited(after))
    assert {(c.kind, c.path) for c in d.changes} == {("removed", "tools[get_order]"),
                                                     ("added", "tools[cancel_order_now]")}


def test_the_diff_imports_no_django() -> None:
    import subprocess
    import sys

    code = ("import sys, harness_editor.diff; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'rest_framework', 'channels', 'celery', 'streams', 'training_jobs', 'console')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_tool_that_alone_keeps_its_implementation_is_renamed_whatever_else_changed() -> None:
    def remake(d: dict[str, Any]) -> None:
        t = tool(d, "check_stock")  # catalog.stock: the only tool bound to it
        t["description"] = "Inventory on hand for a listing."
        t["parameters"] = {"type": "object", "properties": {"query": {"type": "object", "properties": {
            "listing": {"type": "string", "pattern": "^[0-9]+$"}}, "required": ["listing"]}}, "required": ["query"]}
        t["argument_map"] = {"link_id": "query.listing"}
        _rename(d, "check_stock", "inventory_for")

    d = diff_manifests(BASE, edited(remake))
    assert at(d, "tools[inventory_for].name").before == "check_stock"
    assert at(d, "tools[inventory_for].parameters.properties.link_id").kind == "removed"
    assert at(d, "tools[inventory_for].parameters.properties.query").breaking  # a new required parameter

    def remake_twice(d: dict[str, Any]) -> None:  # two new tools on the same implementation: no identity
        remake(d)
        twin = copy.deepcopy(tool(d, "inventory_for"))
        twin["name"] = "stock_twin"
        twin["description"] = "Something else entirely, sharing the implementation."
        d["tools"].append(twin)

    d = diff_manifests(BASE, edited(remake_twice))
    assert not [c for c in d.changes if c.kind == "renamed"]
    assert at(d, "tools[check_stock]").kind == "removed"
