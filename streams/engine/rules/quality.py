"""Text quality: is the reply a clean, complete sentence a host would say?

- ``quality.empty`` — nothing to say: no word of two letters or more;
- ``quality.repeated`` — a phrase said twice: a run of three or more words repeated at once ("in the flash
  sale until minute 55 in the flash sale until minute 55"), a run of six or more anywhere, or a word three times
  in a row;
- ``quality.truncated`` — cut off: it starts inside a number or a sentence (".55 in the ...", ", and ...",
  "of ...", "855 right now, down from $89"), inside a name ("ydraGlow", "Silk Hair Dryer" for the AirSilk Hair
  Dryer) or inside a word (a lower-case first word that is only the end of a known word: "arrier Repair
  Ceramide"), or ends on a dangling word or sign ("... for $", "... and the", "... we") or inside a known word
  ("... in the fla"); known words: the catalogue's titles, the comments, common English;
- ``quality.garbled`` — not words: template or special tokens (``<|im_end|>``, ``{title}``, ``[INST]``),
  replacement characters, a letter repeated five times, a "word" of 25 letters or more, symbol soup (three or
  more stray symbols in a row, or a third of the tokens symbols), digits glued inside a word ("Hydra5Glow"),
  or a currency sign not followed by a number.

Conservative on purpose (a false positive costs a live room a retry): a missing final full stop, a lower-case
start, "very very" or "hello hello" are fine. Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from streams.engine.rules.base import Problem, TurnView, check

_TOKEN_RE = re.compile(r"\w+(?:[.,']\w+)*|[^\w\s]")
_WORD_RE = re.compile(r"[^\W\d_]{2,}")
_TEMPLATE_RE = re.compile(r"<\|[^|>]{0,40}\|?>|\{\{|\}\}|\{[A-Za-z_][\w.]*\}|\[/?INST\]|</?s>|<unk>|<pad>|\ufffd"
                          r"|\{\s*\"[^\"\n]{1,40}\"\s*:|</?(?:tool_call|tool_response|think)>"
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
    r"minute|we))\s*$", re.I)
# A figure that starts the reply and needs a subject before it ("855 right now, down from $89": "X is $" was cut).
_START_FIGURE_CUT_RE = re.compile(
    r"^\s*\d[\d.,]*\s+(?:right\s+now|left\s+of|in\s+the\s+flash\s+sale|until\s+minute|off\s+orders|down\s+from|"
    r"of\s+[A-Z])")


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


# Words that are whole words however short (a fragment is judged only when it is none of these).
COMMON_WORDS = frozenset("""
a an the and or but so of to in on at by for with from as is are was were be been it its it's this that these those
we you your our my me i he she they them their his her us all any some no not yes yeah hi hey hello thanks thank
welcome sorry please sure ok okay now right today tonight here there what which who how when where why if then than
just only also still very really too more most less much many few one two three four five six seven eight nine ten
do does did done have has had get got grab buy use used can could will would should may might must let lets let's
new old good great nice love lovely best free sale deal deals price prices cost stock left off code codes coupon
coupons order orders ship ships shipping delivery days day business returns return over under up down out about
into onto after before until while each every per item items link links card cart room show live host viewer
viewers friend friends everyone guys ask asked answer check look see yes ever never always again back come
go going gone make made keep kept try call calls soon fast quick quickly long short big small more less
flash minute minutes cosmetic cosmetics promise fixes dermatologist watching takes sold units available
tonight hurry helps skin hair feel hydrated gentle
""".split())
_FRAGMENT_MIN = 2


def _vocabulary(turn: TurnView) -> set[str]:
    from streams.engine.rules.entities import catalogue_of

    vocab = set(COMMON_WORDS)
    for p in catalogue_of(turn).products.values():
        vocab |= {w.lower() for w in re.findall(r"[^\W\d_]+", p.title)}
    for text in turn.comment_texts() + turn.viewers():
        vocab |= {w.lower() for w in re.findall(r"[^\W\d_]+", text)}
    return vocab


def _brands(turn: TurnView) -> list[tuple[str, str]]:
    from streams.engine.rules.entities import catalogue_of

    out = []
    for p in catalogue_of(turn).products.values():
        words = p.title.split()
        for i, w in enumerate(words):
            if re.fullmatch(r"[A-Z][a-z]+[A-Z][A-Za-z]*", w):
                out.append((w, words[i + 1] if i + 1 < len(words) else ""))
    return out


def _fragment(word: str, vocab: set[str], *, suffix: bool) -> str | None:
    """The vocabulary word ``word`` is a cut-off piece of (its end when ``suffix``, else its start), if any."""
    w = word.lower()
    if len(w) < _FRAGMENT_MIN or w in vocab:
        return None
    for v in vocab:
        if len(v) > len(w) and len(v) - len(w) <= 10 and (v.endswith(w) if suffix else v.startswith(w)):
            return v
    return None


def _brand_cut(text: str, brands: Sequence[tuple[str, str]]) -> str | None:
    """The start of a brand cut off at its inner capital: "Silk Hair Dryer" for "AirSilk Hair Dryer"
    (``brands``: (brand, the title words after it))."""
    for brand, rest in brands:
        parts = re.findall(r"[A-Z][a-z]+", brand)
        for i in range(1, len(parts)):
            tail = "".join(parts[i:])
            if re.match(rf"{re.escape(tail)}\b", text) and (not rest or text[len(tail):].lstrip().startswith(rest)):
                return f"{tail} (of {brand})"
    return None


def truncation(text: str, vocab: set[str] | Callable[[], set[str]] | None = None,
               brands: Sequence[tuple[str, str]] = ()) -> str | None:
    """Why the text reads as cut off (module docstring), or None. ``vocab``: known words (the catalogue's, the
    comments', common ones); with it, a lower-case first word that is only the end of a known word ("arrier
    Repair Ceramide ...") and a last word that is only its start ("... in the fla") are cut off too."""
    s = text.strip()
    if not s:
        return None
    if m := _START_CUT_RE.match(s):
        return f"starts cut off: {s[:12]!r}"
    if m := _START_WORD_CUT_RE.match(s):
        return f"starts inside a word: {m.group(0)!r}"
    if m := _START_CONNECTOR_RE.match(s):
        return f"starts in the middle of a sentence: {s[:20]!r}"
    if m := _START_FIGURE_CUT_RE.match(s):
        return f"starts with a figure cut from its sentence: {s[:24]!r}"
    if m := _END_CUT_RE.search(s):
        return f"ends cut off: {s[-20:]!r}"
    first = re.match(r"([a-z]+)\b", s)
    last = re.search(r"\b([^\W\d_]+)$", s)
    if brands and (cut := _brand_cut(s, brands)):
        return f"starts inside a name: {cut!r}"
    if vocab is not None and (first or last):
        words = vocab() if callable(vocab) else vocab
        if first and (whole := _fragment(first.group(1), words, suffix=True)):
            return f"starts inside a word: {first.group(1)!r} (of {whole!r})"
        if last and (whole := _fragment(last.group(1), words, suffix=False)):
            return f"ends inside a word: {last.group(1)!r} (of {whole!r})"
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
    if (why := truncation(text, lambda: _vocabulary(turn), _brands(turn))) is not None:
        out.append(Problem("quality.truncated", why, hint="Write a complete sentence, not cut off at either end"))
    if (why := garbling(text)) is not None:
        out.append(Problem("quality.garbled", why, hint="Write plain words only, no stray tokens or symbols"))
    return out
