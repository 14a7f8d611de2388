"""Python-style type expressions ("str", "list[dict]", "tuple[float, float]", "optional[str]", "int | None",
"Literal['a', 'b']", "dict[str, int]", "str[]", "string?") as JSON Schema.

:func:`python_type_schema` returns the schema, whether the type was optional (``Optional[X]``, ``X | None``,
``X?``: the parameter is then not required) and whether the text was a type this module knows. Names are matched
case-insensitively, with a ``typing.`` / ``builtins.`` / ``t.`` prefix ignored.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})

# name -> schema of the bare name. JSON Schema's own names map to themselves (written "object" means a JSON object
# here, as in JSON Schema, not Python's "anything").
_SCALARS: dict[str, dict[str, Any]] = {
    **{n: {"type": "string"} for n in ("str", "string", "text", "unicode", "char", "bytes", "bytearray")},
    **{n: {"type": "integer"} for n in ("int", "integer", "long", "short", "int32", "int64", "uint", "uint32",
                                        "uint64")},
    **{n: {"type": "number"} for n in ("float", "number", "double", "decimal", "real", "float32", "float64")},
    **{n: {"type": "boolean"} for n in ("bool", "boolean")},
    **{n: {"type": "null"} for n in ("none", "nonetype", "null", "nil")},
    **{n: {} for n in ("any", "unknown", "mixed", "json")},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "time": {"type": "string", "format": "time"},
    "timedelta": {"type": "string", "format": "duration"},
    "uuid": {"type": "string", "format": "uuid"},
    "email": {"type": "string", "format": "email"},
    "emailstr": {"type": "string", "format": "email"},
    "url": {"type": "string", "format": "uri"},
    "uri": {"type": "string", "format": "uri"},
    "anyurl": {"type": "string", "format": "uri"},
    "httpurl": {"type": "string", "format": "uri"},
    "path": {"type": "string"},
}
_OBJECTS = frozenset({"dict", "object", "mapping", "mutablemapping", "map", "hash", "record", "typeddict"})
_ARRAYS = frozenset({"list", "array", "sequence", "mutablesequence", "iterable", "collection", "vec", "vector"})
_SETS = frozenset({"set", "frozenset", "abstractset", "mutableset"})
_PREFIXES = ("typing.", "builtins.", "t.", "typing_extensions.", "collections.abc.", "datetime.", "decimal.",
             "uuid.", "pydantic.")


class TypeSyntaxError(ValueError):
    pass


@dataclass
class PyType:
    schema: dict[str, Any]
    optional: bool = False
    known: bool = True  # False: some name in it was not a type this module knows (mapped to "any")


def _norm(name: str) -> str:
    low = name.strip().lower()
    for prefix in _PREFIXES:
        if low.startswith(prefix):
            low = low[len(prefix):]
    return low


_TOKEN_RE = re.compile(
    r"""\s*(?:(\.\.\.)"""  # Tuple[int, ...]
    r"""|([A-Za-z_][\w.]*)"""  # a name, dotted: typing.List
    r"""|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""  # a string literal: Literal['a']
    r"""|(-?\d+(?:\.\d+)?)"""  # a number literal
    r"""|(\[\]|[\[\]<>(),|?]))""")  # punctuation; "[]" as one token (str[])


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise TypeSyntaxError(f"unexpected {text[pos:pos + 10]!r}")
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise TypeSyntaxError(f"expected {expected or 'a type'}, got {tok or 'the end'}")
        self.i += 1
        return tok

    def parse(self) -> PyType:
        result = self.union()
        if self.peek() is not None:
            raise TypeSyntaxError(f"unexpected {self.peek()!r}")
        return result

    def union(self) -> PyType:
        members = [self.postfix()]
        while self.peek() == "|":
            self.take()
            members.append(self.postfix())
        return _union(members) if len(members) > 1 else members[0]

    def postfix(self) -> PyType:
        t = self.atom()
        while self.peek() in ("[]", "?"):
            if self.take() == "[]":
                t = PyType({"type": "array", "items": t.schema} if t.schema else {"type": "array"}, False, t.known)
            else:
                t = PyType(t.schema, True, t.known)
        return t

    def args(self, close: str) -> list[str | PyType]:
        """Arguments up to ``close``: types, or literal values (strings/numbers) kept as Python values."""
        items: list[Any] = []
        while True:
            tok = self.peek()
            if tok == close:
                break
            if tok is not None and (tok[0] in "'\"" or re.fullmatch(r"-?\d+(?:\.\d+)?", tok)):
                items.append(("literal", ast.literal_eval(self.take())))
            elif tok == "...":
                self.take()
                items.append("...")
            elif tok == "[":  # Callable[[int], str]: an argument list
                self.take()
                inner = self.args("]")
                self.take("]")
                items.append(("list", inner))
            else:
                items.append(self.union())
            if self.peek() == ",":
                self.take()
                continue
            break
        return items

    def atom(self) -> PyType:
        tok = self.take()
        if tok == "(":
            inner = self.union()
            self.take(")")
            return inner
        if tok[0] in "'\"":  # a forward reference: "Address"
            return _named(ast.literal_eval(tok), [])
        if not re.fullmatch(r"[A-Za-z_][\w.]*", tok):
            raise TypeSyntaxError(f"unexpected {tok!r}")
        args: list[Any] = []
        if self.peek() in ("[", "<"):
            close = "]" if self.take() == "[" else ">"
            args = self.args(close)
            self.take(close)
        return _named(tok, args)


def _types_of(values: list[Any]) -> list[str]:
    found: list[str] = []
    for v in values:
        t = ("boolean" if isinstance(v, bool) else "integer" if isinstance(v, int) else
             "number" if isinstance(v, float) else "string" if isinstance(v, str) else "null")
        if t not in found:
            found.append(t)
    return found


def _union(members: list[PyType]) -> PyType:
    known = all(m.known for m in members)
    optional = any(m.optional for m in members)
    kept = [m.schema for m in members if m.schema != {"type": "null"}]
    if len(kept) < len(members):
        optional = True
    if not kept:
        return PyType({"type": "null"}, optional, known)
    if any(s == {} for s in kept):
        return PyType({}, optional, known)
    if len(kept) == 1:
        return PyType(kept[0], optional, known)
    if all(set(s) == {"type"} and isinstance(s["type"], str) for s in kept):
        types = list(dict.fromkeys(s["type"] for s in kept))
        return PyType({"type": types[0] if len(types) == 1 else types}, optional, known)
    return PyType({"anyOf": kept}, optional, known)


def _one(args: list[Any], i: int) -> PyType | None:
    a = args[i] if i < len(args) else None
    return a if isinstance(a, PyType) else None


def _named(name: str, args: list[Any]) -> PyType:
    n = _norm(name)
    known = all(a.known for a in args if isinstance(a, PyType))
    if n in ("optional",):
        inner = _one(args, 0) or PyType({})
        return PyType(inner.schema, True, inner.known)
    if n == "union":
        return _union([a for a in args if isinstance(a, PyType)] or [PyType({})])
    if n == "literal":
        values = [a[1] for a in args if isinstance(a, tuple) and a[0] == "literal"]
        values += [None for a in args if isinstance(a, PyType) and a.schema == {"type": "null"}]
        values += [a.schema["const"] for a in args if isinstance(a, PyType) and "const" in a.schema]
        types = _types_of(values)
        schema: dict[str, Any] = {"type": types[0] if len(types) == 1 else types} if types else {}
        schema["enum"] = values
        return PyType(schema)
    if n in ("annotated", "required", "notrequired", "readonly", "final", "classvar"):
        inner = _one(args, 0) or PyType({})
        return PyType(inner.schema, inner.optional or n == "notrequired", inner.known)
    if n in _OBJECTS:
        schema = {"type": "object"}
        value = _one(args, 1)
        if value is not None and value.schema:
            schema["additionalProperties"] = value.schema
        return PyType(schema, False, known)
    if n in _ARRAYS or n in _SETS:
        schema = {"type": "array"}
        item = _one(args, 0)
        if item is not None and item.schema:
            schema["items"] = item.schema
        if n in _SETS:
            schema["uniqueItems"] = True
        return PyType(schema, False, known)
    if n == "tuple":
        if len(args) == 2 and args[1] == "...":
            item = _one(args, 0)
            return PyType({"type": "array", **({"items": item.schema} if item and item.schema else {})}, False, known)
        items = [a.schema if isinstance(a, PyType) else {} for a in args]
        if not items:
            return PyType({"type": "array"})
        return PyType({"type": "array", "prefixItems": items, "items": False, "minItems": len(items),
                       "maxItems": len(items)}, False, known)
    if n in ("callable", "type", "coroutine", "awaitable", "iterator", "generator"):
        return PyType({}, False, False)
    if n in ("true", "false"):
        return PyType({"type": "boolean", "const": n == "true"}, False, True)
    if n in _SCALARS:
        return PyType(dict(_SCALARS[n]), False, known)
    # A name this module does not know (a class such as "Address"): anything, and said so.
    return PyType({}, False, False)


def python_type_schema(text: str) -> PyType:
    """The JSON Schema of a Python-style type expression; raises :class:`TypeSyntaxError` when it does not parse."""
    if not isinstance(text, str) or not text.strip():
        raise TypeSyntaxError("empty type")
    return _Parser(text).parse()


def is_json_type_name(text: str) -> bool:
    return text in JSON_TYPES
