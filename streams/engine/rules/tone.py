"""Tone: shouting, excess punctuation, hostile words, and the declared tone's profile.

Small and conservative: a false positive blocks a good reply in a live room. Universal checks, whatever
tone is declared: shouting (three or more words in capitals that are not acronyms, codes or words from
this turn's tool results), runs of "!!!" / "???", and hostile or insulting words aimed at the viewer.
Declared tones add a profile: formal (no slang or text-speak) and warm/friendly (no curt dismissals).
The word lists are English and apply when the room's language is English; shouting and punctuation apply
to every language. Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from harness_editor.schemas import InteractionConstraints
from streams.engine.rules.base import Problem, TurnView, check
from streams.engine.rules.language import _CASED_SCRIPTS, letter_runs

SHOUT_MIN_WORDS = 3
_ACRONYMS = frozenset(
    "SPF LED USB UV UVA UVB AHA BHA PHA VIP DIY FAQ USD RMB EUR GBP CNY HKD JPY AUD CAD NFC LCD OLED HDMI "
    "BPA PVC SKU ID QR AM PM TV".split()
)
_EXCESS_PUNCT_RE = re.compile(r"[!?！？¡¿]{3,}")
_NEGATION_RE = re.compile(r"\b(?:no|not|never|nothing|isn't|aren't|wasn't|don't|doesn't|ain't)\W+(?:\w+\W+)?$",
                          re.I)
_SENTENCE_START = r"(?:^|[.!?,;:]\s*)"  # imperatives ("Calm down.") differ from descriptions ("calms down redness")
_SENTENCE_END = r"\s*(?:[.!?,;:]|$)"
_HOSTILE_RES: tuple[re.Pattern[str], ...] = (
    # never said to a viewer, negated or not
    re.compile(r"\b(?:idiots?(?!-)|idiotic|morons?|moronic|imbeciles?|dumbass\w*|retard(?:ed|s)?|stfu|shut up|"
               r"screw you|f+u+c+k\w*|shit\w*|bitch\w*|bastards?|assholes?|can'?t you read|learn to read)\b", re.I),
    re.compile(rf"{_SENTENCE_START}(?:nobody cares|no one cares|who cares|get lost|go away){_SENTENCE_END}", re.I),
    # insults aimed at the viewer
    re.compile(r"\byou(?:'re| are)?\s+(?:so\s+|really\s+|such\s+an?\s+|an?\s+|being\s+)?"
               r"(?:stupid|dumb|annoying|ugly|clueless|ignorant|useless|pathetic|rude|loser)\b", re.I),
    re.compile(r"\bare you\s+(?:blind|deaf|stupid|dumb)\b", re.I),
)
# "stupid question" is hostile, "there are no stupid questions" is not: these need no negation just before.
_NEGATABLE_HOSTILE_RE = re.compile(
    r"\b(?:stupid|dumb|dumbest|silly|pointless|ridiculous|lame)\s+(?:questions?|comments?|viewers?)\b", re.I)

_TONE_FORMAL = frozenset({"formal", "professional", "polite", "respectful", "courteous", "business"})
_TONE_WARM = frozenset({"warm", "friendly", "kind", "caring", "upbeat", "cheerful", "welcoming", "empathetic",
                        "gentle", "supportive", "positive", "enthusiastic", "sweet"})
_TONE_NEGATORS = frozenset({"not", "non", "no", "less", "never", "semi", "un", "without"})
_SLANG_RE = re.compile(
    r"\b(?:lol|lmao|rofl|omg|gonna|wanna|gotta|kinda|sorta|ain'?t|y'?all|dude|bro|thx|pls|plz|btw|idk|tbh|imo|"
    r"cuz|(?-i:u|ur))\b", re.I)  # "u"/"ur" only in lower case: "U-shaped" is a product, not text-speak
_DISMISSIVE_RES: tuple[re.Pattern[str], ...] = (
    re.compile(rf"{_SENTENCE_START}(?:whatever|deal with it|calm down|duh){_SENTENCE_END}", re.I),
    re.compile(r"\b(?:not my problem|figure it out yourself|google it|stop asking|take it or leave it|"
               r"as i already said|ask someone else|i already (?:told you|said|answered)|i just told you)\b", re.I),
)


def _walk_strings(value: Any, out: set[str], depth: int = 0) -> None:
    if depth > 12:
        return
    if isinstance(value, str):
        out.update(re.findall(r"[^\W\d_]+", value[:2000]))
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk_strings(v, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value[:500]:
            _walk_strings(v, out, depth + 1)


def result_words(results: Iterable[Any]) -> frozenset[str]:
    out: set[str] = set()
    for r in results:
        _walk_strings(r, out)
    return frozenset(out)


def declared_tones(tone: str) -> set[str]:
    """The profiles a free-text tone asks for: "formal" and/or "warm" ("not formal" and "informal" ask for
    neither)."""
    words = re.findall(r"[a-z]+", tone.lower())
    out: set[str] = set()
    for i, w in enumerate(words):
        if i and words[i - 1] in _TONE_NEGATORS:
            continue
        if w in _TONE_FORMAL:
            out.add("formal")
        elif w in _TONE_WARM:
            out.add("warm")
    return out


def _shouted(text: str, exempt: frozenset[str]) -> list[str]:
    return [r.text for r in letter_runs(text)
            if r.script in _CASED_SCRIPTS and not r.in_code and len(r.text) >= 3 and r.text.isupper()
            and r.text not in _ACRONYMS and r.text not in exempt]


def tone_problems(text: str, constraints: InteractionConstraints,
                  exempt: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(what the model should stop doing, what was found) pairs; [] when the tone is fine."""
    problems: list[tuple[str, str]] = []
    shouted = _shouted(text, exempt)
    if len(shouted) >= SHOUT_MIN_WORDS:
        problems.append(("no words in capital letters (shouting)", "shouting: " + " ".join(shouted[:6])))
    if m := _EXCESS_PUNCT_RE.search(text):
        problems.append((f"no {m.group(0)!r}-style punctuation", f"excess punctuation {m.group(0)!r}"))
    if constraints.language.split("-")[0].lower() != "en":
        return problems
    hostile = [m.group(0) for p in _HOSTILE_RES for m in p.finditer(text)]
    hostile += [m.group(0) for m in _NEGATABLE_HOSTILE_RE.finditer(text)
                if not _NEGATION_RE.search(text[max(0, m.start() - 30):m.start()])]
    if hostile:
        problems.append(("no insults or hostile words towards the viewer",
                         "hostile: " + ", ".join(repr(h.strip(" .!?,;:")) for h in hostile[:4])))
    tones = declared_tones(constraints.tone)
    if "formal" in tones and (slang := [m.group(0) for m in _SLANG_RE.finditer(text)]):
        problems.append(("no slang or text-speak in a formal tone", "slang: " + ", ".join(slang[:6])))
    if "warm" in tones and (curt := [m.group(0).strip(" .!?,") for p in _DISMISSIVE_RES for m in p.finditer(text)]):
        problems.append(("no curt or dismissive phrases", "dismissive: " + ", ".join(repr(c) for c in curt[:4])))
    return problems



def turn_result_words(turn: TurnView) -> frozenset[str]:
    return turn.cached("result_words", lambda: result_words(turn.tool_results))


@check("tone")
def tone_check(turn: TurnView, constraints: InteractionConstraints,
               exempt: frozenset[str] | None = None) -> list[Problem]:
    """``tone``: :func:`tone_problems` as problems (message: what was found; hint: what to do instead)."""
    words = turn_result_words(turn) if exempt is None else exempt
    return [Problem("tone", found, hint=fix) for fix, found in tone_problems(turn.reply, constraints, words)]
