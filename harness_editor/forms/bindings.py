"""A tool's binding as the tools form shows it (a select and a YAML box) and back."""

from __future__ import annotations

import re
from typing import Any

from harness_editor.forms.components import _load_sub, _yaml_block
from harness_editor.schemas import FieldError, load_yaml
from harness_editor.schemas.bindings import FixtureBinding, HttpBinding, McpBinding

# The binding select holds the built-in ids and these (a built-in id never starts with "@"); an open kind's other
# fields are a YAML mapping in the row's ``binding_spec`` box.
OPEN_KINDS: dict[str, type] = {"http": HttpBinding, "fixture": FixtureBinding, "mcp": McpBinding}
UNBOUND = "@unbound"
BINDING_CHOICE_LABELS = {"@http": "HTTP", "@fixture": "Fixture", "@mcp": "MCP", UNBOUND: "None (unbound)"}
UNBOUND_WARNING = "unbound — a call gets the fault 'unbound'"
# The tools tab's import panel (harness_editor.import_views).
IMPORT_SOURCES = {"auto": "Detect", "openai": "OpenAI tools / functions", "anthropic": "Anthropic tools",
                  "mcp": "MCP tools/list", "functions": "Plain functions (Python types, signatures)"}
IMPORT_ON_CONFLICT = {"rename": "rename the imported tool (a suffix: _2)", "replace": "replace the draft's tool",
                      "skip": "skip the imported tool", "error": "refuse the import"}


def binding_state(binding: Any) -> dict[str, str]:
    """A tool's binding as the row's select value and YAML box: an open kind shows only the fields it sets
    away from their defaults (saving puts the defaults back: the content hash does not change)."""
    if binding is None:
        return {"binding": UNBOUND, "binding_spec": ""}
    if isinstance(binding, dict):
        kind = binding.get("kind")
        model = OPEN_KINDS.get(kind)
        spec = {k: v for k, v in binding.items() if k != "kind"}
        if model is not None:
            fields = model.model_fields
            spec = {k: v for k, v in spec.items()
                    if k not in fields or fields[k].is_required()
                    or fields[k].get_default(call_default_factory=True) != v
                    or type(fields[k].get_default(call_default_factory=True)) is not type(v)}
        return {"binding": f"@{kind}", "binding_spec": _yaml_block(spec)}
    return {"binding": binding, "binding_spec": ""}


def binding_from_state(choice: str, spec_text: str, path: str) -> tuple[Any, list[FieldError]]:
    """The binding a row's select and YAML box stand for (unchecked: the manifest's validation says what is
    wrong, at ``tools[i].binding...``), and the errors of reading the box."""
    if choice == UNBOUND:
        if spec_text.strip():
            return None, [FieldError(path=path, message="an unbound tool has no binding fields: clear the box or "
                                     "choose a kind")]
        return None, []
    if not choice.startswith("@"):
        if spec_text.strip():
            return choice, [FieldError(path=path, message=f"the built-in binding {choice!r} takes no fields here "
                                       "(map its parameters in the argument map)")]
        return choice, []
    kind = choice[1:]
    spec, errors = ({}, []) if not spec_text.strip() else _load_sub(spec_text, path, load_yaml)
    if errors:
        return {"kind": kind}, errors
    if not isinstance(spec, dict):
        return {"kind": kind}, [FieldError(path=path, message=f"the {kind} binding's fields are a YAML mapping, "
                                           "e.g. 'endpoint: orders-api'")]
    if "kind" in spec and spec["kind"] != kind:
        return {"kind": kind}, [FieldError(path=f"{path}.kind", message=f"the kind is chosen in the select "
                                           f"({kind}); remove 'kind: {spec['kind']}' from the box")]
    return {"kind": kind, **{k: v for k, v in spec.items() if k != "kind"}}, []


def binding_field_help() -> list[dict[str, Any]]:
    """For the editor's reference box: each open kind, what it does and its fields with their defaults."""
    rows = []
    for kind, model in OPEN_KINDS.items():
        params = []
        for name, info in model.model_fields.items():
            if name == "kind":
                continue
            ann = re.sub(r"Annotated\[(\w+), .*\]", r"\1", str(info.annotation).replace("typing.", ""))
            params.append({"name": name, "type": ann, "required": info.is_required(),
                           "default": None if info.is_required() else info.get_default(call_default_factory=True)})
        rows.append({"kind": kind, "doc": (model.__doc__ or "").strip(), "params": params})
    return rows
