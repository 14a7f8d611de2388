"""Skills: added, removed, renamed (paired by likeness of id, body, description and kind), and field by field."""

from __future__ import annotations

from harness_editor.diff.changes import (
    Change,
    line_counts,
    presence,
    reorder,
    text_diff,
)
from harness_editor.diff.matching import name_similarity, pair_by_score, text_similarity
from harness_editor.schemas import Manifest, Skill

SKILL_RENAME_THRESHOLD = 0.6


def skill_similarity(a: Skill, b: Skill) -> float:
    """The body weighs most (a renamed skill usually keeps its text, perhaps reordered: the words are compared as a
    bag), then the description (which may be blanked), the id and the kind."""
    return (0.15 * name_similarity(a.id, b.id) + 0.55 * text_similarity(a.body, b.body)
            + 0.2 * text_similarity(a.description, b.description) + 0.1 * (a.kind == b.kind))


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
                summary=f"skill '{key}' body changed ({line_counts(d)})",
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


def diff_skills(old: Manifest, new: Manifest, tool_renames: dict[str, str]) -> list[Change]:
    out: list[Change] = []
    old_by = {s.id: s for s in old.skills}
    new_by = {s.id: s for s in new.skills}
    removed = [s for s in old.skills if s.id not in new_by]
    added = [s for s in new.skills if s.id not in old_by]
    renames = pair_by_score(removed, added, skill_similarity, SKILL_RENAME_THRESHOLD)
    renamed_old = {o.id for o, _ in renames}
    renamed_new = {n.id for _, n in renames}

    for s in removed:
        if s.id not in renamed_old:
            out.append(presence("skill", "removed", s.id, f"skills[{s.id}]", f"skill '{s.id}' removed", s,
                                breaking=True))
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
            out.append(presence("skill", "added", s.id, f"skills[{s.id}]", f"{s.kind} skill '{s.id}' added", s))
    for s in new.skills:
        if s.id in old_by:
            out += _skill_fields(old_by[s.id], _with_renamed_tools(s, tool_renames, old_by[s.id]))
    renamed = {o.id: n.id for o, n in renames}
    out += reorder("skill", "skills", "skills", [renamed.get(s.id, s.id) for s in old.skills],
                   [s.id for s in new.skills], "skills")
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
