"""Constrained field types of the manifest (ids, names, one-line texts, regular expressions)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

SKILL_ID_RE = re.compile(r"^[^\W\d][\w\-.]*$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
SLUG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
LANGUAGE_RE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")

def _matches(regex: re.Pattern[str], rule: str):
    def check(value: str) -> str:
        if not regex.fullmatch(value):  # not .match: "$" would accept a trailing newline
            raise ValueError(f"{value!r} is not valid: {rule}")
        return value

    return AfterValidator(check)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _one_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be a single line (no line breaks)")
    return value


def _compiles(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


SkillId = Annotated[
    str,
    Field(min_length=1, max_length=64),
    _matches(SKILL_ID_RE, "a skill id starts with a letter or '_' and has only letters, digits, '_', '-', '.'"),
]
ToolName = Annotated[
    str,
    Field(min_length=1, max_length=64),
    _matches(
        TOOL_NAME_RE,
        "a tool name starts with a letter or '_' and has only ASCII letters, digits, '_', '-' (at most 64 characters)",
    ),
]
Slug = Annotated[
    str,
    Field(min_length=1, max_length=64),
    _matches(SLUG_RE, "an id has only ASCII letters, digits, '_' and '-', and does not start with '-'"),
]

_NotBlank = AfterValidator(_not_blank)
_OneLine = AfterValidator(_one_line)
# Length constraints come first so their messages stay "at most N characters".
ManifestName = Annotated[str, Field(min_length=1, max_length=120), _NotBlank]
SkillDescription = Annotated[str, Field(min_length=1, max_length=300), _OneLine, _NotBlank]
SkillBody = Annotated[str, Field(min_length=1, max_length=20000), _NotBlank]
ToolDescription = Annotated[str, Field(min_length=1, max_length=1000), _NotBlank]
HookText = Annotated[str, Field(min_length=1, max_length=500), _NotBlank]
BlockTitle = Annotated[str, Field(min_length=1, max_length=120), _OneLine, _NotBlank]
Regex = Annotated[str, AfterValidator(_compiles)]
