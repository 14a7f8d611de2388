"""Plain function definitions: parameters written as Python-style types, Python signatures, docstrings.

Accepted forms (each item of a list, or alone):

- ``{"name": "orders.get", "description": "...", "parameters": {"order_id": "str", "items": "list[dict]"}}``:
  parameter name -> type text; a value may also be a JSON-Schema-like object whose ``type`` is a Python type
  (``{"type": "float", "description": "kg", "default": 1.0, "required": false}``) or null (any value).
  ``params`` / ``args`` / ``arguments`` / ``inputs`` are read as ``parameters``.
- ``{"name": ..., "parameters": [{"name": "order_id", "type": "str", "description": ..., "default": ...,
  "required": true}, "limit: int = 10", ...]}``: a list of parameter objects or ``name: type = default`` strings.
- ``{"name": ..., "signature": "(order_id: str, limit: int = 10) -> dict"}``, or a whole signature string
  ``"def orders.get(order_id: str, limit: int = 10) -> dict:"`` (``def`` optional, dotted names allowed, a
  docstring body read as the description, Google-style ``Args:`` lines as parameter descriptions).

A parameter with a default, or typed ``Optional[X]`` / ``X | None`` / ``X?``, is not required.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from harness_editor.importers.schema import Recorder, normalize_schema, type_text_schema
from harness_editor.schemas.errors import _join

PARAM_KEYS = ("parameters", "params", "args", "arguments", "inputs")
_DEF_RE = re.compile(r"^\s*(?:async\s+)?(?:def\s+)?([A-Za-z_][\w.\-:/]*)\s*\(", re.S)
_SIG_LINE_RE = re.compile(r"^\s*(?:async\s+)?def\s", re.M)
_PARAM_TEXT_RE = re.compile(r"^\s*\*{0,2}([A-Za-z_]\w*)\s*(?::\s*(.+?))?\s*(?:=\s*(.+))?\s*$", re.S)


def looks_like_signature(text: str) -> bool:
    return bool(_SIG_LINE_RE.search(text)) or bool(re.fullmatch(r"\s*[A-Za-z_][\w.\-]*\s*\(.*\)\s*(->.*)?:?\s*",
                                                                  text, re.S))


def split_signatures(text: str) -> list[str]:
    """A text of one or more ``def`` blocks, one string per block."""
    starts = [m.start() for m in _SIG_LINE_RE.finditer(text)]
    if not starts:
        return [text]
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def _json_default(node: ast.expr, at: str, rec: Recorder) -> tuple[bool, Any]:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        rec.add(at, "dropped_key", f"dropped default {ast.unparse(node)!r}: not a literal value")
        return False, None
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        rec.add(at, "dropped_key", f"dropped default {ast.unparse(node)!r}: not a JSON value")
        return False, None
    return True, value


def _docstring_args(doc: str) -> tuple[str, dict[str, str]]:
    """The description (the docstring up to an ``Args:`` section) and per-parameter texts from it."""
    lines = doc.strip().splitlines()
    head: list[str] = []
    params: dict[str, str] = {}
    section = False
    for line in lines:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters|Params):", stripped):
            section = True
            continue
        if section and re.fullmatch(r"(Returns|Raises|Yields|Examples?|Notes?):", stripped):
            section = False
            continue
        if section:
            m = re.match(r"([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(.*)", stripped)
            if m:
                params[m.group(1)] = m.group(2)
            continue
        if not params:
            head.append(line)
    return "\n".join(head).strip(), params


def parse_signature(text: str, at: str, rec: Recorder) -> dict[str, Any] | None:
    """A Python signature text as ``{name, description, parameters}`` (a JSON Schema), or None (error recorded)."""
    m = _DEF_RE.match(text)
    if not m:
        rec.error(at, "not a function signature (expected 'def name(param: type, ...) -> type')")
        return None
    name = m.group(1)
    source = "def _f(" + text[m.end():]
    tree = None
    for candidate in (source, source.rstrip().rstrip(":") + ": ...", source.rstrip() + "\n    ..."):
        try:
            tree = ast.parse(candidate)
            break
        except SyntaxError:
            continue
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        rec.error(at, f"the signature of {name!r} does not parse as Python")
        return None
    fn = tree.body[0]
    doc = ast.get_docstring(fn) or ""
    description, arg_docs = _docstring_args(doc)
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr] = dict(zip([p.arg for p in positional][len(positional) - len(a.defaults):],
                                             a.defaults, strict=True))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in [*positional, *a.kwonlyargs]:
        p_at = _join(_join(at, "parameters"), p.arg)
        if positional and p is positional[0] and p.arg in ("self", "cls"):
            rec.add(p_at, "dropped_key", f"dropped {p.arg!r}: a method's own object is not a tool parameter")
            continue
        if p.annotation is None:
            schema, optional = {}, False
            rec.add(p_at, "defaulted", f"{p.arg!r} has no type: imported as any value (no type)")
        else:
            schema, optional = type_text_schema(ast.unparse(p.annotation), p_at, rec)
        schema = dict(schema)
        if p.arg in arg_docs and arg_docs[p.arg]:
            schema["description"] = arg_docs[p.arg]
        if p.arg in defaults:
            ok, value = _json_default(defaults[p.arg], p_at, rec)
            if ok and value is not None:
                schema["default"] = value
        elif not optional:
            required.append(p.arg)
        props[p.arg] = schema
    for star, what in ((a.vararg, "*"), (a.kwarg, "**")):
        if star is not None:
            rec.add(_join(_join(at, "parameters"), star.arg), "dropped_key",
                    f"dropped {what}{star.arg}: a tool takes named arguments only")
    if fn.returns is not None:
        rec.add(_join(at, "returns"), "dropped_key", f"dropped the return type {ast.unparse(fn.returns)!r} "
                "(a tool's result is not declared in the manifest)")
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = required
    return {"name": name, "description": description, "parameters": parameters}


def _param_text(text: str, at: str, rec: Recorder) -> tuple[str, dict[str, Any], bool] | None:
    m = _PARAM_TEXT_RE.match(text)
    if not m:
        rec.error(at, f"{text!r} is not a parameter ('name: type = default')")
        return None
    name, type_text, default = m.groups()
    schema, optional = type_text_schema(type_text, at, rec) if type_text else ({}, False)
    schema = dict(schema)
    if default is not None:
        try:
            value = ast.literal_eval(default.strip())
            json.dumps(value, allow_nan=False)
            if value is not None:
                schema["default"] = list(value) if isinstance(value, tuple) else value
        except (ValueError, SyntaxError, TypeError):
            rec.add(at, "dropped_key", f"dropped default {default.strip()!r}: not a literal JSON value")
        optional = True
    return name, schema, optional


def typed_parameters(params: Any, at: str, rec: Recorder) -> dict[str, Any]:
    """``parameters`` of a plain function (name -> type, or a list of parameters) as an object schema."""
    props: dict[str, Any] = {}
    required: list[str] = []
    if isinstance(params, dict):
        entries = list(params.items())
        for name, value in entries:
            p_at = _join(at, name)
            if isinstance(value, dict) and "name" in value and "type" in value and not isinstance(value["name"], dict):
                value = {k: v for k, v in value.items() if k != "name"}
            if isinstance(value, str) and "=" in value:  # "bool = False": a type with its default
                parsed = _param_text(f"{name}: {value}", p_at, rec)
                if parsed is None:
                    continue
                _, schema, optional = parsed
                props[str(name)] = schema
                if not optional:
                    required.append(str(name))
                continue
            schema, optional = normalize_schema(value, p_at, rec)
            props[str(name)] = schema
            has_default = isinstance(value, dict) and "default" in value
            if not optional and not has_default:
                required.append(str(name))
    else:  # a list
        for i, item in enumerate(params):
            p_at = _join(at, i)
            if isinstance(item, str):
                parsed = _param_text(item, p_at, rec)
                if parsed is None:
                    continue
                name, schema, optional = parsed
            elif isinstance(item, dict) and isinstance(item.get("name"), str):
                name = item["name"]
                body = {k: v for k, v in item.items() if k != "name"}
                schema, optional = normalize_schema(body, p_at, rec)
                optional = optional or "default" in body
            else:
                rec.error(p_at, "a parameter is an object with a 'name' (and a 'type') or a 'name: type' string")
                continue
            if name in props:
                rec.add(p_at, "duplicate_name", f"parameter {name!r} given twice: the later one kept")
            props[name] = schema
            if not optional and name not in required:
                required.append(name)
            elif optional and name in required:
                required.remove(name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema
