"""Tool calls from a model response, native or written in text; and the speakable part of the content.

Models served without a tool-call parser (or that slip) write Hermes/Qwen blocks in their text::

    <tool_call>{"name": "lookup_product", "arguments": {"link_id": 101}}</tool_call>

``arguments`` may be an object or a JSON string. Reasoning comes in ``<think>...</think>`` (an unclosed
``<think>`` swallows the rest). Nothing here raises on model output: bad JSON becomes a
:class:`ParsedToolCall` with ``error`` set, which the engine turns into a tool error the model sees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from streams.engine.client import SPECIAL_TOKEN_RE, NativeToolCall

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.S)
_THINK_OPEN = "<think>"
_STRAY_THINK_CLOSE = re.compile(r"^(.*?)</think>", re.S)  # "</think>" with no opener: what came before is reasoning
_TOOL_BLOCK_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"\\]{1,64})"')
MAX_ARGUMENT_CHARS = 20000


@dataclass(frozen=True, slots=True)
class ParsedToolCall:
    id: str
    name: str
    arguments_raw: str
    arguments: dict[str, Any] | None  # None when the arguments could not be parsed into an object
    source: Literal["native", "text"]
    error: str | None = None  # parse error, for the model to see as a tool error


@dataclass(frozen=True, slots=True)
class SplitContent:
    text: str  # what may be spoken (before hooks): no reasoning, no tool-call blocks, no special tokens
    reasoning: str
    calls: tuple[ParsedToolCall, ...]


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as given by a model (a JSON string, an object, empty) → (object, None) or (None, error)."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None:
        return {}, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    text = raw.strip()
    if not text:
        return {}, None
    if len(text) > MAX_ARGUMENT_CHARS:
        return None, f"arguments longer than {MAX_ARGUMENT_CHARS} characters"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"arguments are not valid JSON: {exc}"
    if isinstance(value, str):  # double-encoded: "{\"link_id\": 101}"
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None, "arguments are a JSON string, not a JSON object"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def from_native(calls: Iterable[NativeToolCall]) -> list[ParsedToolCall]:
    out = []
    for c in calls:
        args, err = parse_arguments(c.arguments)
        if not c.name and err is None:
            err = "tool call without a function name"
        out.append(ParsedToolCall(c.id, c.name, c.arguments, args, "native", err))
    return out


def _parse_block(body: str, call_id: str) -> ParsedToolCall:
    body = body.strip()
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        m = _NAME_RE.search(body)
        name = m.group(1) if m else ""
        return ParsedToolCall(call_id, name, body, None, "text", f"tool call is not valid JSON: {exc}")
    if not isinstance(obj, dict):
        return ParsedToolCall(call_id, "", body, None, "text", "a tool call is a JSON object with name and arguments")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedToolCall(call_id, "", body, None, "text", "tool call has no 'name'")
    raw_args = obj.get("arguments", obj.get("parameters"))
    args, err = parse_arguments(raw_args)
    if isinstance(raw_args, str):
        arguments_raw = raw_args
    else:
        arguments_raw = json.dumps(raw_args if raw_args is not None else {}, ensure_ascii=False)
    return ParsedToolCall(call_id, name, arguments_raw, args, "text", err)


def strip_think(text: str) -> tuple[str, str]:
    """(text without reasoning, the reasoning)."""
    reasoning: list[str] = []
    if "</think>" in text or _THINK_OPEN in text:
        def keep(m: re.Match[str]) -> str:
            reasoning.append(m.group(1))
            return ""

        text = _THINK_RE.sub(keep, text)
        opened = text.find(_THINK_OPEN)
        if opened != -1:  # unclosed: everything after it is reasoning
            reasoning.append(text[opened + len(_THINK_OPEN) :])
            text = text[:opened]
        m = _STRAY_THINK_CLOSE.match(text)
        if m and "</think>" in text:
            reasoning.insert(0, m.group(1))
            text = text[m.end() :]
    return text, "\n".join(r.strip() for r in reasoning if r.strip())


def split_content(content: str, *, id_prefix: str = "call") -> SplitContent:
    """Separate a model's text into speakable text, reasoning and tool-call blocks."""
    text = SPECIAL_TOKEN_RE.sub("", content)
    text, reasoning = strip_think(text)
    calls: list[ParsedToolCall] = []
    if "<tool_call>" in text:
        def take(m: re.Match[str]) -> str:
            calls.append(_parse_block(m.group(1), f"{id_prefix}_{len(calls)}"))
            return " "

        text = _TOOL_BLOCK_RE.sub(take, text)
    text = text.replace("</tool_call>", " ")
    return SplitContent(speakable(text), reasoning, tuple(calls))


_WS_RE = re.compile(r"[ \t]+")


def speakable(text: str) -> str:
    """Trim and collapse runs of spaces; keep line breaks (the reply_format hook judges them)."""
    lines = [_WS_RE.sub(" ", line).strip() for line in text.strip().splitlines()]
    return "\n".join(line for line in lines if line)
