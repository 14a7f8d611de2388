"""The manifest: one harness written down (skills, tools, hooks, system prompt blocks, constraints).

Plain pydantic, no Django: the turn engine, GPU workers (HSA, training, evaluation) and the CLI import it.

Validation happens in two passes. The structural pass is pydantic (strict types, ``extra="forbid"`` on every
model, so a typo is an error and not a silently ignored key). The semantic pass (:func:`validate_semantics`)
checks what one field cannot see alone: unique ids, references between skills and tools, tool schemas
against the JSON Schema meta-schema, tool bindings against their implementations. :func:`parse_manifest`
reports *all* errors of a pass as :class:`FieldError` with a precise path such as
``tools[3].parameters.properties.sku.type``, so the editor can put each message next to its field.

A :class:`Manifest` built any other way (``Manifest.model_validate``) runs the semantic pass too and fails
with one combined message: an instance is always a valid harness.

Canonical form: :func:`manifest_to_json` (compact, fields in declared order, dict order as given: JSON
Schema property order is part of what the model sees, so nothing is ever sorted). :func:`content_hash` is
the sha256 of that text.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Annotated, Any, Literal

import jsonschema
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from streams.bindings import BINDINGS, BindingParam

MAX_MANIFEST_BYTES = 1_000_000  # YAML / JSON text accepted by manifest_from_yaml / manifest_from_json
MAX_YAML_NODES = 200_000  # guards against alias bombs ("billion laughs") before anything walks the data
LOAD_SKILL_TOOL = "load_skill"  # built-in tool; the renderer adds it, a manifest may not define it

SKILL_ID_RE = re.compile(r"^[^\W\d][\w\-.]*$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
SLUG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
LANGUAGE_RE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
_IDENT_RE = re.compile(r"^[^\W\d][\w\-]*$")


# --- errors ------------------------------------------------------------------------------------------


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


# --- constrained field types -------------------------------------------------------------------------


def _matches(regex: re.Pattern[str], rule: str):
    def check(value: str) -> str:
        if not regex.fullmatch(value):  # not .match: "$" would accept a trailing newline
            raise ValueError(f"{value!r} is not valid: {rule}")
        return value

    return AfterValidator(check)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _one_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be a single line (no line breaks)")
    return value


def _compiles(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


SkillId = Annotated[
    str,
    Field(min_length=1, max_length=64),
    _matches(SKILL_ID_RE, "a skill id starts with a letter or '_' and has only letters, digits, '_', '-', '.'"),
]
ToolName = Annotated[
    str,
    Field(min_length=1, max_length=64),
    _matches(
        TOOL_NAME_RE,
        "a tool name starts with a letter or '_' and has only ASCII letters, digits, '_', '-' (at most 64 characters)",
    ),
]
Slug = Annotated[
    str,
    Field(min_length=1, max_length=64),
    _matches(SLUG_RE, "an id has only ASCII letters, digits, '_' and '-', and does not start with '-'"),
]

_NotBlank = AfterValidator(_not_blank)
_OneLine = AfterValidator(_one_line)
# Length constraints come first so their messages stay "at most N characters".
ManifestName = Annotated[str, Field(min_length=1, max_length=120), _NotBlank]
SkillDescription = Annotated[str, Field(min_length=1, max_length=300), _OneLine, _NotBlank]
SkillBody = Annotated[str, Field(min_length=1, max_length=20000), _NotBlank]
ToolDescription = Annotated[str, Field(min_length=1, max_length=1000), _NotBlank]
HookText = Annotated[str, Field(min_length=1, max_length=500), _NotBlank]
BlockTitle = Annotated[str, Field(min_length=1, max_length=120), _OneLine, _NotBlank]
Regex = Annotated[str, AfterValidator(_compiles)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- skills and tools --------------------------------------------------------------------------------


class Skill(_Model):
    """A Markdown module; the model sees id + description always, the body only after load_skill(id)."""

    id: SkillId
    kind: Literal["reply", "strategy"]
    description: SkillDescription
    body: SkillBody
    allowed_tools: list[str] = Field(default_factory=list)


def argument_path_get(arguments: Any, dotted: str) -> tuple[bool, Any]:
    """The value at a tool argument map's dotted path (``"item.link_id"``) in a call's arguments, if there."""
    node = arguments
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def argument_path_set(arguments: dict[str, Any], dotted: str, value: Any) -> None:
    """Put ``value`` at a dotted argument path, creating the objects on the way."""
    node = arguments
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


class Tool(_Model):
    """A JSON-Schema function exposed to the model, bound to an implementation in ``streams.bindings``."""

    name: ToolName
    description: ToolDescription
    parameters: dict[str, Any]
    binding: str
    argument_map: dict[str, str] = Field(default_factory=dict)


# --- hooks -------------------------------------------------------------------------------------------


class _HookBase(_Model):
    id: Slug
    kind: str  # narrowed to a Literal by each kind; declared here so it comes right after id in exports
    enabled: bool = True
    on_fail: Literal["retry", "block"] = "retry"
    message: HookText


class ViewerInputHook(_HookBase):
    """Validate viewer comments before the model sees them."""

    kind: Literal["viewer_input"]
    max_chars: int = Field(default=300, ge=1, le=2000)
    blocked_patterns: list[Regex] = Field(default_factory=list)


class ToolArgsHook(_HookBase):
    """Validate tool-call arguments against the tool's JSON Schema."""

    kind: Literal["tool_args"]
    strict: bool = True


class ReplySkillLoadedHook(_HookBase):
    """At least one reply skill must be loaded before the final reply."""

    kind: Literal["reply_skill_loaded"]


class ReplyFormatHook(_HookBase):
    """The reply goes to TTS: no markdown, URLs or emoji when speakable; optional sentence cap."""

    kind: Literal["reply_format"]
    speakable: bool = True
    max_sentences: int | None = Field(default=None, ge=1, le=20)


class BannedPhrasesHook(_HookBase):
    kind: Literal["banned_phrases"]
    phrases: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=1, max_length=500)
    case_sensitive: bool = False


class FactualRiskHook(_HookBase):
    """Numbers of these kinds in a reply must be backed by a tool result in the same turn."""

    kind: Literal["factual_risk"]
    check: list[Literal["price", "stock", "discount"]] = Field(min_length=1)


class RetryControlHook(_HookBase):
    kind: Literal["retry_control"]
    max_retries: int = Field(default=2, ge=0, le=5)
    fallback_reply: HookText


Hook = Annotated[
    ViewerInputHook
    | ToolArgsHook
    | ReplySkillLoadedHook
    | ReplyFormatHook
    | BannedPhrasesHook
    | FactualRiskHook
    | RetryControlHook,
    Field(discriminator="kind"),
]
HOOK_KINDS: tuple[str, ...] = (
    "viewer_input",
    "tool_args",
    "reply_skill_loaded",
    "reply_format",
    "banned_phrases",
    "factual_risk",
    "retry_control",
)


# --- system prompt and constraints --------------------------------------------------------------------

BlockRole = Literal[
    "persona", "room_context", "business_rules", "compliance", "output_format", "skills_index", "custom"
]


class PromptBlock(_Model):
    id: Slug
    role: BlockRole
    title: BlockTitle
    content: str = Field(default="", max_length=20000)
    items: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list)


class SystemPrompt(_Model):
    layout: Literal["markdown", "xml", "json", "plain"] = "markdown"
    blocks: list[PromptBlock] = Field(min_length=1, max_length=50)


DEFAULT_TURN_DEADLINE_S = 20.0
DEFAULT_HISTORY_TURNS = 6


class InteractionConstraints(_Model):
    reply_min_chars: int = Field(default=10, ge=0, le=2000)
    reply_max_chars: int = Field(default=200, ge=1, le=4000)
    language: Annotated[str, _matches(LANGUAGE_RE, "use a BCP-47 language tag such as 'en' or 'zh-CN'")] = "en"
    tone: str = Field(default="friendly", max_length=200)
    speakable: bool = True
    turn_limit: int = Field(default=6, ge=1, le=50)
    max_tool_rounds: int = Field(default=3, ge=0, le=20)
    # Wall-clock budget of a whole turn (all model requests, tool calls and hook retries), in seconds; past it
    # the engine speaks the fallback line. Declared last and left out of the dump at its default (below).
    turn_deadline_s: float = Field(default=DEFAULT_TURN_DEADLINE_S, ge=1, le=300, allow_inf_nan=False)
    # How many previous turns (viewer comments + the avatar's reply) the model sees; 0 = every turn stands
    # alone (a model trained on single turns, like the tiny demo model, is lost in a dialogue history).
    history_turns: int = Field(default=DEFAULT_HISTORY_TURNS, ge=0, le=50)

    @model_serializer(mode="wrap")
    def _omit_defaults_added_later(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Versions stored before these fields existed must keep their canonical JSON and content hash, so a
        # manifest at their defaults serialises exactly as it did then.
        data = handler(self)
        if self.turn_deadline_s == DEFAULT_TURN_DEADLINE_S:
            data.pop("turn_deadline_s", None)
        if self.history_turns == DEFAULT_HISTORY_TURNS:
            data.pop("history_turns", None)
        return data


_SKIP_SEMANTICS = "harness_editor.skip_semantics"


class Manifest(_Model):
    name: ManifestName
    description: str = Field(default="", max_length=2000)
    skills: list[Skill] = Field(min_length=1, max_length=200)
    tools: list[Tool] = Field(default_factory=list, max_length=100)
    hooks: list[Hook] = Field(default_factory=list, max_length=50)
    prompt: SystemPrompt
    constraints: InteractionConstraints

    @model_validator(mode="after")
    def _semantics(self, info: ValidationInfo) -> Manifest:
        # parse_manifest runs this pass itself to report each error at its own path.
        if isinstance(info.context, dict) and info.context.get(_SKIP_SEMANTICS):
            return self
        errors = validate_semantics(self)
        if errors:
            raise ValueError("; ".join(f"{e.path}: {e.message}" for e in errors))
        return self

    def skill(self, skill_id: str) -> Skill | None:
        return next((s for s in self.skills if s.id == skill_id), None)

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


# --- locations -----------------------------------------------------------------------------------------

# Pydantic puts the tag of a discriminated-union member into the location: ('hooks', 0, 'banned_phrases',
# 'phrases'). The path a human edits has no such segment.
_UNION_TAGS: dict[str, frozenset[str]] = {"hooks": frozenset(HOOK_KINDS)}


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
        ):
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
    """The node a local ``$ref`` ("#/$defs/id") points to inside the tool's parameters schema, or None."""
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


def _check_tool(t: Tool, i: int, tool_names: dict[str, int]) -> list[FieldError]:
    errors: list[FieldError] = []
    at = f"tools[{i}]"
    if t.name == LOAD_SKILL_TOOL:
        errors.append(
            FieldError(path=f"{at}.name", message=f"'{LOAD_SKILL_TOOL}' is reserved for the built-in skill loader")
        )
    elif t.name in tool_names:
        errors.append(
            FieldError(
                path=f"{at}.name", message=f"duplicate tool name {t.name!r} (first at tools[{tool_names[t.name]}])"
            )
        )
    else:
        tool_names[t.name] = i

    schema_ok = True
    bad_values = list(_json_value_errors(t.parameters, ()))
    for parts, msg in bad_values:
        errors.append(FieldError(path=_path(parts, f"{at}.parameters"), message=msg))
    if bad_values:
        schema_ok = False
    else:
        for parts, msg in _schema_errors(t.parameters):
            errors.append(FieldError(path=_path(parts, f"{at}.parameters"), message=msg))
            schema_ok = False
    if schema_ok and t.parameters.get("type") != "object":
        errors.append(
            FieldError(
                path=f"{at}.parameters.type",
                message=f"the top-level parameters schema must have type 'object', got {t.parameters.get('type')!r}",
            )
        )
        schema_ok = False

    binding = BINDINGS.get(t.binding)
    if binding is None:
        errors.append(
            FieldError(
                path=f"{at}.binding", message=f"unknown binding {t.binding!r}; known: {', '.join(sorted(BINDINGS))}"
            )
        )
        return errors

    for impl_param, tool_path in t.argument_map.items():
        where = _join(f"{at}.argument_map", impl_param)
        bp: BindingParam | None = binding.params.get(impl_param)
        if bp is None:
            known = ", ".join(binding.params) or "none"
            errors.append(
                FieldError(
                    path=where,
                    message=f"binding {t.binding!r} has no parameter {impl_param!r}; its parameters: {known}",
                )
            )
            continue
        if not schema_ok:
            continue
        node = resolve_param_path(t.parameters, tool_path)
        if node is None:
            errors.append(
                FieldError(
                    path=where,
                    message=f"tool parameter path {tool_path!r} is not in the "
                    "parameters schema (use dotted names through 'properties', e.g. 'args.sku')",
                )
            )
            continue
        node_path = _path([part for seg in tool_path.split(".") for part in ("properties", seg)],
                          f"{at}.parameters")
        for path, message in _param_type_errors(node, bp, t.binding, tool_path, t.parameters, where, node_path):
            errors.append(FieldError(path=path, message=message))
    for bp in binding.params.values():
        if bp.required and bp.name not in t.argument_map:
            errors.append(
                FieldError(
                    path=f"{at}.argument_map",
                    message=f"required implementation parameter {bp.name!r} of binding {t.binding!r} is not mapped",
                )
            )
    return errors


def _duplicates(ids: Iterable[str], what: str, path_fmt: str) -> list[FieldError]:
    seen: dict[str, int] = {}
    errors: list[FieldError] = []
    for i, value in enumerate(ids):
        if value in seen:
            first = path_fmt.format(i=seen[value]).rsplit(".", 1)[0]
            errors.append(
                FieldError(path=path_fmt.format(i=i), message=f"duplicate {what} {value!r} (first at {first})")
            )
        else:
            seen[value] = i
    return errors


def validate_semantics(m: Manifest) -> list[FieldError]:
    """Cross-field checks on a structurally valid manifest; returns every error found (empty = valid)."""
    errors: list[FieldError] = []
    errors += _duplicates((s.id for s in m.skills), "skill id", "skills[{i}].id")
    if not any(s.kind == "reply" for s in m.skills):
        errors.append(
            FieldError(
                path="skills",
                message="at least one skill must have kind 'reply' (a reply "
                "skill must be loaded before every final reply)",
            )
        )

    tool_names: dict[str, int] = {}
    for i, t in enumerate(m.tools):
        errors += _check_tool(t, i, tool_names)

    known_tools = {t.name for t in m.tools} | {LOAD_SKILL_TOOL}
    for i, s in enumerate(m.skills):
        for j, name in enumerate(s.allowed_tools):
            if name not in known_tools:
                errors.append(
                    FieldError(
                        path=f"skills[{i}].allowed_tools[{j}]",
                        message=f"unknown tool {name!r}; tools in this manifest: "
                        f"{', '.join(t.name for t in m.tools) or 'none'}",
                    )
                )

    errors += _duplicates((h.id for h in m.hooks), "hook id", "hooks[{i}].id")
    retry_at = [i for i, h in enumerate(m.hooks) if h.kind == "retry_control"]
    for i in retry_at[1:]:
        errors.append(
            FieldError(
                path=f"hooks[{i}].kind",
                message=f"only one retry_control hook is allowed (first at hooks[{retry_at[0]}])",
            )
        )

    errors += _duplicates((b.id for b in m.prompt.blocks), "block id", "prompt.blocks[{i}].id")

    c = m.constraints
    if c.reply_min_chars > c.reply_max_chars:
        errors.append(
            FieldError(
                path="constraints.reply_min_chars",
                message=f"reply_min_chars ({c.reply_min_chars}) is greater than reply_max_chars ({c.reply_max_chars})",
            )
        )
    return errors


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


def parse_manifest(data: Any) -> Manifest:
    """Validate plain data (from YAML, JSON or a form) into a Manifest; raises ManifestError with all errors."""
    if not isinstance(data, dict):
        got = "null" if data is None else type(data).__name__
        raise ManifestError(
            [FieldError(path="", message=f"a manifest must be a mapping (object) at the top level, got {got}")]
        )
    control = control_character_errors(data)
    if control:
        raise ManifestError(control)
    try:
        manifest = Manifest.model_validate(data, context={_SKIP_SEMANTICS: True})
    except ValidationError as exc:
        raise ManifestError(pydantic_errors(exc)) from None
    errors = validate_semantics(manifest)
    if errors:
        raise ManifestError(errors)
    return manifest


def _check_size(text: str | bytes) -> str:
    if isinstance(text, bytes):
        if len(text) > MAX_MANIFEST_BYTES:
            raise ManifestError(
                [FieldError(path="", message=f"manifest text is larger than {MAX_MANIFEST_BYTES} bytes")]
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError([FieldError(path="", message=f"manifest text is not UTF-8: {exc}")]) from None
    if len(text) > MAX_MANIFEST_BYTES or len(text.encode("utf-8")) > MAX_MANIFEST_BYTES:
        raise ManifestError([FieldError(path="", message=f"manifest text is larger than {MAX_MANIFEST_BYTES} bytes")])
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
    return hashlib.sha256(manifest_to_json(m).encode("utf-8")).hexdigest()


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
