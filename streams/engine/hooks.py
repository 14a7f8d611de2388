"""One implementation per hook kind of the manifest; each a pure function over the turn state → a verdict.

The manifest sets parameters (``harness_editor.schemas``: ViewerInputHook, ToolArgsHook, ...); what a reply
is judged by lives in :mod:`streams.engine.rules` (the same rule functions the RL rewards, the HSA judge and
evaluation use) and this module turns their problems into verdicts. The engine (:mod:`streams.engine.turn`)
decides what a failing verdict does (``on_fail``: retry with the hook's message, or block with the
retry_control fallback line).

Points: ``viewer_input`` (before the prompt), ``tool_args`` (each tool call), ``before_reply`` (each
candidate final reply):

- ``reply_skill_loaded`` — a reply skill was loaded;
- ``reply_format`` — length, speakable text, sentence cap (rule ``format``; without a reply_format hook the
  built-in ``constraints`` check runs it on the interaction constraints);
- ``banned_phrases`` — rule ``banned``;
- ``factual_risk`` — the reply's facts, entity by entity: its prices, stock counts and discounts (the kinds in
  ``check``) and delivery times (always) backed by this turn's tool results for that product (region) and
  field (``facts.*``), no product or link
  id the room does not have (``products.unknown``), no false coupon promise (``coupon.*``), no claim the
  products' compliance notes forbid (``claims.forbidden``);
- built in, in every harness (constraints no hook kind covers): ``constraints.language``,
  ``constraints.tone``, ``constraints.quality`` (repeated, truncated, garbled, empty text) and
  ``constraints.relevance`` (the reply answers what the comments ask, about the product they ask about).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from harness_editor.schemas import (
    DEFAULT_FALLBACK_REPLY,  # noqa: F401 (the live room's line; kept importable here)
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
from harness_editor.schemas.safe_schema import ToolSchemaFault, check_arguments  # noqa: F401 (re-exported)
from streams.engine.rules.base import Problem, TurnView, run_check
from streams.engine.rules.claims import CLAIM_PATTERNS as _CLAIM_PATTERNS  # noqa: F401 (kept importable)
from streams.engine.rules.claims import Claim, extract_claims  # noqa: F401
from streams.engine.rules.compliance import banned_found  # noqa: F401
from streams.engine.rules.facts import backed_numbers, walk_results  # noqa: F401
from streams.engine.rules.form import count_sentences, format_problems  # noqa: F401
from streams.engine.rules.language import (  # noqa: F401
    JA_MIN_HAN_WITHOUT_KANA,
    LANGUAGE_MIN_FOREIGN_WORDS,
    LANGUAGE_MIN_SHARE,
    LANGUAGE_NAMES,
    STOPWORD_MIN_HITS,
    STOPWORD_MIN_WORDS,
    STOPWORDS,
    ZH_MAX_KANA,
    expected_scripts,
    language_name,
    language_problems,
    letter_runs,
    script_weights,
)
from streams.engine.rules.tone import SHOUT_MIN_WORDS, declared_tones, result_words, tone_problems  # noqa: F401

try:  # the `regex` module can time a match out; plain `re` cannot
    import regex as _regex
except ImportError:  # pragma: no cover - regex ships with transformers; without it we cap the input harder
    _regex = None

REGEX_TIMEOUT_S = 0.05
VIEWER_INPUT_BUDGET_S = 0.25  # every blocked pattern over every comment of a turn, together
REGEX_INPUT_CAP = 2000  # characters a blocked pattern may look at (hook.max_chars is at most 2000)
_RE_ONLY_INPUT_CAP = 300  # without `regex`, a shorter cap bounds (but cannot stop) catastrophic backtracking

DEFAULT_MAX_RETRIES = 2
CONSTRAINTS_HOOK_ID = "constraints"
LANGUAGE_HOOK_ID = "constraints.language"
TONE_HOOK_ID = "constraints.tone"
QUALITY_HOOK_ID = "constraints.quality"
RELEVANCE_HOOK_ID = "constraints.relevance"

Memo = Callable[[tuple[Any, ...], Callable[[], Any]], Any]


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
    """What the before-reply hooks see: the candidate reply, the skills loaded, the parsed JSON results of THIS
    turn (faulted/malformed ones excluded), and the comments and room of the turn (the products the reply may
    name and the questions it must answer; without them those checks have nothing to compare against)."""

    reply: str
    loaded_skills: Sequence[str] = ()
    tool_results: Sequence[Any] = ()
    comments: Sequence[Any] = ()
    room: Any = None
    _backed: set[float] | None = field(default=None, repr=False)
    _words: frozenset[str] | None = field(default=None, repr=False)
    _turn: TurnView | None = field(default=None, repr=False)

    def turn(self) -> TurnView:
        """The reply as the rules see it (built once; its derived data is cached on it)."""
        if self._turn is None:
            comments = [c for c in self.comments if isinstance(c, Mapping)]
            self._turn = TurnView(self.reply, comments, self.room if isinstance(self.room, Mapping) else None,
                                  self.tool_results, self.loaded_skills)
        return self._turn

    def backed_numbers(self) -> set[float]:
        if self._backed is None:
            self._backed = backed_numbers(self.tool_results)
        return self._backed

    def result_words(self) -> frozenset[str]:
        """Words in this turn's tool results (titles, coupon codes), as written: quoting them is not shouting."""
        if self._words is None:
            self._words = result_words(self.tool_results)
        return self._words


def _verdict(hook: Any, point: str, ok: bool, detail: str = "") -> Verdict:
    return Verdict(hook.id, hook.kind, point, ok, hook.on_fail, "" if ok else hook.message, "" if ok else detail)


def _details(problems: Sequence[Problem]) -> str:
    return "; ".join(f"{p.rule}: {p.message}" if "." in p.rule else p.message for p in problems)


def _hints(problems: Sequence[Problem]) -> list[str]:
    return list(dict.fromkeys(p.hint for p in problems if p.hint))


# --- viewer input ----------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _compile(pattern: str) -> Any:
    if _regex is not None:
        try:
            return _regex.compile(pattern, _regex.V0)
        except Exception:  # a pattern `re` accepts but `regex` does not: fall back
            pass
    return re.compile(pattern)


def pattern_search(pattern: str, text: str, timeout_s: float = REGEX_TIMEOUT_S) -> bool | None:
    """True/False, or None when the pattern ran out of time (treated as a match by the hook: fail closed)."""
    compiled = _compile(pattern)
    if _regex is not None and isinstance(compiled, _regex.Pattern):
        try:
            return compiled.search(text[:REGEX_INPUT_CAP], timeout=max(timeout_s, 0.001)) is not None
        except TimeoutError:
            return None
    return compiled.search(text[:_RE_ONLY_INPUT_CAP]) is not None


def check_viewer_input(hook: ViewerInputHook, comments: Sequence[dict[str, Any]]) -> Verdict:
    """Length and blocked patterns of each comment. The comments are anyone's text and the patterns a harness's:
    each match is timed out and the whole check has :data:`VIEWER_INPUT_BUDGET_S`, after which it fails closed
    (a harness with many slow patterns cannot stall the interactive worker)."""
    problems: list[str] = []
    deadline = time.monotonic() + VIEWER_INPUT_BUDGET_S
    for i, c in enumerate(comments):
        text = str(c.get("text") or "")
        if len(text) > hook.max_chars:
            problems.append(f"comment {i} has {len(text)} characters (max {hook.max_chars})")
        for pattern in hook.blocked_patterns:
            left = deadline - time.monotonic()
            if left <= 0:
                problems.append(f"comment {i}: the blocked patterns ran out of time "
                                f"({VIEWER_INPUT_BUDGET_S * 1000:.0f} ms for the turn's comments)")
                return _verdict(hook, "viewer_input", False, "; ".join(problems))
            found = pattern_search(pattern, text, min(REGEX_TIMEOUT_S, left))
            if found is None:
                problems.append(f"comment {i}: pattern {pattern!r} timed out")
            elif found:
                problems.append(f"comment {i} matches blocked pattern {pattern!r}")
    return _verdict(hook, "viewer_input", not problems, "; ".join(problems))


# --- tool arguments --------------------------------------------------------------------------------------

def validate_arguments(tool: Tool, arguments: dict[str, Any], *, strict: bool = True) -> list[str]:
    """JSON-Schema errors of a call's arguments ([] = valid). Not strict: unknown properties are tolerated. Local
    references only, RE2 patterns, a time budget (:mod:`harness_editor.schemas.safe_schema`); a schema that cannot
    be run raises :class:`ToolSchemaFault` (the caller refuses the call as a tool fault)."""
    return check_arguments(tool.parameters, arguments, strict=strict)


def check_tool_args(hook: ToolArgsHook, tool_name: str, errors: Sequence[str]) -> Verdict:
    return _verdict(hook, "tool_args", not errors, f"{tool_name}: " + "; ".join(errors) if errors else "")


# --- before the reply ------------------------------------------------------------------------------------


def check_reply_skill_loaded(hook: ReplySkillLoadedHook, manifest: Manifest, state: ReplyState) -> Verdict:
    kinds = {s.id: s.kind for s in manifest.skills}
    ok = any(kinds.get(s) == "reply" for s in state.loaded_skills)
    loaded = ", ".join(state.loaded_skills) or "none"
    return _verdict(hook, "before_reply", ok, f"no reply skill loaded (loaded: {loaded})")


def check_reply_format(hook: ReplyFormatHook, constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    problems = run_check("format", state.turn(), constraints=constraints,
                         speakable=hook.speakable or constraints.speakable, max_sentences=hook.max_sentences)
    return _verdict(hook, "before_reply", not problems, _details(problems))


def check_constraints(constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    """The interaction constraints, for manifests without a reply_format hook (a built-in check)."""
    problems = run_check("format", state.turn(), constraints=constraints)
    message = (
        f"Reply in {constraints.reply_min_chars} to {constraints.reply_max_chars} characters"
        + (" of plain spoken sentences: no markdown, lists, links or emoji." if constraints.speakable else ".")
    )
    return Verdict(CONSTRAINTS_HOOK_ID, "reply_format", "before_reply", not problems, "retry",
                   "" if not problems else message, _details(problems))


def check_banned_phrases(hook: BannedPhrasesHook, state: ReplyState) -> Verdict:
    problems = run_check("banned", state.turn(), phrases=hook.phrases, case_sensitive=hook.case_sensitive)
    return _verdict(hook, "before_reply", not problems, _details(problems))


def check_factual_risk(hook: FactualRiskHook, state: ReplyState, claims: Sequence[Claim] | None = None) -> Verdict:
    """The reply's facts (module docstring). ``claims``: ``extract_claims(state.reply)`` when the caller already
    has them (the HSA builder checks one reply under many harness variants). The message is the hook's, with a
    hint for what it does not say (another product's figure, a product not sold here, a coupon promise, an
    efficacy claim)."""
    turn = state.turn()
    problems = run_check("facts", turn, categories=[*hook.check, "delivery"], claims=claims)
    problems += run_check("products", turn)
    problems += run_check("coupons", turn)
    problems += run_check("compliance", turn)
    if not problems:
        return _verdict(hook, "before_reply", True)
    hints = _hints(problems)
    message = hook.message + ("" if not hints else " " + ". ".join(hints) + ".")
    return Verdict(hook.id, hook.kind, "before_reply", False, hook.on_fail, message, _details(problems))


def check_language(constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    problems = run_check("language", state.turn(), language=constraints.language)
    message = (f"Reply only in {language_name(constraints.language)}, the language of this room: your last "
               f"reply was not ({problems[0].message})." if problems else "")
    return Verdict(LANGUAGE_HOOK_ID, "language", "before_reply", not problems, "retry", message,
                   "; ".join(p.message for p in problems))


def check_tone(constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    problems = run_check("tone", state.turn(), constraints=constraints, exempt=state.result_words())
    tone = constraints.tone.strip() or "friendly"
    message = (f"Keep the tone {tone}: " + "; ".join(p.hint for p in problems) + ". Answer the viewer again."
               if problems else "")
    return Verdict(TONE_HOOK_ID, "tone", "before_reply", not problems, "retry", message,
                   "; ".join(p.message for p in problems))


def check_quality(state: ReplyState) -> Verdict:
    """Built in: repeated, truncated, garbled or empty text (rule ``quality``)."""
    problems = run_check("quality", state.turn())
    message = ("Your last reply was not clean text: " + "; ".join(p.message for p in problems) + ". "
               + ". ".join(_hints(problems)) + "." if problems else "")
    return Verdict(QUALITY_HOOK_ID, "quality", "before_reply", not problems, "retry", message, _details(problems))


def check_relevance(state: ReplyState) -> Verdict:
    """Built in: the reply answers what the comments ask, about the product they ask about (rule ``intent``)."""
    problems = run_check("intent", state.turn()) + run_check("greeting", state.turn())
    message = ". ".join(_hints(problems)) + ". Call the tool that has the answer if you need it." if problems else ""
    return Verdict(RELEVANCE_HOOK_ID, "relevance", "before_reply", not problems, "retry", message,
                   _details(problems))


# --- retry control -----------------------------------------------------------------------------------------


def retry_policy(manifest: Manifest) -> tuple[int, str, RetryControlHook | None]:
    """(max retries, fallback line, the hook) from the manifest's retry_control hook, or the defaults (the
    fallback line of the manifest's conventions: the live room's unless the harness restates it)."""
    for h in manifest.hooks:
        if h.kind == "retry_control" and h.enabled:
            return h.max_retries, h.fallback_reply, h
    return DEFAULT_MAX_RETRIES, manifest.conventions.fallback_line(), None


def check_retry_control(hook: RetryControlHook, retries_done: int) -> Verdict:
    """Passes while another retry is allowed."""
    return _verdict(hook, "before_reply", retries_done < hook.max_retries,
                    f"{retries_done} retries used of {hook.max_retries}")


# --- running a point --------------------------------------------------------------------------------------


def _direct(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    return compute()


def run_before_reply(manifest: Manifest, state: ReplyState, *, memo: Memo | None = None) -> list[Verdict]:
    """All enabled before-reply hooks in manifest order; the constraints check when no reply_format hook;
    then the built-in text quality, relevance, language and tone checks.

    ``memo(key, compute)``: a cache for the checks that read only the reply and what the key names (the HSA
    builder judges one reply under many harness variants); the verdicts are the same with or without it."""
    memo = memo or _direct
    c = manifest.constraints
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
            verdicts.append(check_reply_format(h, c, state))
        elif kind == "banned_phrases":
            verdicts.append(check_banned_phrases(h, state))
        elif kind == "factual_risk":
            claims = memo(("claims", state.reply), lambda: tuple(extract_claims(state.reply)))
            verdicts.append(check_factual_risk(h, state, claims))
    if not has_format:
        verdicts.append(check_constraints(c, state))
    # Text quality, relevance, language and tone are constraints no hook kind covers: checked in every manifest.
    verdicts.append(memo(("quality", state.reply), lambda: check_quality(state)))
    verdicts.append(check_relevance(state))
    verdicts.append(memo(("language", state.reply, c.language), lambda: check_language(c, state)))
    verdicts.append(memo(("tone", state.reply, c.language, c.tone, state.result_words()),
                         lambda: check_tone(c, state)))
    return verdicts


def enabled_hooks(manifest: Manifest, kind: str) -> list[Any]:
    return [h for h in manifest.hooks if h.enabled and h.kind == kind]
