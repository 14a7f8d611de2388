"""Semantic diff between two manifests: what a compliance reviewer needs to see, and what breaks.

"Breaking" means: model behaviour or recorded turns that were valid under the old manifest may be invalid
under the new one — a tool call with the old name or arguments, a load_skill with a removed id. Rewording
and reordering are never breaking; neither are hooks, prompt blocks or constraints (their effect is what
evaluation measures, not a contract).

Rules, in short:

- skills (:mod:`.skills`): added; removed (breaking); renamed (breaking: old load_skill calls stop resolving) when
  a removed and an added skill are alike enough (id, body, description, kind; a scored matching, :mod:`.matching`);
  per field: kind (breaking), description and body (text diff), allowed_tools (breaking when a tool is taken away);
- tools (:mod:`.tools`): added; removed (breaking); renamed (breaking) when a removed and an added tool are alike
  enough (name, parameter schema, binding, description; scored, best pairs first, never by position), or are
  the only two calling one implementation (a built-in id, an HTTP endpoint + path, an MCP server + tool);
  description (text diff); the parameter schema at any depth (:mod:`.schema`: properties, items, prefixItems,
  additionalProperties, anyOf/oneOf/allOf, local $ref), each change at its schema path and breaking when the schema
  narrows (property removed, new required property, type narrowed, enum value removed, bound tightened);
  binding: kind or built-in id (breaking, unless an unbound tool gets one), an open binding's target fields
  (endpoint, method, path, server, tool...: breaking) and its call settings (timeouts, retries: not);
  argument_map entries removed or remapped (breaking; a new entry for a new optional parameter is not);
- hooks, prompt blocks (:mod:`.sections`): added / removed / changed field by field; blocks reordered (one change);
- prompt layout, each constraint field, manifest name and description: before → after.

Plain Python and pydantic, no Django.
"""

from __future__ import annotations

from harness_editor.diff.changes import (
    COMPONENTS,
    Change,
    ChangeKind,
    Component,
    ManifestDiff,
    text_diff,
)
from harness_editor.diff.schema import schema_changes
from harness_editor.diff.sections import diff_constraints, diff_hooks, diff_prompt
from harness_editor.diff.skills import diff_skills
from harness_editor.diff.tools import diff_tools
from harness_editor.schemas import Manifest

__all__ = [
    "COMPONENTS",
    "Change",
    "ChangeKind",
    "Component",
    "ManifestDiff",
    "diff_manifests",
    "schema_changes",
    "text_diff",
]


def diff_manifests(old: Manifest, new: Manifest) -> ManifestDiff:
    changes: list[Change] = []
    if old.name != new.name:
        changes.append(Change(component="manifest", kind="changed", key="name", path="name",
                              summary=f"name {old.name!r} → {new.name!r}", before=old.name, after=new.name))
    if old.description != new.description:
        changes.append(Change(component="manifest", kind="changed", key="description", path="description",
                              summary="manifest description changed", before=old.description,
                              after=new.description,
                              text_diff=text_diff(old.description, new.description, "description")))
    tool_changes, tool_renames = diff_tools(old, new)
    changes += diff_skills(old, new, tool_renames)
    changes += tool_changes
    changes += diff_hooks(old, new)
    changes += diff_prompt(old, new)
    changes += diff_constraints(old, new)
    return ManifestDiff(changes=changes)
