"""Semantic diff between two manifests: what a compliance reviewer needs to see, and what breaks.

"Breaking" means: model behaviour or recorded turns that were valid under the old manifest may be invalid
under the new one — a tool call with the old name or arguments, a load_skill with a removed id. Rewording
and reordering are never breaking; neither are hooks, prompt blocks or constraints (their effect is what
evaluation measures, not a contract).

Rules, in short:

- skills: added; removed (breaking); renamed (breaking: old load_skill calls stop resolving) when an id
  disappears and a new one appears with the same body, or the same description and kind; per field:
  kind (breaking), description and body (text diff), allowed_tools (breaking when a tool is taken away);
- tools: added; removed (breaking); renamed (breaking) when a removed and an added tool share the binding
  and either the parameter names or the description; description (text diff); per parameter (dotted path
  through nested objects): added (breaking iff required), removed (breaking), type changed (breaking),
  became required (breaking), enum values removed (breaking), description changed; binding changed
  (breaking); argument_map entries removed or remapped (breaking; a new entry for a new optional
  parameter is not);
- hooks, prompt blocks: added / removed / changed field by field; blocks reordered (one change);
- prompt layout, each constraint field, manifest name and description: before → after.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness_editor.schemas import Manifest, Skill, Tool

Component = Literal["manifest", "skill", "tool", "hook", "prompt_block", "prompt", "constraint"]
ChangeKind = Literal["added", "removed", "changed", "renamed", "reordered"]
COMPONENTS: tuple[str, ...] = ("manifest", "skill", "tool", "hook", "prompt_block", "prompt", "constraint")


class Change(BaseModel):
    component: Component
    kind: ChangeKind
    key: str
    path: str
    summary: str
    breaking: bool = False
    before: Any = None
    after: Any = None
    text_diff: list[str] = Field(default_factory=list)


class ManifestDiff(BaseModel):
    changes: list[Change] = Field(default_factory=list)

    @property
    def breaking(self) -> bool:
        return any(c.breaking for c in self.changes)

    @property
    def is_empty(self) -> bool:
        return not self.changes

    def summary(self) -> dict[str, int]:
        """Number of changes per component, components in a fixed order, zero counts left out."""
        counts = {c: 0 for c in COMPONENTS}
        for ch in self.changes:
            counts[ch.component] += 1
        return {c: n for c, n in counts.items() if n}

    def breaking_changes(self) -> list[Change]:
        return [c for c in self.changes if c.breaking]


def text_diff(before: str, after: str, label: str) -> list[str]:
    """Unified diff lines (no trailing newlines), two lines of context."""
    return list(
        difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            fromfile=f"{label} (before)",
            tofile=f"{label} (after)",
            lineterm="",
            n=2,
        )
    )


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _line_counts(diff: list[str]) -> str:
    plus = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    minus = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    return f"+{plus} -{minus} lines"


# --- matching ------------------------------------------------------------------------------------------


def _presence(component: str, kind: str, key: str, path: str, summary: str, item: Any,
              breaking: bool = False) -> Change:
    """An item that appeared (``added``: ``after`` is it) or disappeared (``removed``: ``before`` is it)."""
    dumped = item.model_dump()
    return Change(component=component, kind=kind, key=key, path=path, summary=summary, breaking=breaking,
                  before=dumped if kind == "removed" else None, after=dumped if kind == "added" else None)


def _match_renames(removed: list[Any], added: list[Any], same: Callable[[Any, Any], bool]) -> list[tuple[Any, Any]]:
    """Pair removed with added items (first match wins, each used once)."""
    pairs = []
    free = list(added)
    for old in removed:
        new = next((a for a in free if same(old, a)), None)
        if new is not None:
            free.remove(new)
            pairs.append((old, new))
    return pairs


def _reorder(
    component: Component, key: str, path: str, before: Sequence[str], after: Sequence[str], what: str
) -> list[Change]:
    common = set(before) & set(after)
    if [x for x in before if x in common] == [x for x in after if x in common]:
        return []
    return [
        Change(
            component=component,
            kind="reordered",
            key=key,
            path=path,
            summary=f"{what} reordered",
            before=list(before),
            after=list(after),
        )
    ]


# --- skills --------------------------------------------------------------------------------------------


def _skill_fields(old: Skill, new: Skill) -> list[Change]:
    key, path = new.id, f"skills[{new.id}]"
    out: list[Change] = []
    if old.kind != new.kind:
        out.append(
            Change(
                component="skill",
                kind="changed",
                key=key,
                path=f"{path}.kind",
                breaking=True,
                summary=f"skill '{key}' kind {old.kind} → {new.kind}",
                before=old.kind,
                after=new.kind,
            )
        )
    if old.description != new.description:
        out.append(
            Change(
                component="skill",
                kind="changed",
                key=key,
                path=f"{path}.description",
                summary=f"skill '{key}' description reworded",
                before=old.description,
                after=new.description,
                text_diff=text_diff(old.description, new.description, f"{path}.description"),
            )
        )
    if old.body != new.body:
        d = text_diff(old.body, new.body, f"{path}.body")
        out.append(
            Change(
                component="skill",
                kind="changed",
                key=key,
                path=f"{path}.body",
                summary=f"skill '{key}' body changed ({_line_counts(d)})",
                text_diff=d,
            )
        )
    if old.allowed_tools != new.allowed_tools:
        taken = [t for t in old.allowed_tools if t not in new.allowed_tools]
        given = [t for t in new.allowed_tools if t not in old.allowed_tools]
        bits = ([f"added {', '.join(given)}"] if given else []) + ([f"removed {', '.join(taken)}"] if taken else [])
        out.append(
            Change(
                component="skill",
                kind="changed",
                key=key,
                path=f"{path}.allowed_tools",
                breaking=bool(taken),
                before=old.allowed_tools,
                after=new.allowed_tools,
                summary=f"skill '{key}' allowed tools: {'; '.join(bits) or 'reordered'}",
            )
        )
    return out


def _diff_skills(old: Manifest, new: Manifest, tool_renames: dict[str, str]) -> list[Change]:
    out: list[Change] = []
    old_by = {s.id: s for s in old.skills}
    new_by = {s.id: s for s in new.skills}
    removed = [s for s in old.skills if s.id not in new_by]
    added = [s for s in new.skills if s.id not in old_by]
    renames = _match_renames(removed, added, lambda a, b: a.body == b.body)
    paired_old, paired_new = {o.id for o, _ in renames}, {n.id for _, n in renames}
    renames += _match_renames(
        [s for s in removed if s.id not in paired_old],
        [s for s in added if s.id not in paired_new],
        lambda a, b: (a.description, a.kind) == (b.description, b.kind),
    )
    renamed_old = {o.id for o, _ in renames}
    renamed_new = {n.id for _, n in renames}

    for s in removed:
        if s.id not in renamed_old:
            out.append(_presence("skill", "removed", s.id, f"skills[{s.id}]",
                                      f"skill '{s.id}' removed", s, breaking=True))
    for o, n in renames:
        out.append(
            Change(
                component="skill",
                kind="renamed",
                key=n.id,
                path=f"skills[{n.id}].id",
                breaking=True,
                summary=f"skill '{o.id}' renamed to '{n.id}'",
                before=o.id,
                after=n.id,
            )
        )
        out += _skill_fields(o, _with_renamed_tools(n, tool_renames, o))
    for s in added:
        if s.id not in renamed_new:
            out.append(_presence("skill", "added", s.id, f"skills[{s.id}]", f"{s.kind} skill '{s.id}' added", s))
    for s in new.skills:
        if s.id in old_by:
            out += _skill_fields(old_by[s.id], _with_renamed_tools(s, tool_renames, old_by[s.id]))
    out += _reorder("skill", "skills", "skills", [s.id for s in old.skills], [s.id for s in new.skills], "skills")
    return out


def _with_renamed_tools(new: Skill, tool_renames: dict[str, str], old: Skill) -> Skill:
    """Compare allowed_tools modulo tool renames: following a rename is not a change of the skill."""
    if not tool_renames:
        return new
    back = {v: k for k, v in tool_renames.items()}
    mapped = [back.get(t, t) for t in new.allowed_tools]
    if mapped == old.allowed_tools:
        return new.model_copy(update={"allowed_tools": old.allowed_tools})
    return new


# --- tools ---------------------------------------------------------------------------------------------


def flatten_params(schema: dict[str, Any], prefix: str = "", parent_required: bool = True) -> dict[str, dict[str, Any]]:
    """Dotted parameter path → {"node", "required"} through nested object ``properties``, in schema order.
    A nested parameter counts as required only if every object above it is required too."""
    out: dict[str, dict[str, Any]] = {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return out
    required = set(schema.get("required") or [])
    for name, node in props.items():
        path = f"{prefix}{name}"
        is_required = parent_required and name in required
        node = node if isinstance(node, dict) else {}
        out[path] = {"node": node, "required": is_required}
        if isinstance(node.get("properties"), dict):
            out.update(flatten_params(node, f"{path}.", is_required))
    return out


def _types(node: dict[str, Any]) -> list[str] | None:
    t = node.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return sorted(str(x) for x in t)
    return None


_PARAM_KEYS_HANDLED = {"type", "enum", "description", "properties", "required"}


def _param_changes(tool: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    before, after = flatten_params(old), flatten_params(new)
    base = f"tools[{tool}].parameters"
    for name, info in after.items():
        if name not in before:
            req = info["required"]
            out.append(
                Change(
                    component="tool",
                    kind="added",
                    key=tool,
                    path=f"{base}.{name}",
                    breaking=req,
                    summary=f"tool '{tool}': {'required' if req else 'optional'} parameter '{name}' added",
                    after=info["node"],
                )
            )
    for name, info in before.items():
        if name not in after:
            out.append(
                Change(
                    component="tool",
                    kind="removed",
                    key=tool,
                    path=f"{base}.{name}",
                    breaking=True,
                    summary=f"tool '{tool}': parameter '{name}' removed",
                    before=info["node"],
                )
            )
            continue
        o, n = info["node"], after[name]["node"]
        path = f"{base}.{name}"
        if _types(o) != _types(n):
            out.append(
                Change(
                    component="tool",
                    kind="changed",
                    key=tool,
                    path=f"{path}.type",
                    breaking=True,
                    summary=f"tool '{tool}': parameter '{name}' type {_short(o.get('type'))} → {_short(n.get('type'))}",
                    before=o.get("type"),
                    after=n.get("type"),
                )
            )
        if info["required"] != after[name]["required"]:
            became = after[name]["required"]
            out.append(
                Change(
                    component="tool",
                    kind="changed",
                    key=tool,
                    path=f"{path}.required",
                    breaking=became,
                    summary=f"tool '{tool}': parameter '{name}' became {'required' if became else 'optional'}",
                    before=info["required"],
                    after=became,
                )
            )
        if o.get("enum") != n.get("enum"):
            old_enum, new_enum = o.get("enum"), n.get("enum")
            if isinstance(old_enum, list) and isinstance(new_enum, list):
                gone = [v for v in old_enum if v not in new_enum]
                new_vals = [v for v in new_enum if v not in old_enum]
                bits = ([f"removed {_short(gone)}"] if gone else []) + (
                    [f"added {_short(new_vals)}"] if new_vals else []
                )
                summary = f"tool '{tool}': parameter '{name}' enum {'; '.join(bits) or 'reordered'}"
                breaking = bool(gone)
            elif new_enum is None:
                summary, breaking = f"tool '{tool}': parameter '{name}' no longer restricted to an enum", False
            else:
                summary, breaking = f"tool '{tool}': parameter '{name}' now restricted to {_short(new_enum)}", True
            out.append(
                Change(
                    component="tool",
                    kind="changed",
                    key=tool,
                    path=f"{path}.enum",
                    breaking=breaking,
                    summary=summary,
                    before=old_enum,
                    after=new_enum,
                )
            )
        if o.get("description") != n.get("description"):
            od, nd = str(o.get("description") or ""), str(n.get("description") or "")
            out.append(
                Change(
                    component="tool",
                    kind="changed",
                    key=tool,
                    path=f"{path}.description",
                    summary=f"tool '{tool}': parameter '{name}' description changed",
                    before=o.get("description"),
                    after=n.get("description"),
                    text_diff=text_diff(od, nd, f"{path}.description"),
                )
            )
        o_rest = {k: v for k, v in o.items() if k not in _PARAM_KEYS_HANDLED}
        n_rest = {k: v for k, v in n.items() if k not in _PARAM_KEYS_HANDLED}
        if o_rest != n_rest:
            keys = sorted(k for k in set(o_rest) | set(n_rest) if o_rest.get(k) != n_rest.get(k))
            out.append(
                Change(
                    component="tool",
                    kind="changed",
                    key=tool,
                    path=path,
                    summary=f"tool '{tool}': parameter '{name}' {', '.join(keys)} changed",
                    before=o_rest,
                    after=n_rest,
                )
            )
    out += _reorder("tool", tool, base, list(before), list(after), f"tool '{tool}' parameters")
    o_top = {k: v for k, v in old.items() if k not in ("properties", "required")}
    n_top = {k: v for k, v in new.items() if k not in ("properties", "required")}
    if o_top != n_top:
        keys = sorted(k for k in set(o_top) | set(n_top) if o_top.get(k) != n_top.get(k))
        out.append(
            Change(
                component="tool",
                kind="changed",
                key=tool,
                path=base,
                summary=f"tool '{tool}': schema {', '.join(keys)} changed",
                before=o_top,
                after=n_top,
            )
        )
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
    out += _param_changes(key, old.parameters, new.parameters)
    if old.binding != new.binding:
        out.append(
            Change(
                component="tool",
                kind="changed",
                key=key,
                path=f"{path}.binding",
                breaking=True,
                summary=f"tool '{key}' binding {old.binding} → {new.binding}",
                before=old.binding,
                after=new.binding,
            )
        )
    if old.argument_map != new.argument_map:
        lost = [k for k, v in old.argument_map.items() if new.argument_map.get(k) != v]
        out.append(
            Change(
                component="tool",
                kind="changed",
                key=key,
                path=f"{path}.argument_map",
                breaking=bool(lost),
                summary=f"tool '{key}' argument map {_short(old.argument_map)} → {_short(new.argument_map)}",
                before=old.argument_map,
                after=new.argument_map,
            )
        )
    return out


def _same_tool(a: Tool, b: Tool) -> bool:
    if a.binding != b.binding:
        return False
    return set(flatten_params(a.parameters)) == set(flatten_params(b.parameters)) or a.description == b.description


def _diff_tools(old: Manifest, new: Manifest) -> tuple[list[Change], dict[str, str]]:
    out: list[Change] = []
    old_by = {t.name: t for t in old.tools}
    new_by = {t.name: t for t in new.tools}
    removed = [t for t in old.tools if t.name not in new_by]
    added = [t for t in new.tools if t.name not in old_by]
    renames = _match_renames(removed, added, _same_tool)
    renamed_old = {o.name for o, _ in renames}
    renamed_new = {n.name for _, n in renames}
    for t in removed:
        if t.name not in renamed_old:
            out.append(_presence("tool", "removed", t.name, f"tools[{t.name}]",
                                      f"tool '{t.name}' removed", t, breaking=True))
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
            out.append(_presence("tool", "added", t.name, f"tools[{t.name}]",
                                      f"tool '{t.name}' added (binding {t.binding})", t))
    for t in new.tools:
        if t.name in old_by:
            out += _tool_fields(old_by[t.name], t)
    out += _reorder("tool", "tools", "tools", [t.name for t in old.tools], [t.name for t in new.tools], "tools")
    return out, {o.name: n.name for o, n in renames}


# --- hooks, prompt, constraints --------------------------------------------------------------------------


def _diff_hooks(old: Manifest, new: Manifest) -> list[Change]:
    out: list[Change] = []
    old_by = {h.id: h for h in old.hooks}
    new_by = {h.id: h for h in new.hooks}
    for h in old.hooks:
        if h.id not in new_by:
            out.append(_presence("hook", "removed", h.id, f"hooks[{h.id}]", f"{h.kind} hook '{h.id}' removed", h))
    for h in new.hooks:
        if h.id not in old_by:
            out.append(_presence("hook", "added", h.id, f"hooks[{h.id}]", f"{h.kind} hook '{h.id}' added", h))
            continue
        o, n = old_by[h.id].model_dump(), h.model_dump()
        for field in dict.fromkeys([*o, *n]):
            if o.get(field) == n.get(field):
                continue
            ov, nv = o.get(field), n.get(field)
            change = Change(
                component="hook",
                kind="changed",
                key=h.id,
                path=f"hooks[{h.id}].{field}",
                summary=f"hook '{h.id}': {field} {_short(ov)} → {_short(nv)}",
                before=ov,
                after=nv,
            )
            if isinstance(ov, list) and isinstance(nv, list):
                gone = [v for v in ov if v not in nv]
                new_vals = [v for v in nv if v not in ov]
                bits = ([f"added {_short(new_vals)}"] if new_vals else []) + (
                    [f"removed {_short(gone)}"] if gone else []
                )
                change.summary = f"hook '{h.id}': {field} {'; '.join(bits) or 'reordered'}"
            elif isinstance(ov, str) and isinstance(nv, str) and (len(ov) > 60 or len(nv) > 60):
                change.summary = f"hook '{h.id}': {field} reworded"
                change.text_diff = text_diff(ov, nv, f"hooks[{h.id}].{field}")
            out.append(change)
    out += _reorder("hook", "hooks", "hooks", [h.id for h in old.hooks], [h.id for h in new.hooks], "hooks")
    return out


def _diff_prompt(old: Manifest, new: Manifest) -> list[Change]:
    out: list[Change] = []
    if old.prompt.layout != new.prompt.layout:
        out.append(
            Change(
                component="prompt",
                kind="changed",
                key="layout",
                path="prompt.layout",
                summary=f"prompt layout {old.prompt.layout} → {new.prompt.layout}",
                before=old.prompt.layout,
                after=new.prompt.layout,
            )
        )
    old_by = {b.id: b for b in old.prompt.blocks}
    new_by = {b.id: b for b in new.prompt.blocks}
    for b in old.prompt.blocks:
        if b.id not in new_by:
            out.append(_presence("prompt_block", "removed", b.id, f"prompt.blocks[{b.id}]",
                                      f"{b.role} block '{b.id}' removed", b))
    for b in new.prompt.blocks:
        path = f"prompt.blocks[{b.id}]"
        if b.id not in old_by:
            out.append(_presence("prompt_block", "added", b.id, path, f"{b.role} block '{b.id}' added", b))
            continue
        o = old_by[b.id]
        for field in ("role", "title"):
            ov, nv = getattr(o, field), getattr(b, field)
            if ov != nv:
                out.append(
                    Change(
                        component="prompt_block",
                        kind="changed",
                        key=b.id,
                        path=f"{path}.{field}",
                        summary=f"block '{b.id}' {field} {_short(ov)} → {_short(nv)}",
                        before=ov,
                        after=nv,
                    )
                )
        if o.content != b.content:
            d = text_diff(o.content, b.content, f"{path}.content")
            out.append(
                Change(
                    component="prompt_block",
                    kind="changed",
                    key=b.id,
                    path=f"{path}.content",
                    summary=f"block '{b.id}' content changed ({_line_counts(d)})",
                    text_diff=d,
                )
            )
        if o.items != b.items:
            added = [i for i in b.items if i not in o.items]
            gone = [i for i in o.items if i not in b.items]
            bits = ([f"{len(added)} added"] if added else []) + ([f"{len(gone)} removed"] if gone else [])
            out.append(
                Change(
                    component="prompt_block",
                    kind="changed",
                    key=b.id,
                    path=f"{path}.items",
                    summary=f"block '{b.id}' items: {', '.join(bits) or 'reordered'}",
                    before=o.items,
                    after=b.items,
                    text_diff=text_diff("\n".join(o.items), "\n".join(b.items), f"{path}.items"),
                )
            )
    out += _reorder(
        "prompt_block",
        "blocks",
        "prompt.blocks",
        [b.id for b in old.prompt.blocks],
        [b.id for b in new.prompt.blocks],
        "prompt blocks",
    )
    return out


def _diff_constraints(old: Manifest, new: Manifest) -> list[Change]:
    # Field values, not model_dump(): the dump leaves out turn_deadline_s at its default.
    fields = type(new.constraints).model_fields
    o = {f: getattr(old.constraints, f) for f in fields}
    n = {f: getattr(new.constraints, f) for f in fields}
    return [
        Change(
            component="constraint",
            kind="changed",
            key=field,
            path=f"constraints.{field}",
            summary=f"{field} {_short(o[field])} → {_short(n[field])}",
            before=o[field],
            after=n[field],
        )
        for field in n
        if o[field] != n[field]
    ]


def diff_manifests(old: Manifest, new: Manifest) -> ManifestDiff:
    changes: list[Change] = []
    if old.name != new.name:
        changes.append(
            Change(
                component="manifest",
                kind="changed",
                key="name",
                path="name",
                summary=f"name {old.name!r} → {new.name!r}",
                before=old.name,
                after=new.name,
            )
        )
    if old.description != new.description:
        changes.append(
            Change(
                component="manifest",
                kind="changed",
                key="description",
                path="description",
                summary="manifest description changed",
                before=old.description,
                after=new.description,
                text_diff=text_diff(old.description, new.description, "description"),
            )
        )
    tool_changes, tool_renames = _diff_tools(old, new)
    changes += _diff_skills(old, new, tool_renames)
    changes += tool_changes
    changes += _diff_hooks(old, new)
    changes += _diff_prompt(old, new)
    changes += _diff_constraints(old, new)
    return ManifestDiff(changes=changes)
