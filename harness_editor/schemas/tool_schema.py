"""Checks of a tool's parameters schema: JSON values, the JSON Schema meta-schema (cached per node), and the
types a schema node admits against what a binding parameter takes."""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import json
import math
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

import jsonschema

from harness_editor.schemas.bindings import BindingParam
from harness_editor.schemas.errors import _join, document_key
from harness_editor.schemas.safe_schema import local_ref_target, schema_safety_problems

# --- semantic pass -----------------------------------------------------------------------------------

_META_VALIDATOR = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
_JSON_TYPES = "array, boolean, integer, null, number, object, string"
_COMPATIBLE: dict[str, set[str]] = {
    "string": {"string"},
    "integer": {"integer"},
    "number": {"number", "integer"},
    "boolean": {"boolean"},
}


def _json_value_errors(value: Any, parts: tuple[str | int, ...]) -> Iterable[tuple[tuple[str | int, ...], str]]:
    """Things in a tool schema that JSON cannot carry (YAML can): non-string keys, NaN, dates, ..."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                yield parts, f"object keys must be strings, got {k!r}"
                continue
            yield from _json_value_errors(v, (*parts, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_value_errors(v, (*parts, i))
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield parts, f"{value!r} is not a JSON number"
    elif value is not None and not isinstance(value, (str, int, bool)):
        yield parts, f"{type(value).__name__} values are not JSON (quote it if it is text)"


def _schema_message(err: jsonschema.ValidationError) -> str:
    msg = err.message
    if err.context:
        sub = next((c for c in err.context if c.validator == "enum"), err.context[0])
        msg = f"{msg} ({sub.message})"
    if err.path and err.path[-1] == "type" and "valid JSON Schema type" not in msg:
        msg = f"{msg}; a JSON Schema type is one of: {_JSON_TYPES}"
    return msg


@lru_cache(maxsize=512)
def _schema_errors_cached(schema_json: str) -> tuple[tuple[tuple[str | int, ...], str], ...]:
    schema = json.loads(schema_json)
    found = sorted(_META_VALIDATOR.iter_errors(schema), key=lambda e: [str(p) for p in e.path])
    return tuple((tuple(e.path), _schema_message(e)) for e in found)


# Where the 2020-12 meta-schema expects a subschema (``$dynamicRef: "#meta"``): under these keywords directly,
# as the values of these maps, as the items of these arrays. Everything else is checked where it stands.
_SUBSCHEMA = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
                        "unevaluatedItems", "unevaluatedProperties", "contentSchema"})
_SUBSCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_FREE_TEXT = frozenset({"description", "title", "$comment"})  # any string will do


def _is_schema_value(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _schema_valid(node: Any) -> bool:
    """``_META_VALIDATOR.is_valid(node)``, one schema node at a time: a node is valid when its own keywords are
    (its subschemas replaced by ``{}``, property names by placeholders, free text emptied: the meta-schema
    constrains none of them beyond their type) and every subschema is. Each part is checked once per process:
    harness variants that rename, reword, reorder or nest parameters share their checks."""
    if not isinstance(node, dict):
        return isinstance(node, bool)
    own: dict[str, Any] = {}
    subschemas: list[Any] = []
    for key, value in node.items():
        if key in _SUBSCHEMA and _is_schema_value(value):
            subschemas.append(value)
            value = {}
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            subschemas += [v for v in value.values() if _is_schema_value(v)]
            value = {f"\ue000{i}": {} if _is_schema_value(v) else v for i, v in enumerate(value.values())}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            subschemas += [v for v in value if _is_schema_value(v)]
            value = [{} if _is_schema_value(v) else v for v in value]
        elif key == "required" and isinstance(value, list) and all(isinstance(x, str) for x in value):
            distinct: dict[str, str] = {}  # only "strings, each once" matters
            value = sorted(distinct.setdefault(x, f"\ue000{len(distinct)}") for x in value)
        elif key in _FREE_TEXT and isinstance(value, str):
            value = ""
        own[key] = value
    return _schema_own_valid(json.dumps(own, sort_keys=True, ensure_ascii=False)) and \
        all(_schema_valid(sub) for sub in subschemas)


@lru_cache(maxsize=4096)
def _schema_own_valid(own_json: str) -> bool:
    return _META_VALIDATOR.is_valid(json.loads(own_json))


def _schema_errors(schema: dict[str, Any]) -> tuple[tuple[tuple[str | int, ...], str], ...]:
    if _schema_valid(schema):
        return ()
    return _schema_errors_cached(json.dumps(schema, ensure_ascii=False))  # errors name the real paths


# --- beyond the meta-schema: what it lets through but a tool schema should not have ---------------------------

# The 2020-12 vocabulary (core, applicator, unevaluated, validation, meta-data, format-annotation, content) and
# the keywords its meta-schema keeps for older drafts. The meta-schema allows any other keyword, so a typo
# ("requried") is silently an annotation and the constraint it meant is gone.
SCHEMA_KEYWORDS: frozenset[str] = frozenset({
    "$anchor", "$comment", "$defs", "$dynamicAnchor", "$dynamicRef", "$id", "$ref", "$schema", "$vocabulary",
    "additionalProperties", "allOf", "anyOf", "contains", "dependentSchemas", "else", "if", "items", "not",
    "oneOf", "patternProperties", "prefixItems", "properties", "propertyNames", "then",
    "unevaluatedItems", "unevaluatedProperties",
    "const", "dependentRequired", "enum", "exclusiveMaximum", "exclusiveMinimum", "maxContains", "maxItems",
    "maxLength", "maxProperties", "maximum", "minContains", "minItems", "minLength", "minProperties", "minimum",
    "multipleOf", "pattern", "required", "type", "uniqueItems",
    "default", "deprecated", "description", "examples", "readOnly", "title", "writeOnly",
    "format", "contentEncoding", "contentMediaType", "contentSchema",
    "definitions", "dependencies", "$recursiveAnchor", "$recursiveRef",
})
ANNOTATION_PREFIX = "x-"  # keywords of one's own (OpenAPI's convention): allowed, never judged
_DRAFT07_HINTS = {
    "additionalItems": "'additionalItems' is Draft-07; in 2020-12 'items' (a schema or false) applies to the "
                       "elements after 'prefixItems'",
}
LIST_ITEMS_MESSAGE = ("'items' as a list is Draft-07 tuple validation; in JSON Schema 2020-12 write "
                      "'prefixItems: [...]' (one schema per position), and 'items: false' to allow no more")


Problem = tuple[tuple[str | int, ...], str]  # (parts of the path inside the schema, message)


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.7)
    return f"; did you mean {close[0]!r}?" if close else ""


def _keyword_message(key: str) -> str:
    if key in _DRAFT07_HINTS:
        return _DRAFT07_HINTS[key]
    return (f"unknown JSON Schema keyword {key!r}{_did_you_mean(key, SCHEMA_KEYWORDS)} (keywords of your own "
            f"start with {ANNOTATION_PREFIX!r})")


def _required_problems(node: dict[str, Any], parts: tuple[str | int, ...]) -> Iterable[Problem]:
    """``required`` naming a property the node does not declare (the model is never told its type). Only where
    the node declares its properties and nothing else can supply one (no patternProperties, no schema for
    additionalProperties): ``anyOf: [{required: [a]}, {required: [b]}]`` under a parent's properties is fine."""
    required, props = node.get("required"), node.get("properties")
    if not isinstance(required, list) or "patternProperties" in node or \
            isinstance(node.get("additionalProperties"), dict):
        return
    if not isinstance(props, dict):
        if node.get("type") != "object" or props is not None:
            return
        props = {}
    for k, name in enumerate(required):
        if isinstance(name, str) and name not in props:
            known = ", ".join(repr(p) for p in props) or "none"
            yield ((*parts, "required", k), f"required property {name!r} is not in properties"
                   f"{_did_you_mean(name, props)} (properties: {known})")



def _schema_lint(node: Any, parts: tuple[str | int, ...], depth: int = 0) -> Iterable[Problem]:
    """What the meta-schema allows but a tool schema should not have: unknown keywords (typos), ``required``
    naming an undeclared property, and Draft-07 list-form ``items`` (one problem for the list, nothing inside)."""
    if not isinstance(node, dict) or depth > _MAX_SCHEMA_DEPTH:
        return
    for key, value in node.items():
        if key not in SCHEMA_KEYWORDS and not (isinstance(key, str) and key.startswith(ANNOTATION_PREFIX)):
            yield (*parts, key), _keyword_message(key)
    yield from _required_problems(node, parts)
    for key, value in node.items():
        if key == "items" and isinstance(value, list):
            yield (*parts, key), LIST_ITEMS_MESSAGE
        elif key in _SUBSCHEMA:
            yield from _schema_lint(value, (*parts, key), depth + 1)
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                yield from _schema_lint(sub, (*parts, key, name), depth + 1)
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _schema_lint(sub, (*parts, key, i), depth + 1)
        elif key == "dependencies" and isinstance(value, dict):  # Draft-07: a schema or a list of names
            for name, sub in value.items():
                yield from _schema_lint(sub, (*parts, key, name), depth + 1)


# The lint (unknown keywords, ``required`` names not in ``properties``, ...) came after versions were stored: it
# judges new input (parse_manifest: the editor, the API, imports), not a stored version being read back or a
# manifest built from one (HSA variants): those stay loadable under the rules they were approved by.
_LINT: contextvars.ContextVar[bool] = contextvars.ContextVar("harness_editor_schema_lint", default=True)


@contextlib.contextmanager
def without_schema_lint() -> Iterator[None]:
    """Tool schemas are held to the meta-schema only, not to :func:`_schema_lint` (see :data:`_LINT`)."""
    token = _LINT.set(False)
    try:
        yield
    finally:
        _LINT.reset(token)


def tool_schema_problems(schema: dict[str, Any]) -> list[Problem]:
    """Every problem of a tool's parameters schema, each once, in document order: the meta-schema's errors
    (deduplicated: its ``$dynamicRef`` reports one fault up to eight times), :func:`_schema_lint`'s and what would
    make it unsafe to run (:func:`.safe_schema.schema_safety_problems`: remote references, patterns RE2 refuses,
    reference cycles; neither inside :func:`without_schema_lint`: a stored schema is run safely instead). A
    list-form ``items`` is one problem, not the meta-schema's complaint per element."""
    lint = [*_schema_lint(schema, ()), *schema_safety_problems(schema)] if _LINT.get() else []
    list_items = {p for p, m in lint if m == LIST_ITEMS_MESSAGE}
    out: list[Problem] = []
    seen: set[Problem] = set()
    for parts, message in (*_schema_errors(schema), *lint):
        if any(parts[:len(li)] == li for li in list_items) and message != LIST_ITEMS_MESSAGE:
            continue
        if (parts, message) not in seen:
            seen.add((parts, message))
            out.append((parts, message))
    if len(out) > 1:
        out.sort(key=lambda problem: document_key(schema, problem[0]))
    return out



def _schema_types(node: dict[str, Any]) -> set[str] | None:
    """The JSON types a schema node admits (ignoring null), or None when it does not say."""
    t = node.get("type")
    if isinstance(t, str):
        types = {t}
    elif isinstance(t, list):
        types = {x for x in t if isinstance(x, str)}
    elif "enum" in node or "const" in node:
        values = node.get("enum") if "enum" in node else [node.get("const")]
        types = set()
        for v in values if isinstance(values, list) else []:
            if isinstance(v, bool):
                types.add("boolean")
            elif isinstance(v, int):
                types.add("integer")
            elif isinstance(v, float):
                types.add("number")
            elif isinstance(v, str):
                types.add("string")
            elif v is None:
                types.add("null")
    else:
        return None
    types.discard("null")
    return types or None


def resolve_param_path(schema: dict[str, Any], dotted: str) -> dict[str, Any] | None:
    """The schema node a dotted tool-parameter path ("sku", "args.sku") names, or None."""
    node: Any = schema
    for segment in dotted.split("."):
        props = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(props, dict) or segment not in props or not isinstance(props[segment], dict):
            return None
        node = props[segment]
    return node


# A tool parameter bound to an integer implementation parameter that coerces digit strings
# (``BindingParam.coerces_digit_strings``) may be a string, but only one the schema holds to digits: a
# ``pattern`` of this shape ("^[0-9]+$", "^\\d+$", "^-?[0-9]{1,9}$", ...) or an enum/const of digit strings.
_DIGIT_PATTERN_RE = re.compile(r"\^(?:-\?)?(?:\[0-9\]|\\d)(?:\+|\{[1-9][0-9]*(?:,[0-9]*)?\})\$")
_DIGITS_RE = re.compile(r"-?[0-9]+")
_COMBINATORS = ("anyOf", "oneOf", "allOf")
_MAX_SCHEMA_DEPTH = 32


def _digits_only(node: dict[str, Any]) -> bool:
    """Does the node hold its string values to digit strings (pattern, or every string in enum/const)?"""
    pattern = node.get("pattern")
    if isinstance(pattern, str) and _DIGIT_PATTERN_RE.fullmatch(pattern):
        return True
    values = node.get("enum") if "enum" in node else [node["const"]] if "const" in node else None
    if isinstance(values, list):
        strings = [v for v in values if isinstance(v, str)]
        return bool(strings) and all(_DIGITS_RE.fullmatch(v) for v in strings)
    return False


def _local_ref(root: dict[str, Any], ref: Any) -> dict[str, Any] | None:
    """The schema object a local ``$ref`` points to inside the tool's parameters schema, or None."""
    node = local_ref_target(root, ref)
    return node if isinstance(node, dict) else None


def _param_type_errors(node: dict[str, Any], bp: BindingParam, binding_id: str, tool_path: str,
                       root: dict[str, Any], where: str, node_path: str, *, digits: bool = False,
                       depth: int = 0) -> Iterable[tuple[str, str]]:
    """(path, message) for every JSON type the schema node — or any branch of its anyOf/oneOf/allOf (and
    local ``$ref``) — admits that the binding parameter cannot take. A node or branch that names no type
    is not judged. ``where`` is the path the node's own error goes to (the argument_map entry for the
    parameter itself, the branch's ``type`` for a branch); ``digits``: an enclosing node holds strings to
    digits (its keywords apply to every branch)."""
    if depth > _MAX_SCHEMA_DEPTH:
        return
    digits = digits or _digits_only(node)
    types = _schema_types(node)
    if types is not None:
        bad = types - _COMPATIBLE[bp.json_type]
        if bad == {"string"} and bp.coerces_digit_strings and digits:
            bad = set()
        if bad:
            hint = ""
            if "string" in bad and bp.coerces_digit_strings:
                hint = (" (it coerces digit strings: a string parameter needs a digits-only pattern such as "
                        "'^[0-9]+$')")
            if depth == 0:
                message = (f"tool parameter {tool_path!r} has type {'/'.join(sorted(types))} but binding "
                           f"{binding_id!r} parameter {bp.name!r} needs {bp.json_type}{hint}")
            else:
                message = (f"tool parameter {tool_path!r} admits {'/'.join(sorted(bad))} through this branch, but "
                           f"binding {binding_id!r} parameter {bp.name!r} needs {bp.json_type}{hint}; every "
                           "branch must fit the binding")
            yield where, message
    branches: list[tuple[str, Any]] = []
    for key in _COMBINATORS:
        value = node.get(key)
        if isinstance(value, list):
            branches += [(_join(_join(node_path, key), j), b) for j, b in enumerate(value)]
    if "$ref" in node:
        target = _local_ref(root, node["$ref"])
        if target is not None:
            branches.append((_join(node_path, "$ref"), target))
    for path, branch in branches:
        if isinstance(branch, dict):
            own = _join(path, "type") if "type" in branch else path
            yield from _param_type_errors(branch, bp, binding_id, tool_path, root, own, path, digits=digits,
                                          depth=depth + 1)

