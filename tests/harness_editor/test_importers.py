"""harness_editor.importers: every accepted form, every kind of change reported, the foreign set of public-style
function definitions, import into a manifest, and the property that whatever comes out is a valid harness tool."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_editor.importers import (
    ToolImportError,
    import_into_manifest,
    import_tools,
    tool_name_for,
)
from harness_editor.importers.plan import plan_import
from harness_editor.importers.pytypes import python_type_schema
from harness_editor.schemas import TOOL_NAME_RE, parse_manifest

DATA = Path(__file__).resolve().parent / "data"
DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / "skincare_v1.yaml"


@pytest.fixture(scope="module")
def demo_data():
    from harness_editor.schemas import manifest_from_yaml

    return manifest_from_yaml(DEMO.read_text(encoding="utf-8")).model_dump(mode="json")


def kinds(result, kind):
    return [c for c in result.changes if c.kind == kind]


def assert_valid_in_manifest(base: dict, tools: list[dict]):
    data = copy.deepcopy(base)
    data["tools"] = [*data["tools"], *tools][:100]
    return parse_manifest(data)  # raises ManifestError with every problem


# --- the forms ------------------------------------------------------------------------------------------

OPENAI_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather.", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def test_openai_tool_is_taken_as_it_is_but_strict_is_dropped_and_said():
    r = import_tools([OPENAI_TOOL])
    assert r.source == "openai"
    assert r.tools == [{"name": "get_weather", "description": "Current weather.",
                        "parameters": OPENAI_TOOL["function"]["parameters"], "binding": None}]
    (dropped,) = r.changes
    assert (dropped.kind, dropped.path, dropped.tool) == ("dropped_key", "[0].function.strict", 0)


def test_a_whole_chat_completions_request_and_the_legacy_functions_list():
    request = {"model": "gpt-x", "messages": [], "tools": [OPENAI_TOOL], "tool_choice": "auto"}
    r = import_tools(request, source="openai")
    assert [t["name"] for t in r.tools] == ["get_weather"]
    ignored = [c for c in r.changes if c.path == ""]
    assert ignored and "model" in ignored[0].message and "messages" in ignored[0].message
    legacy = {"functions": [{"name": "lookup", "description": "Look up.",
                             "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]}
    r = import_tools(legacy, source="openai")
    assert r.tools[0]["parameters"]["properties"] == {"q": {"type": "string"}} and r.changes == []


def test_responses_api_flat_function_form():
    r = import_tools({"type": "function", "name": "lookup", "description": "d",
                      "parameters": {"type": "object", "properties": {}}, "strict": False})
    assert r.tools[0]["name"] == "lookup"
    assert [c.path for c in kinds(r, "dropped_key")] == ["strict"]


def test_anthropic_tools():
    tools = [{"name": "get_stock_price", "description": "Price of a ticker.", "cache_control": {"type": "ephemeral"},
              "input_schema": {"type": "object", "properties": {"ticker": {"type": "string"}},
                               "required": ["ticker"]}}]
    r = import_tools({"tools": tools}, source="anthropic")
    assert r.source == "anthropic"
    assert r.tools[0]["parameters"] == tools[0]["input_schema"]
    assert [(c.kind, c.path) for c in r.changes] == [("dropped_key", "tools[0].cache_control")]


def test_anthropic_server_tool_has_nothing_to_import():
    with pytest.raises(ToolImportError) as exc:
        import_tools([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}], source="anthropic")
    assert exc.value.errors[0][0] == "[0]"


def test_mcp_tools_list_and_its_json_rpc_answer():
    listing = {"tools": [{"name": "files/read", "title": "Read file", "description": "Read a file.",
                          "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                                          "properties": {"path": {"type": "string"}}, "required": ["path"]},
                          "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]}
    r = import_tools(listing, source="mcp")
    assert r.source == "mcp" and r.origins == ["files/read"]
    assert r.tools[0]["name"] == "files_read"
    assert r.tools[0]["parameters"] == {"type": "object", "properties": {"path": {"type": "string"}},
                                        "required": ["path"]}
    paths = {c.path: c.kind for c in r.changes}
    assert paths["tools[0].name"] == "renamed"
    assert paths['tools[0].inputSchema["$schema"]'] == "dropped_key"
    # carried, not dropped: the title and hints as annotations, the output schema (tests/harness_editor/
    # test_tool_annotations.py has the details)
    assert r.tools[0]["annotations"] == {"title": "Read file", "read_only": True}
    assert r.tools[0]["output_schema"] == {"type": "object"}
    assert paths["tools[0].annotations"] == paths["tools[0].outputSchema"] == "annotated"
    answer = {"jsonrpc": "2.0", "id": 1, "result": listing}
    assert import_tools(answer).tools == r.tools


def test_mcp_title_becomes_the_description_when_there_is_none():
    r = import_tools([{"name": "x", "title": "Does x", "inputSchema": {"type": "object"}}])
    assert r.tools[0]["description"] == "Does x"
    assert [c.kind for c in r.changes] == ["converted", "annotated"]  # and kept as the display title
    assert r.tools[0]["annotations"] == {"title": "Does x"}


def test_plain_function_with_python_types_the_example_of_the_issue():
    r = import_tools({"name": "orders.get", "parameters": {
        "order_id": "str", "items": "list[dict]", "weight": "float", "dims": "tuple[float, float]", "meta": "any",
        "note": "optional[str]"}})
    (tool,) = r.tools
    assert r.source == "functions"
    assert tool["name"] == "orders_get"
    assert tool["parameters"] == {"type": "object", "properties": {
        "order_id": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object"}},
        "weight": {"type": "number"},
        "dims": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": False,
                 "minItems": 2, "maxItems": 2},
        "meta": {},
        "note": {"type": "string"}},
        "required": ["order_id", "items", "weight", "dims", "meta"]}
    mapped = {c.path: c.message for c in kinds(r, "type_mapped")}
    assert set(mapped) == {f"parameters.{p}" for p in ("order_id", "items", "weight", "dims", "meta", "note")}
    assert "not required" in mapped["parameters.note"] and "no type" in mapped["parameters.meta"]
    assert [c.path for c in kinds(r, "renamed")] == ["name"]
    assert [c.path for c in kinds(r, "defaulted")] == ["description"]
    assert tool["description"] == "orders.get (imported without a description)"


def test_plain_function_with_a_parameter_list():
    r = import_tools({"name": "find", "description": "Find.", "args": [
        {"name": "q", "type": "str", "description": "what"}, {"name": "limit", "type": "int", "default": 5},
        {"name": "exact", "type": "bool", "required": False}, "sort: Literal['asc', 'desc'] = 'asc'", "raw"]})
    p = r.tools[0]["parameters"]
    assert p["properties"] == {"q": {"type": "string", "description": "what"},
                               "limit": {"type": "integer", "default": 5}, "exact": {"type": "boolean"},
                               "sort": {"type": "string", "enum": ["asc", "desc"], "default": "asc"}, "raw": {}}
    assert p["required"] == ["q", "raw"]
    assert any(c.kind == "converted" and c.path == "args" for c in r.changes)  # args read as the parameters


def test_python_signatures_as_text_with_docstrings_and_defaults():
    text = '''
def orders.get(order_id: str, limit: int = 10, *, expand: list[str] | None = None) -> dict:
    """Get an order.

    Args:
        order_id: the order's id
        limit (int): at most this many lines
    """

async def orders.cancel(self, order_id: str, reason, *rest, **extra) -> None: ...
'''
    r = import_tools(text)
    assert [t["name"] for t in r.tools] == ["orders_get", "orders_cancel"]
    get, cancel = r.tools
    assert get["description"] == "Get an order."
    assert get["parameters"] == {"type": "object", "properties": {
        "order_id": {"type": "string", "description": "the order's id"},
        "limit": {"type": "integer", "description": "at most this many lines", "default": 10},
        "expand": {"type": "array", "items": {"type": "string"}}}, "required": ["order_id"]}
    assert cancel["parameters"]["required"] == ["order_id", "reason"]
    assert cancel["parameters"]["properties"]["reason"] == {}
    messages = " | ".join(c.message for c in r.changes if c.tool == 1)
    assert "'self'" in messages and "*rest" in messages and "**extra" in messages and "no type" in messages
    assert any(c.kind == "dropped_key" and c.path == "[0].returns" for c in r.changes)


def test_signature_field_and_yaml_text():
    r = import_tools({"name": "recipes.search", "signature": "(query: str, max_minutes: int = 60)",
                      "description": "Find recipes."})
    assert r.tools[0]["parameters"]["required"] == ["query"]
    yaml_text = "- name: ping\n  description: Ping a host.\n  parameters:\n    host: str\n    count: int\n"
    r = import_tools(yaml_text)
    assert r.tools[0]["parameters"]["properties"] == {"host": {"type": "string"}, "count": {"type": "integer"}}


def test_bytes_and_a_single_mcp_tool_in_json_text():
    r = import_tools(json.dumps({"name": "a", "description": "b", "inputSchema": {}}).encode())
    assert r.tools[0]["parameters"] == {"type": "object", "properties": {}}
    assert [c.kind for c in r.changes] == ["defaulted"]


# --- type mapping ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,schema,optional", [
    ("str", {"type": "string"}, False),
    ("dict", {"type": "object"}, False),
    ("Dict[str, int]", {"type": "object", "additionalProperties": {"type": "integer"}}, False),
    ("float", {"type": "number"}, False),
    ("tuple[float, float]", {"type": "array", "prefixItems": [{"type": "number"}] * 2, "items": False,
                             "minItems": 2, "maxItems": 2}, False),
    ("tuple[int, ...]", {"type": "array", "items": {"type": "integer"}}, False),
    ("any", {}, False),
    ("typing.Any", {}, False),
    ("optional[str]", {"type": "string"}, True),
    ("int | None", {"type": "integer"}, True),
    ("Union[int, str]", {"type": ["integer", "string"]}, False),
    ("Union[int, list[str]]", {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]}, False),
    ("Literal['a', 'b']", {"type": "string", "enum": ["a", "b"]}, False),
    ("Literal[1, 'x', None]", {"type": ["integer", "string", "null"], "enum": [1, "x", None]}, False),
    ("list[dict]", {"type": "array", "items": {"type": "object"}}, False),
    ("set[str]", {"type": "array", "items": {"type": "string"}, "uniqueItems": True}, False),
    ("str[]", {"type": "array", "items": {"type": "string"}}, False),
    ("string?", {"type": "string"}, True),
    ("List<String>", {"type": "array", "items": {"type": "string"}}, False),
    ("datetime", {"type": "string", "format": "date-time"}, False),
    ("bool", {"type": "boolean"}, False),
    ("None", {"type": "null"}, False),
    ("Annotated[int, 'percent']", {"type": "integer"}, False),
])
def test_python_type_mapping(text, schema, optional):
    t = python_type_schema(text)
    assert (t.schema, t.optional, t.known) == (schema, optional, True)


def test_unknown_and_unparseable_types_become_any_and_are_reported():
    r = import_tools({"name": "f", "description": "d", "parameters": {"a": "Address", "b": "list[", "c": "int"}})
    props = r.tools[0]["parameters"]["properties"]
    assert props["a"] == {} and props["b"] == {} and props["c"] == {"type": "integer"}
    unknown = {c.path for c in kinds(r, "unknown_type")}
    assert unknown == {"parameters.a", "parameters.b"}


def test_python_types_inside_a_json_schema_and_draft_07_forms():
    r = import_tools([{"name": "f", "description": "d", "input_schema": {
        "type": "object", "properties": {
            "w": {"type": "float", "description": "kg"},
            "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}], "additionalItems": False},
            "note": {"type": "string", "nullable": True},
            "flag": {"type": "boolean", "required": True},
            "opt": {"type": "str", "optional": True},
            "lim": {"type": "number", "maximum": 5, "exclusiveMaximum": True},
            "x": {"type": "string", "requried": True, "x-internal": 1, "vendor": 2},
            "nested": {"type": "object", "properties": {"q": "optional[int]"}, "required": ["q", "zz"]},
        }, "required": ["w", "opt", "missing", "w"]}}])
    p = r.tools[0]["parameters"]
    assert p["properties"]["w"] == {"type": "number", "description": "kg"}
    assert p["properties"]["point"] == {"type": "array", "prefixItems": [{"type": "number"}] * 2, "items": False}
    assert p["properties"]["note"] == {"type": ["string", "null"]}
    assert p["properties"]["lim"] == {"type": "number", "exclusiveMaximum": 5}
    assert p["properties"]["x"] == {"type": "string", "x-internal": 1}
    assert p["properties"]["nested"] == {"type": "object", "properties": {"q": {"type": "integer"}}}
    assert p["required"] == ["w", "flag"]
    paths = {(c.kind, c.path) for c in r.changes}
    at = "[0].input_schema.properties"
    for expected in [("type_mapped", f"{at}.w.type"), ("converted", f"{at}.point.items"),
                     ("converted", f"{at}.note.nullable"), ("converted", f"{at}.flag.required"),
                     ("converted", f"{at}.opt.optional"), ("converted", f"{at}.lim.exclusiveMaximum"),
                     ("dropped_key", f"{at}.x.requried"), ("dropped_key", f"{at}.x.vendor"),
                     ("dropped_key", "[0].input_schema.required"), ("dropped_key", f"{at}.nested.required")]:
        assert expected in paths, expected
    msgs = " ".join(c.message for c in r.changes if c.path == "[0].input_schema.required")
    assert "'missing'" in msgs and "twice" in msgs and "'opt'" in msgs


def test_a_non_object_parameters_schema_is_wrapped_and_a_missing_type_defaulted():
    r = import_tools([{"name": "f", "description": "d", "input_schema": {"type": "string"}},
                      {"name": "g", "description": "d", "parameters": {"properties": {"a": {"type": "integer"}}}}])
    assert r.tools[0]["parameters"] == {"type": "object", "properties": {"input": {"type": "string"}},
                                        "required": ["input"]}
    assert r.tools[1]["parameters"]["type"] == "object"
    assert ("converted", "[0].input_schema") in {(c.kind, c.path) for c in r.changes}
    assert ("defaulted", "[1].parameters.type") in {(c.kind, c.path) for c in r.changes}


# --- names and descriptions -------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,name", [("orders.get", "orders_get"), ("Unit Converter", "Unit_Converter"),
                                      ("3d.render", "_3d_render"), ("a..b", "a_b"), ("-x", "_-x"),
                                      ("naïve", "na_ve"), ("x" * 80, "x" * 64), ("ok-name_1", "ok-name_1")])
def test_tool_names(raw, name):
    assert tool_name_for(raw) == name and TOOL_NAME_RE.fullmatch(name)


def test_valid_names_keep_theirs_renamed_and_repeated_ones_get_suffixes():
    r = import_tools([{"name": "a.b", "input_schema": {}}, {"name": "a_b", "input_schema": {}},
                      {"name": "a_b", "input_schema": {}}, "def load_skill(x: int): ..."])
    assert [t["name"] for t in r.tools] == ["a_b_2", "a_b", "a_b_3", "load_skill_2"]
    dup = {c.path: c.message for c in kinds(r, "duplicate_name")}
    assert set(dup) == {"[0].name", "[2].name", "[3].name"} and "reserved" in dup["[3].name"]


def test_long_descriptions_are_truncated_and_control_characters_removed():
    r = import_tools([{"name": "f", "description": "x" * 1500, "input_schema": {}},
                      {"name": "g", "description": "  bell\x07 here  ", "input_schema": {
                          "type": "object", "properties": {"a": {"type": "string", "description": "t\x01ab"}}}}])
    assert len(r.tools[0]["description"]) == 1000
    assert r.tools[1]["description"] == "bell here"
    assert r.tools[1]["parameters"]["properties"]["a"]["description"] == "tab"
    assert [c.path for c in kinds(r, "truncated")] == ["[0].description"]
    assert len([c for c in kinds(r, "converted") if c.tool == 1]) == 3


# --- refusals -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("payload,path", [
    ("", ""), ("   ", ""), ("{oops", ""), ([], ""), (42, ""),
    ([{"description": "no name", "parameters": {}}], "[0].name"),
    ([{"foo": 1}], "[0]"), (["just words"], "[0]"),
    ({"tools": [OPENAI_TOOL, {"name": "", "input_schema": {}}]}, "tools[1].name"),
    ([{"name": "f", "parameters": [{"type": "int"}]}], "[0].parameters[0]"),
])
def test_what_cannot_be_imported_is_refused_with_its_path(payload, path):
    with pytest.raises(ToolImportError) as exc:
        import_tools(payload)
    assert path in [p for p, _ in exc.value.errors]


@pytest.mark.parametrize("schema,path,says", [
    ({"$ref": "https://schemas.example.com/order.json"}, '[0].function.parameters.properties.id["$ref"]', "network"),
    ({"$ref": "file:///etc/hat-console/env"}, '[0].function.parameters.properties.id["$ref"]', "a file"),
    ({"$ref": "#/$defs/missing"}, '[0].function.parameters.properties.id["$ref"]', "points to nothing"),
    ({"type": "string", "pattern": "^(?!x)"}, "[0].function.parameters.properties.id.pattern", "RE2"),
], ids=["remote-ref", "file-ref", "dangling-ref", "lookahead"])
def test_a_schema_that_could_not_run_safely_is_refused_at_its_place_in_the_input(schema, path, says):
    """Issue 26: the importer accepted these; the schema then fetched, crashed or backtracked where it ran."""
    tool = {"type": "function", "function": {"name": "get_order", "description": "An order by id.",
                                             "parameters": {"type": "object", "properties": {"id": schema}}}}
    with pytest.raises(ToolImportError) as exc:
        import_tools([tool])
    errors = dict(exc.value.errors)
    assert path in errors and says in errors[path]


def test_an_explicit_source_refuses_other_forms():
    with pytest.raises(ToolImportError) as exc:
        import_tools([OPENAI_TOOL, {"name": "x", "input_schema": {}}], source="openai")
    assert exc.value.errors == [("[1]", "not a openai tool definition (it looks like anthropic)")]
    with pytest.raises(ToolImportError):
        import_tools([OPENAI_TOOL], source="mcp")
    with pytest.raises(ToolImportError):
        import_tools([OPENAI_TOOL], source="nope")  # type: ignore[arg-type]


# --- bindings and manifests -------------------------------------------------------------------------------

def test_binding_given_for_every_tool_or_by_original_name():
    r = import_tools([{"name": "files/read", "inputSchema": {}}],
                     binding=lambda raw, name: {"kind": "mcp", "server": "files", "tool": raw})
    assert r.tools[0]["binding"] == {"kind": "mcp", "server": "files", "tool": "files/read"}
    r = import_tools([{"name": "x", "inputSchema": {}}], binding={"kind": "fixture", "default": {"ok": True}})
    assert r.tools[0]["binding"] == {"kind": "fixture", "default": {"ok": True}}


def test_a_manifest_tool_keeps_its_binding_and_argument_map(demo_data):
    tool = demo_data["tools"][0]
    r = import_tools([tool])
    assert r.tools == [tool] and r.changes == []


@pytest.mark.parametrize("on_conflict", ["rename", "replace", "skip", "error"])
def test_import_into_manifest_name_clashes(demo_data, on_conflict):
    taken = demo_data["tools"][0]["name"]
    result = import_tools([{"name": taken, "description": "new", "input_schema": {}},
                           {"name": "brand_new", "description": "new", "input_schema": {}}])
    before = copy.deepcopy(demo_data)
    if on_conflict == "error":
        with pytest.raises(ToolImportError) as exc:
            import_into_manifest(demo_data, result, on_conflict=on_conflict)
        assert exc.value.errors[0][0] == "[0].name"
        assert demo_data == before
        return
    data, changes = import_into_manifest(demo_data, result, on_conflict=on_conflict)
    assert demo_data == before  # a copy, never the caller's data
    names = [t["name"] for t in data["tools"]]
    n = len(before["tools"])
    assert [c.kind for c in changes] == ["conflict"] and changes[0].tool == 0
    if on_conflict == "rename":
        assert names == [*(t["name"] for t in before["tools"]), f"{taken}_2", "brand_new"]
    elif on_conflict == "replace":
        assert len(names) == n + 1 and data["tools"][0]["description"] == "new"
    else:
        assert names == [*(t["name"] for t in before["tools"]), "brand_new"]
    manifest = parse_manifest(data)
    assert manifest.tool("brand_new").binding is None


def test_plan_reports_manifest_errors_and_warnings(demo_data):
    plan = plan_import(demo_data, [{"name": "x", "description": "d", "input_schema": {}}])
    assert plan.ok and plan.added == ["x"]
    assert [w.path for w in plan.warnings] == [f"tools[{len(demo_data['tools'])}].binding"]
    bad = plan_import(demo_data, [{"name": "x", "description": "d", "input_schema": {},
                                   "binding": "no.such.binding"}])
    assert not bad.ok and not bad.import_failed
    assert bad.errors[0].path == f"tools[{len(demo_data['tools'])}].binding"
    failed = plan_import(demo_data, "{oops")
    assert failed.import_failed and not failed.ok


# --- the foreign set ------------------------------------------------------------------------------------

def test_the_foreign_set_of_public_style_functions_imports_whole(demo_data):
    payload = json.loads((DATA / "foreign_functions.json").read_text(encoding="utf-8"))
    assert len(payload["functions"]) >= 50
    r = import_tools(payload, source="functions")
    assert len(r.tools) == len(payload["functions"])
    assert all(TOOL_NAME_RE.fullmatch(t["name"]) for t in r.tools)
    assert len({t["name"] for t in r.tools}) == len(r.tools)
    for kind in ("renamed", "type_mapped", "duplicate_name", "defaulted", "dropped_key", "converted"):
        assert kinds(r, kind), kind
    manifest = assert_valid_in_manifest(demo_data, r.tools)
    assert sum(t.binding is None for t in manifest.tools) == len(r.tools)
    by_name = {t["name"]: t for t in r.tools}
    assert by_name["geo_distance"]["parameters"]["properties"]["a"]["prefixItems"] == [{"type": "number"}] * 2
    assert by_name["orders_get_2"]["description"].startswith("An order by id (v2")
    assert "due" not in by_name["tasks_add"]["parameters"].get("required", [])


# --- property: whatever comes out is a valid harness tool ----------------------------------------------------

_names = st.text(min_size=1, max_size=90).filter(lambda s: s.strip())
_leaf_types = st.sampled_from(["str", "int", "float", "bool", "dict", "list", "any", "None", "datetime", "uuid",
                               "Address", "decimal", "bytes", "object", "string", "number", "integer"])
_type_texts = st.recursive(
    _leaf_types,
    lambda inner: st.one_of(
        st.builds(lambda t: f"list[{t}]", inner), st.builds(lambda t: f"optional[{t}]", inner),
        st.builds(lambda a, b: f"tuple[{a}, {b}]", inner, inner), st.builds(lambda a, b: f"{a} | {b}", inner, inner),
        st.builds(lambda t: f"dict[str, {t}]", inner), st.builds(lambda t: f"{t}[]", inner),
        st.builds(lambda t: f"Union[{t}, int]", inner)),
    max_leaves=6)
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=10),
                       st.floats(allow_nan=False, allow_infinity=False))
_schema_nodes = st.recursive(
    st.one_of(_type_texts, st.fixed_dictionaries({"type": st.one_of(_type_texts, st.sampled_from(
        ["string", "integer", "object", "array", ["string", "null"]]))}, optional={
        "description": st.text(max_size=30), "default": _json_leaf, "nullable": st.booleans(),
        "required": st.booleans(), "enum": st.lists(_json_leaf, min_size=1, max_size=3, unique_by=repr),
        "x-vendor": _json_leaf, "vendor_key": _json_leaf, "additionalProperties": st.booleans(),
        "dependencies": st.just({}), "$schema": st.just("http://json-schema.org/draft-07/schema#")})),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4)},
                              optional={"required": st.lists(st.text(max_size=8), max_size=3),
                                        "additionalProperties": st.one_of(st.booleans(), inner)}),
        st.fixed_dictionaries({"type": st.just("object"), "required": st.lists(st.text(max_size=8), max_size=3)}),
        st.fixed_dictionaries({"type": st.just("array"), "items": st.one_of(inner, st.lists(inner, max_size=3))})),
    max_leaves=8)
_definitions = st.one_of(
    st.builds(lambda n, d, p: {"type": "function", "function": {"name": n, "description": d, "parameters": p}},
              _names, st.one_of(st.none(), st.text(max_size=50)), _schema_nodes),
    st.builds(lambda n, p: {"name": n, "input_schema": p}, _names, _schema_nodes),
    st.builds(lambda n, p: {"name": n, "inputSchema": p, "annotations": {}}, _names, _schema_nodes),
    st.builds(lambda n, p: {"name": n, "parameters": p}, _names,
              st.dictionaries(st.text(min_size=1, max_size=8), _type_texts, max_size=5)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_definitions, min_size=1, max_size=6))
def test_any_import_output_is_a_valid_harness_tool(demo_data, definitions):
    try:
        r = import_tools(definitions)
    except ToolImportError as exc:  # only what has nothing to import may be refused, and with a path
        assert exc.errors and all(isinstance(p, str) and m for p, m in exc.errors)
        return
    assert len(r.tools) == len(definitions)
    names = [t["name"] for t in r.tools]
    assert all(TOOL_NAME_RE.fullmatch(n) for n in names) and len(set(names)) == len(names)
    assert "load_skill" not in names
    for t in r.tools:
        assert t["parameters"]["type"] == "object" and t["binding"] is None
    assert_valid_in_manifest(demo_data, r.tools)
    again = import_tools(r.tools)  # what came out goes back in unchanged
    assert again.tools == r.tools and again.changes == []


_any_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["name", "description", "parameters", "input_schema", "inputSchema", "type",
                                     "function", "tools", "properties", "items", "required", "args", "signature",
                                     "x"]), inner, max_size=5)), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_any_json, st.text(max_size=200)))
def test_any_input_is_imported_validly_or_refused_with_paths(demo_data, payload):
    try:
        r = import_tools(payload)
    except ToolImportError as exc:
        assert exc.errors and all(isinstance(p, str) and isinstance(m, str) and m for p, m in exc.errors)
        return
    assert_valid_in_manifest(demo_data, r.tools[:90])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_type_text_parses_or_says_why(text):
    from harness_editor.importers.pytypes import TypeSyntaxError

    try:
        python_type_schema(text)
    except TypeSyntaxError:
        pass


def test_a_type_with_its_default_in_the_name_to_type_form() -> None:
    result = import_tools({"name": "rooms.list", "parameters": {"include_reserved": "bool = False", "floor": "int",
                                                                "tag": 'str = "a=b"'}}, source="functions")
    params = result.tools[0]["parameters"]
    assert params["properties"]["include_reserved"] == {"type": "boolean", "default": False}
    assert params["properties"]["tag"] == {"type": "string", "default": "a=b"}
    assert params["required"] == ["floor"]
    assert not [c for c in result.changes if c.kind == "unknown_type"]
