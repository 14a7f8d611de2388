"""An import planned against a manifest before anything is saved: the converter's report, the name clashes with
the manifest's tools, the manifest it would make, and whether that manifest is valid (every error, located) —
what the editor's import panel and the import API show, and what they save on confirmation.

Plain Python, no Django (the view and the API call a registry service to save)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness_editor.importers import (
    ImportChange,
    ImportResult,
    OnConflict,
    Source,
    ToolImportError,
    import_into_manifest,
    import_tools,
)
from harness_editor.schemas import FieldError, Manifest, ManifestError, parse_manifest

UNBOUND_MESSAGE = "unbound — a call gets the fault 'unbound'"


def manifest_warnings_of(manifest: Manifest) -> list[FieldError]:
    """The manifest's warnings (unbound tools, ...): the registry's own list where it has one."""
    try:
        from harness_editor.schemas import manifest_warnings  # type: ignore[attr-defined]
    except ImportError:  # before the semantic pass lists warnings itself
        return [FieldError(path=f"tools[{i}].binding", message=f"tool {t.name!r} is {UNBOUND_MESSAGE}")
                for i, t in enumerate(manifest.tools) if t.binding is None]
    return list(manifest_warnings(manifest))


@dataclass
class ImportPlan:
    result: ImportResult | None = None
    conflicts: list[ImportChange] = field(default_factory=list)
    manifest: Manifest | None = None  # the manifest with the tools added, when valid
    errors: list[FieldError] = field(default_factory=list)  # import errors (paths into the input) or manifest ones
    import_failed: bool = False  # the input itself could not be converted (errors are paths into it)
    warnings: list[FieldError] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # names of the tools the manifest gains (or has replaced)

    @property
    def ok(self) -> bool:
        return self.manifest is not None

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "ok": self.ok,
            "source": r.source if r else None,
            "tools": r.tools if r else [],
            "origins": r.origins if r else [],
            "changes": [c.as_dict() for c in r.changes] if r else [],
            "conflicts": [c.as_dict() for c in self.conflicts],
            "added": self.added,
            "errors": [e.model_dump() for e in self.errors],
            "import_failed": self.import_failed,
            "warnings": [e.model_dump() for e in self.warnings],
        }


def plan_import(manifest_data: dict[str, Any], payload: Any, *, source: Source = "auto",
                on_conflict: OnConflict = "rename", binding: Any = None) -> ImportPlan:
    """Convert ``payload`` and add its tools to (a copy of) ``manifest_data``; never raises for bad input."""
    plan = ImportPlan()
    try:
        plan.result = import_tools(payload, source=source, binding=binding)
        data, plan.conflicts = import_into_manifest(manifest_data, plan.result, on_conflict=on_conflict)
    except ToolImportError as exc:
        plan.import_failed = True
        plan.errors = [FieldError(path=p, message=m) for p, m in exc.errors]
        return plan
    before = list(manifest_data.get("tools") or [])
    plan.added = [t["name"] for i, t in enumerate(data["tools"]) if i >= len(before) or t != before[i]]
    try:
        plan.manifest = parse_manifest(data)
    except ManifestError as exc:
        plan.errors = exc.errors
        return plan
    plan.warnings = manifest_warnings_of(plan.manifest)
    return plan
