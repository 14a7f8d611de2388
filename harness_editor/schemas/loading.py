"""Manifests from and to text: YAML and JSON loading (size limits, duplicate keys, alias bombs), parsing with
every error located, the canonical JSON and its content hash, and YAML export."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml
from pydantic import ValidationError

from harness_editor.schemas.errors import (
    FieldError,
    ManifestError,
    _path,
    in_document_order,
)
from harness_editor.schemas.locations import pydantic_errors
from harness_editor.schemas.manifest import _SKIP_SEMANTICS, Manifest
from harness_editor.schemas.semantics import semantic_errors_of_data, validate_semantics

MAX_MANIFEST_BYTES = 1_000_000  # YAML / JSON text, and a manifest object as compact JSON
MAX_YAML_NODES = 200_000  # guards against alias bombs ("billion laughs") before anything walks the data


# --- parsing -----------------------------------------------------------------------------------------


# C0 control characters other than tab, line feed and carriage return: NUL cannot be stored (PostgreSQL), and
# none of them belongs in text a model, a reviewer or a TTS voice reads.
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def control_character_errors(data: Any) -> list[FieldError]:
    """One error per string (value or key) of plain data holding a control character, at its path.

    Iterative (the data may be deep: its depth is bounded by the loaders, not here)."""
    errors: list[FieldError] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, parts = stack.pop()
        if isinstance(value, str):
            found = _CONTROL_CHARS.search(value)
            if found:
                errors.append(FieldError(path=_path(parts), message=f"control character {found.group()!r} is not "
                                         f"allowed (only tab and line breaks)"))
        elif isinstance(value, dict):
            for key, child in reversed(list(value.items())):
                if isinstance(key, str) and _CONTROL_CHARS.search(key):
                    errors.append(FieldError(path=_path(parts), message=f"key {key!r} has a control character "
                                             f"(only tab and line breaks are allowed)"))
                    continue
                stack.append((child, (*parts, key)))
        elif isinstance(value, list):
            stack.extend((child, (*parts, i)) for i, child in reversed(list(enumerate(value))))
    return errors


# json.dumps writes every control character as an escape: \b, \f or \u00XX (tab, line feed and carriage return as
# \t, \n, \r), and a backslash as two.
_ESCAPED_CONTROL = re.compile(r"\\(?:[bf]|u00(?:0[0-8bcef]|1[0-9a-f]))")


def _has_control_escape(text: str) -> bool:
    """Does compact JSON text escape a control character? A match is one only after an even run of backslashes
    (a regex's "\\b" is dumped "\\\\b": an escaped backslash, then "b")."""
    for m in _ESCAPED_CONTROL.finditer(text):
        start = m.start()
        while start > 0 and text[start - 1] == "\\":
            start -= 1
        if (m.start() - start) % 2 == 0:
            return True
    return False


TOO_LARGE_MESSAGE = (f"manifest is larger than {MAX_MANIFEST_BYTES} bytes (the same limit for YAML, JSON text and "
                     "a JSON object, measured as compact JSON)")


def _too_large() -> ManifestError:
    return ManifestError([FieldError(path="", message=TOO_LARGE_MESSAGE)])


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _text_too_large(text: str) -> bool:
    if len(text) > MAX_MANIFEST_BYTES:
        return True
    # at most 4 bytes a character: short text needs no encoding to be known small enough
    return len(text) * 4 > MAX_MANIFEST_BYTES and _utf8_size(text) > MAX_MANIFEST_BYTES


def _compact_json_size(data: Any) -> int:
    """The size in UTF-8 bytes of ``data`` as compact JSON, for data json.dumps refuses (keys that are dates,
    nesting past its recursion limit): iterative, non-JSON values counted as their text."""
    size = 0
    stack: list[Any] = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            size += 2 + max(len(value) - 1, 0) + len(value)  # braces, commas, colons
            for k, v in value.items():
                size += _utf8_size(json.dumps(k if isinstance(k, str) else str(k), ensure_ascii=False))
                stack.append(v)
        elif isinstance(value, list):
            size += 2 + max(len(value) - 1, 0)
            stack.extend(value)
        elif isinstance(value, str):
            size += _utf8_size(json.dumps(value, ensure_ascii=False))
        else:
            size += len(json.dumps(value) if isinstance(value, (int, float, bool)) or value is None else str(value))
        if size > MAX_MANIFEST_BYTES:
            break
    return size


def _measure(data: Any) -> tuple[bool, bool]:
    """(is ``data`` larger than the limit as compact JSON in UTF-8, may it hold a control character).

    One C-speed dump answers both for ordinary data (cheaper than walking every string in Python)."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        return _compact_json_size(data) > MAX_MANIFEST_BYTES, True
    if _text_too_large(text):
        return True, True
    return False, _has_control_escape(text)


def check_manifest_size(data: Any) -> None:
    """Refuse manifest data (a JSON object from an API, a form's data) larger than the text limit, with the same
    message: a manifest sent as an object must not pass where the same manifest as YAML is refused."""
    if _measure(data)[0]:
        raise _too_large()


def parse_manifest(data: Any) -> Manifest:
    """Validate plain data (from YAML, JSON or a form) into a Manifest; raises ManifestError with all errors.

    One pass reports every error it can: the structural errors (pydantic), control characters, and the semantic
    errors of every part that is valid on its own (a duplicate id beside a typo elsewhere), each once, in the
    order their paths appear in the document. Data larger than :data:`MAX_MANIFEST_BYTES` as compact JSON is
    refused outright, like text of that size."""
    if not isinstance(data, dict):
        got = "null" if data is None else type(data).__name__
        raise ManifestError(
            [FieldError(path="", message=f"a manifest must be a mapping (object) at the top level, got {got}")]
        )
    too_large, may_have_control = _measure(data)
    if too_large:
        raise _too_large()
    control = control_character_errors(data) if may_have_control else []
    try:
        manifest = Manifest.model_validate(data, context={_SKIP_SEMANTICS: True})
    except ValidationError as exc:
        flagged = [tuple(e["loc"]) for e in exc.errors(include_url=False, include_context=False,
                                                      include_input=False)]
        errors = [*control, *pydantic_errors(exc), *semantic_errors_of_data(data, flagged)]
        raise ManifestError(in_document_order(errors, data)) from None
    errors = [*control, *validate_semantics(manifest)]
    if errors:
        raise ManifestError(in_document_order(errors, data))
    return manifest


def _check_size(text: str | bytes) -> str:
    if isinstance(text, bytes):
        if len(text) > MAX_MANIFEST_BYTES:
            raise _too_large()
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError([FieldError(path="", message=f"manifest text is not UTF-8: {exc}")]) from None
    if _text_too_large(text):
        raise _too_large()
    return text


# libyaml's parser when the wheel has it (about 10x faster); same nodes, marks and errors.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _TooManyNodes(Exception):
    pass


def _yaml_duplicates(
    node: yaml.Node, parts: tuple[str | int, ...], errors: list[FieldError], budget: list[int]
) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooManyNodes
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            key_part: str = key.value if isinstance(key, yaml.ScalarNode) else "?"
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                ident = (key.tag, key.value)
                if ident in seen:
                    errors.append(
                        FieldError(
                            path=_path((*parts, key_part)),
                            message=f"duplicate key {key.value!r} at line {key.start_mark.line + 1}, column "
                            f"{key.start_mark.column + 1} (first at line {seen[ident] + 1})",
                        )
                    )
                else:
                    seen[ident] = key.start_mark.line
            _yaml_duplicates(value, (*parts, key_part), errors, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _yaml_duplicates(item, (*parts, i), errors, budget)


def _yaml_error(exc: yaml.YAMLError) -> ManifestError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    detail = f"{context}: {problem}" if context else problem
    return ManifestError([FieldError(path="", message=f"invalid YAML{where}: {detail}")])


def load_yaml(text: str | bytes) -> Any:
    """Safe-load one YAML document; duplicate keys are errors (PyYAML silently keeps the last one)."""
    text = _check_size(text)
    loader = _SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        errors: list[FieldError] = []
        try:
            _yaml_duplicates(node, (), errors, [MAX_YAML_NODES])
        except _TooManyNodes:
            raise ManifestError(
                [FieldError(path="", message=f"YAML expands to more than {MAX_YAML_NODES} nodes (aliases?)")]
            ) from None
        if errors:
            raise ManifestError(errors)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    finally:
        loader.dispose()


class _PairsDict(dict):
    """A dict that remembers keys that appeared twice in the JSON text."""

    duplicates: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = _PairsDict()
    d.duplicates = []
    for k, v in pairs:
        if k in d:
            d.duplicates.append(k)
        d[k] = v
    return d


def _json_duplicates(value: Any, parts: tuple[str | int, ...], errors: list[FieldError]) -> Any:
    """Report duplicate keys and return the same data with plain dicts."""
    if isinstance(value, dict):
        for k in getattr(value, "duplicates", ()):
            errors.append(FieldError(path=_path((*parts, k)), message=f"duplicate key {k!r}"))
        return {k: _json_duplicates(v, (*parts, k), errors) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_duplicates(v, (*parts, i), errors) for i, v in enumerate(value)]
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def load_json(text: str | bytes) -> Any:
    text = _check_size(text)
    try:
        raw = json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_reject_constant)
    except RecursionError:  # json.loads recurses per level: ~1,000 nested arrays exhaust the stack
        raise ManifestError([FieldError(path="", message="invalid JSON: nested too deeply")]) from None
    except json.JSONDecodeError as exc:
        raise ManifestError(
            [FieldError(path="", message=f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
        ) from None
    except ValueError as exc:
        raise ManifestError([FieldError(path="", message=f"invalid JSON: {exc}")]) from None
    errors: list[FieldError] = []
    try:
        data = _json_duplicates(raw, (), errors)
    except RecursionError:  # just under json's own limit: this walk adds frames of its own
        raise ManifestError([FieldError(path="", message="invalid JSON: nested too deeply")]) from None
    if errors:
        raise ManifestError(errors)
    return data


def manifest_from_yaml(text: str | bytes) -> Manifest:
    return parse_manifest(load_yaml(text))


def manifest_from_json(text: str | bytes) -> Manifest:
    return parse_manifest(load_json(text))


# --- export ------------------------------------------------------------------------------------------


def manifest_to_json(m: Manifest) -> str:
    """Canonical JSON: compact, declared field order, dict order kept (never sorted)."""
    return m.model_dump_json()


def content_hash(m: Manifest) -> str:
    return text_content_hash(manifest_to_json(m))


def text_content_hash(canonical_json: str) -> str:
    """:func:`content_hash` of a manifest whose canonical JSON is already at hand."""
    return hashlib.sha256(canonical_json.encode("utf-8")).hexdigest()


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings as ``|`` literals so Markdown bodies stay readable in review."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def manifest_to_yaml(m: Manifest) -> str:
    return yaml.dump(
        m.model_dump(mode="json"),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
