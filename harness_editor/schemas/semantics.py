"""The semantic pass: what one field cannot see alone (unique ids, references between skills and tools, tool
schemas against the meta-schema, tool bindings against their implementations).

It reads a :class:`ManifestParts`: from a valid :class:`Manifest` everything (:func:`validate_semantics`); from data
that failed the structural pass (:func:`semantic_errors_of_data`) the items that are valid on their own and the ids
and names of every item, so one pass reports structural and semantic errors together (a duplicate is reported
beside a typo in another tool, not after it is fixed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from harness_editor.schemas.binding_checks import open_binding_errors
from harness_editor.schemas.bindings import BUILTIN_BINDINGS, BindingParam
from harness_editor.schemas.errors import FieldError, _join, _path
from harness_editor.schemas.manifest import (
    LOAD_SKILL_TOOL,
    Conventions,
    Hook,
    InteractionConstraints,
    Manifest,
    Skill,
    Tool,
)
from harness_editor.schemas.tool_schema import (
    _json_value_errors,
    _param_type_errors,
    _schema_valid,
    resolve_param_path,
    tool_schema_problems,
)

EMPTY_PARAMETERS_MESSAGE = ('an empty schema says nothing about the arguments; a tool without parameters has '
                            '{"type": "object", "properties": {}}')


@dataclass
class ManifestParts:
    """What the semantic pass reads. Item lists hold (document index, item) for the items that are structurally
    valid; the id lists hold (index, id) for every item whose id is a string; ``None``: that part is unreadable
    (not a list, or structurally invalid), so the checks that need all of it are not judged."""

    skills: list[tuple[int, Skill]]
    tools: list[tuple[int, Tool]]
    hooks: list[tuple[int, Any]]
    constraints: InteractionConstraints | None
    conventions: Conventions | None
    skill_ids: list[tuple[int, str]]
    skill_kinds: list[Any] | None
    tool_names: list[tuple[int, str]] | None
    allowed_tools: list[tuple[int, int, str]]
    hook_ids: list[tuple[int, str]]
    hook_kinds: list[tuple[int, Any]]
    block_ids: list[tuple[int, str]]


def _parts_of_manifest(m: Manifest) -> ManifestParts:
    return ManifestParts(
        skills=list(enumerate(m.skills)), tools=list(enumerate(m.tools)), hooks=list(enumerate(m.hooks)),
        constraints=m.constraints, conventions=m.conventions,
        skill_ids=[(i, s.id) for i, s in enumerate(m.skills)], skill_kinds=[s.kind for s in m.skills],
        tool_names=[(i, t.name) for i, t in enumerate(m.tools)],
        allowed_tools=[(i, j, name) for i, s in enumerate(m.skills) for j, name in enumerate(s.allowed_tools)],
        hook_ids=[(i, h.id) for i, h in enumerate(m.hooks)], hook_kinds=[(i, h.kind) for i, h in enumerate(m.hooks)],
        block_ids=[(i, b.id) for i, b in enumerate(m.prompt.blocks)],
    )


_HOOK_ADAPTER: TypeAdapter[Any] = TypeAdapter(Hook)


def _valid_items(raw: Any, validate, flagged: frozenset[int] = frozenset()) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    for i, item in enumerate(raw if isinstance(raw, list) else ()):
        if i in flagged:  # the structural pass already found it invalid
            continue
        try:
            out.append((i, validate(item)))
        except ValidationError:
            continue
    return out


def _valid_or_none(raw: Any, validate, flagged: bool = False) -> Any:
    if flagged:
        return None
    try:
        return validate(raw)
    except ValidationError:
        return None


def _ids(raw: Any, key: str) -> list[tuple[int, str]]:
    return [(i, item[key]) for i, item in enumerate(raw if isinstance(raw, list) else ())
            if isinstance(item, dict) and isinstance(item.get(key), str)]


def _parts_of_data(data: dict[str, Any], flagged: Iterable[tuple[str | int, ...]] = ()) -> ManifestParts:
    """The parts of manifest data that failed the structural pass (each item validated on its own; ``flagged``:
    the locations of the structural errors, whose items need no second look)."""
    bad: dict[str, set[int]] = {}
    bad_sections: set[str | int] = set()
    for loc in flagged:
        if loc:
            bad_sections.add(loc[0])
        if len(loc) >= 2 and isinstance(loc[0], str) and isinstance(loc[1], int):
            bad.setdefault(loc[0], set()).add(loc[1])
    skills, tools, hooks = data.get("skills"), data.get("tools", []), data.get("hooks", [])
    prompt = data.get("prompt")
    blocks = prompt.get("blocks") if isinstance(prompt, dict) else None
    return ManifestParts(
        skills=_valid_items(skills, Skill.model_validate, frozenset(bad.get("skills", ()))),
        tools=_valid_items(tools, Tool.model_validate, frozenset(bad.get("tools", ()))),
        hooks=_valid_items(hooks, _HOOK_ADAPTER.validate_python, frozenset(bad.get("hooks", ()))),
        constraints=_valid_or_none(data.get("constraints"), InteractionConstraints.model_validate,
                                   "constraints" in bad_sections),
        conventions=_valid_or_none(data.get("conventions", {}), Conventions.model_validate,
                                   "conventions" in bad_sections),
        skill_ids=_ids(skills, "id"),
        skill_kinds=[s.get("kind") if isinstance(s, dict) else None for s in skills]
        if isinstance(skills, list) else None,
        tool_names=_ids(tools, "name") if isinstance(tools, list) else None,
        allowed_tools=[(i, j, name) for i, s in enumerate(skills if isinstance(skills, list) else ())
                       if isinstance(s, dict) and isinstance(s.get("allowed_tools"), list)
                       for j, name in enumerate(s["allowed_tools"]) if isinstance(name, str)],
        hook_ids=_ids(hooks, "id"),
        hook_kinds=[(i, h.get("kind")) for i, h in enumerate(hooks if isinstance(hooks, list) else ())
                    if isinstance(h, dict)],
        block_ids=_ids(blocks, "id"),
    )


def _check_tool(t: Tool, i: int) -> list[FieldError]:
    """One structurally valid tool: its parameters schema, and its binding against that schema."""
    errors: list[FieldError] = []
    at = f"tools[{i}]"
    schema_ok = True
    bad_values = list(_json_value_errors(t.parameters, ()))
    for parts, msg in bad_values:
        errors.append(FieldError(path=_path(parts, f"{at}.parameters"), message=msg))
    if bad_values:
        schema_ok = False
    elif not t.parameters:
        errors.append(FieldError(path=f"{at}.parameters", message=EMPTY_PARAMETERS_MESSAGE))
        schema_ok = False
    else:
        problems = tool_schema_problems(t.parameters)
        for parts, msg in problems:
            errors.append(FieldError(path=_path(parts, f"{at}.parameters"), message=msg))
        # A typo'd keyword or an undeclared required name leaves a schema the binding checks can still read.
        schema_ok = not problems or _schema_valid(t.parameters)
    if schema_ok and t.parameters.get("type") != "object":
        errors.append(
            FieldError(
                path=f"{at}.parameters.type",
                message=f"the top-level parameters schema must have type 'object', got {t.parameters.get('type')!r}",
            )
        )
        schema_ok = False
    errors += _output_schema_errors(t, at)

    if not isinstance(t.binding, str):
        # unbound (a warning: tool_warnings) or an open kind (its own checks: _check_open_binding)
        errors += open_binding_errors(t, at, schema_ok)
        return errors
    binding = BUILTIN_BINDINGS.get(t.binding)
    if binding is None:
        errors.append(
            FieldError(
                path=f"{at}.binding",
                message=f"unknown binding {t.binding!r}; known: {', '.join(sorted(BUILTIN_BINDINGS))} "
                "(or an open binding: {kind: http | fixture | mcp, ...})",
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


def _output_schema_errors(t: Tool, at: str) -> list[FieldError]:
    """A tool's ``output_schema`` (the JSON Schema of its result) is held to what ``parameters`` is: JSON values,
    the meta-schema and the lint. Any schema will do (MCP asks for an object schema; the result of an HTTP or a
    built-in tool may be anything)."""
    if t.output_schema is None:
        return []
    where = f"{at}.output_schema"
    bad = list(_json_value_errors(t.output_schema, ()))
    problems = bad or tool_schema_problems(t.output_schema)
    return [FieldError(path=_path(parts, where), message=msg) for parts, msg in problems]


def _duplicates(ids: Iterable[tuple[int, str]], what: str, path_fmt: str) -> list[FieldError]:
    seen: dict[str, int] = {}
    errors: list[FieldError] = []
    for i, value in ids:
        if value in seen:
            first = path_fmt.format(i=seen[value]).rsplit(".", 1)[0]
            errors.append(
                FieldError(path=path_fmt.format(i=i), message=f"duplicate {what} {value!r} (first at {first})")
            )
        else:
            seen[value] = i
    return errors


def _tool_name_errors(names: Iterable[tuple[int, str]]) -> list[FieldError]:
    errors: list[FieldError] = []
    first: dict[str, int] = {}
    for i, name in names:
        if name == LOAD_SKILL_TOOL:
            errors.append(FieldError(path=f"tools[{i}].name",
                                     message=f"'{LOAD_SKILL_TOOL}' is reserved for the built-in skill loader"))
        elif name in first:
            errors.append(FieldError(path=f"tools[{i}].name",
                                     message=f"duplicate tool name {name!r} (first at tools[{first[name]}])"))
        else:
            first[name] = i
    return errors


def _conventions_errors(p: ManifestParts) -> list[FieldError]:
    """A harness that does not require a reply skill cannot have a hook that requires one."""
    if p.conventions is None or p.conventions.require_reply_skill:
        return []
    return [
        FieldError(path=f"hooks[{i}].kind", message="a reply_skill_loaded hook needs "
                   "conventions.require_reply_skill: true (remove the hook or require a reply skill)")
        for i, h in p.hooks if h.kind == "reply_skill_loaded" and h.enabled
    ]


def semantic_errors(p: ManifestParts) -> list[FieldError]:
    """Every cross-field error of the parts (empty = valid), roughly in document order."""
    errors: list[FieldError] = []
    errors += _duplicates(p.skill_ids, "skill id", "skills[{i}].id")
    if p.conventions is not None and p.conventions.require_reply_skill and p.skill_kinds is not None \
            and "reply" not in p.skill_kinds:
        errors.append(
            FieldError(
                path="skills",
                message="at least one skill must have kind 'reply' (a reply "
                "skill must be loaded before every final reply)",
            )
        )
    errors += _conventions_errors(p)

    if p.tool_names is not None:
        errors += _tool_name_errors(p.tool_names)
    for i, t in p.tools:
        errors += _check_tool(t, i)

    if p.tool_names is not None:
        known_tools = {name for _, name in p.tool_names} | {LOAD_SKILL_TOOL}
        for i, j, name in p.allowed_tools:
            if name not in known_tools:
                errors.append(
                    FieldError(
                        path=f"skills[{i}].allowed_tools[{j}]",
                        message=f"unknown tool {name!r}; tools in this manifest: "
                        f"{', '.join(n for _, n in p.tool_names) or 'none'}",
                    )
                )

    errors += _duplicates(p.hook_ids, "hook id", "hooks[{i}].id")
    retry_at = [i for i, kind in p.hook_kinds if kind == "retry_control"]
    for i in retry_at[1:]:
        errors.append(
            FieldError(
                path=f"hooks[{i}].kind",
                message=f"only one retry_control hook is allowed (first at hooks[{retry_at[0]}])",
            )
        )

    errors += _duplicates(p.block_ids, "block id", "prompt.blocks[{i}].id")

    c = p.constraints
    if c is not None and c.reply_min_chars > c.reply_max_chars:
        errors.append(
            FieldError(
                path="constraints.reply_min_chars",
                message=f"reply_min_chars ({c.reply_min_chars}) is greater than reply_max_chars ({c.reply_max_chars})",
            )
        )
    return errors


def validate_semantics(m: Manifest) -> list[FieldError]:
    """Cross-field checks on a structurally valid manifest; returns every error found (empty = valid)."""
    return semantic_errors(_parts_of_manifest(m))


def semantic_errors_of_data(data: dict[str, Any],
                            flagged: Iterable[tuple[str | int, ...]] = ()) -> list[FieldError]:
    """The semantic pass over manifest data that failed the structural pass: on the items valid on their own, and
    the ids and names of every item. ``flagged``: pydantic's error locations (a speed-up, never a change in
    what is found: a flagged item is invalid on its own too)."""
    return semantic_errors(_parts_of_data(data, flagged))
