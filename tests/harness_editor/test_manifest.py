"""Manifest schema: parsing, precise error paths, canonical round trips, content hash; and the bindings the
manifest validates against. Pure Python: no Django, no database."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from harness_editor.schemas import (
    MAX_MANIFEST_BYTES,
    FieldError,
    Manifest,
    ManifestError,
    content_hash,
    format_loc,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    manifest_to_json,
    manifest_to_yaml,
    parse_manifest,
)
from streams.bindings import BINDINGS, get_binding

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
DEMO_FILES = ["skincare_v1.yaml", "skincare_v2.yaml", "skincare_v3.yaml"]
V1_TEXT = (DEMO / "skincare_v1.yaml").read_text(encoding="utf-8")


def v1() -> dict[str, Any]:
    return copy.deepcopy(_V1_DATA)


_V1_DATA = load_yaml(V1_TEXT)


def room() -> dict[str, Any]:
    return yaml.safe_load((DEMO / "room.yaml").read_text(encoding="utf-8"))


# --- demo manifests and round trips -------------------------------------------------------------------


@pytest.mark.parametrize("name", DEMO_FILES)
def test_demo_manifest_parses_and_is_canonical(name: str) -> None:
    text = (DEMO / name).read_text(encoding="utf-8")
    m = manifest_from_yaml(text)
    assert len(m.skills) >= 6 and len(m.tools) >= 6 and len(m.hooks) >= 4
    assert {s.kind for s in m.skills} == {"reply", "strategy"}
    # The demo files are exactly what the exporter writes, so re-exporting them shows no diff.
    assert manifest_to_yaml(m) == text


@pytest.mark.parametrize("name", DEMO_FILES)
def test_yaml_json_round_trip_is_byte_stable(name: str) -> None:
    m = manifest_from_yaml((DEMO / name).read_text(encoding="utf-8"))
    first_yaml = manifest_to_yaml(m)
    as_json = manifest_to_json(m)
    m2 = manifest_from_json(as_json)
    assert manifest_to_yaml(m2) == first_yaml
    assert manifest_to_json(m2) == as_json
    assert manifest_to_json(manifest_from_json(as_json)) == as_json
    assert manifest_to_json(manifest_from_yaml(first_yaml)) == as_json
    assert m2 == m


def test_json_is_compact_in_declared_order_and_never_sorted() -> None:
    d = v1()
    d["tools"][5]["parameters"]["properties"] = {
        "zeta": {"type": "string"},
        "link_id": {"type": "integer"},
        "alpha": {"type": "string"},
    }
    text = manifest_to_json(parse_manifest(d))
    assert text.startswith('{"name":"Glow & Gadget live room","description":')
    pin = text[text.index('"name":"pin_product"') :]
    assert pin.index('"zeta"') < pin.index('"link_id"') < pin.index('"alpha"')
    assert ": " not in text.split('"skills"')[0]  # compact separators
    # key order inside the schema survives a JSON round trip too
    assert manifest_to_json(manifest_from_json(text)) == text


def test_yaml_export_uses_literal_blocks_and_keeps_unicode() -> None:
    d = v1()
    d["skills"][2]["id"] = "闲聊"
    d["skills"][2]["description"] = "和观众打招呼 — greet viewers"
    text = manifest_to_yaml(parse_manifest(d))
    assert "  body: |\n    # Price and stock questions\n" in text
    assert "闲聊" in text and "\\u" not in text
    assert manifest_to_yaml(manifest_from_yaml(text)) == text


def test_content_hash_is_stable_and_tracks_content() -> None:
    a = manifest_from_yaml(V1_TEXT)
    b = manifest_from_yaml(V1_TEXT)
    assert content_hash(a) == content_hash(b)
    assert len(content_hash(a)) == 64 and int(content_hash(a), 16) >= 0
    d = v1()
    d["skills"][0]["body"] += "\n7. One more rule."
    assert content_hash(parse_manifest(d)) != content_hash(a)
    # Property order is part of what the model sees, so it is part of the hash.
    d = v1()
    props = d["tools"][2]["parameters"]["properties"]
    d["tools"][2]["parameters"]["properties"] = dict(reversed(list(props.items())))
    assert content_hash(parse_manifest(d)) != content_hash(a)


def test_defaults_are_filled_in() -> None:
    d = v1()
    del d["hooks"][0]["max_chars"], d["hooks"][0]["enabled"], d["constraints"]["turn_limit"]
    m = parse_manifest(d)
    assert m.hooks[0].max_chars == 300 and m.hooks[0].enabled is True and m.constraints.turn_limit == 6


def test_unicode_skill_id_is_allowed() -> None:
    d = v1()
    d["skills"][0]["id"] = "价格_qa.v2"
    assert parse_manifest(d).skills[0].id == "价格_qa.v2"


# --- malformed inputs -------------------------------------------------------------------------------------


def _yaml(text: str) -> Callable[[], Any]:
    return lambda: manifest_from_yaml(text)


def _json(text: str) -> Callable[[], Any]:
    return lambda: manifest_from_json(text)


def _data(mutate: Callable[[dict[str, Any]], Any]) -> Callable[[], Any]:
    def run() -> Any:
        d = v1()
        mutate(d)
        return parse_manifest(d)

    return run


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set a value by a dotted path with integer segments for list indexes: "tools.0.binding"."""

    def mutate(d: dict[str, Any]) -> None:
        node: Any = d
        parts = [int(p) if p.isdigit() else p for p in path.split(".")]
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value

    return mutate


def _do(*fns: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        for fn in fns:
            fn(d)

    return mutate


def _all_strategy(d: dict[str, Any]) -> None:
    for s in d["skills"]:
        s["kind"] = "strategy"


def _second_retry(d: dict[str, Any]) -> None:
    extra = copy.deepcopy(d["hooks"][6])
    extra["id"] = "retry-again"
    d["hooks"].append(extra)


_DUP_KEY_YAML = V1_TEXT.replace("- id: price_stock_qa\n", "- id: price_stock_qa\n  id: price_qa\n", 1)
_DEEP_DUP_YAML = V1_TEXT.replace(
    "      link_id:\n        type: integer\n", "      link_id:\n        type: integer\n        type: string\n", 1
)
_NAN_YAML = V1_TEXT.replace(
    "      link_id:\n        type: integer\n", "      link_id:\n        type: integer\n        maximum: .nan\n", 1
)
_ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)

MALFORMED: list[tuple[str, Callable[[], Any], str, str]] = [
    # (case id, how to load, expected path, message fragment)
    ("yaml-syntax", _yaml("name: [unclosed\nskills: 1\n"), "", "invalid YAML at line 2, column"),
    ("yaml-tab-indent", _yaml("name: x\n\tskills: []\n"), "", "invalid YAML at line 2"),
    ("yaml-duplicate-key", _yaml(_DUP_KEY_YAML), "skills[0].id", "duplicate key 'id'"),
    ("yaml-duplicate-key-deep", _yaml(_DEEP_DUP_YAML), "tools[0].parameters.properties.link_id.type", "duplicate key"),
    ("yaml-top-level-list", _yaml("- name: x\n- name: y\n"), "", "must be a mapping (object) at the top level"),
    ("yaml-empty", _yaml(""), "", "got null"),
    ("yaml-two-documents", _yaml("name: a\n---\nname: b\n"), "", "single document"),
    ("yaml-alias-bomb", _yaml(_ALIAS_BOMB), "", "more than"),
    ("yaml-nan-in-schema", _yaml(_NAN_YAML), "tools[0].parameters.properties.link_id.maximum", "not a JSON number"),
    ("json-syntax", _json('{"name": }'), "", "invalid JSON at line 1, column 10"),
    ("json-duplicate-key", _json('{"name": "a", "name": "b"}'), "name", "duplicate key"),
    ("json-top-level-string", _json('"hello"'), "", "got str"),
    ("json-nan", _json('{"name": NaN}'), "", "NaN is not valid JSON"),
    ("oversize-text", _yaml("name: x\n" + "#" * MAX_MANIFEST_BYTES), "", "larger than"),
    ("unknown-top-level-key", _data(_set("owner", "me")), "owner", "unknown field 'owner'"),
    ("missing-prompt", _data(lambda d: d.pop("prompt")), "prompt", "field required"),
    ("unknown-key-in-skill", _data(_set("skills.1.priority", 3)), "skills[1].priority", "unknown field"),
    ("unknown-hook-kind", _data(_set("hooks.0.kind", "sentiment")), "hooks[0].kind", "unknown kind 'sentiment'"),
    ("hook-without-kind", _data(lambda d: d["hooks"][2].pop("kind")), "hooks[2].kind", "missing 'kind'"),
    ("hook-param-wrong-type", _data(_set("hooks.0.max_chars", "300")), "hooks[0].max_chars", "valid integer"),
    ("hook-param-of-other-kind", _data(_set("hooks.4.max_chars", 10)), "hooks[4].max_chars", "unknown field"),
    (
        "hook-param-out-of-range",
        _data(_set("hooks.6.max_retries", 9)),
        "hooks[6].max_retries",
        "less than or equal to 5",
    ),
    (
        "factual-risk-unknown-check",
        _data(_set("hooks.5.check", ["price", "colour"])),
        "hooks[5].check[1]",
        "'price', 'stock' or 'discount'",
    ),
    ("banned-phrases-empty", _data(_set("hooks.4.phrases", [])), "hooks[4].phrases", "at least 1 item"),
    (
        "bad-regex",
        _data(_set("hooks.0.blocked_patterns.1", "(unclosed")),
        "hooks[0].blocked_patterns[1]",
        "not a valid regular expression",
    ),
    ("two-retry-control-hooks", _data(_second_retry), "hooks[7].kind", "only one retry_control hook"),
    (
        "duplicate-hook-id",
        _data(_set("hooks.1.id", "viewer-input-guard")),
        "hooks[1].id",
        "duplicate hook id 'viewer-input-guard' (first at hooks[0])",
    ),
    ("bad-hook-id", _data(_set("hooks.1.id", "tool args!")), "hooks[1].id", "is not valid"),
    (
        "schema-invalid-deep",
        _data(_set("tools.0.parameters.properties.link_id.type", "integr")),
        "tools[0].parameters.properties.link_id.type",
        "is not valid under any of the given schemas",
    ),
    (
        "schema-invalid-keyword-value",
        _data(_set("tools.2.parameters.properties.coupon_code.minLength", -1)),
        "tools[2].parameters.properties.coupon_code.minLength",
        "less than the minimum of 0",
    ),
    (
        "schema-required-not-array",
        _data(_set("tools.0.parameters.required", "link_id")),
        "tools[0].parameters.required",
        "is not of type 'array'",
    ),
    (
        "schema-top-level-not-object",
        _data(_set("tools.4.parameters", {"type": "array"})),
        "tools[4].parameters.type",
        "must have type 'object'",
    ),
    ("parameters-not-a-dict", _data(_set("tools.4.parameters", [])), "tools[4].parameters", "valid dictionary"),
    (
        "duplicate-skill-id",
        _data(_set("skills.3.id", "price_stock_qa")),
        "skills[3].id",
        "duplicate skill id 'price_stock_qa' (first at skills[0])",
    ),
    ("skill-id-trailing-newline", _data(_set("skills.0.id", "price_stock_qa\n")), "skills[0].id", "is not valid"),
    ("skill-id-starts-with-digit", _data(_set("skills.0.id", "1price")), "skills[0].id", "is not valid"),
    (
        "duplicate-tool-name",
        _data(_set("tools.1.name", "lookup_product")),
        "tools[1].name",
        "duplicate tool name 'lookup_product'",
    ),
    ("bad-tool-name", _data(_set("tools.0.name", "lookup product")), "tools[0].name", "is not valid"),
    ("reserved-tool-name", _data(_set("tools.5.name", "load_skill")), "tools[5].name", "reserved"),
    ("no-reply-skill", _data(_all_strategy), "skills", "at least one skill must have kind 'reply'"),
    ("empty-skills", _data(_set("skills", [])), "skills", "at least 1 item"),
    (
        "unknown-binding",
        _data(_set("tools.1.binding", "catalog.stok")),
        "tools[1].binding",
        "unknown binding 'catalog.stok'; known: campaign.state, catalog.product_info",
    ),
    (
        "argument-map-missing-required",
        _data(_set("tools.2.argument_map", {"coupon_code": "coupon_code"})),
        "tools[2].argument_map",
        "required implementation parameter 'viewer_id' of binding 'coupons.issue' is not mapped",
    ),
    (
        "argument-map-unknown-impl-param",
        _data(_set("tools.0.argument_map.sku", "link_id")),
        "tools[0].argument_map.sku",
        "binding 'catalog.product_info' has no parameter 'sku'",
    ),
    (
        "argument-map-path-not-in-schema",
        _data(_set("tools.0.argument_map.link_id", "args.link_id")),
        "tools[0].argument_map.link_id",
        "tool parameter path 'args.link_id' is not in the parameters schema",
    ),
    (
        "argument-map-type-mismatch",
        _data(_set("tools.0.parameters.properties.link_id.type", "string")),
        "tools[0].argument_map.link_id",
        "has type string but binding 'catalog.product_info' parameter 'link_id' needs integer",
    ),
    (
        "argument-map-enum-type-mismatch",
        _data(_set("tools.3.parameters.properties.region", {"enum": [1, 2]})),
        "tools[3].argument_map.region",
        "needs string",
    ),
    (
        "allowed-tools-unknown",
        _data(_set("skills.2.allowed_tools.0", "get_weather")),
        "skills[2].allowed_tools[0]",
        "unknown tool 'get_weather'",
    ),
    ("oversize-skill-body", _data(_set("skills.0.body", "x" * 20001)), "skills[0].body", "at most 20000 characters"),
    ("blank-skill-body", _data(_set("skills.0.body", "  \n ")), "skills[0].body", "must not be blank"),
    (
        "oversize-skill-description",
        _data(_set("skills.0.description", "a" * 301)),
        "skills[0].description",
        "at most 300 characters",
    ),
    (
        "newline-in-description",
        _data(_set("skills.0.description", "line one\nline two")),
        "skills[0].description",
        "single line",
    ),
    (
        "min-above-max-reply-chars",
        _data(_set("constraints.reply_min_chars", 300)),
        "constraints.reply_min_chars",
        "reply_min_chars (300) is greater than reply_max_chars (200)",
    ),
    ("bad-language-code", _data(_set("constraints.language", "english!")), "constraints.language", "BCP-47"),
    (
        "constraint-out-of-range",
        _data(_set("constraints.turn_limit", 0)),
        "constraints.turn_limit",
        "greater than or equal to 1",
    ),
    (
        "duplicate-block-id",
        _data(_set("prompt.blocks.1.id", "persona")),
        "prompt.blocks[1].id",
        "duplicate block id 'persona'",
    ),
    ("unknown-block-role", _data(_set("prompt.blocks.0.role", "intro")), "prompt.blocks[0].role", "Input should be"),
    ("unknown-layout", _data(_set("prompt.layout", "html")), "prompt.layout", "'markdown', 'xml', 'json'"),
    ("no-blocks", _data(_set("prompt.blocks", [])), "prompt.blocks", "at least 1 item"),
    ("bool-for-int", _data(_set("constraints.reply_max_chars", True)), "constraints.reply_max_chars", "valid integer"),
]


@pytest.mark.parametrize(("load", "path", "fragment"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_manifest_reports_exact_path(load: Callable[[], Any], path: str, fragment: str) -> None:
    with pytest.raises(ManifestError) as info:
        load()
    errors = info.value.errors
    assert errors, "ManifestError without errors"
    assert all(isinstance(e, FieldError) for e in errors)
    matching = [e for e in errors if e.path == path]
    assert matching, f"no error at {path!r}; got {[(e.path, e.message) for e in errors]}"
    assert any(fragment in e.message for e in matching), [e.message for e in matching]


def test_all_errors_of_a_pass_are_reported_together() -> None:
    d = v1()
    d["skills"][1]["priority"] = 1
    d["hooks"][0]["max_chars"] = "x"
    d["constraints"]["language"] = "??"
    with pytest.raises(ManifestError) as info:
        parse_manifest(d)
    assert {e.path for e in info.value.errors} == {"skills[1].priority", "hooks[0].max_chars", "constraints.language"}
    d = v1()
    d["tools"][1]["binding"] = "nope"
    d["skills"][0]["allowed_tools"] = ["nope_tool"]
    d["constraints"]["reply_min_chars"] = 500
    with pytest.raises(ManifestError) as info:
        parse_manifest(d)
    assert {e.path for e in info.value.errors} == {
        "tools[1].binding",
        "skills[0].allowed_tools[0]",
        "constraints.reply_min_chars",
    }


def test_invalid_schema_message_is_readable() -> None:
    d = v1()
    d["tools"][0]["parameters"]["properties"]["link_id"]["type"] = "strin"
    with pytest.raises(ManifestError) as info:
        parse_manifest(d)
    (err,) = [e for e in info.value.errors if e.path == "tools[0].parameters.properties.link_id.type"]
    assert err.message.startswith("'strin' is not valid under any of the given schemas")
    assert "array, boolean, integer, null, number, object, string" in err.message


def test_manifest_error_str_lists_path_and_message() -> None:
    exc = ManifestError([FieldError(path="skills[0].id", message="duplicate key"), FieldError(path="", message="x")])
    assert str(exc) == "skills[0].id: duplicate key\nx"


def test_nested_argument_map_paths_resolve() -> None:
    d = v1()
    d["tools"][0]["parameters"] = {
        "type": "object",
        "properties": {"args": {"type": "object", "properties": {"sku": {"type": "integer"}}, "required": ["sku"]}},
        "required": ["args"],
    }
    d["tools"][0]["argument_map"] = {"link_id": "args.sku"}
    assert parse_manifest(d).tools[0].argument_map == {"link_id": "args.sku"}


def test_direct_model_validate_also_runs_semantic_checks() -> None:
    d = v1()
    d["tools"][1]["binding"] = "nope"
    with pytest.raises(ValidationError, match=r"tools\[1\]\.binding: unknown binding 'nope'"):
        Manifest.model_validate(d)
    assert Manifest.model_validate(v1()) == parse_manifest(v1())


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        (("tools", 3, "parameters", "properties", "sku", "type"), "tools[3].parameters.properties.sku.type"),
        (("hooks", 0, "banned_phrases", "phrases"), "hooks[0].phrases"),
        (("hooks", 2, "viewer_input", "blocked_patterns", 1), "hooks[2].blocked_patterns[1]"),
        (("skills", 0, "allowed_tools", 2), "skills[0].allowed_tools[2]"),
        (("constraints", "reply_min_chars"), "constraints.reply_min_chars"),
        (("tools", 0, "parameters", "properties", "odd key"), 'tools[0].parameters.properties["odd key"]'),
        ((), ""),
    ],
)
def test_format_loc(loc: tuple[Any, ...], expected: str) -> None:
    assert format_loc(loc) == expected


# --- bindings ---------------------------------------------------------------------------------------


def test_binding_params_come_from_signatures() -> None:
    assert set(BINDINGS) == {
        "catalog.product_info",
        "catalog.stock",
        "coupons.issue",
        "policy.shipping",
        "campaign.state",
        "room.pin_product",
    }
    pin = get_binding("room.pin_product")
    assert pin is not None
    assert [(p.name, p.json_type, p.required) for p in pin.params.values()] == [
        ("link_id", "integer", True),
        ("duration_s", "integer", False),
    ]
    assert get_binding("policy.shipping").params["region"].required is False  # type: ignore[union-attr]
    assert get_binding("campaign.state").params == {}  # type: ignore[union-attr]
    assert get_binding("nope") is None


def _call(binding_id: str, r: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    b = get_binding(binding_id)
    assert b is not None
    out = b.func(r, **kwargs)
    json.dumps(out)  # JSON-able
    return out


def test_product_info_and_stock() -> None:
    r = room()
    info = _call("catalog.product_info", r, link_id=101)
    assert info["price"] == 24.9 and info["list_price"] == 34.0 and info["stock"] == 180
    assert info["flash_sale"] == {"price": 19.9, "ends_at_minute": 55}
    assert info["compliance_notes"] and "key_ingredients" in info["attributes"]
    assert "flash_sale" not in _call("catalog.product_info", r, link_id=102)
    assert _call("catalog.product_info", r, link_id=999)["code"] == "not_found"
    assert _call("catalog.product_info", r, link_id="abc")["code"] == "invalid_argument"
    assert _call("catalog.product_info", r, link_id="101")["link_id"] == 101
    assert _call("catalog.stock", r, link_id=102) == {
        "link_id": 102,
        "title": r["products"][1]["title"],
        "stock": 8,
        "low_stock": True,
    }
    assert _call("catalog.stock", r, link_id=101)["low_stock"] is False
    r["clock_minute"] = 60
    assert "flash_sale" not in _call("catalog.product_info", r, link_id=101)


def test_coupon_issue_mutates_room_and_checks_rules() -> None:
    r = room()
    ok = _call("coupons.issue", r, coupon_code="glow5", viewer_id="amy")
    assert ok["issued"] is True and ok["coupon_code"] == "GLOW5" and ok["remaining"] == 199
    assert r["coupons"][0]["remaining"] == 199
    assert _call("coupons.issue", r, coupon_code="GLOW5", viewer_id="amy")["code"] == "already_issued"
    assert _call("coupons.issue", r, coupon_code="EARLYBIRD", viewer_id="amy")["code"] == "expired"
    assert _call("coupons.issue", r, coupon_code="NOPE", viewer_id="amy")["code"] == "not_found"
    r["coupons"][1]["remaining"] = 0
    assert _call("coupons.issue", r, coupon_code="GADGET15", viewer_id="bo")["code"] == "exhausted"
    assert _call("coupons.issue", r, coupon_code="", viewer_id="bo")["code"] == "invalid_argument"


def test_shipping_campaign_and_pin() -> None:
    r = room()
    base = _call("policy.shipping", r)
    assert base["free_over"] == 35.0 and base["return_days"] == 30 and base["region_override"] is False
    alaska = _call("policy.shipping", r, region="alaska")
    assert alaska["region"] == "Alaska" and alaska["free_over"] == 60.0 and alaska["return_days"] == 30
    state = _call("campaign.state", r)
    assert state["phase"] == "flash_sale" and state["flash_sale"]["link_id"] == 101
    assert [c["code"] for c in state["coupons"]] == ["GLOW5", "GADGET15"]  # EARLYBIRD expired at 30
    pinned = _call("room.pin_product", r, link_id=202)
    assert pinned == {"pinned": True, "link_id": 202, "title": r["products"][5]["title"], "duration_s": 60}
    assert r["pinned"]["link_id"] == 202
    assert _call("room.pin_product", r, link_id=202, duration_s=0)["code"] == "invalid_argument"
    assert _call("campaign.state", {"products": []}) == {
        "clock_minute": 0,
        "phase": "idle",
        "flash_sale": None,
        "coupons": [],
    }


def test_pure_python_yaml_loader_behaves_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML without libyaml (some platforms) must give the same manifests and error paths."""
    from harness_editor.schemas import loading

    monkeypatch.setattr(loading, "_SafeLoader", yaml.SafeLoader)
    assert manifest_to_yaml(manifest_from_yaml(V1_TEXT)) == V1_TEXT
    with pytest.raises(ManifestError) as info:
        manifest_from_yaml(_DUP_KEY_YAML)
    assert [e.path for e in info.value.errors] == ["skills[0].id"]
    with pytest.raises(ManifestError, match=r"invalid YAML at line 2, column"):
        manifest_from_yaml("name: [unclosed\nskills: 1\n")
