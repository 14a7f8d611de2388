"""What a component's template shows: rows with their own errors next to their fields, and the choices."""

from __future__ import annotations

from typing import Any

from harness_editor.forms.bindings import (
    BINDING_CHOICE_LABELS,
    IMPORT_ON_CONFLICT,
    IMPORT_SOURCES,
    UNBOUND,
    UNBOUND_WARNING,
    binding_field_help,
    binding_from_state,
)
from harness_editor.forms.components import (
    _PATH_RE,
    BLOCK_ROLES,
    HOOK_CLASSES,
    HOOK_COMMON,
    LAYOUTS,
    ON_FAIL,
    SKILL_KINDS,
    hook_kind_help,
)
from harness_editor.forms.state import _rows
from harness_editor.schemas import FieldError, InteractionConstraints, ManifestError, Tool, load_yaml
from harness_editor.schemas.manifest import ToolAnnotations
from harness_editor.schemas.tool_effects import ToolEffect, tool_effect
from harness_editor.schemas.bindings import BUILTIN_BINDINGS as BINDINGS


def errors_by_field(component: str, errors: list[FieldError]) -> tuple[dict, list[FieldError]]:
    """Split errors into ``{(index, field): [FieldError]}`` / ``{field: [...]}`` for the shown component, and
    the rest (other components, the document). Field names are the form's (hook parameters -> "params")."""
    placed: dict = {}
    rest: list[FieldError] = []
    row_component = {"skills": "skills", "tools": "tools", "hooks": "hooks", "prompt": "prompt.blocks"}.get(component)
    for e in errors:
        m = _PATH_RE.match(e.path)
        if row_component and m and m["component"] == row_component:
            fld = m["field"] or "row"
            if component == "hooks" and fld not in HOOK_COMMON and fld != "row":
                fld = "params"
            placed.setdefault((int(m["index"]), fld), []).append(e)
            continue
        head = e.path.split("[", 1)[0].split(".", 1)
        if component == "constraints" and head[0] == "constraints" and len(head) == 2:
            placed.setdefault(head[1], []).append(e)
        elif component == "prompt" and e.path.startswith("prompt.layout"):
            placed.setdefault("layout", []).append(e)
        elif component == "prompt" and e.path in ("prompt", "prompt.blocks"):
            placed.setdefault("component", []).append(e)
        elif row_component and e.path == component:
            placed.setdefault("component", []).append(e)
        else:
            rest.append(e)
    return placed, rest


def row_effect(row: dict) -> ToolEffect:
    """The effect of a tool row as its inputs stand: annotations and binding each where they parse (the row's
    errors are shown beside their fields; the badge shows what the rest says)."""
    annotations = None
    if row.get("annotations", "").strip():
        try:
            annotations = ToolAnnotations.model_validate(load_yaml(row["annotations"]))
        except (ManifestError, ValueError):
            annotations = None
    binding, errs = binding_from_state(row["binding"], row.get("binding_spec", ""), "")
    tool = {"name": "t", "description": "d", "parameters": {}, "binding": None if errs else binding}
    try:
        parsed = Tool.model_validate(tool)
    except ValueError:
        parsed = Tool.model_validate({**tool, "binding": None})
    return tool_effect(parsed.model_copy(update={"annotations": annotations}))


def editor_view(component: str, state: Any, errors: list[FieldError], base: dict) -> dict:
    """What the component's template needs: rows with their own errors and choices."""
    placed, _rest = errors_by_field(component, errors)
    view: dict[str, Any] = {"component_errors": placed.get("component", [])}
    if component in ("skills", "tools", "hooks", "prompt"):
        rows = _rows(state, component)
        out = []
        for i, row in enumerate(rows):
            errs: dict[str, list[FieldError]] = {}
            for (idx, fld), found in ((k, v) for k, v in placed.items() if isinstance(k, tuple)):
                if idx == i:
                    errs.setdefault(fld, []).extend(found)
            out.append({"i": i, "first": i == 0, "last": i == len(rows) - 1, "v": row, "errors": errs,
                        "has_errors": bool(errs)})
        view["rows"] = out
    if component == "skills":
        names = [t["name"] for t in base.get("tools", [])] + ["load_skill"]
        for r in view["rows"]:
            # The checked tools first, in their order: the browser posts checkboxes in page order, so this
            # keeps allowed_tools' order (the model sees it) unless the user changes the selection.
            allowed = list(dict.fromkeys(r["v"]["allowed_tools"]))
            r["tool_choices"] = ([{"name": n, "checked": True} for n in allowed]
                                 + [{"name": n, "checked": False} for n in names if n not in allowed])
        view["kinds"] = SKILL_KINDS
    elif component == "tools":
        view["bindings"] = [{"id": b.id, "description": b.description,
                             "params": ", ".join(f"{p.name}: {p.json_type}{'' if p.required else ' (optional)'}"
                                                 for p in b.params.values()) or "none"}
                            for b in BINDINGS.values()]
        view["open_kinds"] = [{"id": k, "label": v} for k, v in BINDING_CHOICE_LABELS.items()]
        view["binding_help"] = binding_field_help()
        for r in view["rows"]:
            choice = r["v"]["binding"]
            b = BINDINGS.get(choice)
            r["binding_params"] = ", ".join(p.name for p in b.params.values()) if b else ""
            r["open_kind"] = choice.startswith("@") and choice != UNBOUND
            r["unbound"] = choice == UNBOUND
            # An id that is not in the catalog (an old or mistyped one) stays selectable, so the page posts back
            # what the manifest holds and validation names it.
            r["unknown_binding"] = "" if b or choice.startswith("@") else choice
            r["effect"] = row_effect(r["v"])
        view["unbound_warning"] = UNBOUND_WARNING
        view["import_sources"] = IMPORT_SOURCES
        view["import_on_conflict"] = IMPORT_ON_CONFLICT
    elif component == "prompt":
        view["layouts"] = LAYOUTS
        view["roles"] = BLOCK_ROLES
        view["layout"] = state["layout"]
        view["layout_errors"] = placed.get("layout", [])
    elif component == "hooks":
        view["kinds"] = list(HOOK_CLASSES)
        view["on_fail"] = ON_FAIL
        view["kind_help"] = hook_kind_help()
    elif component == "constraints":
        fields = []
        for name, info in InteractionConstraints.model_fields.items():
            kind = {bool: "bool", int: "int", float: "float"}.get(info.annotation, "str")
            fields.append({"name": name, "kind": kind, "value": state.get(name),
                           "default": info.get_default(call_default_factory=True),
                           "errors": placed.get(name, [])})
        view["fields"] = fields
    return view
