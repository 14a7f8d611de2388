"""A tool's JSON Schema is input from a campaign manager or a foreign file, and the arguments checked against it
are model output: both are untrusted. This module is the one place that runs such a schema, and what makes a
schema safe to run when it is saved.

Running (:func:`check_arguments`, used by the ``tool_args`` hook, the turn engine and the written-turn check):

- **no fetching**: references resolve only inside the schema. The validator's registry refuses every other URI
  (``https:``, ``file:``, a relative name under an ``$id``) without a request, so a schema cannot reach a host, read
  a file on the worker or wait on a server that never answers;
- **no backtracking**: ``pattern`` and ``patternProperties`` run on RE2 (``google-re2``), which matches in time
  linear in the input whatever the pattern. ``regex`` with a timeout would bound a match too, but only by burning
  the whole timeout on every bad input while holding the GIL; RE2 has no such input. Its dialect lacks lookarounds
  and backreferences: such a pattern is refused when the manifest is saved (:func:`schema_safety_problems`);
- **a time budget**: every keyword the validator visits checks a deadline (:data:`ARGUMENT_CHECK_BUDGET_S`), so a
  schema that expands through ``$ref`` beyond what the save-time check allows (a version stored before it) still
  ends in milliseconds;
- **faults, never exceptions**: a stored schema the validator cannot run (a dangling reference, a pattern RE2
  refuses, a reference cycle) raises :class:`ToolSchemaFault`, which callers turn into a clean tool fault.

Saving (:func:`schema_safety_problems`, part of ``tool_schema_problems``): references are local (``#/…`` or an
``#anchor`` defined in the schema) and point at something, no ``$id`` (it moves where references resolve), every
pattern compiles on RE2, ``unevaluatedProperties`` is not combined with ``patternProperties`` (jsonschema would
match those with Python's backtracking ``re``), and the schema does not expand through ``$ref`` into more than
:data:`MAX_SCHEMA_VISITS` checks or loop on itself without descending into the arguments.

Plain Python, no Django.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

import jsonschema
import re2
from jsonschema.exceptions import ValidationError
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable

ARGUMENT_CHECK_BUDGET_S = 0.1  # a real tool schema checks in well under a millisecond; a turn has 20 s in all
MAX_SCHEMA_VISITS = 2_000  # schema nodes one check may visit, references expanded: about 10 ms, a tenth of the budget
MAX_ARGUMENT_DEPTH = 64  # nesting of a call's arguments (deeper is refused before the validator recurses)
MAX_ERRORS = 20  # errors reported per check
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")

Problem = tuple[tuple[str | int, ...], str]  # (parts of the path inside the schema, message)


class ToolSchemaFault(Exception):
    """A stored tool schema that cannot be run (not the arguments' fault): the call is refused as a tool fault."""


# --- patterns on RE2 -----------------------------------------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the user, not printed to the worker's stderr


class PatternError(ValueError):
    """A pattern RE2 cannot compile (``reason``: RE2's own words)."""

    def __init__(self, pattern: str, reason: str):
        self.pattern, self.reason = pattern, reason
        super().__init__(f"{pattern!r}: {reason}")


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """The RE2 program of a JSON Schema pattern (searched, not anchored, as JSON Schema says)."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else exc
        raise PatternError(pattern, raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)) from None


def pattern_message(err: PatternError) -> str:
    return (f"pattern {err.pattern!r} cannot be used: {err.reason} (tool schema patterns run on RE2, which checks "
            "any input in linear time and so has no lookarounds or backreferences)")


def _search(pattern: str, text: str) -> bool:
    try:
        return compile_pattern(pattern).search(text) is not None
    except PatternError as exc:
        raise ToolSchemaFault(pattern_message(exc)) from None


# --- the validator -------------------------------------------------------------------------------------------

_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("tool_schema_deadline", default=float("inf"))


class _OverBudget(Exception):
    pass


def _timed(keyword: Any) -> Any:
    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > _DEADLINE.get():
            raise _OverBudget
        return keyword(validator, value, instance, schema)

    return check


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties") or {}
    patterns = schema.get("patternProperties") or {}
    extras = sorted((k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)),
                    key=str)
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        joined = ", ".join(repr(k) for k in extras)
        yield ValidationError(f"Additional properties are not allowed ({joined} {'was' if len(extras) == 1 else 'were'}"
                              " unexpected)")


_KEYWORDS = dict(jsonschema.Draft202012Validator.VALIDATORS)
_KEYWORDS.update(pattern=_pattern, patternProperties=_pattern_properties, additionalProperties=_additional_properties)
ArgumentValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, validators={k: _timed(v) for k, v in _KEYWORDS.items()})


def _refuse(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # nothing outside the schema is ever fetched or read


# The meta-schemas jsonschema bundles still resolve (from memory); every other URI is refused.
REFUSING_REGISTRY: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]

_VALIDATORS: dict[int, tuple[Any, Any]] = {}


def _validator(schema: Any) -> Any:
    hit = _VALIDATORS.get(id(schema))
    if hit is not None and hit[0] is schema:  # the cache holds the schema, so its id cannot be reused meanwhile
        return hit[1]
    if len(_VALIDATORS) > 512:
        _VALIDATORS.clear()
    if _mentions(schema, "unevaluatedProperties") and _mentions(schema, "patternProperties"):
        raise ToolSchemaFault("'unevaluatedProperties' beside 'patternProperties' is not supported (its patterns "
                              "would run on a backtracking engine)")
    try:
        v = ArgumentValidator(schema, registry=REFUSING_REGISTRY)
    except Exception as exc:  # an unknown $schema dialect, a schema of the wrong shape
        raise ToolSchemaFault(f"the schema cannot be loaded: {exc}") from None
    _VALIDATORS[id(schema)] = (schema, v)
    return v


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value, counted no further than ``limit + 1``."""
    stack, deepest = [(value, 1)], 0
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack += [(c, d + 1) for c in children if isinstance(c, (dict, list))]
    return deepest


def check_arguments(schema: Any, arguments: Any, *, strict: bool = True,
                    budget_s: float = ARGUMENT_CHECK_BUDGET_S) -> list[str]:
    """JSON-Schema errors of a call's arguments ([] = valid); not strict: unknown properties are tolerated.
    Raises :class:`ToolSchemaFault` when the schema cannot be run or the check runs out of ``budget_s``."""
    depth = _depth(arguments, MAX_ARGUMENT_DEPTH)
    if depth > MAX_ARGUMENT_DEPTH:
        return [f"arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep"]
    validator = _validator(schema)
    errors: list[str] = []
    token = _DEADLINE.set(time.monotonic() + budget_s)
    try:
        for err in validator.iter_errors(arguments):
            if not strict and err.validator == "additionalProperties":
                continue
            where = ".".join(str(p) for p in err.absolute_path)
            errors.append(f"{where}: {err.message}" if where else err.message)
            if len(errors) >= MAX_ERRORS:
                break
    except ToolSchemaFault:
        raise
    except _OverBudget:
        raise ToolSchemaFault(f"checking the arguments took longer than {budget_s * 1000:.0f} ms (the schema expands "
                              "too far through '$ref')") from None
    except RecursionError:
        raise ToolSchemaFault("the schema refers to itself without end ('$ref' cycle)") from None
    except Unresolvable as exc:  # jsonschema wraps it; .ref reaches the wrapped error's
        raise ToolSchemaFault(f"the reference {str(exc.ref)[:200]!r} cannot be resolved (only references inside the "
                              "schema are, and nothing is fetched)") from None
    except Exception as exc:  # referencing's Unresolvable/PointerToNowhere/Unretrievable, and anything else
        raise ToolSchemaFault(f"the schema cannot be checked: {type(exc).__name__}: {exc}"[:500]) from None
    finally:
        _DEADLINE.reset(token)
    return errors


# --- when the manifest is saved ------------------------------------------------------------------------------

# Keywords whose subschemas apply to a member of the instance (so recursion through them is bounded by the
# arguments' depth), and those whose subschemas apply to the same instance. $defs are not applied by themselves.
_CHILD = frozenset({"items", "additionalProperties", "contains", "propertyNames", "unevaluatedItems",
                    "unevaluatedProperties", "additionalItems"})
_CHILD_MAPS = frozenset({"properties", "patternProperties"})
_CHILD_LISTS = frozenset({"prefixItems"})
_SAME = frozenset({"not", "if", "then", "else"})
_SAME_MAPS = frozenset({"dependentSchemas"})
_SAME_LISTS = frozenset({"allOf", "anyOf", "oneOf"})
_DEFS = frozenset({"$defs", "definitions"})


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], Any, bool]]:
    """(path parts below ``node``, subschema, applies to a member of the instance) for every subschema, $defs
    included (applies: None, they are walked for their own problems only)."""
    for key, value in node.items():
        if key in _CHILD or key in _SAME:
            yield (key,), value, key in _CHILD
        elif key in _CHILD_MAPS | _SAME_MAPS | _DEFS and isinstance(value, dict):
            for name, sub in value.items():
                yield (key, name), sub, key in _CHILD_MAPS if key not in _DEFS else None  # type: ignore[misc]
        elif key in _CHILD_LISTS | _SAME_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                yield (key, i), sub, key in _CHILD_LISTS


def _nodes(schema: Any, parts: tuple[str | int, ...] = (), depth: int = 0) -> Iterator[tuple[tuple[str | int, ...],
                                                                                              dict[str, Any]]]:
    if not isinstance(schema, dict) or depth > 64:
        return
    yield parts, schema
    for below, sub, _ in _subschemas(schema):
        yield from _nodes(sub, (*parts, *below), depth + 1)


def _mentions(schema: Any, keyword: str) -> bool:
    return any(keyword in node for _, node in _nodes(schema))


def local_ref_target(root: Any, ref: Any) -> Any:
    """What a local ``$ref`` ("#/$defs/id", a JSON pointer into ``root``) points to, or None (the one reading of a
    ``$ref`` for validation and the diff)."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node: Any = root
    for raw in ref[1:].split("/")[1:] if ref != "#" else []:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return None
    return node


def _pointer_parts(ref: str) -> tuple[str | int, ...]:
    raw = ref[1:].split("/")[1:] if ref != "#" else []
    return tuple(int(k) if k.isdigit() else k for k in (p.replace("~1", "/").replace("~0", "~") for p in raw))


def _anchor_nodes(schema: Any) -> dict[str, tuple[tuple[str | int, ...], dict[str, Any]]]:
    return {node[k]: (parts, node) for parts, node in _nodes(schema) for k in ("$anchor", "$dynamicAnchor")
            if isinstance(node.get(k), str)}


def _target(root: Any, ref: str, anchors: dict[str, tuple[tuple[str | int, ...], dict[str, Any]]]
            ) -> tuple[tuple[str | int, ...], Any] | None:
    """(where in the document, the schema) a local reference points to, or None."""
    if ref == "#" or ref.startswith("#/"):
        node, parts = local_ref_target(root, ref), _pointer_parts(ref)
    else:
        parts, node = anchors.get(ref[1:], ((), None))
    return (parts, node) if isinstance(node, (dict, bool)) else None


def _where(ref: str) -> str:
    scheme = ref.split(":", 1)[0].lower() if ":" in ref else ""
    if scheme == "file":
        return "a file on the machine that runs the turn"
    if scheme in ("http", "https"):
        return "the network"
    return "outside this schema"


def _reference_problems(schema: dict[str, Any]) -> Iterable[Problem]:
    anchor_nodes = _anchor_nodes(schema)
    defs = schema.get("$defs") if isinstance(schema.get("$defs"), dict) else {}
    for parts, node in _nodes(schema):
        if "$id" in node:
            yield (*parts, "$id"), ("'$id' is not allowed in a tool schema: it changes where references resolve; "
                                    "refer to parts of this schema with '#/$defs/<name>'")
        for key in REFERENCE_KEYWORDS:
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            if not ref.startswith("#"):
                yield (*parts, key), (f"only references inside this schema are allowed ('#/$defs/<name>'); {ref!r} "
                                      f"points to {_where(ref)}, which the console never fetches")
            elif _target(schema, ref, anchor_nodes) is None:
                known = ", ".join(f"'#/$defs/{d}'" for d in defs) or "none"
                what = "anchor" if not (ref == "#" or ref.startswith("#/")) else "reference"
                yield (*parts, key), f"{what} {ref!r} points to nothing in this schema ($defs: {known})"


def _pattern_problems(schema: dict[str, Any]) -> Iterable[Problem]:
    uneval = [parts for parts, node in _nodes(schema) if "unevaluatedProperties" in node]
    with_patterns = _mentions(schema, "patternProperties")
    for parts, node in _nodes(schema):
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                yield (*parts, "pattern"), pattern_message(exc)
        props = node.get("patternProperties")
        if isinstance(props, dict):
            for key in props:
                try:
                    compile_pattern(key)
                except PatternError as exc:
                    yield (*parts, "patternProperties", key), pattern_message(exc)
    if with_patterns:
        for parts in uneval:
            yield (*parts, "unevaluatedProperties"), ("'unevaluatedProperties' cannot be combined with "
                                                      "'patternProperties' in a tool schema; use "
                                                      "'additionalProperties'")


class _Cycle(Exception):
    def __init__(self, parts: tuple[str | int, ...]):
        self.parts = parts


class _TooBig(Exception):
    def __init__(self, parts: tuple[str | int, ...]):
        self.parts = parts


def _expansion_problems(schema: dict[str, Any]) -> Iterable[Problem]:
    """A schema whose references loop without consuming the arguments, or that expands (references followed)
    into more than MAX_SCHEMA_VISITS checks: 20 definitions each naming the next twice are a million checks."""
    if not any(isinstance(node.get(k), str) for _, node in _nodes(schema) for k in REFERENCE_KEYWORDS):
        return
    anchors = _anchor_nodes(schema)
    memo: dict[str, int] = {}
    active: dict[str, int] = {}
    total = 0

    def visit(node: Any, parts: tuple[str | int, ...], level: int) -> int:
        nonlocal total
        if not isinstance(node, dict):
            return 1
        count = 1
        total += 1
        if total > MAX_SCHEMA_VISITS:
            raise _TooBig(parts)
        for key in REFERENCE_KEYWORDS:
            ref = node.get(key)
            if not isinstance(ref, str) or not ref.startswith("#"):
                continue
            found = _target(schema, ref, anchors)
            if found is None:
                continue  # reported by _reference_problems
            target_parts, target = found
            if ref in active:
                if active[ref] == level:
                    raise _Cycle((*parts, key))
                count += 1  # recursion through a member of the arguments: bounded by their depth
                continue
            if ref in memo:
                count += memo[ref]
                total += memo[ref]
                if total > MAX_SCHEMA_VISITS:
                    raise _TooBig((*parts, key))
                continue
            active[ref] = level
            n = visit(target, target_parts, level)
            del active[ref]
            memo[ref] = n
            count += n
        for below, sub, child in _subschemas(node):
            if child is None:
                continue
            count += visit(sub, (*parts, *below), level + 1 if child else level)
        return count

    try:
        visit(schema, (), 0)
    except _Cycle as exc:
        yield exc.parts, ("this reference leads back to itself without descending into the arguments: checking "
                          "it would never end")
    except _TooBig as exc:
        yield exc.parts, (f"the schema expands through '$ref' into more than {MAX_SCHEMA_VISITS:,} checks; refer "
                          "to shared definitions fewer times")


def schema_safety_problems(schema: dict[str, Any]) -> list[Problem]:
    """What would make the schema unsafe or impossible to run (module docstring), each with its path."""
    problems = [*_reference_problems(schema), *_pattern_problems(schema)]
    if not problems:
        problems += _expansion_problems(schema)
    return problems
