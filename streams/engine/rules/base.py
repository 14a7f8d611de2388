"""What every rule reads (:class:`TurnView`) and writes (:class:`Problem`), and the registry of checks.

A *check* is a function ``check(turn, **params) -> list[Problem]``. The runtime hooks
(:mod:`streams.engine.hooks`), the judge (:func:`streams.engine.rules.judge.judge_turn`) and through it the RL
rewards, the HSA judge and evaluation all run a check by name through :func:`run_check`, which looks it up
in :data:`CHECKS` at call time: there is one function per check, and replacing it replaces it everywhere
(a test does exactly that).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

Effect = Literal["accuracy", "effectiveness", "partial", "none"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a reply. ``rule``: the rule id (``facts.wrong_field``, ``quality.repeated``, ...);
    ``span``: (start, end) in the reply when the problem sits somewhere, else None."""

    rule: str
    message: str
    span: tuple[int, int] | None = None
    hint: str = ""  # what to do instead, for the model (a hook's retry message); "" when the hook's own says it

    @property
    def effect(self) -> Effect:
        return effect_of(self.rule)


# What a problem costs a judged turn (module docstring of streams.engine.rules): accuracy -> 0,
# effectiveness -> 0, partial -> effectiveness at most 0.5, none -> reported only. Longest prefix wins.
EFFECTS: dict[str, Effect] = {
    "facts": "accuracy",
    "products": "accuracy",
    "claims": "accuracy",
    "coupon": "accuracy",
    "intent": "effectiveness",
    "quality": "effectiveness",
    "quality.repeated": "partial",
    "intent.wrong_viewer": "partial",
    "format": "partial",
    "language": "partial",
    "tone": "partial",
    "expect": "partial",
    "expect.wrong_product": "effectiveness",
    "expect.off_topic": "effectiveness",
    "turn.fallback": "effectiveness",
    "skills": "none",
}


def effect_of(rule: str) -> Effect:
    parts = rule.split(".")
    for i in range(len(parts), 0, -1):
        hit = EFFECTS.get(".".join(parts[:i]))
        if hit is not None:
            return hit
    return "none"


@dataclass(slots=True)
class TurnView:
    """One candidate reply in its turn: the comments it answers, the room (its catalogue is the closed list
    of products; None when unknown: product checks then pass), the parsed JSON results of THIS turn's
    successful tool calls (faulted or failed ones back nothing) and the skills loaded. Derived data (the
    catalogue, mentions, claims, result figures) is computed once, on first use."""

    reply: str
    comments: Sequence[Mapping[str, Any]] = ()
    room: Mapping[str, Any] | None = None
    tool_results: Sequence[Any] = ()
    loaded_skills: Sequence[str] = ()
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = compute()
            return value

    def comment_texts(self) -> list[str]:
        return [str(c.get("text") or "") for c in self.comments if isinstance(c, Mapping)]

    def viewers(self) -> list[str]:
        return [str(c.get("viewer") or "") for c in self.comments if isinstance(c, Mapping) and c.get("viewer")]


@lru_cache(maxsize=4096)
def word_pattern(word: str, *, plural: bool = False) -> re.Pattern[str]:
    """``word`` as a whole word, any case (compiled once: rules look for the same codes and names every reply)."""
    return re.compile(rf"(?<!\w){re.escape(word)}{'(?:e?s)?' if plural else ''}(?!\w)", re.I)


Check = Callable[..., list[Problem]]

# Filled by the rule modules at import (streams.engine.rules imports them all).
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    """Register a check under ``name`` (a decorator)."""

    def register(fn: Check) -> Check:
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = fn
        return fn

    return register


def run_check(name: str, turn: TurnView, **params: Any) -> list[Problem]:
    """The problems check ``name`` finds in ``turn`` (looked up at call time: one implementation)."""
    return CHECKS[name](turn, **params)


def sentence_bounds(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence: split after . ! ? followed by a space or the end (not inside 19.9)."""
    out = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in ".!?;" and (i + 1 == n or text[i + 1].isspace()):
            j = i + 1
            out.append((start, j))
            while j < n and text[j].isspace():
                j += 1
            start = i = j
            continue
        i += 1
    if start < n:
        out.append((start, n))
    return out or [(0, n)]


def sentence_of(bounds: Sequence[tuple[int, int]], pos: int) -> int:
    for i, (s, e) in enumerate(bounds):
        if s <= pos < e:
            return i
    return len(bounds) - 1
