"""What a diff is made of: :class:`Change`, :class:`ManifestDiff`, and the helpers every section uses."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

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


def short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def line_counts(diff: list[str]) -> str:
    plus = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    minus = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    return f"+{plus} -{minus} lines"


_IDENT_RE = re.compile(r"^[^\W\d][\w\-]*$")


def join_path(path: str, part: str | int) -> str:
    """The editor's path style (the same as validation errors): ``a.b``, ``a[0]``, ``a["$ref"]``."""
    if isinstance(part, int):
        return f"{path}[{part}]"
    if _IDENT_RE.match(part):
        return f"{path}.{part}" if path else part
    return f"{path}[{json.dumps(part, ensure_ascii=False)}]"


def presence(component: str, kind: str, key: str, path: str, summary: str, item: Any,
             breaking: bool = False) -> Change:
    """An item that appeared (``added``: ``after`` is it) or disappeared (``removed``: ``before`` is it)."""
    dumped = item.model_dump(mode="json")
    return Change(component=component, kind=kind, key=key, path=path, summary=summary, breaking=breaking,
                  before=dumped if kind == "removed" else None, after=dumped if kind == "added" else None)


def reorder(component: Component, key: str, path: str, before: Sequence[str], after: Sequence[str],
            what: str) -> list[Change]:
    """One non-breaking ``reordered`` change when the items both sides have are in another order."""
    common = set(before) & set(after)
    if [x for x in before if x in common] == [x for x in after if x in common]:
        return []
    return [Change(component=component, kind="reordered", key=key, path=path, summary=f"{what} reordered",
                   before=list(before), after=list(after))]
