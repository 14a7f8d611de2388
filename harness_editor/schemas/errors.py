"""Located validation errors: :class:`FieldError` and the editor paths they carry (``tools[3].parameters.sku``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

_IDENT_RE = re.compile(r"^[^\W\d][\w\-]*$")


class FieldError(BaseModel):
    """One problem, located: ``path`` is "" for the document itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    message: str


class ManifestError(Exception):
    """Raised with every error found in one validation pass."""

    def __init__(self, errors: Iterable[FieldError]):
        self.errors: list[FieldError] = list(errors)
        super().__init__(self.errors)  # args stay (errors,) so the exception pickles (Celery results)

    def __str__(self) -> str:
        return "\n".join(f"{e.path}: {e.message}" if e.path else e.message for e in self.errors)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    if _IDENT_RE.match(part):
        return f"{path}.{part}" if path else part
    return f"{path}[{json.dumps(part, ensure_ascii=False)}]"


def _path(parts: Iterable[str | int], base: str = "") -> str:
    path = base
    for part in parts:
        path = _join(path, part)
    return path



# One segment of an editor path: ``.name`` (or a leading ``name``), ``[3]``, ``["odd key"]`` (see _join).
_SEGMENT_RE = re.compile(r'\.?([^\W\d][\w\-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def path_parts(path: str) -> list[str | int]:
    """The parts of an editor path (the inverse of :func:`_path`); what does not parse ends the list."""
    parts: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _SEGMENT_RE.match(path, pos)
        if m is None or m.end() == pos:
            break
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(int(m.group(2)))
        else:
            parts.append(json.loads(m.group(3)))
        pos = m.end()
    return parts


def document_key(root: object, parts: Iterable[str | int]) -> list[tuple[int, int]]:
    """Sort key putting a path where it stands in the document: keys in the order they were written, items by
    index, a path the document does not have (a missing field) after its written siblings."""
    key: list[tuple[int, int]] = []
    node = root
    for part in parts:
        if isinstance(node, dict) and part in node:
            key.append((0, _key_position(node, part)))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            key.append((0, part))
            node = node[part]
        else:
            key.append((1, 0))
            node = None
    return key


def _key_position(node: dict, key: object) -> int:
    for i, k in enumerate(node):
        if k == key:
            return i
    return 0


def in_document_order(errors: Iterable[FieldError], data: object) -> list[FieldError]:
    """The errors without repeats, in the order their paths appear in ``data`` (stable: errors at one path keep
    the order they were found in)."""
    unique = list(dict.fromkeys(errors))
    if len(unique) > 1:
        unique.sort(key=lambda e: document_key(data, path_parts(e.path)))
    return unique
