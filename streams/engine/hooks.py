"""One implementation per hook kind of the manifest; each a pure function over the turn state → a verdict.

The manifest sets parameters (``harness_editor.schemas``: ViewerInputHook, ToolArgsHook, ...); the code
that judges lives only here. The engine (:mod:`streams.engine.turn`) decides what a failing verdict does
(``on_fail``: retry with the hook's message, or block with the retry_control fallback line).

Points: ``viewer_input`` (before the prompt), ``tool_args`` (each tool call), ``before_reply`` (each
candidate final reply: reply_skill_loaded, reply_format + the interaction constraints, banned_phrases,
factual_risk).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema

from harness_editor.schemas import (
    BannedPhrasesHook,
    FactualRiskHook,
    InteractionConstraints,
    Manifest,
    ReplyFormatHook,
    ReplySkillLoadedHook,
    RetryControlHook,
    Tool,
    ToolArgsHook,
    ViewerInputHook,
)

try:  # the `regex` module can time a match out; plain `re` cannot
    import regex as _regex
except ImportError:  # pragma: no cover - regex ships with transformers; without it we cap the input harder
    _regex = None

REGEX_TIMEOUT_S = 0.05
REGEX_INPUT_CAP = 2000  # characters a blocked pattern may look at (hook.max_chars is at most 2000)
_RE_ONLY_INPUT_CAP = 300  # without `regex`, a shorter cap bounds (but cannot stop) catastrophic backtracking

DEFAULT_MAX_RETRIES = 2
DEFAULT_FALLBACK_REPLY = "Let me double-check that for you. Please look at the product card on screen!"
CONSTRAINTS_HOOK_ID = "constraints"


@dataclass(frozen=True, slots=True)
class Verdict:
    hook_id: str
    kind: str
    point: str
    passed: bool
    on_fail: str = "retry"
    message: str = ""  # the hook's message to the model (only when failed)
    detail: str = ""  # what failed, for operators


@dataclass(slots=True)
class ReplyState:
    """What the before-reply hooks see."""

    reply: str
    loaded_skills: Sequence[str] = ()
    tool_results: Sequence[Any] = ()  # parsed JSON results of THIS turn (faulted/malformed ones excluded)
    _backed: set[float] | None = field(default=None, repr=False)

    def backed_numbers(self) -> set[float]:
        if self._backed is None:
            self._backed = backed_numbers(self.tool_results)
        return self._backed


def _verdict(hook: Any, point: str, ok: bool, detail: str = "") -> Verdict:
    return Verdict(hook.id, hook.kind, point, ok, hook.on_fail, "" if ok else hook.message, "" if ok else detail)


# --- viewer input ----------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _compile(pattern: str) -> Any:
    if _regex is not None:
        try:
            return _regex.compile(pattern, _regex.V0)
        except Exception:  # a pattern `re` accepts but `regex` does not: fall back
            pass
    return re.compile(pattern)


def pattern_search(pattern: str, text: str) -> bool | None:
    """True/False, or None when the pattern ran out of time (treated as a match by the hook: fail closed)."""
    compiled = _compile(pattern)
    if _regex is not None and isinstance(compiled, _regex.Pattern):
        try:
            return compiled.search(text[:REGEX_INPUT_CAP], timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            return None
    return compiled.search(text[:_RE_ONLY_INPUT_CAP]) is not None


def check_viewer_input(hook: ViewerInputHook, comments: Sequence[dict[str, Any]]) -> Verdict:
    problems: list[str] = []
    for i, c in enumerate(comments):
        text = str(c.get("text") or "")
        if len(text) > hook.max_chars:
            problems.append(f"comment {i} has {len(text)} characters (max {hook.max_chars})")
        for pattern in hook.blocked_patterns:
            found = pattern_search(pattern, text)
            if found is None:
                problems.append(f"comment {i}: pattern {pattern!r} timed out")
            elif found:
                problems.append(f"comment {i} matches blocked pattern {pattern!r}")
    return _verdict(hook, "viewer_input", not problems, "; ".join(problems))


# --- tool arguments --------------------------------------------------------------------------------------

_VALIDATORS: dict[int, tuple[Tool, Any]] = {}


def _validator(tool: Tool) -> Any:
    hit = _VALIDATORS.get(id(tool))
    if hit is not None and hit[0] is tool:  # the cache holds the tool, so its id cannot be reused meanwhile
        return hit[1]
    if len(_VALIDATORS) > 512:
        _VALIDATORS.clear()
    v = jsonschema.Draft202012Validator(tool.parameters)
    _VALIDATORS[id(tool)] = (tool, v)
    return v


def validate_arguments(tool: Tool, arguments: dict[str, Any], *, strict: bool = True) -> list[str]:
    """JSON-Schema errors of a call's arguments ([] = valid). Not strict: unknown properties are tolerated."""
    errors = []
    for err in _validator(tool).iter_errors(arguments):
        if not strict and err.validator == "additionalProperties":
            continue
        where = ".".join(str(p) for p in err.absolute_path)
        errors.append(f"{where}: {err.message}" if where else err.message)
    return errors


def check_tool_args(hook: ToolArgsHook, tool_name: str, errors: Sequence[str]) -> Verdict:
    return _verdict(hook, "tool_args", not errors, f"{tool_name}: " + "; ".join(errors) if errors else "")


# --- before the reply ------------------------------------------------------------------------------------


def check_reply_skill_loaded(hook: ReplySkillLoadedHook, manifest: Manifest, state: ReplyState) -> Verdict:
    kinds = {s.id: s.kind for s in manifest.skills}
    ok = any(kinds.get(s) == "reply" for s in state.loaded_skills)
    loaded = ", ".join(state.loaded_skills) or "none"
    return _verdict(hook, "before_reply", ok, f"no reply skill loaded (loaded: {loaded})")


_MARKDOWN_RE = re.compile(
    r"\*\*|__|`|~~|^\s{0,3}#{1,6}\s|^\s*[-*+•]\s|^\s*\d+[.)]\s|\[[^\]\n]*\]\([^)\n]*\)|^\s*>|\|\s*---",
    re.M,
)
_URL_RE = re.compile(
    r"https?://|\bwww\.|\b[\w-]+\.(?:com|net|org|io|shop|store|cn|co|app|ly|me|tv)\b(?:/\S*)?", re.I
)
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
        if m := _EMOJI_RE.search(text):
            problems.append(f"emoji or symbol in a spoken reply: {m.group(0)!r}")
    if max_sentences is not None and (k := count_sentences(text)) > max_sentences:
        problems.append(f"{k} sentences, more than {max_sentences}")
    return problems


def check_reply_format(hook: ReplyFormatHook, constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    problems = format_problems(
        state.reply, constraints, speakable=hook.speakable or constraints.speakable, max_sentences=hook.max_sentences
    )
    return _verdict(hook, "before_reply", not problems, "; ".join(problems))


def check_constraints(constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    """The interaction constraints, for manifests without a reply_format hook (a built-in check)."""
    problems = format_problems(state.reply, constraints, speakable=constraints.speakable)
    message = (
        f"Reply in {constraints.reply_min_chars} to {constraints.reply_max_chars} characters"
        + (" of plain spoken sentences: no markdown, lists, links or emoji." if constraints.speakable else ".")
    )
    return Verdict(CONSTRAINTS_HOOK_ID, "reply_format", "before_reply", not problems, "retry",
                   "" if not problems else message, "; ".join(problems))


def check_banned_phrases(hook: BannedPhrasesHook, state: ReplyState) -> Verdict:
    if hook.case_sensitive:
        text = state.reply
        found = [p for p in hook.phrases if p in text]
    else:
        text = state.reply.casefold()
        found = [p for p in hook.phrases if p.casefold() in text]
    return _verdict(hook, "before_reply", not found, "banned: " + ", ".join(repr(p) for p in found))


# --- factual risk ---------------------------------------------------------------------------------------

_CUR = r"(?:[$¥€£￥]|US\$|RMB\s?)"
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_UNIT = r"(?:dollars?|bucks|usd|yuan|rmb|euros?|pounds?|元|块)"
_CLAIM_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("discount", re.compile(rf"(?P<n>{_NUM})\s*(?:%|percent)\s*(?:off|discount|cheaper|less|saving)", re.I)),
    ("discount", re.compile(
        rf"\b(?:save|saving|savings of|discount of|knock(?:s|ed)? off)\s+(?:you\s+)?(?:of\s+)?{_CUR}?\s*(?P<n>{_NUM})",
        re.I)),
    ("discount", re.compile(rf"{_CUR}\s*(?P<n>{_NUM})\s*(?:off|discount|cheaper|less)\b", re.I)),
    ("discount", re.compile(rf"(?P<n>{_NUM})\s*{_UNIT}\s*(?:off|discount|cheaper|less)\b", re.I)),
    ("price", re.compile(rf"{_CUR}\s*(?P<n>{_NUM})", re.I)),
    ("price", re.compile(rf"(?P<n>{_NUM})\s*{_UNIT}(?![a-z])", re.I)),
    ("stock", re.compile(
        rf"(?P<n>{_NUM})\s*(?:units?|pieces?|pcs|items?|bottles?|sets?|of them)?\s*"
        r"(?:left|remaining|in stock|still available|available)\b",
        re.I)),
    ("stock", re.compile(
        rf"\b(?:stock|inventory)\s*(?:of|is|at|level|count|:)?\s*(?:is\s+)?(?:only\s+|just\s+)?(?P<n>{_NUM})\b", re.I)),
)


@dataclass(frozen=True, slots=True)
class Claim:
    category: str
    text: str
    value: float


def _number(text: str) -> float | None:
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _key(v: float) -> float:
    return round(v, 2)


def extract_claims(reply: str) -> list[Claim]:
    """Prices, stock counts and discounts stated in a reply (a span is claimed by the first pattern)."""
    claims: list[Claim] = []
    taken: list[tuple[int, int]] = []
    for category, pattern in _CLAIM_PATTERNS:
        for m in pattern.finditer(reply):
            s, e = m.span("n")
            if any(s < te and ts < e for ts, te in taken):
                continue
            value = _number(m.group("n"))
            if value is None:
                continue
            taken.append((s, e))
            claims.append(Claim(category, m.group(0).strip(), value))
    return claims


_NUM_IN_TEXT = re.compile(r"\d+(?:\.\d+)?")


def backed_numbers(results: Iterable[Any]) -> set[float]:
    """Every number in the tool results (values and numbers inside strings), plus savings derivable from a
    price / list price pair in the same object (list - price, and the percentage off)."""
    out: set[float] = set()

    def walk(v: Any, depth: int, list_price: float | None) -> None:
        if depth > 12:
            return
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            if math.isfinite(v):
                out.add(_key(float(v)))
            return
        if isinstance(v, str):
            for m in _NUM_IN_TEXT.findall(v[:2000]):
                out.add(_key(float(m)))
            return
        if isinstance(v, dict):
            lp = v.get("list_price")
            lp = float(lp) if isinstance(lp, (int, float)) and not isinstance(lp, bool) else list_price
            p = v.get("price")
            if lp and isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p < lp:
                out.add(_key(lp - p))
                pct = (lp - p) / lp * 100
                out.update({_key(round(pct)), _key(round(pct, 1)), _key(math.floor(pct))})
            for x in v.values():
                walk(x, depth + 1, lp)
        elif isinstance(v, (list, tuple)):
            for x in v[:500]:
                walk(x, depth + 1, list_price)

    for r in results:
        walk(r, 0, None)
    return out


def check_factual_risk(hook: FactualRiskHook, state: ReplyState) -> Verdict:
    wanted = set(hook.check)
    claims = [c for c in extract_claims(state.reply) if c.category in wanted]
    if not claims:
        return _verdict(hook, "before_reply", True)
    backed = state.backed_numbers()
    unbacked = [c for c in claims if _key(c.value) not in backed]
    detail = "; ".join(f"{c.category} {c.text!r} not in any tool result this turn" for c in unbacked)
    return _verdict(hook, "before_reply", not unbacked, detail)


# --- retry control -----------------------------------------------------------------------------------------


def retry_policy(manifest: Manifest) -> tuple[int, str, RetryControlHook | None]:
    """(max retries, fallback line, the hook) from the manifest's retry_control hook, or the defaults."""
    for h in manifest.hooks:
        if h.kind == "retry_control" and h.enabled:
            return h.max_retries, h.fallback_reply, h
    return DEFAULT_MAX_RETRIES, DEFAULT_FALLBACK_REPLY, None


def check_retry_control(hook: RetryControlHook, retries_done: int) -> Verdict:
    """Passes while another retry is allowed."""
    return _verdict(hook, "before_reply", retries_done < hook.max_retries,
                    f"{retries_done} retries used of {hook.max_retries}")


# --- running a point --------------------------------------------------------------------------------------


def run_before_reply(manifest: Manifest, state: ReplyState) -> list[Verdict]:
    """All enabled before-reply hooks in manifest order; the constraints check when no reply_format hook."""
    verdicts: list[Verdict] = []
    has_format = False
    for h in manifest.hooks:
        if not h.enabled:
            continue
        kind = h.kind
        if kind == "reply_skill_loaded":
            verdicts.append(check_reply_skill_loaded(h, manifest, state))
        elif kind == "reply_format":
            has_format = True
            verdicts.append(check_reply_format(h, manifest.constraints, state))
        elif kind == "banned_phrases":
            verdicts.append(check_banned_phrases(h, state))
        elif kind == "factual_risk":
            verdicts.append(check_factual_risk(h, state))
    if not has_format:
        verdicts.append(check_constraints(manifest.constraints, state))
    return verdicts


def enabled_hooks(manifest: Manifest, kind: str) -> list[Any]:
    return [h for h in manifest.hooks if h.enabled and h.kind == kind]
