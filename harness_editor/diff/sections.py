"""Hooks, prompt layout and blocks, constraints: added / removed / changed field by field; never breaking (their
effect is what evaluation measures, not a contract)."""

from __future__ import annotations

from harness_editor.diff.changes import (
    Change,
    line_counts,
    presence,
    reorder,
    short,
    text_diff,
)
from harness_editor.schemas import Manifest


def diff_hooks(old: Manifest, new: Manifest) -> list[Change]:
    out: list[Change] = []
    old_by = {h.id: h for h in old.hooks}
    new_by = {h.id: h for h in new.hooks}
    for h in old.hooks:
        if h.id not in new_by:
            out.append(presence("hook", "removed", h.id, f"hooks[{h.id}]", f"{h.kind} hook '{h.id}' removed", h))
    for h in new.hooks:
        if h.id not in old_by:
            out.append(presence("hook", "added", h.id, f"hooks[{h.id}]", f"{h.kind} hook '{h.id}' added", h))
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
                summary=f"hook '{h.id}': {field} {short(ov)} → {short(nv)}",
                before=ov,
                after=nv,
            )
            if isinstance(ov, list) and isinstance(nv, list):
                gone = [v for v in ov if v not in nv]
                new_vals = [v for v in nv if v not in ov]
                bits = ([f"added {short(new_vals)}"] if new_vals else []) + (
                    [f"removed {short(gone)}"] if gone else []
                )
                change.summary = f"hook '{h.id}': {field} {'; '.join(bits) or 'reordered'}"
            elif isinstance(ov, str) and isinstance(nv, str) and (len(ov) > 60 or len(nv) > 60):
                change.summary = f"hook '{h.id}': {field} reworded"
                change.text_diff = text_diff(ov, nv, f"hooks[{h.id}].{field}")
            out.append(change)
    out += reorder("hook", "hooks", "hooks", [h.id for h in old.hooks], [h.id for h in new.hooks], "hooks")
    return out


def diff_prompt(old: Manifest, new: Manifest) -> list[Change]:
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
            out.append(presence("prompt_block", "removed", b.id, f"prompt.blocks[{b.id}]",
                                      f"{b.role} block '{b.id}' removed", b))
    for b in new.prompt.blocks:
        path = f"prompt.blocks[{b.id}]"
        if b.id not in old_by:
            out.append(presence("prompt_block", "added", b.id, path, f"{b.role} block '{b.id}' added", b))
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
                        summary=f"block '{b.id}' {field} {short(ov)} → {short(nv)}",
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
                    summary=f"block '{b.id}' content changed ({line_counts(d)})",
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
    out += reorder(
        "prompt_block",
        "blocks",
        "prompt.blocks",
        [b.id for b in old.prompt.blocks],
        [b.id for b in new.prompt.blocks],
        "prompt blocks",
    )
    return out


def diff_constraints(old: Manifest, new: Manifest) -> list[Change]:
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
            summary=f"{field} {short(o[field])} → {short(n[field])}",
            before=o[field],
            after=n[field],
        )
        for field in n
        if o[field] != n[field]
    ]
