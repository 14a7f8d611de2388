"""What an MCP tool says about itself beyond its input: ``title`` and ``annotations`` (``readOnlyHint``,
``destructiveHint``, ``idempotentHint``, ``openWorldHint``) become the manifest tool's ``annotations``; its
``outputSchema`` becomes ``output_schema``. Every hint carried is reported (kind ``annotated``), and so is every
one that could not be (a hint that is not a boolean, an output schema the harness would refuse: ``dropped_key``),
so the reviewer sees what the server claimed. A tool without hints gets none: "says nothing" stays apart from
"says it is harmless" (:mod:`harness_editor.schemas.tool_effects` reads MCP's defaults).
"""

from __future__ import annotations

import json
from typing import Any

from harness_editor.importers.schema import Recorder, normalize_schema
from harness_editor.schemas.errors import _join
from harness_editor.schemas.tool_schema import _json_value_errors, tool_schema_problems

# MCP's hint -> the manifest's field
HINTS = {"readOnlyHint": "read_only", "destructiveHint": "destructive", "idempotentHint": "idempotent",
         "openWorldHint": "open_world"}
MAX_TITLE = 200


def _title(value: Any, at: str, rec: Recorder) -> str | None:
    if not isinstance(value, str) or not value.strip():
        rec.add(at, "dropped_key", f"dropped the title {json.dumps(value)[:60]} (not text)")
        return None
    title = " ".join(value.split())
    if len(title) > MAX_TITLE:
        rec.add(at, "truncated", f"the title had {len(title)} characters: cut to {MAX_TITLE}")
        title = title[: MAX_TITLE - 1].rstrip() + "…"
    return title


def annotations_of(body: dict[str, Any], at: str, rec: Recorder) -> dict[str, Any] | None:
    """The manifest ``annotations`` of an MCP tool (its ``title`` and ``annotations``), or None when it has none."""
    out: dict[str, Any] = {}
    given = body.get("annotations")
    if given is not None and not isinstance(given, dict):
        rec.add(_join(at, "annotations"), "dropped_key", "dropped 'annotations': not an object")
        given = None
    given = given or {}
    # MCP puts a display title on the tool and, older, in its annotations; the tool's own wins.
    for title_at, value in ((_join(at, "title"), body.get("title")),
                            (_join(_join(at, "annotations"), "title"), given.get("title"))):
        if value is not None and "title" not in out:
            title = _title(value, title_at, rec)
            if title is not None:
                out["title"] = title
    for key, value in given.items():
        where = _join(_join(at, "annotations"), key)
        if key == "title":
            continue
        if key not in HINTS:
            rec.add(where, "dropped_key", f"dropped {key!r} (not an MCP tool annotation the harness reads)")
        elif not isinstance(value, bool):
            rec.add(where, "dropped_key", f"dropped {key!r}: {json.dumps(value)[:40]} is not true or false")
        else:
            out[HINTS[key]] = value
    if not out:
        return None
    stated = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in out.items())
    rec.add(_join(at, "annotations"), "annotated", f"annotations carried: {stated}")
    return out


def output_schema_of(body: dict[str, Any], at: str, rec: Recorder) -> dict[str, Any] | None:
    """The manifest ``output_schema`` of an MCP tool's ``outputSchema`` (converted as parameters are), or None. One
    the harness would refuse is dropped and reported, not an import error: the tool works without it."""
    if "outputSchema" not in body or body["outputSchema"] is None:
        return None
    where = _join(at, "outputSchema")
    own = Recorder(tool=rec.tool)
    schema, _ = normalize_schema(body["outputSchema"], where, own)
    problems = [m for _, m in own.errors]
    if not problems:
        if not isinstance(schema, dict):
            problems = ["not an object schema"]
        else:
            problems = [m for _, m in [*_json_value_errors(schema, ()), *tool_schema_problems(schema)]]
    if problems:
        rec.add(where, "dropped_key", f"dropped 'outputSchema': the harness would refuse it ({problems[0]})")
        return None
    rec.changes.extend(own.changes)
    rec.add(where, "annotated", "output schema carried (output_schema)")
    return schema
