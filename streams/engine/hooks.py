"""One implementation per hook kind of the manifest; each a pure function over the turn state → a verdict.

The manifest sets parameters (``harness_editor.schemas``: ViewerInputHook, ToolArgsHook, ...); the code
that judges lives only here. The engine (:mod:`streams.engine.turn`) decides what a failing verdict does
(``on_fail``: retry with the hook's message, or block with the retry_control fallback line).

Points: ``viewer_input`` (before the prompt), ``tool_args`` (each tool call), ``before_reply`` (each
candidate final reply: reply_skill_loaded, reply_format + the interaction constraints, banned_phrases,
factual_risk, and always the language and tone constraints: ``constraints.language``, ``constraints.tone``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
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
LANGUAGE_HOOK_ID = "constraints.language"
TONE_HOOK_ID = "constraints.tone"


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
    _words: frozenset[str] | None = field(default=None, repr=False)

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


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def walk_results(results: Iterable[Any], leaf: Callable[[Any, Any], None]) -> tuple[set[float], set[float]]:
    """Visit every scalar of the tool results (``leaf(key, value)``: the key it sits under in its object, None in a
    list) and return the savings the results back, from a price below a list price in the same object or an
    enclosing one: (amounts: list price - price, percentages off: rounded, to one decimal, floored). The one walk
    both the factual-risk hook and the RL accuracy reward read results with."""
    amounts: set[float] = set()
    percents: set[float] = set()

    def walk(v: Any, key: Any, depth: int, list_price: float | None) -> None:
        if depth > 12:
            return
        if isinstance(v, dict):
            lp = _finite(v.get("list_price"))
            lp = lp if lp is not None else list_price
            p = _finite(v.get("price"))
            if lp and p is not None and 0 < p < lp:
                amounts.add(_key(lp - p))
                pct = (lp - p) / lp * 100
                percents.update({_key(float(round(pct))), _key(round(pct, 1)), _key(float(math.floor(pct)))})
            for k, x in v.items():
                walk(x, k, depth + 1, lp)
        elif isinstance(v, (list, tuple)):
            for x in v[:500]:
                walk(x, None, depth + 1, list_price)
        else:
            leaf(key, v)

    for r in results:
        walk(r, None, 0, None)
    return amounts, percents


def backed_numbers(results: Iterable[Any]) -> set[float]:
    """Every number in the tool results (values and numbers inside strings), plus savings derivable from a
    price / list price pair in the same object (list - price, and the percentage off)."""
    out: set[float] = set()

    def leaf(key: Any, v: Any) -> None:
        if isinstance(v, str):
            out.update(_key(float(m)) for m in _NUM_IN_TEXT.findall(v[:2000]))
        elif (n := _finite(v)) is not None:
            out.add(_key(n))

    amounts, percents = walk_results(results, leaf)
    return out | amounts | percents


def check_factual_risk(hook: FactualRiskHook, state: ReplyState, claims: Sequence[Claim] | None = None) -> Verdict:
    """``claims``: ``extract_claims(state.reply)`` when the caller already has them (the HSA builder checks
    one reply under many harness variants)."""
    wanted = set(hook.check)
    claims = [c for c in (extract_claims(state.reply) if claims is None else claims) if c.category in wanted]
    if not claims:
        return _verdict(hook, "before_reply", True)
    backed = state.backed_numbers()
    unbacked = [c for c in claims if _key(c.value) not in backed]
    detail = "; ".join(f"{c.category} {c.text!r} not in any tool result this turn" for c in unbacked)
    return _verdict(hook, "before_reply", not unbacked, detail)


# --- language ------------------------------------------------------------------------------------------
#
# Offline and dependency-free, so it runs on every candidate reply of a live room: (1) the Unicode script of
# the letters against the scripts the language tag implies, (2) for a few Latin-script languages, which
# language's common function words the reply uses. Both only flag when confident: a few foreign words
# (a viewer's name, a greeting) never do, and neither do product names, codes, numbers or link ids (digits
# and mid-word capitals mark a code or a brand; for a non-Latin language, any capitalised Latin word is
# taken for a name).

# Unicode character-name prefix → script (the first words of unicodedata.name(), longest first).
_SCRIPT_NAMES: tuple[tuple[str, str], ...] = (
    ("FULLWIDTH LATIN", "Latin"), ("HALFWIDTH KATAKANA", "Kana"), ("HALFWIDTH HANGUL", "Hangul"),
    ("KATAKANA-HIRAGANA", "Kana"), ("IDEOGRAPHIC", "Han"), ("CJK", "Han"), ("HIRAGANA", "Kana"),
    ("KATAKANA", "Kana"), ("HANGUL", "Hangul"), ("LATIN", "Latin"), ("CYRILLIC", "Cyrillic"),
    ("GREEK", "Greek"), ("ARABIC", "Arabic"), ("HEBREW", "Hebrew"), ("DEVANAGARI", "Devanagari"),
    ("BENGALI", "Bengali"), ("GURMUKHI", "Gurmukhi"), ("GUJARATI", "Gujarati"), ("TAMIL", "Tamil"),
    ("TELUGU", "Telugu"), ("KANNADA", "Kannada"), ("MALAYALAM", "Malayalam"), ("THAI", "Thai"),
    ("LAO", "Lao"), ("KHMER", "Khmer"), ("MYANMAR", "Myanmar"), ("GEORGIAN", "Georgian"),
    ("ARMENIAN", "Armenian"), ("ETHIOPIC", "Ethiopic"),
)
_CASED_SCRIPTS = frozenset({"Latin", "Cyrillic", "Greek", "Armenian"})
# Scripts written without spaces between words: letters are weighed as a fraction of a word.
_LETTERS_PER_WORD = {"Han": 2.0, "Kana": 2.0, "Thai": 4.0, "Lao": 4.0, "Khmer": 4.0, "Myanmar": 4.0}

_LATIN_LANGUAGES = frozenset(
    "en es fr de pt it nl id ms vi tr pl sv da no nb nn fi cs sk ro hu tl fil sw ca gl eu et lv lt sl hr bs "
    "sq is ga cy af az uz mt lb".split()
)
_PRIMARY_SCRIPTS: dict[str, frozenset[str]] = {
    **{lang: frozenset({"Latin"}) for lang in _LATIN_LANGUAGES},
    "zh": frozenset({"Han"}), "yue": frozenset({"Han"}), "ja": frozenset({"Han", "Kana"}),
    "ko": frozenset({"Hangul"}),
    **{lang: frozenset({"Cyrillic"}) for lang in ("ru", "uk", "be", "bg", "mk", "kk", "ky", "mn", "tg")},
    "sr": frozenset({"Cyrillic", "Latin"}),  # Serbian is written in both
    **{lang: frozenset({"Arabic"}) for lang in ("ar", "fa", "ur", "ps")},
    **{lang: frozenset({"Devanagari"}) for lang in ("hi", "mr", "ne", "sa")},
    "bn": frozenset({"Bengali"}), "pa": frozenset({"Gurmukhi"}), "gu": frozenset({"Gujarati"}),
    "ta": frozenset({"Tamil"}), "te": frozenset({"Telugu"}), "kn": frozenset({"Kannada"}),
    "ml": frozenset({"Malayalam"}), "th": frozenset({"Thai"}), "lo": frozenset({"Lao"}),
    "km": frozenset({"Khmer"}), "my": frozenset({"Myanmar"}), "el": frozenset({"Greek"}),
    "he": frozenset({"Hebrew"}), "iw": frozenset({"Hebrew"}), "yi": frozenset({"Hebrew"}),
    "ka": frozenset({"Georgian"}), "hy": frozenset({"Armenian"}), "am": frozenset({"Ethiopic"}),
}
# ISO 15924 script subtags (zh-Hant, sr-Latn, ...) override the primary language's script.
_SCRIPT_SUBTAGS: dict[str, frozenset[str]] = {
    "latn": frozenset({"Latin"}), "cyrl": frozenset({"Cyrillic"}), "arab": frozenset({"Arabic"}),
    "deva": frozenset({"Devanagari"}), "thai": frozenset({"Thai"}), "grek": frozenset({"Greek"}),
    "hebr": frozenset({"Hebrew"}), "hani": frozenset({"Han"}), "hans": frozenset({"Han"}),
    "hant": frozenset({"Han"}), "hira": frozenset({"Kana"}), "kana": frozenset({"Kana"}),
    "jpan": frozenset({"Han", "Kana"}), "hang": frozenset({"Hangul"}), "kore": frozenset({"Hangul", "Han"}),
    "beng": frozenset({"Bengali"}), "guru": frozenset({"Gurmukhi"}), "gujr": frozenset({"Gujarati"}),
    "taml": frozenset({"Tamil"}), "telu": frozenset({"Telugu"}), "knda": frozenset({"Kannada"}),
    "mlym": frozenset({"Malayalam"}), "geor": frozenset({"Georgian"}), "armn": frozenset({"Armenian"}),
}
LANGUAGE_NAMES = {
    "en": "English", "es": "Spanish", "fr": "French", "de": "German", "pt": "Portuguese", "it": "Italian",
    "nl": "Dutch", "id": "Indonesian", "ms": "Malay", "vi": "Vietnamese", "tr": "Turkish", "pl": "Polish",
    "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ru": "Russian", "uk": "Ukrainian", "ar": "Arabic",
    "hi": "Hindi", "th": "Thai", "el": "Greek", "he": "Hebrew",
}

# Common function words per Latin-script language. A word listed for two languages says nothing about which
# one a reply is in, so such words are dropped from every profile (computed below, never by hand).
_STOPWORDS_RAW: dict[str, str] = {
    # English also lists its homographs of other languages' words (a, as, do, per, come, met, ...) so that
    # those drop out of every profile.
    "en": "the and is are was were you your it this that these those with for of to in on have has had we our "
          "not be been will can just right now today only left from at so but or they them what there here "
          "get all very yes my an by if do does would could should about more also than which who how when "
          "back down up out off still some any over please thanks thank welcome sorry a as per come met pour "
          "den die hay um",
    "es": "el los las del y es está están son pero muy para por con una uno este esta estos estas ahora hoy "
          "también tenemos hay solo más usted gracias hola aquí cuando sí nuestro nuestra puedes pues cómo "
          "qué porque desde hasta sin sobre todo todos mucho lo le se que o en de la tu quedan ya un te",
    "fr": "le les des du et est sont mais très pour avec dans une un ce cette ces nous vous il elle ils "
          "maintenant aussi pas ne merci bonjour ici quand oui notre votre peut au aux sur tout tous "
          "beaucoup qui à en de la se que son tu",
    "de": "der die das und ist sind nicht aber sehr für mit ein eine einen dem den wir sie ich du heute "
          "jetzt auch noch nur hier wenn ja danke hallo unser kann können auf bei zu von wie was es so "
          "an in also will er",
    "pt": "o os as um uma é são mas muito para por com não você vocês nós hoje agora também temos aqui "
          "quando sim obrigado obrigada olá nosso nossa pode ao aos da do das dos na em isso este está só "
          "mais ainda sem tudo que de a e se tu à",
    "it": "il lo gli della delle dei degli e è sono ma molto per con una questo questa oggi adesso ora "
          "anche non abbiamo qui quando sì grazie ciao nostro nostra può puoi al alla nel nella del di che "
          "come tutto ancora solo più in la se tu un da",
    "nl": "de het een en is zijn niet maar heel voor met van dit deze wij jij jullie vandaag nu ook nog "
          "alleen hier wanneer ja bedankt dank hallo onze kan kunnen op bij naar hoe wat er te om al we "
          "was so",
    "id": "dan yang di ke dari untuk dengan ini itu tidak ada saya kamu anda kami kita juga akan sudah "
          "bisa hari sekarang hanya sini kalau terima kasih ya lagi sangat banyak atau tapi belum masih",
}


def _distinct_profiles(raw: dict[str, str]) -> dict[str, frozenset[str]]:
    words = {lang: set(text.split()) for lang, text in raw.items()}
    shared = {w for lang, ws in words.items() for w in ws if any(w in o for k, o in words.items() if k != lang)}
    return {lang: frozenset(ws - shared) for lang, ws in words.items()}


STOPWORDS: dict[str, frozenset[str]] = _distinct_profiles(_STOPWORDS_RAW)

LANGUAGE_MIN_FOREIGN_WORDS = 3.0  # fewer foreign "words" than this never fail the script check
LANGUAGE_MIN_SHARE = 0.5  # the language's own script must carry at least this share of the words
STOPWORD_MIN_WORDS = 5  # lowercase Latin words a reply needs before its function words are judged
STOPWORD_MIN_HITS = 3  # function words of the other language needed to flag
JA_MIN_HAN_WITHOUT_KANA = 12  # Japanese prose this long always has some kana; without any it is Chinese
ZH_MAX_KANA = 3  # Chinese prose has no kana; more than a stray one or two means Japanese


@lru_cache(maxsize=8192)
def _script(ch: str) -> str | None:
    name = unicodedata.name(ch, "")
    for prefix, script in _SCRIPT_NAMES:
        if name.startswith(prefix):
            return script
    return "Other" if ch.isalpha() else None


@dataclass(frozen=True, slots=True)
class _Run:
    """A run of letters (with their combining marks) of one script, inside one alphanumeric token."""

    text: str
    script: str
    in_code: bool  # its token also has digits (a code like GLOW5, SPF50, a link id)


def _mark(ch: str) -> bool:
    return unicodedata.category(ch).startswith("M")


_ASCII_TOKEN_RE = re.compile(r"[A-Za-z0-9]+")
_ASCII_LETTERS_RE = re.compile(r"[A-Za-z]+")


def letter_runs(text: str) -> list[_Run]:
    if text.isascii():  # the common case, a regex instead of a loop over characters (same runs)
        runs = []
        for token in _ASCII_TOKEN_RE.findall(text):
            if token.isalpha():
                runs.append(_Run(token, "Latin", False))
            else:
                runs.extend(_Run(part, "Latin", True) for part in _ASCII_LETTERS_RE.findall(token))
        return runs
    return _letter_runs_any(text)


def _letter_runs_any(text: str) -> list[_Run]:
    runs: list[_Run] = []
    token: list[tuple[str, str | None]] = []  # (char, script or None for a digit)

    def flush() -> None:
        if not token:
            return
        has_digit = any(sc is None for _, sc in token)
        cur, script = "", ""
        for ch, sc in token:
            if sc is None or (sc != script and cur):
                if cur:
                    runs.append(_Run(cur, script, has_digit))
                cur, script = "", ""
            if sc is not None:
                cur, script = cur + ch, sc
        if cur:
            runs.append(_Run(cur, script, has_digit))
        token.clear()

    for ch in text:
        if ch.isdigit():
            token.append((ch, None))
        elif ch.isalpha():
            token.append((ch, _script(ch)))
        elif _mark(ch) and token and token[-1][1] is not None:
            token.append((ch, token[-1][1]))  # a vowel sign or virama belongs to the letter before it
        else:
            flush()
    flush()
    return runs


def _name_or_code(run: _Run, *, capitalised_too: bool) -> bool:
    """A product name, brand, code or link id rather than a word of running text."""
    if run.script not in _CASED_SCRIPTS:
        return False
    if run.in_code or any(c.isupper() for c in run.text[1:]):  # GLOW5, #101, SPF, HydraGlow
        return True
    return capitalised_too and run.text[:1].isupper()


def expected_scripts(language: str) -> frozenset[str] | None:
    """Scripts a BCP-47 tag is written in (a script subtag wins), or None when the tag is not known."""
    parts = language.replace("_", "-").split("-")
    for sub in parts[1:]:
        if len(sub) == 4 and sub.isalpha():
            return _SCRIPT_SUBTAGS.get(sub.lower())
    return _PRIMARY_SCRIPTS.get(parts[0].lower())


def language_name(language: str) -> str:
    name = LANGUAGE_NAMES.get(language.split("-")[0].lower())
    return f"{name} ({language})" if name else language


def script_weights(runs: Sequence[_Run], *, skip_capitalised: bool) -> dict[str, float]:
    """Roughly how many words of each script the runs make (names and codes left out)."""
    weights: dict[str, float] = {}
    for run in runs:
        if _name_or_code(run, capitalised_too=skip_capitalised):
            continue
        per_word = _LETTERS_PER_WORD.get(run.script)
        weights[run.script] = weights.get(run.script, 0.0) + (len(run.text) / per_word if per_word else 1.0)
    return weights


def language_problems(text: str, language: str) -> list[str]:
    """Why ``text`` does not read as ``language`` ([] when it does, or when nobody can tell)."""
    expected = expected_scripts(language)
    if expected is None:
        return []  # an unknown tag: nothing to compare against
    problems: list[str] = []
    runs = letter_runs(text)
    weights = script_weights(runs, skip_capitalised="Latin" not in expected)
    own = sum(w for sc, w in weights.items() if sc in expected)
    foreign = {sc: w for sc, w in weights.items() if sc not in expected}
    other = sum(foreign.values())
    if other >= LANGUAGE_MIN_FOREIGN_WORDS and own / (own + other) < LANGUAGE_MIN_SHARE:
        main = max(foreign, key=foreign.__getitem__)
        problems.append(f"it is mostly in {main} script (about {round(other)} of {round(own + other)} words)")
    primary = language.split("-")[0].lower()
    letters = {sc: sum(len(r.text) for r in runs if r.script == sc) for sc in ("Han", "Kana")}
    if not problems and primary == "ja" and letters["Kana"] == 0 and letters["Han"] >= JA_MIN_HAN_WITHOUT_KANA:
        problems.append(f"it looks like Chinese ({letters['Han']} Han characters and no kana)")
    if not problems and primary in ("zh", "yue") and letters["Kana"] > ZH_MAX_KANA:
        problems.append(f"it looks like Japanese ({letters['Kana']} kana characters)")
    if not problems and primary in STOPWORDS and expected == frozenset({"Latin"}):
        problems += _stopword_problems(runs, primary)
    return problems


def _stopword_problems(runs: Sequence[_Run], primary: str) -> list[str]:
    # Only all-lowercase words: capitalised ones may be names ("Agua De Rosas"), and a sentence's first word
    # is not needed to tell a language.
    words = [r.text for r in runs if r.script == "Latin" and not r.in_code and r.text.islower()]
    if len(words) < STOPWORD_MIN_WORDS:
        return []
    hits = {lang: sum(w in profile for w in words) for lang, profile in STOPWORDS.items()}
    own = hits[primary]
    best = max((lang for lang in hits if lang != primary), key=hits.__getitem__)
    if hits[best] >= STOPWORD_MIN_HITS and hits[best] >= 2 * own + 2:  # a clear margin, not a coin toss
        found = sorted({w for w in words if w in STOPWORDS[best]})
        return [f"it reads as {language_name(best)} ({', '.join(found[:6])}: {hits[best]} {best} function "
                f"words, {own} {primary})"]
    return []


def check_language(constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    problems = language_problems(state.reply, constraints.language)
    message = (f"Reply only in {language_name(constraints.language)}, the language of this room: your last "
               f"reply was not ({problems[0]})." if problems else "")
    return Verdict(LANGUAGE_HOOK_ID, "language", "before_reply", not problems, "retry", message,
                   "; ".join(problems))


# --- tone ----------------------------------------------------------------------------------------------
#
# Small and conservative: a false positive blocks a good reply in a live room. Universal checks, whatever
# tone is declared: shouting (three or more words in capitals that are not acronyms, codes or words from
# this turn's tool results), runs of "!!!" / "???", and hostile or insulting words aimed at the viewer.
# Declared tones add a profile: formal (no slang or text-speak) and warm/friendly (no curt dismissals).
# The word lists are English and apply when the room's language is English; shouting and punctuation apply
# to every language.

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


def check_tone(constraints: InteractionConstraints, state: ReplyState) -> Verdict:
    problems = tone_problems(state.reply, constraints, state.result_words())
    tone = constraints.tone.strip() or "friendly"
    message = (f"Keep the tone {tone}: " + "; ".join(p for p, _ in problems) + ". Answer the viewer again."
               if problems else "")
    return Verdict(TONE_HOOK_ID, "tone", "before_reply", not problems, "retry", message,
                   "; ".join(d for _, d in problems))


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
    """All enabled before-reply hooks in manifest order; the constraints check when no reply_format hook;
    then the language and tone checks."""
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
    # Language and tone are constraints no hook kind covers, so they are checked in every manifest.
    verdicts.append(check_language(manifest.constraints, state))
    verdicts.append(check_tone(manifest.constraints, state))
    return verdicts


def enabled_hooks(manifest: Manifest, kind: str) -> list[Any]:
    return [h for h in manifest.hooks if h.enabled and h.kind == kind]
