"""A recorded turn (preview room or scenario run) → an eval case: recorded failures become regression seeds.

The turn is what :func:`streams.selectors.preview_transcript` folds from the stored events (comments, the
``turn_started`` payload with the room state the turn started from, tool calls each with its result, skills,
the reply). The case keeps that room and those comments, and takes its labels from what the turn did that
worked:

- ``expected_tools``: every binding call that returned a result (no error, no injected fault), in
  implementation terms — the call's arguments mapped through the harness tool's ``argument_map`` — so the case
  still holds when a tool is renamed or reshaped (T2/T3). The viewer's id is left out: a case's comments carry
  a name, not the preview user's id;
- ``expected_skills``: the reply skills loaded successfully;
- ``gold_facts``: the figures and names of those results that the gold reply (as the user edited it) states —
  a number of the reply equal to a number of a result, or a result's short text found in the reply;
- ``forbidden_claims`` and ``tags`` come from the user; ``tool_faults``: the faults the turn ran under.

Plain Python, no Django: the caller passes the folded turn and the harness manifest it ran under.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness_editor.render import _num as spoken_number
from harness_editor.schemas import argument_path_get
from harness_editor.schemas.bindings import binding_kind, binding_label
from streams.bindings import BINDINGS
from training_jobs.evals.cases import EvalCase, parse_case

SKIPPED_ARGUMENTS = frozenset({"viewer_id"})  # who asked, not what was asked
SKIPPED_FIELDS = frozenset({"link_id", "issued", "region_override", "low_stock", "code", "error"})
MAX_TEXT_FACT = 80  # a result string longer than this is a description, not a fact a reply states
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)*)(?![\w])")


class TurnCaseError(ValueError):
    """The turn cannot become a case (not finished, no recorded room state, ...): ``path`` says which input."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


def case_id_for_turn(turn_id: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.:\-]", "", turn_id)[:100]
    return f"turn-{clean or 'unknown'}"


def _numbers_in(text: str) -> set[float]:
    out = set()
    for m in _NUMBER.findall(text):
        try:
            v = float(m.replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(v):
            out.add(round(v, 2))
    return out


def _leaves(value: Any, path: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}.{i}" if path else str(i))
    else:
        yield path, value


def implementation_arguments(tool, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """A call's arguments (the model's, in the tool's exposed parameter names) → the binding's keyword arguments,
    through the tool's argument map, as the engine does."""
    out: dict[str, Any] = {}
    for impl, path in tool.argument_map.items():
        found, value = argument_path_get(arguments or {}, path)
        if found:
            out[impl] = value
    return out


def successful_calls(turn: Mapping[str, Any], manifest) -> list[dict[str, Any]]:
    """The turn's tool calls that returned a usable result, in call order: ``{binding, arguments, result}`` for a
    built-in binding (implementation arguments), ``{tool, arguments, result}`` for a tool bound to a fixture, an
    http endpoint or an MCP server (the tool's own arguments: a case names such calls by tool)."""
    tools = {t.name: t for t in manifest.tools}
    calls = []
    for call in turn.get("tools") or []:
        result = call.get("result") or {}
        binding = result.get("binding")
        if not binding or not call.get("valid"):
            continue
        if result.get("error") or result.get("fault") not in (None, "slow"):
            continue
        value = result.get("result")
        if not isinstance(value, Mapping) or "error" in value:
            continue
        tool = tools.get(call.get("name") or "")
        if tool is None or binding_label(tool.binding) != binding:
            continue  # a version switched since: the argument map is unknown
        if binding_kind(tool.binding) != "builtin":
            args = {k: v for k, v in dict(call.get("arguments") or {}).items() if k not in SKIPPED_ARGUMENTS}
            calls.append({"tool": tool.name, "result": value, "arguments": args})
            continue
        if binding not in BINDINGS:
            continue
        args = implementation_arguments(tool, call.get("arguments"))
        params = BINDINGS[binding].params
        calls.append({"binding": binding, "result": value,
                      "arguments": {k: v for k, v in args.items() if k in params and k not in SKIPPED_ARGUMENTS}})
    return calls


def _named(call: Mapping[str, Any]) -> dict[str, str]:
    """How a case names the call: ``{"binding": id}`` or ``{"tool": name}``."""
    return {"tool": call["tool"]} if "tool" in call else {"binding": call["binding"]}


def _said_number(value: float, reply: str) -> str:
    """The renderer's number form (19.9, 12) when the reply states it so, else the figure as the reply wrote it
    ("54.0"): the rules find a fact by its text, and "54" is not stated in "54.0"."""
    say = spoken_number(value)
    if re.search(rf"(?<![\d.]){re.escape(say)}(?![\d]|\.\d)", reply):
        return say
    for m in _NUMBER.finditer(reply):
        try:
            if round(float(m.group(1).replace(",", "")), 2) == round(float(value), 2):
                return m.group(1)
        except ValueError:
            continue
    return say


def gold_facts(calls: Sequence[Mapping[str, Any]], gold_reply: str) -> list[dict[str, Any]]:
    """The result values the gold reply states: numbers by value (24.9 = "24.90"), short texts by substring."""
    said_numbers = _numbers_in(gold_reply)
    lowered = gold_reply.casefold()
    facts: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for call in calls:
        link_id = call["arguments"].get("link_id", call["result"].get("link_id")) if "binding" in call else None
        for field, value in _leaves(call["result"]):
            last = field.rsplit(".", 1)[-1]
            if last in SKIPPED_FIELDS or value is None or isinstance(value, bool) or not field:
                continue
            if isinstance(value, (int, float)):
                if not math.isfinite(float(value)) or round(float(value), 2) not in said_numbers:
                    continue
                say = _said_number(value, gold_reply)
            elif isinstance(value, str):
                text = value.strip()
                if not text or len(text) > MAX_TEXT_FACT or text.casefold() not in lowered or len(text) < 3:
                    continue
                say = text
            else:
                continue
            key = (call.get("binding") or f"tool:{call.get('tool')}", field)
            if key in seen:
                continue
            seen.add(key)
            fact = {**_named(call), "arguments": dict(call["arguments"]), "field": field,
                    "value": value, "say": say[:200]}
            if isinstance(link_id, int) and not isinstance(link_id, bool):
                fact["link_id"] = link_id
            facts.append(fact)
    return facts


def case_from_turn(*, turn: Mapping[str, Any], manifest, harness: str, gold_reply: str, tags: Sequence[str] = (),
                   forbidden_claims: Sequence[Mapping[str, Any]] = (), source: str = "",
                   case_id: str | None = None) -> EvalCase:
    """The T1 case a finished turn gives; raises :class:`TurnCaseError` (the turn) or
    :class:`harness_editor.schemas.ManifestError` (the case, with paths: ``forbidden_claims[0].kind``)."""
    started = turn.get("started") or {}
    room = started.get("room")
    if turn.get("state") != "done" or not turn.get("reply"):
        raise TurnCaseError("turn_id", "the turn has not finished with a reply: only finished turns become cases")
    if not isinstance(room, Mapping):
        raise TurnCaseError("turn_id", "the turn did not record the room state it started from")
    comments = [{"viewer": (str(c.get("viewer") or "viewer").strip() or "viewer")[:64],
                 "text": str(c.get("text") or "")[:2000]} for c in turn.get("comments") or []]
    if not comments:
        raise TurnCaseError("turn_id", "the turn answers no comment")
    calls = successful_calls(turn, manifest)
    if not room and not any("tool" in c for c in calls):  # a harness without built-in bindings reads no room
        raise TurnCaseError("turn_id", "the turn did not record the room state it started from")
    expected_tools: list[dict[str, Any]] = []
    for call in calls:
        entry = {**_named(call), "arguments": call["arguments"]}
        if entry not in expected_tools:
            expected_tools.append(entry)
    skills = []
    for s in turn.get("skills") or []:
        if s.get("ok") and s.get("kind") == "reply" and s.get("skill_id") not in skills:
            skills.append(s["skill_id"])
    faults = {key: {"binding": key, "kind": kind}
              for key, kind in ((started.get("faults") or {}).items()) if isinstance(kind, str)}
    data: dict[str, Any] = {
        "id": case_id or case_id_for_turn(str(turn.get("turn_id") or "")),
        "kind": "t1",
        "harness": harness,
        "room": dict(room),
        "comments": comments,
        "gold_facts": gold_facts(calls, gold_reply),
        "expected_tools": expected_tools,
        "expected_skills": skills,
        "forbidden_claims": [dict(c) for c in forbidden_claims],
        "gold_reply": gold_reply,
        "tool_faults": faults,
        "tags": list(dict.fromkeys(tags)),
        "source": source[:200],
    }
    return parse_case(data, manifest=manifest)
