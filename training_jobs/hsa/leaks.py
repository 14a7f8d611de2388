"""The HSA build's own leak guard: no held-out name, phrasing, code or setting in a training split.

Held-out *names* are looked for as names: a distinctive one (``promo_snapshot``, ``K-0042``, a generated
``pull_order_record``) wherever it stands as a whole token; a plain word used as a name (``query``, ``payload``,
``province``) only where it stands as an identifier: a quoted JSON string (a tool or parameter name in the tools
JSON, a key or a ``load_skill`` id in a call's arguments, escaped quotes included) or a `code span`. Held-out
*phrasings* (titles, frames, masked descriptions, fallback lines, distractor and decoy descriptions) are looked for
as phrases. The held-out word synonyms ("obtain", "patron") are ordinary English, not names: a policy or a
customer may use them, so they are no leak signal (``names.HeldOutRegistry.words``).

What a row's own base data already says is no leak: the terms found in the base harnesses and samples the rows
were made from (``samples``) are left out, so a foreign harness whose search tool has a ``query`` parameter, or
whose policy says "Commercial policy", builds. The independent T2 check (:func:`training_jobs.evals.t2.t2_leaks`,
run by :mod:`training_jobs.eval_leakage` over every training source) is not affected by this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from harness_editor.schemas import manifest_to_json
from training_jobs.hsa import names as N
from training_jobs.hsa.samples import Sample, target_json

_HEAD, _TAIL = r"(?<![\w\-])", r"(?![\w\-])"
_LENGTH_RE = re.compile(r"Reply length: \d+ to (\d+) characters")


def _plain_word(name: str) -> bool:
    """A name that is also an ordinary word (only an identifier position makes it a name)."""
    return name.isascii() and name.isalpha() and name.islower()


@lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[tuple[str, re.Pattern[str]], ...], tuple[re.Pattern[str], ...]]:
    """((term, its pattern) for every name and phrasing, the name patterns). A distinctive name or a phrasing
    matches as a whole token; a plain-word name only in an identifier position."""
    reg = N.heldout_registry()
    checks: list[tuple[str, re.Pattern[str]]] = []
    for t in sorted(reg.names | reg.phrasings):
        if t in reg.names and _plain_word(t):
            checks.append((t, re.compile(rf"\\?\"{re.escape(t)}\\?\"|`{re.escape(t)}`")))
        else:
            head = _HEAD if t[0].isalnum() else ""
            tail = _TAIL if t[-1].isalnum() else ""
            checks.append((t, re.compile(head + re.escape(t) + tail)))
    return tuple(checks), tuple(p for p in reg.patterns if p.pattern != _CODE_RE.pattern)


_TOKEN_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CODE_RE = re.compile(r"(?<![\w-])K-[0-9]{4}(?![\w-])")
_TOKEN_HITS: dict[str, tuple[str, ...]] = {}  # identifier token -> the patterns' matches in it (rows share tokens)


def _token_hits(token: str, patterns: Sequence[re.Pattern[str]]) -> tuple[str, ...]:
    hit = _TOKEN_HITS.get(token)
    if hit is None:
        if len(_TOKEN_HITS) >= 200_000:
            _TOKEN_HITS.clear()
        hit = _TOKEN_HITS[token] = tuple(m.group(0) for p in patterns for m in p.finditer(token))
    return hit


def terms_in(text: str) -> set[str]:
    """Every held-out term in ``text`` (names as names, phrasings, generated names, reply-length settings)."""
    checks, patterns = _patterns()
    # a plain substring test first (fast), the pattern only for terms that are there at all
    found: set[str] = {term for term, pattern in checks if term in text and pattern.search(text)}
    # the name patterns match inside one identifier token: test each distinct token once (cached)
    for token in set(_TOKEN_RE.findall(text)):
        found.update(_token_hits(token, patterns))
    found.update(_CODE_RE.findall(text))
    reg = N.heldout_registry()
    for m in _LENGTH_RE.finditer(text):
        if int(m.group(1)) in reg.reply_max_chars:
            found.add(f"reply_max_chars={m.group(1)}")
    return found


def _words_in(text: str) -> set[str]:
    """Whole words of a base text (a plain-word name the base uses anywhere is its own, in any position)."""
    return set(re.findall(r"[A-Za-z][\w\-]*", text))


def base_terms(samples: Iterable[Sample]) -> set[str]:
    """The held-out terms the base data already has: in the samples' harnesses (as JSON), rooms, comments and
    targets."""
    found: set[str] = set()
    seen: set[int] = set()
    for s in samples:
        texts = [json.dumps([dict(c) for c in s.comments], ensure_ascii=False),
                 json.dumps(target_json(s.target), ensure_ascii=False, default=str),
                 json.dumps([st.result for st in s.tool_calls()], ensure_ascii=False, default=str)]
        if id(s.room) not in seen and s.room:
            seen.add(id(s.room))
            texts.append(json.dumps(dict(s.room), ensure_ascii=False, default=str))
        if id(s.manifest) not in seen:
            seen.add(id(s.manifest))
            texts.append(manifest_to_json(s.manifest))
        for text in texts:
            found |= terms_in(text)
            found |= _words_in(text) & N.heldout_registry().names
    return found


def heldout_leaks(rows: Iterable[Mapping[str, Any]], *, samples: Sequence[Sample] | None = None) -> list[str]:
    """Held-out names, phrasings, codes or numbers found in rows that their base data does not have (for a
    training set this must be empty). ``samples``: the canonical samples the rows were built from."""
    allowed = base_terms(samples) if samples else set()
    found: set[str] = set()
    tools_seen: set[str] = set()  # the rows of one harness variant share its tools JSON: scan it once
    for row in rows:
        found |= terms_in(json.dumps(row["messages"], ensure_ascii=False))
        tools = str(row["tools"])
        if tools not in tools_seen:
            tools_seen.add(tools)
            found |= terms_in(tools)
    return sorted(found - allowed)
