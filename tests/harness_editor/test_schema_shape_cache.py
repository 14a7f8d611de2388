"""The meta-schema check of a tool's parameters runs one schema node at a time, each cached by its shape
(subschemas, property names and free text left out): a schema is valid exactly when the whole-schema check says
so, and an invalid schema still reports its errors at its own paths."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness_editor.schemas import _META_VALIDATOR, _schema_errors, _schema_errors_cached, _schema_valid

NAMES = st.sampled_from(["sku", "link_id", "description", "properties", "required", "type", "title", "x", "é"])
KEYWORDS = st.sampled_from(["type", "properties", "required", "description", "title", "items", "enum", "const",
                            "default", "minimum", "maxLength", "anyOf", "oneOf", "allOf", "prefixItems", "not",
                            "additionalProperties", "patternProperties", "$defs", "dependentRequired",
                            "dependentSchemas", "dependencies", "if", "then", "pattern", "format", "$comment",
                            "examples", "$id", "x-extra"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["string", "object", "integer",
                                                                                  "bogus", "", "sku", "#a"]))


def values(depth: int):
    leaf = st.one_of(SCALARS, st.lists(st.one_of(NAMES, SCALARS), max_size=3))
    if depth == 0:
        return leaf
    return st.one_of(leaf, schemas(depth - 1), st.dictionaries(NAMES, schemas(depth - 1), max_size=3),
                     st.lists(schemas(depth - 1), max_size=2))


def schemas(depth: int = 3):
    if depth == 0:
        return st.one_of(st.booleans(), st.dictionaries(KEYWORDS, SCALARS, max_size=3))
    return st.one_of(st.booleans(), st.dictionaries(KEYWORDS, values(depth), max_size=4))


@settings(max_examples=600, deadline=None)
@given(schemas())
def test_node_by_node_is_the_whole_schema_check(schema):
    valid = _META_VALIDATOR.is_valid(schema)
    assert _schema_valid(schema) is valid
    if isinstance(schema, dict):
        errors = _schema_errors(schema)
        assert errors == _schema_errors_cached(json.dumps(schema, ensure_ascii=False))
        assert bool(errors) is not valid


@given(st.lists(st.one_of(NAMES, st.integers(0, 2)), max_size=4))
def test_required_keeps_what_the_meta_schema_reads(required):
    schema = {"type": "object", "required": required}
    assert _schema_valid(schema) is _META_VALIDATOR.is_valid(schema)


def test_renamed_reworded_and_reordered_parameters_share_their_checks():
    from harness_editor.schemas import _schema_own_valid

    a = {"type": "object", "description": "Look up a product.",
         "properties": {"link_id": {"type": "integer", "description": "the link"}, "note": {"type": "string"}},
         "required": ["link_id"]}
    b = {"required": ["item"], "type": "object", "description": "Find an item on sale.",
         "properties": {"extra": {"type": "string"}, "item": {"description": "its number", "type": "integer"}}}
    assert _schema_valid(a)
    before = _schema_own_valid.cache_info().misses
    assert _schema_valid(b)
    assert _schema_own_valid.cache_info().misses == before
    c = {**b, "required": ["item", "item"]}  # duplicates stay duplicates: uniqueItems still fails
    assert _schema_errors(c) and not _schema_errors(b)


def test_errors_name_the_real_paths():
    bad = {"type": "object", "properties": {"link_id": {"type": "integr"}}, "required": ["link_id"]}
    ((path, message),) = _schema_errors(bad)
    assert path == ("properties", "link_id", "type") and "integr" in message
