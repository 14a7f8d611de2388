"""Forms of the harness pages.

Two kinds live here:

* small Django forms for the registry actions (new harness, label move, review decision), and
* the editor's *component forms*: plain functions that turn one manifest component (skills, tools, prompt,
  hooks, constraints, or the whole manifest as raw YAML) into what the inputs show (``state``: strings,
  lists of row dicts) and back. The view replaces that component in the current manifest and calls
  :func:`harness_editor.schemas.parse_manifest`, which owns every rule; the only errors made here are the
  ones a text box can produce before pydantic sees the data (bad JSON/YAML, a number that is not one), and
  they carry the same kind of path (``tools[2].parameters``), so the page shows all errors alike.

Field names of list rows are ``<component>-<index>-<field>`` (``skills-2-description``), so a form works
with a plain POST and no JavaScript; add / remove / move up / move down are submit buttons named ``op``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, get_args

from django import forms
from django.http import QueryDict

from harness_editor.schemas import (
    HOOK_KINDS,
    FieldError,
    InteractionConstraints,
    Manifest,
    ManifestError,
    PromptBlock,
    Skill,
    SystemPrompt,
    load_json,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    manifest_to_yaml,
)
from harness_editor.schemas.bindings import BUILTIN_BINDINGS as BINDINGS
from harness_editor.schemas.bindings import FixtureBinding, HttpBinding, McpBinding

# --- registry forms ----------------------------------------------------------------------------------


class HarnessCreateForm(forms.Form):
    SOURCES = [("demo", "Start from the demo manifest"), ("paste", "Paste YAML or JSON"),
               ("upload", "Upload a .yaml / .json file")]

    slug = forms.SlugField(max_length=64, help_text="lowercase, used in URLs, e.g. glow-gadget")
    name = forms.CharField(max_length=120)
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    source = forms.ChoiceField(choices=SOURCES, initial="demo", widget=forms.RadioSelect)
    manifest_text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 12, "class": "code"}))
    manifest_file = forms.FileField(required=False)
    change_note = forms.CharField(max_length=2000, required=False, initial="Initial version")

    def manifest_text_for(self, demo_path) -> tuple[str, str]:
        """(text, "yaml" | "json") of the chosen source; call after is_valid()."""
        source = self.cleaned_data["source"]
        if source == "demo":
            return demo_path.read_text(encoding="utf-8"), "yaml"
        if source == "upload":
            upload = self.cleaned_data.get("manifest_file")
            if upload is None:
                raise ManifestError([FieldError(path="", message="choose a file to upload")])
            raw = upload.read(2_000_000)
            name = (upload.name or "").lower()
            text = raw.decode("utf-8", errors="replace")
            return text, "json" if name.endswith(".json") else _guess_format(text)
        text = self.cleaned_data.get("manifest_text") or ""
        if not text.strip():
            raise ManifestError([FieldError(path="", message="paste a manifest (YAML or JSON)")])
        return text, _guess_format(text)


def _guess_format(text: str) -> str:
    return "json" if text.lstrip().startswith("{") else "yaml"


def parse_manifest_text(text: str, fmt: str) -> Manifest:
    """Raises ManifestError with path-precise errors."""
    return manifest_from_json(text) if fmt == "json" else manifest_from_yaml(text)


class LabelMoveForm(forms.Form):
    name = forms.CharField(max_length=64, label="Label", help_text="production, staging or room:<id>")
    # A number with suggestions (the latest approved versions), not a <select> of the whole history:
    # the page must stay the same size whether the harness has 10 versions or 10,000.
    version = forms.IntegerField(min_value=1, label="Approved version",
                                 widget=forms.NumberInput(attrs={"list": "approved-versions", "class": "narrow"}))
    comment = forms.CharField(max_length=2000, required=False)


class DecisionForm(forms.Form):
    comment = forms.CharField(max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 3}))
    # only when the evaluation gate fails and the reviewer may override it (harness_editor.gate)
    override_reason = forms.CharField(max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 3}))


def add_domain_errors(form: forms.Form, errors: list[dict]) -> None:
    """Put a service's ``[{path, message}]`` errors on the matching form fields (or the form itself)."""
    for err in errors:
        path = err.get("path") or None
        form.add_error(path if path in form.fields else None, err.get("message", ""))


# --- editor: shared helpers --------------------------------------------------------------------------

COMPONENTS: dict[str, str] = {
    "skills": "Skills",
    "tools": "Tools",
    "prompt": "Prompt blocks",
    "hooks": "Hooks",
    "constraints": "Constraints",
    "yaml": "Raw YAML",
}
HOOK_COMMON = ("id", "kind", "enabled", "on_fail", "message")
_ROW_KEY = re.compile(r"^(?P<component>[a-z]+)-(?P<index>\d+)-(?P<field>[a-z_]+)$")
_PATH_RE = re.compile(r"^(?P<component>skills|tools|hooks|prompt\.blocks)\[(?P<index>\d+)\](?:\.(?P<field>\w+))?")


def _literal_choices(annotation) -> list[str]:
    return [a for a in get_args(annotation) if isinstance(a, str)]


SKILL_KINDS = _literal_choices(Skill.model_fields["kind"].annotation)
BLOCK_ROLES = _literal_choices(PromptBlock.model_fields["role"].annotation)
LAYOUTS = _literal_choices(SystemPrompt.model_fields["layout"].annotation)
def _hook_classes() -> dict[str, type]:
    union = get_args(Manifest.model_fields["hooks"].annotation)[0]  # Annotated[Union[...], Field]
    members = get_args(get_args(union)[0])
    out = {}
    for cls in members:
        (kind,) = _literal_choices(cls.model_fields["kind"].annotation)
        out[kind] = cls
    return {kind: out[kind] for kind in HOOK_KINDS if kind in out}


HOOK_CLASSES = _hook_classes()
ON_FAIL = _literal_choices(next(iter(HOOK_CLASSES.values())).model_fields["on_fail"].annotation)


def _placeholder(annotation) -> Any:
    text = str(annotation)
    if text.startswith("list"):
        return []
    if annotation is bool:
        return False
    if annotation is int:
        return 0
    return ""


def hook_param_defaults(kind: str) -> dict[str, Any]:
    """Kind-specific parameters with their defaults (a placeholder where a value is required)."""
    cls = HOOK_CLASSES.get(kind)
    if cls is None:
        return {}
    out = {}
    for name, info in cls.model_fields.items():
        if name in HOOK_COMMON:
            continue
        out[name] = _placeholder(info.annotation) if info.is_required() else info.get_default(
            call_default_factory=True)
    return out


def hook_kind_help() -> list[dict]:
    """For the editor's reference box: each kind, its description and its parameters."""
    rows = []
    for kind, cls in HOOK_CLASSES.items():
        params = []
        for name, info in cls.model_fields.items():
            if name in HOOK_COMMON:
                continue
            ann = str(info.annotation).replace("typing.", "")
            ann = re.sub(r"Annotated\[(\w+), .*\]", r"\1", ann)
            params.append({"name": name, "type": ann, "required": info.is_required(),
                           "default": None if info.is_required() else info.get_default(call_default_factory=True)})
        rows.append({"kind": kind, "doc": (cls.__doc__ or "").strip(), "params": params})
    return rows


def _yaml_block(value: Any) -> str:
    if not value:
        return ""
    import yaml

    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


def _text(post: QueryDict, key: str, default: str = "") -> str:
    """A posted text value with browser line endings (CRLF) normalised."""
    return post.get(key, default).replace("\r\n", "\n").replace("\r", "\n")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _row_indices(post: QueryDict, component: str, marker: str) -> list[int]:
    found = set()
    for key in post:
        m = _ROW_KEY.match(key)
        if m and m["component"] == component and m["field"] == marker:
            found.add(int(m["index"]))
    return sorted(found)


def _int_or_raw(text: str, *, optional: bool = False) -> Any:
    text = text.strip()
    if text == "" and optional:
        return None
    try:
        return int(text)
    except ValueError:
        return text  # pydantic (strict) reports "Input should be a valid integer" at the field's path


def _float_or_raw(text: str) -> Any:
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return text  # pydantic (strict) reports "Input should be a valid number" at the field's path
    return value if math.isfinite(value) else text  # nan/inf: pydantic says why at the field's path


def _load_sub(text: str, path: str, loader) -> tuple[Any, list[FieldError]]:
    """Parse a nested JSON/YAML text box; errors are re-rooted at ``path``."""
    try:
        return loader(text), []
    except ManifestError as exc:
        out = []
        for e in exc.errors:
            if not e.path:
                out.append(FieldError(path=path, message=e.message))
            elif e.path.startswith("["):
                out.append(FieldError(path=f"{path}{e.path}", message=e.message))
            else:
                out.append(FieldError(path=f"{path}.{e.path}", message=e.message))
        return None, out


# --- editor: a tool's binding ------------------------------------------------------------------------

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


# --- editor: state <-> manifest ----------------------------------------------------------------------


@dataclass
class EditorForm:
    """One component form as shown: ``state`` (what the inputs hold), the lock the draft was opened at,
    the change note, and the errors to show (all of them, with paths)."""

    component: str
    state: Any
    lock_version: int
    change_note: str = ""
    errors: list[FieldError] = field(default_factory=list)


def state_from_manifest(component: str, data: dict) -> Any:
    """``data`` is ``manifest.model_dump(mode="json")``."""
    if component == "skills":
        return [{"id": s["id"], "kind": s["kind"], "description": s["description"], "body": s["body"],
                 "allowed_tools": list(s.get("allowed_tools") or [])} for s in data["skills"]]
    if component == "tools":
        return [{"name": t["name"], "description": t["description"],
                 "parameters": json.dumps(t["parameters"], indent=2, ensure_ascii=False),
                 **binding_state(t.get("binding")), "argument_map": _yaml_block(t.get("argument_map"))}
                for t in data["tools"]]
    if component == "prompt":
        return {"layout": data["prompt"]["layout"],
                "blocks": [{"id": b["id"], "role": b["role"], "title": b["title"], "content": b.get("content", ""),
                            "items": "\n".join(b.get("items") or [])} for b in data["prompt"]["blocks"]]}
    if component == "hooks":
        rows = []
        for h in data["hooks"]:
            params = {k: v for k, v in h.items() if k not in HOOK_COMMON}
            rows.append({"id": h["id"], "kind": h["kind"], "enabled": bool(h.get("enabled", True)),
                         "on_fail": h.get("on_fail", "retry"), "message": h.get("message", ""),
                         "params": _yaml_block(params)})
        return rows
    if component == "constraints":
        # The dump leaves out fields at some defaults (turn_deadline_s, history_turns): show every field.
        return {name: data["constraints"].get(name, info.get_default(call_default_factory=True))
                for name, info in InteractionConstraints.model_fields.items()}
    if component == "yaml":
        return {"text": manifest_to_yaml(Manifest.model_validate(data))}
    raise KeyError(component)


def state_from_post(component: str, post: QueryDict) -> Any:
    if component == "skills":
        return [{"id": _text(post, f"skills-{i}-id").strip(), "kind": post.get(f"skills-{i}-kind", ""),
                 "description": _text(post, f"skills-{i}-description"), "body": _text(post, f"skills-{i}-body"),
                 "allowed_tools": post.getlist(f"skills-{i}-allowed_tools")}
                for i in _row_indices(post, "skills", "id")]
    if component == "tools":
        return [{"name": _text(post, f"tools-{i}-name").strip(),
                 "description": _text(post, f"tools-{i}-description"),
                 "parameters": _text(post, f"tools-{i}-parameters"), "binding": post.get(f"tools-{i}-binding", ""),
                 "binding_spec": _text(post, f"tools-{i}-binding_spec"),
                 "argument_map": _text(post, f"tools-{i}-argument_map")}
                for i in _row_indices(post, "tools", "name")]
    if component == "prompt":
        return {"layout": post.get("layout", ""),
                "blocks": [{"id": _text(post, f"blocks-{i}-id").strip(), "role": post.get(f"blocks-{i}-role", ""),
                            "title": _text(post, f"blocks-{i}-title"), "content": _text(post, f"blocks-{i}-content"),
                            "items": _text(post, f"blocks-{i}-items")}
                           for i in _row_indices(post, "blocks", "id")]}
    if component == "hooks":
        return [{"id": _text(post, f"hooks-{i}-id").strip(), "kind": post.get(f"hooks-{i}-kind", ""),
                 "enabled": f"hooks-{i}-enabled" in post, "on_fail": post.get(f"hooks-{i}-on_fail", ""),
                 "message": _text(post, f"hooks-{i}-message"), "params": _text(post, f"hooks-{i}-params")}
                for i in _row_indices(post, "hooks", "id")]
    if component == "constraints":
        out: dict[str, Any] = {}
        for name, info in InteractionConstraints.model_fields.items():
            out[name] = (name in post) if info.annotation is bool else _text(post, name)
        return out
    if component == "yaml":
        return {"text": _text(post, "yaml")}
    raise KeyError(component)


def _rows(state: Any, component: str) -> list:
    return state["blocks"] if component == "prompt" else state


def _blank_row(component: str, hook_kind: str = "") -> dict:
    if component == "skills":
        return {"id": "", "kind": "reply", "description": "", "body": "", "allowed_tools": []}
    if component == "tools":
        return {"name": "", "description": "", "parameters": json.dumps(
            {"type": "object", "properties": {}, "additionalProperties": False}, indent=2),
            "binding": next(iter(BINDINGS)), "binding_spec": "", "argument_map": ""}
    if component == "prompt":
        return {"id": "", "role": "custom", "title": "", "content": "", "items": ""}
    if component == "hooks":
        kind = hook_kind if hook_kind in HOOK_CLASSES else next(iter(HOOK_CLASSES))
        return {"id": "", "kind": kind, "enabled": True, "on_fail": "retry", "message": "",
                "params": _yaml_block(hook_param_defaults(kind))}
    raise KeyError(component)


def apply_op(component: str, state: Any, op: str, *, hook_kind: str = "") -> Any:
    """``add``, ``remove:N``, ``up:N``, ``down:N`` on a list component's rows (in place; returns state)."""
    if component not in ("skills", "tools", "prompt", "hooks"):
        return state
    rows = _rows(state, component)
    name, _, arg = op.partition(":")
    if name == "add":
        rows.append(_blank_row(component, hook_kind))
        return state
    try:
        i = int(arg)
    except ValueError:
        return state
    if not 0 <= i < len(rows):
        return state
    if name == "remove":
        rows.pop(i)
    elif name == "up" and i > 0:
        rows[i - 1], rows[i] = rows[i], rows[i - 1]
    elif name == "down" and i < len(rows) - 1:
        rows[i + 1], rows[i] = rows[i], rows[i + 1]
    return state


def manifest_data_from_state(component: str, state: Any, base: dict) -> tuple[Any, list[FieldError]]:
    """The whole manifest data with ``component`` taken from the form (``base`` supplies the rest), plus the
    errors made while reading text boxes. For ``yaml`` the form *is* the whole manifest."""
    errors: list[FieldError] = []
    if component == "yaml":
        data, errors = _load_sub(state["text"], "", load_yaml)
        if errors:
            errors = [FieldError(path=e.path.lstrip("."), message=e.message) for e in errors]
        return data, errors
    data = dict(base)
    if component == "skills":
        data["skills"] = [{"id": r["id"], "kind": r["kind"], "description": r["description"], "body": r["body"],
                           "allowed_tools": list(r["allowed_tools"])} for r in state]
    elif component == "tools":
        tools = []
        for i, r in enumerate(state):
            params, errs = _load_sub(r["parameters"], f"tools[{i}].parameters", load_json)
            errors += errs
            amap, errs = (({}, []) if not r["argument_map"].strip()
                          else _load_sub(r["argument_map"], f"tools[{i}].argument_map", load_yaml))
            errors += errs
            binding, errs = binding_from_state(r["binding"], r.get("binding_spec", ""), f"tools[{i}].binding")
            errors += errs
            tools.append({"name": r["name"], "description": r["description"],
                          "parameters": params if params is not None else {}, "binding": binding,
                          "argument_map": amap if amap is not None else {}})
        data["tools"] = tools
    elif component == "prompt":
        data["prompt"] = {"layout": state["layout"], "blocks": [
            {"id": r["id"], "role": r["role"], "title": r["title"], "content": r["content"],
             "items": _lines(r["items"])} for r in state["blocks"]]}
    elif component == "hooks":
        hooks = []
        for i, r in enumerate(state):
            hook = {"id": r["id"], "kind": r["kind"], "enabled": r["enabled"], "on_fail": r["on_fail"],
                    "message": r["message"]}
            params, errs = (({}, []) if not r["params"].strip()
                            else _load_sub(r["params"], f"hooks[{i}].params", load_yaml))
            errors += errs
            if params is not None and not isinstance(params, dict):
                errors.append(FieldError(path=f"hooks[{i}].params",
                                         message="parameters must be a YAML mapping, e.g. 'max_chars: 300'"))
            elif params:
                for key, value in params.items():
                    if key in HOOK_COMMON:
                        errors.append(FieldError(path=f"hooks[{i}].params",
                                                 message=f"set {key!r} in its own field, not in the parameters"))
                    else:
                        hook[key] = value
            hooks.append(hook)
        data["hooks"] = hooks
    elif component == "constraints":
        out = {}
        for name, info in InteractionConstraints.model_fields.items():
            raw = state.get(name)
            if info.annotation is bool:
                out[name] = bool(raw)
            elif info.annotation is int:
                out[name] = _int_or_raw(raw or "")
            elif info.annotation is float:
                out[name] = _float_or_raw(raw or "")
            else:
                out[name] = raw or ""
        data["constraints"] = out
    else:
        raise KeyError(component)
    return data, errors


def merge_errors(read_errors: list[FieldError], parse_errors: list[FieldError]) -> list[FieldError]:
    """Text-box errors win: drop the schema's errors under a path whose text could not even be read."""
    bad = [e.path for e in read_errors if e.path]
    kept = [e for e in parse_errors
            if not any(e.path == p or e.path.startswith(p + ".") or e.path.startswith(p + "[") for p in bad)]
    return [*read_errors, *kept]


# --- editor: errors next to their fields ------------------------------------------------------------


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
