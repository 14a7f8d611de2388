"""Pydantic's errors as located, readable :class:`FieldError` s (shared with streams/scenarios.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import ValidationError

from harness_editor.schemas.bindings import BINDING_UNION_TAGS
from harness_editor.schemas.errors import FieldError, _join, _path
from harness_editor.schemas.manifest import HOOK_KINDS

# Pydantic puts the tag of a discriminated-union member into the location: ('hooks', 0, 'banned_phrases',
# 'phrases'). The path a human edits has no such segment.
_UNION_TAGS: dict[str, frozenset[str]] = {"hooks": frozenset(HOOK_KINDS)}
# The same for a union-valued field (not a list of them): ('tools', 0, 'binding', 'http', 'path').
_FIELD_UNION_TAGS: dict[str, frozenset[str]] = {"binding": BINDING_UNION_TAGS}


def format_loc(loc: tuple[str | int, ...] | list[str | int]) -> str:
    """Turn a pydantic error location into an editor path like ``tools[3].parameters.properties.sku``."""
    parts = list(loc)
    kept: list[str | int] = []
    for i, part in enumerate(parts):
        if (
            isinstance(part, str)
            and i >= 2
            and isinstance(parts[i - 1], int)
            and isinstance(parts[i - 2], str)
            and part in _UNION_TAGS.get(parts[i - 2], ())
        ) or (isinstance(part, str) and i >= 1 and isinstance(parts[i - 1], str)
              and part in _FIELD_UNION_TAGS.get(parts[i - 1], ())):
            continue
        kept.append(part)
    return _path(kept)


def pydantic_errors(exc: ValidationError, *, loc_format: Callable[[tuple], str] = format_loc,
                    kinds: Sequence[str] = HOOK_KINDS) -> list[FieldError]:
    """Pydantic's errors as located, readable :class:`FieldError` s (shared with streams/scenarios.py).

    ``loc_format`` drops the union tags of the caller's discriminated unions; ``kinds`` names the valid
    ``kind`` values, for the message when one is unknown or missing."""
    out: list[FieldError] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = loc_format(loc)
        msg: str = err["msg"]
        kind = err["type"]
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            path = _join(path, str((err.get("ctx") or {}).get("discriminator", "kind")).strip("'"))
            if kind == "union_tag_invalid":
                msg = f"unknown kind {(err.get('ctx') or {}).get('tag')!r}; known kinds: {', '.join(kinds)}"
            else:
                msg = f"missing 'kind'; known kinds: {', '.join(kinds)}"
        elif kind == "extra_forbidden":
            msg = f"unknown field {loc[-1]!r}" if loc else "unknown field"
        elif kind == "missing":
            msg = "field required"
        elif kind == "literal_error" and loc and loc[-1] == "kind":
            msg = f"unknown kind {err.get('input')!r}; {msg[0].lower()}{msg[1:]}"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        fe = FieldError(path=path, message=msg)
        if fe not in out:
            out.append(fe)
    return out

