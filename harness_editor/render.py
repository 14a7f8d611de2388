"""The one prompt renderer: manifest (+ live room, comments, history) → OpenAI-style messages and tools.

The turn engine, the preview room, evaluation, HSA-SFT data and RL rollouts all call :func:`render_prompt`,
so what is evaluated and trained on is exactly what is served. Pure functions, deterministic output (no
clock, no randomness, no dict-order surprises), and cheap enough to run on every turn.

System prompt assembly: the manifest's blocks in order, each formatted by the layout. Three roles get
generated content in their *first* block of that role:

- ``skills_index``: one line per skill (id, kind, description; never the body) and how to call
  ``load_skill``. Appended as a block at the end when the manifest has none.
- ``room_context``: the live room (products, flash sale, coupons, pinned card) when a room is given;
  otherwise the block's static content only.
- ``output_format``: the interaction constraints. Appended as a block at the end when there is none.

What the live room puts around a harness (the ``load_skill`` line, the output-format lines, the ``[viewer]``
label of an unnamed comment) comes from the manifest's ``conventions``, whose defaults are the live room's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from harness_editor.room_state import active_flash_sale, coupon_active
from harness_editor.schemas import (
    DEFAULT_SPEAKER_LABEL,
    LOAD_SKILL_TOOL,
    Conventions,
    InteractionConstraints,
    Manifest,
)

# The live room's line (the default of the manifest's conventions; a manifest may restate it for its domain).
LOAD_SKILL_INSTRUCTION = Conventions().load_skill_text()


@dataclass(frozen=True)
class RenderedPrompt:
    """What goes to the model endpoint: ``messages`` and ``tools`` in OpenAI chat format."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    system_text: str

    def estimated_tokens(self) -> int:
        """Rough size of the whole request (messages + tool schemas); see :func:`estimate_tokens`."""
        text = "".join(str(m.get("content") or "") for m in self.messages)
        return estimate_tokens(text) + estimate_tokens(json.dumps(self.tools, ensure_ascii=False))


@dataclass(frozen=True)
class _Section:
    role: str
    title: str
    content: str
    items: tuple[str, ...]


# --- generated content ---------------------------------------------------------------------------------


def _num(value: Any) -> str:
    """12.0 → "12", 24.9 → "24.9": how a person says a price, stable across runs."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return f"{value:.6f}".rstrip("0").rstrip(".")
    return str(value)


def skills_index_lines(m: Manifest) -> list[str]:
    return [f"{s.id} ({s.kind}) — {s.description}" for s in m.skills]


def room_lines(room: dict[str, Any]) -> list[str]:
    """The live room as short factual lines (a snapshot; tools are the source of truth)."""
    cur = str(room.get("currency") or "")
    products = {p.get("link_id"): p for p in room.get("products") or []}
    lines: list[str] = []
    campaign = room.get("campaign") or {}
    head = f"Minute {_num(room.get('clock_minute', 0))} of the show"
    if campaign.get("phase"):
        head += f"; campaign phase: {campaign['phase']}"
    lines.append(head + ".")
    sale = active_flash_sale(room)
    if sale:
        title = (products.get(sale.get("link_id")) or {}).get("title", "")
        name = f"link {_num(sale.get('link_id'))} {title}".rstrip()
        lines.append(
            f"Flash sale: {name} at {cur}{_num(sale.get('price'))} until minute {_num(sale.get('ends_at_minute'))}."
        )
    for p in room.get("products") or []:
        lines.append(
            f"Link {_num(p.get('link_id'))}: {p.get('title', '')} — price {cur}{_num(p.get('price'))}, "
            f"list price {cur}{_num(p.get('list_price'))}, stock {_num(p.get('stock'))}."
        )
    for c in room.get("coupons") or []:
        if coupon_active(room, c):
            lines.append(
                f"Coupon {c.get('code')}: {cur}{_num(c.get('discount'))} off orders from "
                f"{cur}{_num(c.get('min_spend'))}, until minute {_num(c.get('expires_at_minute'))}, "
                f"{_num(c.get('remaining'))} left."
            )
    pinned = room.get("pinned")
    if pinned:
        lines.append(f"Pinned on screen: link {_num(pinned.get('link_id'))} {pinned.get('title', '')}".rstrip() + ".")
    return lines


_room_lines = room_lines  # render_system_text's keyword of the same name shadows it


def constraint_lines(c: InteractionConstraints) -> list[str]:
    lines = [f"Reply length: {c.reply_min_chars} to {c.reply_max_chars} characters.", f"Language: {c.language}."]
    if c.tone.strip():
        lines.append(f"Tone: {c.tone.strip()}.")
    if c.speakable:
        lines.append("Speakable text only: no markdown, lists, links or emoji; the reply is read aloud.")
    else:
        lines.append("The reply is shown as text; light formatting is allowed.")
    lines.append(f"Use at most {c.max_tool_rounds} rounds of tool calls per reply.")
    return lines


def output_format_lines(m: Manifest) -> list[str] | None:
    """The generated output-format lines (the manifest's conventions: the constraints', its own, or none)."""
    fmt = m.conventions.output_format
    if fmt is True:
        return constraint_lines(m.constraints)
    return list(fmt) if fmt else None


def _sections(m: Manifest, room: dict[str, Any] | None) -> list[_Section]:
    sections: list[_Section] = []
    done: set[str] = set()
    load_skill = m.conventions.load_skill_text()
    format_lines = output_format_lines(m)
    for b in m.prompt.blocks:
        content, items = b.content, list(b.items)
        if b.role not in done:
            if b.role == "skills_index":
                content = f"{content.rstrip()}\n{load_skill}" if content.strip() else load_skill
                items += skills_index_lines(m)
                done.add(b.role)
            elif b.role == "room_context" and room is not None:
                items += room_lines(room)
                done.add(b.role)
            elif b.role == "output_format":
                items += format_lines or []
                done.add(b.role)
        sections.append(_Section(b.role, b.title, content.strip("\n"), tuple(items)))
    if "skills_index" not in done:
        sections.append(_Section("skills_index", "Skills", load_skill, tuple(skills_index_lines(m))))
    if "output_format" not in done and format_lines is not None:
        sections.append(_Section("output_format", "Output format", "", tuple(format_lines)))
    return sections


# --- layouts ---------------------------------------------------------------------------------------------
#
# Each layout renders one section to a *piece*; the system text is the pieces joined. Pieces depend only on the
# manifest, except the room section's, so :class:`_Plan` keeps them per manifest and a render only formats the
# room lines and joins (byte-identical to formatting every section each time; a test holds it to the previous
# renderer across layouts).


def _markdown_piece(s: _Section) -> str:
    parts = [f"## {s.title}"]
    if s.content:
        parts.append(s.content)
    if s.items:
        parts.append("\n".join("- " + item.replace("\n", "\n  ") for item in s.items))
    return "\n".join(parts)


def _xml_piece(s: _Section) -> str:
    parts = [f"<{s.role} title={quoteattr(s.title)}>"]
    if s.content:
        parts.append(escape(s.content))
    parts.extend(f"<item>{escape(item)}</item>" for item in s.items)
    parts.append(f"</{s.role}>")
    return "\n".join(parts)


def _plain_piece(s: _Section) -> str:
    parts = [f"{s.title.upper()}:"]
    if s.content:
        parts.append(s.content)
    parts.extend(f"{i}. {item}" for i, item in enumerate(s.items, 1))
    return "\n".join(parts)


def _json_keys(sections: Sequence[_Section]) -> list[str]:
    keys: list[str] = []
    taken: set[str] = set()
    for s in sections:
        key, n = s.title, 2
        while key in taken:  # titles need not be unique; keys must be
            key, n = f"{s.title} ({n})", n + 1
        taken.add(key)
        keys.append(key)
    return keys


def _json_piece(s: _Section, key: str) -> str:
    """One ``"key": value`` member exactly as ``json.dumps(obj, ensure_ascii=False, indent=2)`` writes it inside
    the top-level object (written out here: ``indent`` makes json use its slow pure-Python encoder)."""
    q = _json_str
    if not s.items:
        return f"  {q(key)}: {q(s.content)}"
    items = ",\n".join(f"      {q(i)}" for i in s.items)
    return f"  {q(key)}: {{\n    \"content\": {q(s.content)},\n    \"items\": [\n{items}\n    ]\n  }}"


_json_str = json.JSONEncoder(ensure_ascii=False).encode  # one string, as json.dumps(ensure_ascii=False) writes it


_JOINERS = {"markdown": "\n\n", "xml": "\n", "plain": "\n\n", "json": ",\n"}
_PIECES = {"markdown": _markdown_piece, "xml": _xml_piece, "plain": _plain_piece}


def _render(layout: str, sections: list[_Section]) -> str:
    if layout == "json":
        if not sections:
            return "{}"
        return "{\n" + ",\n".join(_json_piece(s, k) for s, k in zip(sections, _json_keys(sections))) + "\n}"
    return _JOINERS[layout].join(_PIECES[layout](s) for s in sections)


def _markdown(sections: list[_Section]) -> str:
    return _render("markdown", sections)


def _xml(sections: list[_Section]) -> str:
    return _render("xml", sections)


def _json(sections: list[_Section]) -> str:
    return _render("json", sections)


def _plain(sections: list[_Section]) -> str:
    return _render("plain", sections)


_LAYOUTS = {"markdown": _markdown, "xml": _xml, "json": _json, "plain": _plain}


class _Plan:
    """What a manifest's system text and tools need, computed once per manifest object: the sections and
    their rendered pieces without a room; the room section (its index, its base items, its JSON key); the
    text without a room; the tool schemas as JSON (a fresh copy per call is one ``json.loads``)."""

    __slots__ = ("manifest", "layout", "pieces", "room_at", "room_section", "room_key", "text_no_room",
                 "tools_json", "before", "after")

    def __init__(self, m: Manifest):
        self.manifest = m
        self.layout = m.prompt.layout
        sections = _sections(m, None)
        self.room_at = next((i for i, b in enumerate(m.prompt.blocks) if b.role == "room_context"), None)
        self.room_section = sections[self.room_at] if self.room_at is not None else None
        keys = _json_keys(sections) if self.layout == "json" else []
        self.room_key = keys[self.room_at] if keys and self.room_at is not None else ""
        if self.layout == "json":
            self.pieces = [_json_piece(s, k) for s, k in zip(sections, keys)]
        else:
            piece = _PIECES[self.layout]
            self.pieces = [piece(s) for s in sections]
        self.text_no_room = self._join(self.pieces)
        self.tools_json = json.dumps([t.parameters for t in m.tools], ensure_ascii=False)
        # the text around the room piece, so a render is three concatenations
        self.before = self.after = ""
        if self.room_at is not None:
            j = _JOINERS[self.layout]
            head, tail = self.pieces[: self.room_at], self.pieces[self.room_at + 1:]
            self.before = ("{\n" if self.layout == "json" else "") + "".join(p + j for p in head)
            self.after = "".join(j + p for p in tail) + ("\n}" if self.layout == "json" else "")

    def _join(self, pieces: list[str]) -> str:
        if self.layout == "json":
            return "{\n" + ",\n".join(pieces) + "\n}" if pieces else "{}"
        return _JOINERS[self.layout].join(pieces)

    def text(self, lines: Sequence[str] | None) -> str:
        """The system text with these room lines (None: no room given)."""
        s = self.room_section
        if lines is None or s is None:
            return self.text_no_room
        section = _Section(s.role, s.title, s.content, s.items + tuple(lines))
        if self.layout == "json":
            piece = _json_piece(section, self.room_key)
        else:
            piece = _PIECES[self.layout](section)
        return self.before + piece + self.after


_PLANS: dict[int, _Plan] = {}
_MAX_PLANS = 4096


def _plan(m: Manifest) -> _Plan:
    """The plan of this manifest object (manifests are frozen models; the cache holds the object, so its id
    cannot be reused while the entry lives)."""
    hit = _PLANS.get(id(m))
    if hit is not None and hit.manifest is m:
        return hit
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    plan = _PLANS[id(m)] = _Plan(m)
    return plan


def render_system_text(m: Manifest, room: dict[str, Any] | None = None, *,
                       room_lines: Sequence[str] | None = None) -> str:
    """The system prompt. ``room_lines``: :func:`room_lines` of the room, when the caller already has them
    (e.g. many renders of one room); given, ``room`` is not read."""
    if room_lines is None and room is not None:
        room_lines = _room_lines(room)
    return _plan(m).text(room_lines)


# --- messages and tools -----------------------------------------------------------------------------------


def _one_line(value: Any) -> str:
    return " ".join(str(value).splitlines()).strip()


def render_comments(comments: Sequence[dict[str, Any]], *, speaker_label: str = DEFAULT_SPEAKER_LABEL) -> str:
    """``[name] text`` per line, ``[viewer] text`` (the manifest's ``conventions.speaker_label``) for a comment
    without a name. Line breaks are flattened and brackets in names replaced, so a comment cannot forge a line
    from another viewer."""
    lines = []
    for c in comments:
        viewer = _one_line(c.get("viewer") or speaker_label).replace("[", "(").replace("]", ")")
        lines.append(f"[{viewer}] {_one_line(c.get('text') or '')}".rstrip())
    return "\n".join(lines)


def load_skill_tool(m: Manifest) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": LOAD_SKILL_TOOL,
            "description": "Load the full instructions of one skill listed in the system prompt.",
            "parameters": {
                "type": "object",
                "properties": {
                    "skill_id": {
                        "type": "string",
                        "enum": [s.id for s in m.skills],
                        "description": "Id of the skill to load.",
                    }
                },
                "required": ["skill_id"],
                "additionalProperties": False,
            },
        },
    }


def render_tools(m: Manifest) -> list[dict[str, Any]]:
    """Manifest tools in order (schemas copied, so callers may mutate them), then load_skill."""
    schemas = json.loads(_plan(m).tools_json)  # a fresh copy: one json.loads beats deepcopy per schema
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": schema},
        }
        for t, schema in zip(m.tools, schemas)
    ]
    tools.append(load_skill_tool(m))
    return tools


def render_prompt(
    manifest: Manifest,
    *,
    room: dict[str, Any] | None = None,
    comments: Sequence[dict[str, Any]] = (),
    history: Sequence[dict[str, Any]] = (),
) -> RenderedPrompt:
    """System message, then ``history`` as given (shallow copies), then one user message with the comments
    (omitted when there are none)."""
    system_text = render_system_text(manifest, room)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_text}]
    messages.extend(dict(h) for h in history)
    if comments:
        messages.append({"role": "user", "content": render_comments(
            comments, speaker_label=manifest.conventions.speaker_label)})
    return RenderedPrompt(messages=messages, tools=render_tools(manifest), system_text=system_text)


def render_skill_body(manifest: Manifest, skill_id: str) -> str | None:
    """What load_skill(skill_id) returns to the model; None for an unknown id."""
    skill = manifest.skill(skill_id)
    if skill is None:
        return None
    text = skill.body.strip("\n")
    if skill.allowed_tools:
        text += f"\n\nTools for this skill: {', '.join(skill.allowed_tools)}."
    return text


def estimate_tokens(text: str) -> int:
    """An estimate, not a tokenizer: ~4 ASCII characters per token, 1 token per other character (CJK,
    emoji). Deterministic and O(n); good for budgets and UI hints, not for billing or truncation."""
    n_ascii = len(text.encode("ascii", "ignore"))
    return -(-n_ascii // 4) + (len(text) - n_ascii)
