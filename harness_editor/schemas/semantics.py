"""The semantic pass: what one field cannot see alone (unique ids, references between skills and tools, tool
schemas against the meta-schema, tool bindings against their implementations)."""

from __future__ import annotations

from collections.abc import Iterable

from harness_editor.schemas.binding_checks import open_binding_errors
from harness_editor.schemas.bindings import BUILTIN_BINDINGS, BindingParam
from harness_editor.schemas.errors import FieldError, _join, _path
from harness_editor.schemas.manifest import LOAD_SKILL_TOOL, Manifest, Tool
from harness_editor.schemas.tool_schema import (
    _json_value_errors,
    _param_type_errors,
    _schema_errors,
    resolve_param_path,
)


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


def _conventions_errors(m: Manifest) -> list[FieldError]:
    """A harness that does not require a reply skill cannot have a hook that requires one."""
    if m.conventions.require_reply_skill:
        return []
    return [
        FieldError(path=f"hooks[{i}].kind", message="a reply_skill_loaded hook needs "
                   "conventions.require_reply_skill: true (remove the hook or require a reply skill)")
        for i, h in enumerate(m.hooks) if h.kind == "reply_skill_loaded" and h.enabled
    ]


def validate_semantics(m: Manifest) -> list[FieldError]:
    """Cross-field checks on a structurally valid manifest; returns every error found (empty = valid)."""
    errors: list[FieldError] = []
    errors += _duplicates((s.id for s in m.skills), "skill id", "skills[{i}].id")
    if m.conventions.require_reply_skill and not any(s.kind == "reply" for s in m.skills):
        errors.append(
            FieldError(
                path="skills",
                message="at least one skill must have kind 'reply' (a reply "
                "skill must be loaded before every final reply)",
            )
        )
    errors += _conventions_errors(m)

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

