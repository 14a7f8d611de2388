"""Tools: added, removed, renamed (paired by likeness), and field by field — description, the parameter schema at
any depth (:mod:`.schema`), the binding, the argument map, the annotations and the output schema."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from harness_editor.diff.changes import Change, presence, reorder, short, text_diff
from harness_editor.diff.matching import (
    SchemaShape,
    bag_similarity,
    name_similarity,
    pair_by_score,
    schema_shape,
    shape_similarity,
    words,
)
from harness_editor.diff.schema import schema_changes
from harness_editor.schemas import Manifest, Tool
from harness_editor.schemas.bindings import binding_kind, binding_label
from harness_editor.schemas.tool_effects import tool_effect

# A renamed tool: score = weighted name, parameter-schema, binding and description likeness (see tool_similarity).
TOOL_RENAME_THRESHOLD = 0.6
_NAME_W, _SCHEMA_W, _BINDING_W, _DESCRIPTION_W = 0.3, 0.3, 0.15, 0.25

# Fields of an open binding whose change sends the tool's calls somewhere else (breaking); the others (timeouts,
# retries, size cap) only change how a call is made.
_BINDING_TARGET_FIELDS = {
    "http": ("endpoint", "method", "path", "query", "body", "result"),
    "mcp": ("server", "tool"),
    "fixture": (),
}


def binding_value(binding: Any) -> Any:
    """A binding as plain JSON: the built-in id, the open binding's fields, or None."""
    return binding.model_dump(mode="json") if isinstance(binding, BaseModel) else binding


def binding_similarity(a: Any, b: Any) -> float:
    """1 for the same binding; less for the same kind (more for the same endpoint / server); two unbound tools
    share nothing but the lack of a binding."""
    if a is None and b is None:
        return 0.3
    if a == b:
        return 1.0
    if binding_kind(a) != binding_kind(b):
        return 0.0
    if binding_label(a) == binding_label(b):
        return 0.7
    return 0.4


@dataclass(frozen=True)
class _Look:
    """What a tool looks like, computed once per tool for the pairwise scores."""

    tool: Tool
    shape: SchemaShape
    words: Counter[str]


def _look(t: Tool) -> _Look:
    return _Look(t, schema_shape(t.parameters), words(t.description))


def _look_similarity(a: _Look, b: _Look) -> float:
    return (_NAME_W * name_similarity(a.tool.name, b.tool.name)
            + _SCHEMA_W * shape_similarity(a.shape, b.shape)
            + _BINDING_W * binding_similarity(a.tool.binding, b.tool.binding)
            + _DESCRIPTION_W * bag_similarity(a.words, b.words))


def binding_identity(binding: Any) -> tuple[str, ...] | None:
    """What a binding calls, when that names one implementation: a built-in id, an HTTP endpoint + method + path,
    an MCP server + tool named explicitly (an empty ``tool`` means the manifest tool's own name, which a rename
    changes). Fixtures and unbound tools have no identity."""
    kind = binding_kind(binding)
    if kind == "builtin":
        return ("builtin", binding)
    if kind == "http":
        return ("http", binding.endpoint, binding.method, binding.path)
    if kind == "mcp" and binding.tool:
        return ("mcp", binding.server, binding.tool)
    return None


def tool_similarity(a: Tool, b: Tool) -> float:
    """0..1: how likely ``b`` is ``a`` renamed (name, parameter schema, binding, description)."""
    return _look_similarity(_look(a), _look(b))


def _binding_changes(key: str, path: str, old: Any, new: Any) -> list[Change]:
    if old == new:
        return []
    ok, nk = binding_kind(old), binding_kind(new)
    before, after = binding_value(old), binding_value(new)
    if ok != nk or ok in ("builtin", "unbound"):
        # Binding a tool that was unbound only makes failing calls work; anything else reroutes them.
        breaking = ok != "unbound"
        return [Change(component="tool", kind="changed", key=key, path=f"{path}.binding", breaking=breaking,
                       summary=f"tool '{key}' binding {binding_label(old) or 'unbound'} → "
                               f"{binding_label(new) or 'unbound'}",
                       before=before, after=after)]
    out: list[Change] = []
    for field in dict.fromkeys([*before, *after]):
        ov, nv = before.get(field), after.get(field)
        if ov == nv:
            continue
        if field == "cases":
            ov, nv = ov or [], nv or []
            gone = [c for c in ov if c not in nv]
            added = [c for c in nv if c not in ov]
            bits = ([f"{len(added)} added"] if added else []) + ([f"{len(gone)} removed or changed"] if gone else [])
            # A case taken away changes some answer; a new case only answers calls that got the default before.
            out.append(Change(component="tool", kind="changed", key=key, path=f"{path}.binding.cases",
                              breaking=bool(gone), before=ov, after=nv,
                              summary=f"tool '{key}' fixture cases: {', '.join(bits) or 'reordered'}"))
            continue
        breaking = field in _BINDING_TARGET_FIELDS.get(ok, ()) or field == "default"
        out.append(Change(component="tool", kind="changed", key=key, path=f"{path}.binding.{field}",
                          breaking=breaking, before=ov, after=nv,
                          summary=f"tool '{key}' {ok} binding {field} {short(ov)} → {short(nv)}"))
    return out


def _tool_fields(old: Tool, new: Tool) -> list[Change]:
    key, path = new.name, f"tools[{new.name}]"
    out: list[Change] = []
    if old.description != new.description:
        out.append(
            Change(
                component="tool",
                kind="changed",
                key=key,
                path=f"{path}.description",
                summary=f"tool '{key}' description reworded",
                before=old.description,
                after=new.description,
                text_diff=text_diff(old.description, new.description, f"{path}.description"),
            )
        )
    out += schema_changes(key, old.parameters, new.parameters, f"{path}.parameters")
    out += _binding_changes(key, path, old.binding, new.binding)
    if old.argument_map != new.argument_map:
        lost = [k for k, v in old.argument_map.items() if new.argument_map.get(k) != v]
        out.append(
            Change(
                component="tool",
                kind="changed",
                key=key,
                path=f"{path}.argument_map",
                breaking=bool(lost),
                summary=f"tool '{key}' argument map {short(old.argument_map)} → {short(new.argument_map)}",
                before=old.argument_map,
                after=new.argument_map,
            )
        )
    return out + _hint_changes(old, new, key, path)


def _hint_changes(old: Tool, new: Tool, key: str, path: str) -> list[Change]:
    """Annotations (what the tool says it does: a reviewer must see a tool turn destructive, or stop saying it is
    not) and the output schema. Neither changes what a call sends or gets: never breaking."""
    out: list[Change] = []
    before, after = old.annotations, new.annotations
    if before != after:
        b = before.model_dump(mode="json") if before else {}
        a = after.model_dump(mode="json") if after else {}
        was, now = tool_effect(old), tool_effect(new)
        effect = f" (effect {was.label} → {now.label})" if was.effect != now.effect else ""
        for field in dict.fromkeys([*b, *a]):
            if b.get(field) != a.get(field):
                out.append(Change(component="tool", kind="changed", key=key, path=f"{path}.annotations.{field}",
                                  before=b.get(field), after=a.get(field),
                                  summary=f"tool '{key}' annotation {field} {short(b.get(field))} → "
                                          f"{short(a.get(field))}{effect}"))
    if old.output_schema != new.output_schema:
        what = ("added" if old.output_schema is None else "removed" if new.output_schema is None else "changed")
        out.append(Change(component="tool", kind="changed", key=key, path=f"{path}.output_schema",
                          before=old.output_schema, after=new.output_schema,
                          summary=f"tool '{key}' output schema {what}"))
    return out


def diff_tools(old: Manifest, new: Manifest) -> tuple[list[Change], dict[str, str]]:
    """The tool changes, and the renames found (old name → new name)."""
    out: list[Change] = []
    old_by = {t.name: t for t in old.tools}
    new_by = {t.name: t for t in new.tools}
    removed = [t for t in old.tools if t.name not in new_by]
    added = [t for t in new.tools if t.name not in old_by]
    # A removed and an added tool that alone call the same implementation are one tool renamed, whatever else
    # changed (HSA renames tools, their parameters and descriptions and keeps the binding).
    old_ids = Counter(binding_identity(t.binding) for t in removed)
    new_ids = Counter(binding_identity(t.binding) for t in added)

    def score(a: _Look, b: _Look) -> float:
        s = _look_similarity(a, b)
        same = binding_identity(a.tool.binding)
        if same is not None and same == binding_identity(b.tool.binding) and old_ids[same] == new_ids[same] == 1:
            s = max(s, TOOL_RENAME_THRESHOLD)
        return s

    renames = [(a.tool, b.tool) for a, b in pair_by_score([_look(t) for t in removed], [_look(t) for t in added],
                                                          score, TOOL_RENAME_THRESHOLD)]
    renamed_old = {o.name for o, _ in renames}
    renamed_new = {n.name for _, n in renames}
    for t in removed:
        if t.name not in renamed_old:
            out.append(presence("tool", "removed", t.name, f"tools[{t.name}]", f"tool '{t.name}' removed", t,
                                breaking=True))
    for o, n in renames:
        out.append(
            Change(
                component="tool",
                kind="renamed",
                key=n.name,
                path=f"tools[{n.name}].name",
                breaking=True,
                summary=f"tool '{o.name}' renamed to '{n.name}'",
                before=o.name,
                after=n.name,
            )
        )
        out += _tool_fields(o, n)
    for t in added:
        if t.name not in renamed_new:
            out.append(presence("tool", "added", t.name, f"tools[{t.name}]",
                                f"tool '{t.name}' added (binding {binding_label(t.binding) or 'none'})", t))
    for t in new.tools:
        if t.name in old_by:
            out += _tool_fields(old_by[t.name], t)
    renamed = {o.name: n.name for o, n in renames}
    # Order compared under the new names, so two renamed tools that swap places also report the new order.
    out += reorder("tool", "tools", "tools", [renamed.get(t.name, t.name) for t in old.tools],
                   [t.name for t in new.tools], "tools")
    return out, renamed
