"""Tools from outside: OpenAI, Anthropic and MCP tool definitions and plain (Python-typed) function definitions
as manifest tools, with a report of everything that was changed on the way.

:func:`import_tools` takes what a team pastes or uploads: text (JSON, YAML, or Python ``def`` signatures) or the
parsed data, in any of these forms (``source="auto"`` tells them apart per item):

- **openai**: ``{"type": "function", "function": {name, description, parameters, strict}}`` (chat completions),
  a bare function ``{name, description, parameters}`` (the legacy ``functions`` list, the Responses API's flat
  ``{"type": "function", "name": ...}``), a whole request's ``{"tools": [...]}`` / ``{"functions": [...]}``;
- **anthropic**: ``{name, description, input_schema, cache_control}``, alone or as a request's ``tools``;
- **mcp**: ``{name, title, description, inputSchema, outputSchema, annotations}``, a ``tools/list`` result
  ``{"tools": [...]}`` or its JSON-RPC answer ``{"result": {"tools": [...]}}``;
- **functions**: plain function definitions with Python-style types (:mod:`.functions` lists the forms).

Every output tool is ``{name, description, parameters, binding}`` (``binding`` is None — unbound — unless one was
given), valid for the harness: a name that :data:`~harness_editor.schemas.TOOL_NAME_RE` refuses is renamed
(``orders.get`` -> ``orders_get``), names made equal by renaming get suffixes (``_2``), a missing description is
filled in, the parameters become a JSON Schema 2020-12 object schema (:mod:`.schema`, :mod:`.pytypes`). Each
change is an :class:`ImportChange` (path into the input, kind, message). Kinds: ``renamed``, ``duplicate_name``,
``type_mapped``, ``unknown_type``, ``converted``, ``dropped_key``, ``defaulted``, ``truncated``, ``conflict``
(:func:`import_into_manifest`), ``annotated`` (an MCP tool's hints and output schema carried: :mod:`.hints`). What
cannot be imported at all raises :class:`ToolImportError` with every problem located; nothing is returned half-done.

Plain Python, no Django.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from harness_editor.importers.functions import (
    PARAM_KEYS,
    looks_like_signature,
    parse_signature,
    split_signatures,
    typed_parameters,
)
from harness_editor.importers.hints import annotations_of, output_schema_of
from harness_editor.importers.schema import (
    ImportChange,
    Recorder,
    ToolImportError,
    normalize_schema,
)
from harness_editor.schemas.errors import ManifestError, _join
from harness_editor.schemas.fields import TOOL_NAME_RE
from harness_editor.schemas.loading import load_json, load_yaml
from harness_editor.schemas.manifest import LOAD_SKILL_TOOL, Tool
from harness_editor.schemas.safe_schema import schema_safety_problems
from harness_editor.schemas.tool_schema import _json_value_errors, _schema_errors

__all__ = ["ImportChange", "ImportResult", "Source", "ToolImportError", "import_into_manifest", "import_tools",
           "tool_name_for"]

Source = Literal["auto", "openai", "anthropic", "mcp", "functions"]
SOURCES: tuple[str, ...] = ("auto", "openai", "anthropic", "mcp", "functions")
MAX_TOOLS = 500
MAX_DESCRIPTION = 1000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


@dataclass
class ImportResult:
    tools: list[dict[str, Any]]
    changes: list[ImportChange]
    source: str  # the form found: openai, anthropic, mcp, functions, or "mixed"
    origins: list[str] = field(default_factory=list)  # each tool's name as given (an MCP binding calls that)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "tools": self.tools, "origins": self.origins,
                "changes": [c.as_dict() for c in self.changes]}


# --- names -------------------------------------------------------------------------------------------------


def tool_name_for(raw: str) -> str:
    """A valid tool name for a foreign one: runs of other characters become ``_`` (``orders.get`` ->
    ``orders_get``), a leading digit or ``-`` gets a ``_`` in front, at most 64 characters."""
    name = re.sub(r"[^A-Za-z0-9_\-]+", "_", raw.strip())
    if not name or not re.match(r"[A-Za-z_]", name):
        name = "_" + name
    return name[:64]


def _unique(name: str, taken: set[str]) -> str:
    n = 2
    candidate = name
    while candidate in taken:
        suffix = f"_{n}"
        candidate = name[: 64 - len(suffix)] + suffix
        n += 1
    return candidate


# --- one item --------------------------------------------------------------------------------------------


def _kind_of(item: Any) -> str | None:
    """openai (wrapped), openai_function (bare, JSON Schema parameters), anthropic, mcp, plain, signature."""
    if isinstance(item, str):
        return "signature"
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):
        return "openai"
    if "input_schema" in item:
        return "anthropic"
    if "inputSchema" in item:
        return "mcp"
    if "signature" in item:
        return "plain"
    params = next((item[k] for k in PARAM_KEYS if k in item), None)
    if isinstance(params, list) or (isinstance(params, dict) and not _is_json_schema(params)):
        return "plain"
    if "name" in item or "description" in item or params is not None:
        return "openai_function"  # a name missing is then reported where it belongs
    return None


_SCHEMA_MARKERS = frozenset({"properties", "required", "$schema", "additionalProperties", "$defs", "definitions",
                             "anyOf", "oneOf", "allOf", "patternProperties", "$ref"})


def _is_json_schema(params: dict[str, Any]) -> bool:
    if not params:
        return True
    if _SCHEMA_MARKERS & set(params):
        return True
    return params.get("type") == "object"


_ACCEPTS: dict[str, frozenset[str]] = {
    "openai": frozenset({"openai", "openai_function"}),
    "anthropic": frozenset({"anthropic"}),
    "mcp": frozenset({"mcp"}),
    "functions": frozenset({"plain", "signature", "openai_function"}),
}
_FAMILY = {"openai": "openai", "openai_function": "openai", "anthropic": "anthropic", "mcp": "mcp",
           "plain": "functions", "signature": "functions"}
_KNOWN_KEYS: dict[str, frozenset[str]] = {
    "openai": frozenset({"type", "function"}),
    "openai_inner": frozenset({"name", "description", "parameters"}),
    "openai_function": frozenset({"name", "description", "parameters", "binding", "argument_map"}),
    "anthropic": frozenset({"name", "description", "input_schema", "binding", "argument_map"}),
    "mcp": frozenset({"name", "description", "inputSchema", "binding", "argument_map", "title", "annotations",
                      "outputSchema"}),
    "plain": frozenset({"name", "description", "signature", *PARAM_KEYS, "binding", "argument_map"}),
}


def _drop_unknown(item: dict[str, Any], known: frozenset[str], at: str, rec: Recorder, *, quiet: tuple = ()) -> None:
    for key in item:
        if key not in known and key not in quiet:
            rec.add(_join(at, key), "dropped_key", f"dropped {key!r} {_why(key)}")


def _why(key: str) -> str:
    return {
        "strict": "(OpenAI's strict mode: the harness checks arguments with its tool_args hook)",
        "cache_control": "(Anthropic's prompt caching)",
        "outputSchema": "(a tool's result is not declared in the manifest)",
        "annotations": "(MCP hints; not part of a manifest tool)",
        "title": "(a display title; the description is what the model reads)",
        "returns": "(a tool's result is not declared in the manifest)",
        "type": "(the tool's kind in its own API)",
    }.get(key, "(not a field of a manifest tool)")


def _description_of(item: dict[str, Any], at: str, rec: Recorder) -> Any:
    for key in ("description", "doc", "docstring", "summary"):
        if key in item:
            if key != "description":
                rec.add(_join(at, key), "converted", f"{key!r} used as the description")
            return item[key]
    if isinstance(item.get("title"), str):
        rec.add(_join(at, "title"), "converted", "'title' used as the description (no description given)")
        return item["title"]
    return None


def _one(item: Any, kind: str, at: str, rec: Recorder) -> dict[str, Any] | None:
    """The item as {name, description, parameters[, binding, argument_map]} before names are settled."""
    if kind == "signature":
        parsed = parse_signature(item, at, rec)
        return parsed and {**parsed, "_name_at": _join(at, "name")}
    body = item
    body_at = at
    if kind == "openai":
        _drop_unknown(item, _KNOWN_KEYS["openai"], at, rec, quiet=("type",) if item.get("type") == "function" else ())
        body = item["function"]
        body_at = _join(at, "function")
        _drop_unknown(body, _KNOWN_KEYS["openai_inner"], body_at, rec)
    else:
        quiet: tuple[str, ...] = ("type",) if item.get("type") in ("function", "custom") else ()
        quiet += tuple(k for k in ("doc", "docstring", "summary") if k in item)
        if "title" in item and "description" not in item:
            quiet += ("title",)
        _drop_unknown(item, _KNOWN_KEYS[kind], at, rec, quiet=quiet)
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        rec.error(_join(body_at, "name"), "a tool needs a name (a non-empty string)")
        return None
    description = _description_of(body, body_at, rec)
    out: dict[str, Any] = {"name": name, "description": description, "_name_at": _join(body_at, "name"),
                           "_description_at": _join(body_at, "description")}
    if kind == "plain":
        if "signature" in body:
            sig = body["signature"]
            parsed = parse_signature(f"def {name}{sig}" if isinstance(sig, str) and sig.lstrip().startswith("(")
                                     else sig if isinstance(sig, str) else "", _join(body_at, "signature"), rec)
            if parsed is None:
                return None
            out["parameters"] = parsed["parameters"]
            if description is None and parsed["description"]:
                out["description"] = parsed["description"]
        else:
            key = next(k for k in PARAM_KEYS if k in body)
            if key != "parameters":
                rec.add(_join(body_at, key), "converted", f"{key!r} read as the parameters")
            out["parameters"] = typed_parameters(body[key], _join(body_at, key), rec)
    else:
        key = {"anthropic": "input_schema", "mcp": "inputSchema"}.get(kind, "parameters")
        out["parameters"] = _parameters(body, key, _join(body_at, key), rec)
    if kind == "mcp":  # what it says it does and answers (hints.py): carried, reported
        out["annotations"] = annotations_of(body, body_at, rec)
        out["output_schema"] = output_schema_of(body, body_at, rec)
    for key in ("binding", "argument_map"):
        if key in body:
            out[key] = body[key]
    return out


def _parameters(body: dict[str, Any], key: str, at: str, rec: Recorder) -> dict[str, Any]:
    if key not in body or body[key] is None or body[key] == {}:
        rec.add(at, "defaulted", "no parameters given: an object schema with no properties")
        return {"type": "object", "properties": {}}
    schema, _ = normalize_schema(body[key], at, rec)
    if not isinstance(schema, dict):
        rec.add(at, "converted", f"parameters {json.dumps(schema)} -> an object schema with no properties")
        return {"type": "object", "properties": {}}
    if "type" not in schema and not ({"anyOf", "oneOf", "allOf", "$ref"} & set(schema)):
        rec.add(_join(at, "type"), "defaulted", "no top-level type: type 'object'")
        schema = {"type": "object", **schema}
    elif schema.get("type") != "object":
        rec.add(at, "converted", f"the parameters were a {schema.get('type') or 'combined'} schema, not an object: "
                "wrapped as the single property 'input'")
        schema = {"type": "object", "properties": {"input": schema}, "required": ["input"]}
    return schema


# --- the whole payload ------------------------------------------------------------------------------------


def _items(payload: Any, rec: Recorder) -> list[tuple[Any, str]]:
    """(item, path) for every tool definition in the payload."""
    if isinstance(payload, list):
        return [(item, _join("", i)) for i, item in enumerate(payload)]
    if isinstance(payload, dict):
        if isinstance(payload.get("result"), dict) and isinstance(payload["result"].get("tools"), list):
            return [(item, f"result.tools[{i}]") for i, item in enumerate(payload["result"]["tools"])]
        lists = [k for k in ("tools", "functions") if isinstance(payload.get(k), list)]
        if lists:
            other = [k for k in payload if k not in lists]
            if other:
                rec.add("", "dropped_key", f"ignored what is not a tool list: {', '.join(map(str, other[:10]))}"
                        + (" ..." if len(other) > 10 else ""))
            return [(item, f"{k}[{i}]") for k in lists for i, item in enumerate(payload[k])]
        return [(payload, "")]
    raise ToolImportError([("", f"expected tool definitions (a list or an object), got {type(payload).__name__}")])


def _load_text(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        raise ToolImportError([("", "nothing to import: the text is empty")])
    try:
        if stripped[0] in "[{":
            return load_json(text)
        if looks_like_signature(stripped):
            return split_signatures(stripped)
        return load_yaml(text)
    except ManifestError as exc:
        raise ToolImportError([(e.path, e.message) for e in exc.errors]) from None


def _clean_text(value: str, at: str, rec: Recorder, what: str) -> str:
    if _CONTROL.search(value):
        value = _CONTROL.sub("", value)
        rec.add(at, "converted", f"removed control characters from the {what}")
    return value


def _plain_json(value: Any, at: str, rec: Recorder, depth: int = 0) -> Any:
    """The value as JSON data (YAML may bring dates, NaN, non-string keys), control characters removed."""
    if isinstance(value, str):
        return _clean_text(value, at, rec, "text")
    if isinstance(value, float) and not math.isfinite(value):
        rec.add(at, "dropped_key", f"{value!r} is not a JSON number: imported as null")
        return None
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                key = k
            else:
                key = json.dumps(k) if isinstance(k, (int, float, bool)) or k is None else str(k)
            if key != k:
                rec.add(at, "converted", f"key {k!r} -> {key!r} (JSON keys are strings)")
            key = _clean_text(key, at, rec, "key")
            out[key] = _plain_json(v, _join(at, key), rec, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain_json(v, _join(at, i), rec, depth + 1) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    rec.add(at, "converted", f"{type(value).__name__} value -> the string {str(value)!r}")
    return str(value)


def import_tools(payload: Any, *, source: Source = "auto",
                 binding: Any | Callable[[str, str], Any] = None,
                 taken: set[str] | frozenset[str] = frozenset()) -> ImportResult:
    """Manifest tools from foreign definitions, and every change made on the way (see the module doc).

    ``binding``: the binding of every tool (a built-in id, an open binding dict), or a function
    ``(name as given, name as imported) -> binding``; None leaves the tools unbound. ``taken``: names already in
    use (the manifest's tools), so imported names avoid them."""
    if source not in SOURCES:
        raise ToolImportError([("", f"unknown source {source!r}; one of: {', '.join(SOURCES)}")])
    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolImportError([("", f"the file is not UTF-8 text: {exc}")]) from None
    if isinstance(payload, str):
        payload = _load_text(payload)
    rec = Recorder()
    items = _items(payload, rec)
    if not items:
        raise ToolImportError([("", "no tool definitions found")])
    if len(items) > MAX_TOOLS:
        raise ToolImportError([("", f"{len(items)} tool definitions: at most {MAX_TOOLS} at a time")])
    drafts: list[tuple[dict[str, Any], int]] = []
    families: list[str] = []
    for item, at in items:
        if isinstance(item, str) and not looks_like_signature(item):
            rec.error(at, "a text item must be a Python signature ('def name(param: type) -> type')")
            continue
        kind = _kind_of(item)
        if kind is None:
            rec.error(at, "not a tool definition: expected an OpenAI, Anthropic or MCP tool, or a function with a "
                      "name and parameters")
            continue
        if source != "auto" and kind not in _ACCEPTS[source]:
            rec.error(at, f"not a {source} tool definition (it looks like {_FAMILY[kind]})")
            continue
        rec.tool = len(drafts)
        if isinstance(item, str) and len(split_signatures(item)) > 1:
            rec.error(at, "one signature per item")
            continue
        draft = _one(item, kind, at, rec)
        if draft is not None:
            drafts.append((draft, len(drafts)))
            families.append(_FAMILY[kind])
    if rec.errors:
        raise ToolImportError(rec.errors)
    tools: list[dict[str, Any]] = []
    origins: list[str] = []
    used = set(taken) | {LOAD_SKILL_TOOL}
    # A name valid as given keeps it (its first holder does); renamed and repeated ones yield to it.
    claims: dict[str, int] = {}
    for draft, index in drafts:
        if tool_name_for(draft["name"]) == draft["name"] and draft["name"] not in used:
            claims.setdefault(draft["name"], index)
    for draft, index in drafts:
        rec.tool = index
        tools.append(_finish(draft, index, used, rec, binding, claims))
        origins.append(draft["name"])
    _verify(tools, [d for d, _ in drafts], rec)
    if rec.errors:
        raise ToolImportError(rec.errors)
    rec.changes.sort(key=lambda c: (c.tool is not None, c.tool or 0))  # stable: per tool, in the order made
    found = sorted(set(families))
    return ImportResult(tools=tools, changes=rec.changes, source=found[0] if len(found) == 1 else "mixed",
                        origins=origins)


def _finish(draft: dict[str, Any], index: int, used: set[str], rec: Recorder, binding: Any,
            claims: dict[str, int]) -> dict[str, Any]:
    raw = draft["name"]
    name_at = draft.get("_name_at", _join(f"[{index}]", "name"))
    name = tool_name_for(raw)
    if name != raw:
        foreign = "".join(dict.fromkeys(ch for ch in raw if not ch.isascii()))
        what = f"the non-ASCII characters {foreign!r} replaced; " if foreign else ""
        rec.add(name_at, "renamed", f"{raw!r} -> {name!r} ({what}a tool name has only ASCII letters, digits, '_', "
                "'-', starts with a letter or '_', at most 64 characters)")
    if name in used or claims.get(name, index) != index:
        unique = _unique(name, used | {n for n, i in claims.items() if i != index})
        why = "is reserved for the built-in skill loader" if name == LOAD_SKILL_TOOL else "is already taken"
        rec.add(name_at, "duplicate_name", f"{name!r} {why}: imported as {unique!r}")
        name = unique
    used.add(name)
    claims.pop(name, None)
    desc_at = draft.get("_description_at", _join(f"[{index}]", "description"))
    description = draft.get("description")
    if not isinstance(description, str) or not description.strip():
        if description is not None and not isinstance(description, str):
            rec.add(desc_at, "converted", f"the description {json.dumps(description)[:60]} is not text")
        description = f"{_CONTROL.sub('', raw).strip() or name} (imported without a description)"
        rec.add(desc_at, "defaulted", f"no description: {description!r}")
    else:
        description = _clean_text(description, desc_at, rec, "description")
        stripped = description.strip()
        if stripped != description:
            rec.add(desc_at, "converted", "removed leading and trailing whitespace from the description")
            description = stripped
        if len(description) > MAX_DESCRIPTION:
            rec.add(desc_at, "truncated", f"the description had {len(description)} characters: cut to "
                    f"{MAX_DESCRIPTION}")
            description = description[: MAX_DESCRIPTION - 1].rstrip() + "…"
    params_at = name_at.rsplit(".", 1)[0] if name_at.endswith(".name") else f"[{index}]"
    parameters = _plain_json(draft["parameters"], _join(params_at, "parameters"), rec)
    tool: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if "binding" in draft:
        tool["binding"] = copy.deepcopy(draft["binding"])
    elif callable(binding):
        tool["binding"] = binding(raw, name)
    else:
        tool["binding"] = copy.deepcopy(binding)
    if draft.get("argument_map"):
        tool["argument_map"] = copy.deepcopy(draft["argument_map"])
    for key in ("annotations", "output_schema"):
        if draft.get(key) is not None:
            tool[key] = draft[key]
    return tool


def _verify(tools: list[dict[str, Any]], drafts: list[dict[str, Any]], rec: Recorder) -> None:
    """What the importer made must be a valid manifest tool: anything left over is an error, located."""
    for tool, draft in zip(tools, drafts, strict=True):
        at = draft.get("_name_at", "").rsplit(".", 1)[0]
        if not TOOL_NAME_RE.fullmatch(tool["name"]):
            rec.error(_join(at, "name"), f"cannot make a tool name of {draft['name']!r}")
        # a schema that could not run safely (a remote reference, a pattern RE2 refuses) is refused here, at its
        # place in the input, not only when the harness is saved
        problems = [*_json_value_errors(tool["parameters"], ()), *_schema_errors(tool["parameters"])]
        for parts, message in problems or schema_safety_problems(tool["parameters"]):
            path = _join(at, "parameters")
            for p in parts:
                path = _join(path, p)
            rec.error(path, message)
        # A binding given with the definitions is the manifest's to judge (at tools[i].binding...), not ours.
        try:
            Tool.model_validate({"name": tool["name"], "description": tool["description"],
                                 "parameters": tool["parameters"]})
        except ValueError as exc:
            for err in getattr(exc, "errors", lambda: [])():
                loc = [str(x) for x in err.get("loc", ())]
                if loc and loc[0] != "parameters":
                    rec.error(_join(at, loc[0]), err.get("msg", str(exc)))


# --- into a manifest --------------------------------------------------------------------------------------

OnConflict = Literal["rename", "replace", "skip", "error"]


def import_into_manifest(manifest_data: dict[str, Any], result: ImportResult, *,
                         on_conflict: OnConflict = "rename") -> tuple[dict[str, Any], list[ImportChange]]:
    """A copy of the manifest data with the imported tools appended, and what happened to each whose name the
    manifest already uses: ``rename`` (a suffix: ``_2``), ``replace`` (the manifest's tool of that name is
    replaced where it stands), ``skip`` (left out), ``error`` (:class:`ToolImportError`, nothing changed)."""
    if on_conflict not in ("rename", "replace", "skip", "error"):
        raise ToolImportError([("", f"unknown on_conflict {on_conflict!r}; one of: rename, replace, skip, error")])
    data = copy.deepcopy(manifest_data)
    existing = data.get("tools")
    if existing is None:
        existing = data["tools"] = []
    if not isinstance(existing, list):
        raise ToolImportError([("tools", "the manifest's tools are not a list")])
    index = {t.get("name"): i for i, t in enumerate(existing) if isinstance(t, dict)}
    used = set(index) | {LOAD_SKILL_TOOL} | {t["name"] for t in result.tools}
    changes: list[ImportChange] = []
    errors: list[tuple[str, str]] = []
    for i, tool in enumerate(result.tools):
        tool = copy.deepcopy(tool)
        name = tool["name"]
        at = f"tools[{len(existing)}]"
        if name in index or name == LOAD_SKILL_TOOL:
            where = f"tools[{index[name]}]" if name in index else "the built-in skill loader"
            if on_conflict == "error":
                errors.append((f"[{i}].name", f"the manifest already has a tool {name!r} ({where})"))
                continue
            if on_conflict == "skip":
                changes.append(ImportChange(f"[{i}].name", "conflict", f"{name!r} is already in the manifest "
                                            f"({where}): not imported", i))
                continue
            if on_conflict == "replace" and name in index:
                existing[index[name]] = tool
                changes.append(ImportChange(f"tools[{index[name]}]", "conflict", f"{name!r} replaced the "
                                            f"manifest's tool of that name ({where})", i))
                continue
            new = _unique(name, used)
            used.add(new)
            changes.append(ImportChange(f"[{i}].name", "conflict", f"{name!r} is already in the manifest ({where}): "
                                        f"imported as {new!r}", i))
            tool["name"] = new
        index[tool["name"]] = len(existing)
        existing.append(tool)
        del at
    if errors:
        raise ToolImportError(errors)
    return data, changes
