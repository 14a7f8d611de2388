"""Forms of the harness pages.

Two kinds live here:

* small Django forms for the registry actions (new harness, label move, review decision): :mod:`.registry`;
* the editor's *component forms*: plain functions that turn one manifest component (skills, tools, prompt,
  hooks, constraints, or the whole manifest as raw YAML) into what the inputs show (``state``: strings,
  lists of row dicts) and back (:mod:`.state`, with a tool's binding in :mod:`.bindings` and the shared
  choices and text-box readers in :mod:`.components`). The view replaces that component in the current
  manifest and calls :func:`harness_editor.schemas.parse_manifest`, which owns every rule; the only errors made
  here are the ones a text box can produce before pydantic sees the data (bad JSON/YAML, a number that is not
  one), and they carry the same kind of path (``tools[2].parameters``), so the page shows all errors alike.
  :mod:`.display` puts those errors next to their fields; :mod:`.yaml_lines` finds the raw YAML line of each.

Field names of list rows are ``<component>-<index>-<field>`` (``skills-2-description``), so a form works
with a plain POST and no JavaScript; add / remove / move up / move down are submit buttons named ``op``.

Everything is importable from here (``from harness_editor.forms import EditorForm``).
"""

from harness_editor.forms.bindings import (
    BINDING_CHOICE_LABELS,
    IMPORT_ON_CONFLICT,
    IMPORT_SOURCES,
    OPEN_KINDS,
    UNBOUND,
    UNBOUND_WARNING,
    binding_field_help,
    binding_from_state,
    binding_state,
)
from harness_editor.forms.components import (
    BLOCK_ROLES,
    COMPONENTS,
    HOOK_CLASSES,
    HOOK_COMMON,
    LAYOUTS,
    ON_FAIL,
    SKILL_KINDS,
    hook_kind_help,
    hook_param_defaults,
)
from harness_editor.forms.display import editor_view, errors_by_field
from harness_editor.forms.registry import (
    DecisionForm,
    HarnessCreateForm,
    LabelMoveForm,
    add_domain_errors,
    parse_manifest_text,
)
from harness_editor.forms.state import (
    EditorForm,
    apply_op,
    manifest_data_from_state,
    merge_errors,
    state_from_manifest,
    state_from_post,
)
from harness_editor.forms.yaml_lines import error_lines

__all__ = [
    "BINDING_CHOICE_LABELS", "BLOCK_ROLES", "COMPONENTS", "HOOK_CLASSES", "HOOK_COMMON", "IMPORT_ON_CONFLICT",
    "IMPORT_SOURCES", "LAYOUTS", "ON_FAIL", "OPEN_KINDS", "SKILL_KINDS", "UNBOUND", "UNBOUND_WARNING",
    "DecisionForm", "EditorForm", "HarnessCreateForm", "LabelMoveForm", "add_domain_errors", "apply_op",
    "binding_field_help", "binding_from_state", "binding_state", "editor_view", "error_lines", "errors_by_field",
    "hook_kind_help", "hook_param_defaults", "manifest_data_from_state", "merge_errors", "parse_manifest_text",
    "state_from_manifest", "state_from_post",
]
