"""Which line of the raw YAML tab an error is about, so the page can move the cursor there.

A parse or duplicate-key error names its line in the message; a schema error names a path
(``skills[0].description``), which is found in the YAML text's node tree (the key's line; for a field that is
missing, the line of the mapping that lacks it).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from harness_editor.schemas import FieldError

_LINE_IN_MESSAGE = re.compile(r"\bat line (\d+)")
_PATH_PART = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")


def _path_parts(path: str) -> list[str | int]:
    return [int(index) if index else key for index, key in _PATH_PART.findall(path)]


def _line_of_path(root: yaml.Node, path: str) -> int | None:
    node, line = root, root.start_mark.line + 1
    for part in _path_parts(path):
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def error_lines(text: str, errors: list[FieldError]) -> list[dict[str, Any]]:
    """``[{"e": FieldError, "line": int | None}]`` in the errors' order (1-based lines of ``text``)."""
    root: yaml.Node | None = None
    if any(e.path and not _LINE_IN_MESSAGE.search(e.message) for e in errors):
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            root = None
    out = []
    for e in errors:
        m = _LINE_IN_MESSAGE.search(e.message)
        if m:
            line: int | None = int(m[1])
        elif e.path and root is not None:
            line = _line_of_path(root, e.path)
        else:
            line = None
        out.append({"e": e, "line": line})
    return out
