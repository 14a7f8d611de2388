"""Leakage between training data and evaluation sets: an evaluation text that also appears in training data,
exactly or nearly, measures memory rather than skill. Plain strings in, plain records out (no Django), so any
training source (distillation prompts, SFT transcripts, HSA datasets) can be checked against any evaluation set
(IFEval prompts, T1–T3 cases).

Texts are compared as normalised word tokens: Unicode NFKC, case-folded, split on anything that is not a letter or
digit (so whitespace, punctuation and case differences do not hide a copy). An evaluation text leaks into a
training text when:

- ``exact``: both have the same token sequence;
- ``contained``: the evaluation text, at least ``min_contained_tokens`` long, appears whole (contiguous tokens)
  inside the training text, e.g. a viewer comment inside a training transcript;
- ``ngram``: they share at least one run of ``min_ngram`` consecutive tokens (a near copy: edited, truncated,
  or embedded with other text). 8 tokens by default: independently written sentences rarely share 8 words in
  a row, while a copy with a few words changed still does.

Evaluation texts shorter than ``min_contained_tokens`` are only matched exactly (a three-word comment inside a
long transcript is coincidence more often than leakage).

Usage::

    from training_jobs.evals.leakage import find_leaks
    leaks = find_leaks(training_texts, eval_texts)          # lists of str
    for leak in leaks:
        print(leak.describe())                               # "eval #3 in training #17 (ngram, 42% ...): '...'"
    assert not leaks

Cost is linear in the total number of tokens (an index of the evaluation texts' n-grams, one pass over the
training texts).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

DEFAULT_MIN_NGRAM = 8
DEFAULT_MIN_CONTAINED_TOKENS = 6
_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Leak:
    training_index: int  # position in ``training_texts``
    eval_index: int  # position in ``eval_texts``
    kind: Literal["exact", "contained", "ngram"]
    shared_ngrams: int  # distinct ``min_ngram``-grams of the evaluation text found in the training text
    overlap: float  # shared_ngrams / the evaluation text's distinct n-grams (1.0 for exact and contained)
    span: str  # the first shared passage, normalised (the whole text for exact / contained)

    def describe(self) -> str:
        return (f"eval #{self.eval_index} in training #{self.training_index} ({self.kind}, {self.overlap:.0%} of "
                f"the evaluation text): {self.span[:120]!r}")


def tokens(text: str) -> list[str]:
    """The normalised word tokens leakage is judged on."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def normalise(text: str) -> str:
    """``text`` as its normalised tokens joined by single spaces (what ``exact`` compares)."""
    return " ".join(tokens(text))


def _ngrams(toks: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def find_leaks(training_texts: Iterable[str], eval_texts: Iterable[str], *, min_ngram: int = DEFAULT_MIN_NGRAM,
               min_contained_tokens: int = DEFAULT_MIN_CONTAINED_TOKENS) -> list[Leak]:
    """Every (training text, evaluation text) pair where the evaluation text leaks into the training text, one
    record per pair with the strongest kind found, ordered by evaluation then training index. Empty: no leak."""
    if min_ngram < 2 or min_contained_tokens < 1:
        raise ValueError("min_ngram must be at least 2 and min_contained_tokens at least 1")
    evals = [tokens(t) for t in eval_texts]
    exact: dict[tuple[str, ...], list[int]] = {}
    contained: dict[int, dict[tuple[str, ...], list[int]]] = {}  # length -> whole short text -> eval indexes
    grams: dict[tuple[str, ...], list[int]] = {}
    n_grams: list[int] = []
    for e, toks in enumerate(evals):
        if not toks:
            n_grams.append(0)
            continue
        exact.setdefault(tuple(toks), []).append(e)
        if min_contained_tokens <= len(toks) < min_ngram:
            contained.setdefault(len(toks), {}).setdefault(tuple(toks), []).append(e)
        own = _ngrams(toks, min_ngram)
        n_grams.append(len(own))
        for g in own:
            grams.setdefault(g, []).append(e)

    leaks: list[Leak] = []
    for t, text in enumerate(training_texts):
        toks = tokens(text)
        found: dict[int, Leak] = {}
        for e in exact.get(tuple(toks), ()):
            found[e] = Leak(t, e, "exact", n_grams[e], 1.0, " ".join(toks))
        for length, wholes in contained.items():
            for i in range(len(toks) - length + 1):
                for e in wholes.get(tuple(toks[i:i + length]), ()):
                    if e not in found:
                        found[e] = Leak(t, e, "contained", 0, 1.0, " ".join(evals[e]))
        shared: dict[int, set[tuple[str, ...]]] = {}
        first: dict[int, tuple[str, ...]] = {}
        for i in range(len(toks) - min_ngram + 1):
            g = tuple(toks[i:i + min_ngram])
            for e in grams.get(g, ()):
                shared.setdefault(e, set()).add(g)
                first.setdefault(e, g)
        padded = f" {' '.join(toks)} "
        for e, gs in shared.items():
            if e in found:
                continue
            whole = " ".join(evals[e])
            if len(gs) == n_grams[e] and f" {whole} " in padded:  # the whole evaluation text, inside a longer one
                found[e] = Leak(t, e, "contained", len(gs), 1.0, whole)
            else:
                found[e] = Leak(t, e, "ngram", len(gs), len(gs) / n_grams[e], " ".join(first[e]))
        leaks.extend(found.values())
    return sorted(leaks, key=lambda leak: (leak.eval_index, leak.training_index))


def training_row_text(row: Mapping[str, Any]) -> str:
    """A chat training row (messages + tools) as one plain text, everything the model read or wrote: each message's
    content on its own lines, tool calls and tools as JSON. Plain text, not the row's JSON, so a line break stays a
    line break (in JSON it becomes the two characters ``\\n`` and the next line's first word reads as 'n...')."""
    messages = row.get("messages") or []
    parts = [str(m.get("content") or "") for m in messages if isinstance(m, dict)]
    parts += [json.dumps(m.get("tool_calls"), ensure_ascii=False) for m in messages
              if isinstance(m, dict) and m.get("tool_calls")]
    parts.append(str(row.get("tools") or ""))
    return "\n".join(parts)

