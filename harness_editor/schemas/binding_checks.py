"""Checks of a tool's open binding (http, fixture, mcp) or of its absence, against the tool's own schema.

Part of the semantic pass (:func:`harness_editor.schemas.semantics.validate_semantics`)."""

from __future__ import annotations

from harness_editor.schemas.errors import FieldError
from harness_editor.schemas.manifest import Tool


def open_binding_errors(t: Tool, at: str, schema_ok: bool) -> list[FieldError]:
    """An open binding (http, fixture, mcp) or none: its argument_map must be empty (these kinds take the call's
    arguments as they are; templates and patterns name argument paths)."""
    errors: list[FieldError] = []
    if t.argument_map and t.binding is not None:
        errors.append(FieldError(path=f"{at}.argument_map", message=f"a {t.binding.kind} binding takes the call's "
                                 "arguments as they are: leave argument_map empty"))
    return errors
