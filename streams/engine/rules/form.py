"""Form: the reply's length, speakable text (no markdown, links, code or emoji) and sentence cap.

``format`` problems come from the interaction constraints (``reply_min_chars``, ``reply_max_chars``,
``speakable``) and a reply_format hook (``speakable``, ``max_sentences``). Plain Python.
"""

from __future__ import annotations

import re

from harness_editor.schemas import InteractionConstraints
from streams.engine.rules.base import Problem, TurnView, check

_MARKDOWN_RE = re.compile(
    r"\*\*|__|`|~~|^\s{0,3}#{1,6}\s|^\s*[-*+•]\s|^\s*\d+[.)]\s|\[[^\]\n]*\]\([^)\n]*\)|^\s*>|\|\s*---",
    re.M,
)
_URL_RE = re.compile(
    r"https?://|\bwww\.|\b[\w-]+\.(?:com|net|org|io|shop|store|cn|co|app|ly|me|tv)\b(?:/\S*)?", re.I
)
# Markup a model leaks when it writes a tool call or its reasoning as text instead of speaking: JSON objects
# with quoted keys, tool-call / think tags.
_CODE_RE = re.compile(r'\{\s*"[^"\n]{1,40}"\s*:|</?(?:tool_call|tool_response|think)>')
_EMOJI_RE = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U0001f1e6-\U0001f1ff\u2b50\u2b55\u2934\u2935\u3030\u303d"
    "\u3297\u3299\ufe0f\u200d\u2190-\u21ff\u2300-\u23ff]"
)
_SENTENCE_END_RE = re.compile(r"[.!?。！？]+(?=\s|$)")


def count_sentences(text: str) -> int:
    text = text.strip()
    if not text:
        return 0
    ends = len(_SENTENCE_END_RE.findall(text))
    return ends + (0 if _SENTENCE_END_RE.search(text[-3:]) else 1)


def format_problems(text: str, constraints: InteractionConstraints, *, speakable: bool,
                    max_sentences: int | None = None) -> list[str]:
    """Length range, speakable text (no markdown, URLs or emoji) and sentence cap."""
    problems: list[str] = []
    n = len(text)
    if n < constraints.reply_min_chars:
        problems.append(f"reply has {n} characters, fewer than {constraints.reply_min_chars}")
    if n > constraints.reply_max_chars:
        problems.append(f"reply has {n} characters, more than {constraints.reply_max_chars}")
    if speakable:
        if m := _MARKDOWN_RE.search(text):
            problems.append(f"markdown in a spoken reply: {m.group(0).strip()!r}")
        if m := _URL_RE.search(text):
            problems.append(f"link in a spoken reply: {m.group(0)!r}")
        if m := _CODE_RE.search(text):
            problems.append(f"code or a tool call in a spoken reply: {m.group(0)!r}")
        if m := _EMOJI_RE.search(text):
            problems.append(f"emoji or symbol in a spoken reply: {m.group(0)!r}")
    if max_sentences is not None and (k := count_sentences(text)) > max_sentences:
        problems.append(f"{k} sentences, more than {max_sentences}")
    return problems



@check("format")
def form_problems(turn: TurnView, constraints: InteractionConstraints, speakable: bool | None = None,
                  max_sentences: int | None = None) -> list[Problem]:
    """``format``: :func:`format_problems` as problems (``speakable`` defaults to the constraints')."""
    speak = constraints.speakable if speakable is None else speakable
    return [Problem("format", p) for p in format_problems(turn.reply, constraints, speakable=speak,
                                                          max_sentences=max_sentences)]
