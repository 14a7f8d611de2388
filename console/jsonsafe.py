"""JSON from untrusted callers, decoded without a way to crash the process or the database.

:func:`loads` is ``json.loads`` with two limits the standard decoder lacks, each raising :class:`JsonRejected`
(a ``ValueError``) with a path-precise message instead of failing later:

- nesting deeper than ``MAX_DEPTH`` arrays/objects (``json.loads`` recurses: a body of 1,000 ``[`` raised
  ``RecursionError``, a 500 / a WebSocket closed with 1011). The depth is measured before decoding, without
  recursion, so nothing deep is ever built.
- a NUL character (``\\u0000``) in any string or key: PostgreSQL refuses it in text and jsonb (``DataError``),
  and no text of the product has a use for it.

``NaN`` / ``Infinity`` are refused too (standard JSON has no such numbers; jsonb cannot store them).

Used by the API's JSON parser (:class:`console.parsing.SafeJSONParser`) and by every WebSocket consumer
(:class:`console.parsing.SafeJsonWebsocketConsumer`). Plain Python: no Django.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

# Manifests nest ~8 levels (a tool's JSON-schema parameters a few more); 64 leaves room for any real document
# and stays far below the interpreter's recursion limit for everything that walks the result afterwards.
MAX_DEPTH = 64

# A JSON string literal, escapes included (unrolled, so linear): removed before brackets are counted, so "[[["
# inside text never counts.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# bytes.translate keeps only the brackets, as "(" and ")"; each becomes a step of +1 or -1 (looked up by byte)
_AS_PARENS = bytes.maketrans(b"[]{}", b"()()")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = tuple(1 if byte == ord("(") else -1 for byte in range(256))
_NUL_ESCAPE = re.compile(r"\\u0000", re.IGNORECASE)


class JsonRejected(ValueError):
    """The text is not JSON this service accepts; ``path`` names where (``""``: the document itself)."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.message = message
        self.path = path


def nesting_depth(text: str) -> int:
    """The deepest array/object nesting of JSON ``text`` (the most brackets open at once; strings skipped).

    Not a validation: malformed text is json's to reject, but this is never lower than the nesting json would
    recurse into. No Python code per character: about 0.1 s per million brackets."""
    parens = _STRINGS.sub("", text).encode("utf-8", "surrogatepass").translate(_AS_PARENS, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_STEP.__getitem__, parens)), default=0)


def find_nul(value: Any, path: str = "") -> str | None:
    """The path of the first string or key holding a NUL character in decoded JSON ``value`` (None: none).

    Iterative, so it is safe on anything :func:`loads` let through."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{where}.{key}" if where else str(key)
                if "\x00" in key:
                    return child_path.replace("\x00", "\\u0000")
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
    return None


def _reject_constant(name: str) -> Any:
    raise JsonRejected(f"{name} is not valid JSON")  # json accepts NaN/Infinity; jsonb and every client do not


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Decode JSON ``text`` within the limits above; :class:`JsonRejected` (a ValueError) when it breaks one,
    ``json.JSONDecodeError`` (also a ValueError) when it is not JSON at all."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    if nesting_depth(text) > max_depth:
        raise JsonRejected(f"JSON nested more than {max_depth} levels deep (arrays and objects)")
    value = json.loads(text, parse_constant=_reject_constant)
    if _NUL_ESCAPE.search(text):  # cheap test first: only then walk the document for the path
        where = find_nul(value)
        if where is not None:
            raise JsonRejected("NUL characters (\\u0000) are not allowed", where)
    return value
