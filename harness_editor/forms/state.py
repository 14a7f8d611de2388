"""A component's form state (what the inputs hold) from the manifest, from a POST, and back to manifest data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from harness_editor.forms.bindings import binding_from_state, binding_state
from harness_editor.forms.components import (
    HOOK_CLASSES,
    HOOK_COMMON,
    _float_or_raw,
    _int_or_raw,
    _lines,
    _load_sub,
    _row_indices,
    _text,
    _yaml_block,
    hook_param_defaults,
)
from harness_editor.schemas import (
    FieldError,
    InteractionConstraints,
    Manifest,
    load_json,
    load_yaml,
    manifest_to_yaml,
)
from harness_editor.schemas.bindings import BUILTIN_BINDINGS as BINDINGS


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
                 **binding_state(t.get("binding")), "argument_map": _yaml_block(t.get("argument_map")),
                 "annotations": _yaml_block(t.get("annotations")),
                 "output_schema": "" if t.get("output_schema") is None
                 else json.dumps(t["output_schema"], indent=2, ensure_ascii=False)}
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
                 "argument_map": _text(post, f"tools-{i}-argument_map"),
                 "annotations": _text(post, f"tools-{i}-annotations"),
                 "output_schema": _text(post, f"tools-{i}-output_schema")}
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
            "binding": next(iter(BINDINGS)), "binding_spec": "", "argument_map": "", "annotations": "",
            "output_schema": ""}
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
            tool = {"name": r["name"], "description": r["description"],
                    "parameters": params if params is not None else {}, "binding": binding,
                    "argument_map": amap if amap is not None else {}}
            # empty boxes: the tool says nothing (the keys stay out, so an unchanged tool keeps its bytes)
            for key, loader in (("annotations", load_yaml), ("output_schema", load_json)):
                if r.get(key, "").strip():
                    value, errs = _load_sub(r[key], f"tools[{i}].{key}", loader)
                    errors += errs
                    if value is not None:
                        tool[key] = value
            tools.append(tool)
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
    """Text-box errors win: drop the schema's errors under a path whose text could not even be read. A document
    that could not be read at all (the raw YAML tab's parse error, path "") leaves nothing to check: its one
    error is the only one, not also "must be a mapping … got null"."""
    if any(not e.path for e in read_errors):
        return list(read_errors)
    bad = [e.path for e in read_errors if e.path]
    kept = [e for e in parse_errors
            if not any(e.path == p or e.path.startswith(p + ".") or e.path.startswith(p + "[") for p in bad)]
    return [*read_errors, *kept]
