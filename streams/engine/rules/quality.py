"""Text quality: is the reply a clean, complete sentence a host would say?

- ``quality.empty`` — nothing to say: no word of two letters or more;
- ``quality.repeated`` — a phrase said twice: a run of three or more words repeated at once ("in the flash
  sale until minute 55 in the flash sale until minute 55"), a run of six or more anywhere, or a word three times
  in a row;
- ``quality.truncated`` — cut off: it starts inside a number or a sentence (".55 in the ...", ", and ...", a
  word that continues another: "ydraGlow"), or ends on a dangling word, sign or number start ("... for $",
  "... and the", "... $19.");
- ``quality.garbled`` — not words: template or special tokens (``<|im_end|>``, ``{title}``, ``[INST]``),
  replacement characters, a letter repeated five times, a "word" of 25 letters or more, symbol soup (three or
  more stray symbols in a row, or a third of the tokens symbols), digits glued inside a word ("Hydra5Glow"),
  or a currency sign not followed by a number.

Conservative on purpose (a false positive costs a live room a retry): a missing final full stop, a lower-case
start, "very very" or "hello hello" are fine. Plain Python.
"""

from __future__ import annotations

import re

from streams.engine.rules.base import Problem, TurnView, check

_TOKEN_RE = re.compile(r"\w+(?:[.,']\w+)*|[^\w\s]")
_WORD_RE = re.compile(r"[^\W\d_]{2,}")
_TEMPLATE_RE = re.compile(r"<\|[^|>]{0,40}\|?>|\{\{|\}\}|\{[A-Za-z_][\w.]*\}|\[/?INST\]|</?s>|<unk>|<pad>|\ufffd"
                          r"|\bNone\b(?=\s*[.,]?$)|\bnull\b|\bundefined\b|\bNaN\b")
_TRIPLE_CHAR_RE = re.compile(r"([^\W\d_])\1{4,}", re.I)
_GLUED_DIGIT_RE = re.compile(r"\b[A-Za-z]{2,}\d+[A-Za-z]{2,}\b")
_BAD_CURRENCY_RE = re.compile(r"[$€£¥￥](?!\s?\d)")
_SYMBOLS_RE = re.compile(r"(?:[^\w\s.,!?'’\"()\-:;%&/+#@][\s]*){3,}")
_START_CUT_RE = re.compile(r"^\s*(?:[.,;:)\]}%]|'s\b)")
_START_WORD_CUT_RE = re.compile(r"^\s*[a-z]+[A-Z]\w*")  # "ydraGlow", "irSilk": the start of a brand cut off
_START_CONNECTOR_RE = re.compile(r"^\s*(?:of|until|than|and\s+the|or\s+the|minute)\b")  # lower case only
_END_CUT_RE = re.compile(
    r"(?:[$€£¥￥#(\[{,\-–:;/]|\b(?:and|or|the|a|an|of|to|for|with|from|until|than|your|our|its|their|my|"
    r"minute))\s*$", re.I)


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN_RE.findall(text) if re.match(r"\w", t)]


def repeated_phrase(text: str) -> str | None:
    """The phrase the reply repeats (module docstring), or None."""
    words = _tokens(text)
    n = len(words)
    for size in range(min(12, n // 2), 2, -1):  # back to back, three words or more
        for i in range(0, n - 2 * size + 1):
            if words[i:i + size] == words[i + size:i + 2 * size]:
                return " ".join(words[i:i + size])
    for size in range(min(12, n // 2), 5, -1):  # anywhere, six words or more
        seen: dict[tuple[str, ...], int] = {}
        for i in range(0, n - size + 1):
            gram = tuple(words[i:i + size])
            if gram in seen and seen[gram] + size <= i:
                return " ".join(gram)
            seen.setdefault(gram, i)
    for i in range(n - 2):
        if words[i] == words[i + 1] == words[i + 2]:
            return " ".join(words[i:i + 3])
    return None


def truncation(text: str) -> str | None:
    s = text.strip()
    if not s:
        return None
    if m := _START_CUT_RE.match(s):
        return f"starts cut off: {s[:12]!r}"
    if m := _START_WORD_CUT_RE.match(s):
        return f"starts inside a word: {m.group(0)!r}"
    if m := _START_CONNECTOR_RE.match(s):
        return f"starts in the middle of a sentence: {s[:20]!r}"
    if m := _END_CUT_RE.search(s):
        return f"ends cut off: {s[-20:]!r}"
    return None


def garbling(text: str) -> str | None:
    if m := _TEMPLATE_RE.search(text):
        return f"a template or special token {m.group(0)!r}"
    if m := _TRIPLE_CHAR_RE.search(text):
        return f"a letter repeated: {m.group(0)!r}"
    if m := re.search(r"[^\W\d_]{25,}", text):
        return f"not a word: {m.group(0)[:30]!r}"
    if m := _GLUED_DIGIT_RE.search(text):
        return f"digits inside a word: {m.group(0)!r}"
    if m := _BAD_CURRENCY_RE.search(text):
        return f"a currency sign without an amount: {text[max(0, m.start() - 10):m.end() + 5]!r}"
    if m := _SYMBOLS_RE.search(text):
        return f"stray symbols: {m.group(0).strip()!r}"
    tokens = _TOKEN_RE.findall(text)
    symbols = [t for t in tokens if not re.match(r"\w", t) and t not in ".,!?'’\"()-:;%&/$€£¥"]
    if len(tokens) >= 6 and len(symbols) * 3 >= len(tokens):
        return f"mostly symbols: {''.join(symbols[:8])!r}"
    return None


@check("quality")
def quality_problems(turn: TurnView) -> list[Problem]:
    """The text-quality problems of the reply (module docstring): at most one per rule."""
    text = turn.reply
    if not _WORD_RE.search(text):
        return [Problem("quality.empty", "no words in the reply" if text.strip() else "an empty reply",
                        hint="Answer the viewer in a full sentence")]
    out = []
    if (phrase := repeated_phrase(text)) is not None:
        i = text.lower().find(phrase.split()[0])
        out.append(Problem("quality.repeated", f"repeats {phrase!r}", (i, i + len(phrase)) if i >= 0 else None,
                           "Say each thing once, without repeating a phrase"))
    if (why := truncation(text)) is not None:
        out.append(Problem("quality.truncated", why, hint="Write a complete sentence, not cut off at either end"))
    if (why := garbling(text)) is not None:
        out.append(Problem("quality.garbled", why, hint="Write plain words only, no stray tokens or symbols"))
    return out
