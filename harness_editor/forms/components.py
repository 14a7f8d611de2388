"""What every component form shares: the tabs, choices read from the schema, and reading posted text boxes."""

from __future__ import annotations

import math
import re
from typing import Any, get_args

from django.http import QueryDict

from harness_editor.schemas import (
    HOOK_KINDS,
    FieldError,
    Manifest,
    ManifestError,
    PromptBlock,
    Skill,
    SystemPrompt,
)

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
