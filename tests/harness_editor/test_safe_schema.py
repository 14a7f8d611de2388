"""A tool's schema is untrusted input (issue 26, points 1-3): a reference outside the schema is a located error when
the manifest is saved and never a request when a stored one runs; patterns run on RE2 (linear time) and one RE2
cannot compile is refused at save time; a reference that dangles, loops or expands without end is refused at save
time and a clean fault (never an exception, never a hang) when a stored schema runs."""

from __future__ import annotations

import copy
import time

import pytest

from harness_editor.schemas import ManifestError, parse_manifest
from harness_editor.schemas.safe_schema import (
    ARGUMENT_CHECK_BUDGET_S,
    MAX_SCHEMA_VISITS,
    ToolSchemaFault,
    check_arguments,
    schema_safety_problems,
)


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "worker-key.json"
    path.write_text('{"enum": ["TOP-SECRET-KEY-MATERIAL"]}', encoding="utf-8")
    return path


def _tool_schema(**sku) -> dict:
    return {"type": "object", "properties": {"sku": sku}, "required": ["sku"]}


def _manifest_with(demo_manifest, schema: dict) -> dict:
    data = demo_manifest().model_dump(mode="json")
    tool = next(t for t in data["tools"] if t["name"] == "lookup_product")
    tool["parameters"] = copy.deepcopy(schema)
    tool["argument_map"] = {}
    tool["binding"] = None
    return data


def _errors_at(demo_manifest, schema: dict) -> dict[str, str]:
    data = _manifest_with(demo_manifest, schema)
    i = next(i for i, t in enumerate(data["tools"]) if t["name"] == "lookup_product")
    try:
        parse_manifest(data)
        errors = []
    except ManifestError as exc:
        errors = exc.errors
    prefix = f"tools[{i}].parameters"
    return {e.path[len(prefix):].lstrip("."): e.message for e in errors if e.path.startswith(prefix)}


def _laughs(levels: int = 24) -> dict:
    """Each definition names the next twice: 2**levels checks from a schema of a few hundred bytes."""
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return {"type": "object", "$defs": defs, "properties": {"sku": {"$ref": "#/$defs/d0"}}}


# --- saved: located errors ------------------------------------------------------------------------------------


def test_a_remote_reference_is_a_located_error_when_saved(demo_manifest, upstream) -> None:
    errors = _errors_at(demo_manifest, _tool_schema(**{"$ref": f"{upstream.base_url}/sku.json"}))
    assert "never fetches" in errors['properties.sku["$ref"]'] and "network" in errors['properties.sku["$ref"]']
    assert upstream.requests == []


def test_a_file_reference_is_a_located_error_when_saved(demo_manifest, secret_file) -> None:
    errors = _errors_at(demo_manifest, _tool_schema(**{"$ref": secret_file.as_uri()}))
    assert "a file on the machine" in errors['properties.sku["$ref"]']
    assert "TOP-SECRET" not in " ".join(errors.values())


def test_an_id_that_moves_references_elsewhere_is_refused(demo_manifest, upstream) -> None:
    schema = {"$id": f"{upstream.base_url}/", **_tool_schema(**{"$ref": "sku.json"})}
    errors = _errors_at(demo_manifest, schema)
    assert "'$id' is not allowed" in errors['["$id"]'] and "never fetches" in errors['properties.sku["$ref"]']
    assert upstream.requests == []


def test_a_dangling_local_reference_is_a_located_error(demo_manifest) -> None:
    schema = {**_tool_schema(**{"$ref": "#/$defs/skuu"}), "$defs": {"sku": {"type": "string"}}}
    errors = _errors_at(demo_manifest, schema)
    assert errors['properties.sku["$ref"]'] == "reference '#/$defs/skuu' points to nothing in this schema ($defs: " \
                                            "'#/$defs/sku')"
    assert "anchor '#nope'" in _errors_at(demo_manifest, _tool_schema(**{"$ref": "#nope"}))['properties.sku["$ref"]']


def test_local_references_anchors_and_recursion_through_the_arguments_are_fine(demo_manifest) -> None:
    node = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
    schema = {"type": "object", "$defs": {"node": node, "sku": {"$anchor": "sku", "type": "string"}},
              "properties": {"sku": {"$ref": "#sku"}, "tree": {"$ref": "#/$defs/node"}}}
    assert _errors_at(demo_manifest, schema) == {}
    assert check_arguments(schema, {"sku": "A1", "tree": {"children": [{"children": []}]}}) == []
    assert check_arguments(schema, {"sku": 7}) == ["sku: 7 is not of type 'string'"]


def test_a_pattern_re2_cannot_compile_is_a_located_error(demo_manifest) -> None:
    errors = _errors_at(demo_manifest, _tool_schema(type="string", pattern="^(?=A)[A-Z0-9]+$"))
    assert "cannot be used" in errors["properties.sku.pattern"] and "RE2" in errors["properties.sku.pattern"]
    schema = {"type": "object", "patternProperties": {r"^(x)\1$": {"type": "string"}}}
    assert "cannot be used" in _errors_at(demo_manifest, schema)['patternProperties["^(x)\\\\1$"]']
    invalid = _errors_at(demo_manifest, _tool_schema(type="string", pattern="[A-Z"))  # re.error before
    assert "missing ]" in invalid["properties.sku.pattern"]


def test_unevaluated_properties_beside_pattern_properties_is_refused(demo_manifest) -> None:
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "unevaluatedProperties": False}
    assert "cannot be combined" in _errors_at(demo_manifest, schema)["unevaluatedProperties"]


def test_a_reference_cycle_and_an_exponential_expansion_are_refused(demo_manifest) -> None:
    cycle = {**_tool_schema(**{"$ref": "#/$defs/a"}), "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}}
    assert "never end" in _errors_at(demo_manifest, cycle)['["$defs"].a.anyOf[0]["$ref"]']
    (path, message), = _errors_at(demo_manifest, _laughs()).items()
    assert path.startswith('["$defs"].d') and f"more than {MAX_SCHEMA_VISITS:,} checks" in message


# --- stored (a version saved before these checks, an HSA variant of one): run safely -------------------------


def test_a_stored_remote_or_file_reference_is_a_fault_and_no_request(upstream, secret_file) -> None:
    for ref in (f"{upstream.base_url}/sku.json", secret_file.as_uri()):
        with pytest.raises(ToolSchemaFault) as info:
            check_arguments(_tool_schema(**{"$ref": ref}), {"sku": "A1"})
        assert "nothing is fetched" in str(info.value)
        assert "TOP-SECRET" not in str(info.value)
    relative = {"$id": f"{upstream.base_url}/", **_tool_schema(**{"$ref": "sku.json"})}
    with pytest.raises(ToolSchemaFault):
        check_arguments(relative, {"sku": "A1"})
    assert upstream.requests == []


@pytest.mark.parametrize("schema", [
    _tool_schema(**{"$ref": "#/$defs/missing"}),
    _tool_schema(type="string", pattern="[A-Z"),
    _tool_schema(type="string", pattern="(?<=a)b"),
    {"type": "object", "patternProperties": {"(": {}}},
    {**_tool_schema(**{"$ref": "#/$defs/a"}), "$defs": {"a": {"$ref": "#/$defs/a"}}},
    {"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False},
    {"$schema": "https://example.com/not-a-dialect", **_tool_schema(type="string")},
], ids=["dangling", "invalid-pattern", "lookbehind", "invalid-pattern-property", "cycle", "unevaluated", "dialect"])
def test_a_stored_schema_that_cannot_run_is_a_fault_never_an_exception(schema) -> None:
    try:
        check_arguments(schema, {"sku": "A1", "x1": "v"})
    except ToolSchemaFault:
        pass  # a clean tool fault; anything else would escape the turn or the request


def test_the_catastrophic_pattern_is_checked_in_milliseconds() -> None:
    schema = _tool_schema(type="string", pattern="^(a+)+$")  # Python's re: 43 s at 30 characters, doubling per one
    for text in ("a" * 30 + "!", "a" * 2000 + "!"):
        start = time.process_time()
        errors = check_arguments(schema, {"sku": text})
        assert time.process_time() - start < 0.05
        assert errors and "does not match" in errors[0]
    assert check_arguments(schema, {"sku": "a" * 30}) == []
    keys = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}
    start = time.process_time()
    errors = check_arguments(keys, {"a" * 40 + "!": 1, "aaa": "x"})
    assert time.process_time() - start < 0.05
    assert sorted(errors) == ["Additional properties are not allowed ('" + "a" * 40 + "!' was unexpected)",
                              "aaa: 'x' is not of type 'integer'"]


def test_a_stored_exponential_schema_ends_within_the_budget() -> None:
    start = time.monotonic()
    with pytest.raises(ToolSchemaFault) as info:
        check_arguments(_laughs(), {"sku": "not an integer"})
    assert time.monotonic() - start < ARGUMENT_CHECK_BUDGET_S + 0.5
    assert "longer than" in str(info.value)


def test_arguments_nested_past_the_limit_are_refused_before_the_validator_recurses() -> None:
    node = {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}
    schema = {"type": "object", "$defs": {"n": node}, "properties": {"next": {"$ref": "#/$defs/n"}}}
    deep: dict = {}
    for _ in range(5000):
        deep = {"next": deep}
    assert check_arguments(schema, deep) == ["arguments are nested more than 64 levels deep"]


def test_not_strict_tolerates_unknown_properties_only() -> None:
    schema = {**_tool_schema(type="string"), "additionalProperties": False}
    assert check_arguments(schema, {"sku": "A1", "colour": "red"}, strict=False) == []
    assert check_arguments(schema, {"sku": 1, "colour": "red"}, strict=False) == ["sku: 1 is not of type 'string'"]
    assert check_arguments(schema, {"sku": "A1", "colour": "red"}) == [
        "Additional properties are not allowed ('colour' was unexpected)"]


def test_what_saving_accepts_runs_inside_the_budget() -> None:
    """The save-time bound on expansion is what keeps a saved schema from faulting where it runs: the largest chain
    it accepts checks in a fraction of ARGUMENT_CHECK_BUDGET_S (measured: 7.5 ms on a loaded 2-core machine)."""
    levels = next(n for n in range(1, 30) if schema_safety_problems(_laughs(n))) - 1
    schema = _laughs(levels)
    assert schema_safety_problems(schema) == [] and levels >= 6  # 2**6 branches is still a fine schema
    start = time.process_time()
    assert check_arguments(schema, {"sku": "not an integer"})  # every branch fails: the most work it can make
    assert time.process_time() - start < ARGUMENT_CHECK_BUDGET_S
