"""A foreign tool's parameters as a JSON Schema (2020-12) the harness accepts, every change recorded.

Handles what public tool definitions carry: Python-style types in ``type`` ("str", "float", "dict"), properties
written as bare type strings, draft-07 list-form ``items`` / ``additionalItems`` / boolean
``exclusiveMaximum``, OpenAPI's ``nullable``, ``required: true`` or ``optional: true`` on a property, ``required``
naming absent properties, keywords JSON Schema does not know (dropped), ``$schema`` (dropped: the harness reads
2020-12).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness_editor.importers.pytypes import (
    JSON_TYPES,
    TypeSyntaxError,
    python_type_schema,
)
from harness_editor.schemas.errors import _join
from harness_editor.schemas.tool_schema import ANNOTATION_PREFIX, SCHEMA_KEYWORDS

# What the harness's schema check knows (the 2020-12 vocabulary and older drafts' leftovers), less $schema: the
# harness reads 2020-12 whatever a definition declares, and the importer converts the draft-07 forms itself.
KEYWORDS = SCHEMA_KEYWORDS - {"$schema"}
_SUB = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
        "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_SUB_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUB_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
MAX_DEPTH = 48


@dataclass(frozen=True)
class ImportChange:
    """One thing the importer changed, at a path into what was given (``tools[3].function.name``)."""

    path: str
    kind: str
    message: str
    tool: int | None = None  # index into ImportResult.tools, when the change belongs to one tool

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "message": self.message, "tool": self.tool}


class ToolImportError(ValueError):
    """Nothing could be imported: every problem, located (``errors``: (path, message))."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in errors))


@dataclass
class Recorder:
    changes: list[ImportChange] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    tool: int | None = None

    def add(self, path: str, kind: str, message: str) -> None:
        self.changes.append(ImportChange(path, kind, message, self.tool))

    def error(self, path: str, message: str) -> None:
        self.errors.append((path, message))


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def type_text_schema(text: str, path: str, rec: Recorder) -> tuple[dict[str, Any], bool]:
    """A Python-style type text as a schema (and whether it made the parameter optional), recorded."""
    try:
        t = python_type_schema(text)
    except TypeSyntaxError as exc:
        rec.add(path, "unknown_type", f"type {text!r} does not parse ({exc}); imported as any value (no type)")
        return {}, False
    if not t.known:
        rec.add(path, "unknown_type", f"type {text!r} names a type the importer does not know; parts of it are "
                "imported as any value (no type)")
    if text.strip() not in JSON_TYPES:
        note = " (not required)" if t.optional else ""
        rec.add(path, "type_mapped", f"{text!r} -> {_short(t.schema) if t.schema else 'any value (no type)'}{note}")
    return t.schema, t.optional


def normalize_schema(node: Any, path: str, rec: Recorder, depth: int = 0) -> tuple[Any, bool]:
    """The node as a 2020-12 schema, and whether it marked itself optional (for its parent's ``required``)."""
    schema, optional, flag = _child(node, path, rec, depth)
    if flag is not None:
        optional = not flag
    return schema, optional


def _child(node: Any, path: str, rec: Recorder, depth: int) -> tuple[Any, bool, bool | None]:
    schema, optional = _normalize(node, path, rec, depth)
    flag = schema.pop("\ue000required", None) if isinstance(schema, dict) else None
    return schema, optional, flag


def _normalize(node: Any, path: str, rec: Recorder, depth: int) -> tuple[Any, bool]:
    if depth > MAX_DEPTH:
        rec.error(path, f"schema nested deeper than {MAX_DEPTH} levels")
        return {}, False
    if isinstance(node, bool):
        return node, False
    if isinstance(node, str):
        return type_text_schema(node, path, rec)
    if node is None:
        rec.add(path, "type_mapped", "null schema -> any value (no type)")
        return {}, False
    if not isinstance(node, dict):
        rec.add(path, "dropped_key", f"{_short(node)} is not a schema; imported as any value (no type)")
        return {}, False
    out: dict[str, Any] = {}
    optional = False
    required_flag: bool | None = None
    for key, value in node.items():
        at = _join(path, key)
        if key == "type":
            mapped, opt = _normalize_type(value, at, rec)
            optional = optional or opt
            for k, v in mapped.items():
                if k == "type" and "type" in out:
                    continue
                out.setdefault(k, v)
            continue
        if key == "$schema":
            rec.add(at, "dropped_key", f"dropped $schema {_short(value)} (the harness reads JSON Schema 2020-12)")
            continue
        if key == "required" and isinstance(value, bool):
            required_flag = value
            rec.add(at, "converted", f"required: {str(value).lower()} on a property -> the parent's 'required' list")
            continue
        if key == "optional" and isinstance(value, bool):
            required_flag = not value
            rec.add(at, "converted", f"optional: {str(value).lower()} -> the parent's 'required' list")
            continue
        if key == "nullable" and isinstance(value, bool):
            if value:
                out["\ue000nullable"] = True
                rec.add(at, "converted", "nullable: true -> null added to the type")
            else:
                rec.add(at, "dropped_key", "dropped nullable: false (the default)")
            continue
        if key == "additionalItems":
            continue  # handled with list-form items below
        if isinstance(key, str) and key.startswith(ANNOTATION_PREFIX) and key != "$schema":
            out[key] = value  # a keyword of one's own (x-...): the harness keeps these as they are
            continue
        if key not in KEYWORDS:
            rec.add(at, "dropped_key", f"dropped {key!r}: not a JSON Schema keyword")
            continue
        if key in _SUB:
            if key == "items" and isinstance(value, list):
                out["prefixItems"] = [normalize_schema(v, _join(_join(path, "prefixItems"), i), rec, depth + 1)[0]
                                      for i, v in enumerate(value)]
                extra = node.get("additionalItems", None)
                if extra is not None:
                    out["items"] = normalize_schema(extra, _join(path, "additionalItems"), rec, depth + 1)[0]
                rec.add(at, "converted", "draft-07 list-form items -> prefixItems" +
                        (" (additionalItems -> items)" if extra is not None else ""))
                continue
            out[key] = normalize_schema(value, at, rec, depth + 1)[0]
        elif key in _SUB_MAPS and isinstance(value, dict):
            sub: dict[str, Any] = {}
            opt_children: list[str] = []
            req_children: list[str] = []
            for name, child in value.items():
                schema, child_opt, flag = _child(child, _join(at, name), rec, depth + 1)
                if flag is not None:
                    (req_children if flag else opt_children).append(name)
                elif child_opt:
                    opt_children.append(name)
                sub[name] = schema
            out[key] = sub
            if key == "properties":
                out["\ue000req"] = (req_children, opt_children)
        elif key in _SUB_LISTS and isinstance(value, list):
            out[key] = [normalize_schema(v, _join(at, i), rec, depth + 1)[0] for i, v in enumerate(value)]
        elif key in ("exclusiveMaximum", "exclusiveMinimum") and isinstance(value, bool):
            bound = "maximum" if key == "exclusiveMaximum" else "minimum"
            if value and isinstance(node.get(bound), (int, float)) and not isinstance(node.get(bound), bool):
                out[key] = node[bound]
                out["\ue000drop_" + bound] = True
                rec.add(at, "converted", f"draft-04 {key}: true -> {key}: {node[bound]}")
            else:
                rec.add(at, "dropped_key", f"dropped {key}: {str(value).lower()} (draft-04 form)")
        else:
            out[key] = value
    for bound in ("maximum", "minimum"):
        if out.pop("\ue000drop_" + bound, False):
            out.pop(bound, None)
    if out.pop("\ue000nullable", False):
        t = out.get("type")
        if isinstance(t, str) and t != "null":
            out["type"] = [t, "null"]
        elif isinstance(t, list) and "null" not in t:
            out["type"] = [*t, "null"]
    req = out.pop("\ue000req", None)
    if req is not None or "required" in out:
        _fix_required(out, req or ([], []), path, rec)
    if required_flag is not None:
        out["\ue000required"] = required_flag
    return out, optional


def _normalize_type(value: Any, at: str, rec: Recorder) -> tuple[dict[str, Any], bool]:
    if isinstance(value, str):
        if value in JSON_TYPES:
            return {"type": value}, False
        return type_text_schema(value, at, rec)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if all(v in JSON_TYPES for v in value):
            return {"type": list(dict.fromkeys(value))}, False
        return type_text_schema(" | ".join(value), at, rec)
    rec.add(at, "dropped_key", f"dropped type {_short(value)}: not a type name")
    return {}, False


def _fix_required(out: dict[str, Any], req: tuple[list[str], list[str]], path: str, rec: Recorder) -> None:
    """``required``: the list given, plus properties flagged ``required: true``, less those flagged optional
    (``Optional[X]``, ``optional: true``), less names of absent properties, each once."""
    given = out.get("required", [])
    at = _join(path, "required")
    if not isinstance(given, list) or not all(isinstance(x, str) for x in given):
        rec.add(at, "dropped_key", f"dropped required {_short(given)}: not a list of property names")
        given = []
    props = out.get("properties") if isinstance(out.get("properties"), dict) else None
    if props is None and "properties" not in out and out.get("type") == "object":
        props = {}  # an object that declares no properties: a required name would never be described
    names: list[str] = []
    for name in [*given, *req[0]]:
        if name in names:
            if name in given and given.count(name) > 1:
                rec.add(at, "dropped_key", f"{name!r} was listed twice in required")
            continue
        if name in req[1] and name not in req[0]:
            if name in given:
                rec.add(at, "dropped_key", f"{name!r} left out of required: the property is optional")
            continue
        if props is not None and name not in props and "patternProperties" not in out \
                and not isinstance(out.get("additionalProperties"), dict):
            rec.add(at, "dropped_key", f"{name!r} left out of required: there is no such property")
            continue
        names.append(name)
    if names:
        out["required"] = names
    else:
        if given == [] and "required" in out:  # every change is reported, even one that means the same
            rec.add(at, "dropped_key", "dropped an empty required list (the same as none: nothing is required)")
        out.pop("required", None)
