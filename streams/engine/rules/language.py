"""Language: does the reply read as the room's language (``constraints.language``)?

Offline and dependency-free, so it runs on every candidate reply of a live room: (1) the Unicode script of
the letters against the scripts the language tag implies, (2) for a few Latin-script languages, which
language's common function words the reply uses. Both only flag when confident: a few foreign words
(a viewer's name, a greeting) never do, and neither do product names, codes, numbers or link ids (digits
and mid-word capitals mark a code or a brand; for a non-Latin language, any capitalised Latin word is
taken for a name). Plain Python.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from streams.engine.rules.base import Problem, TurnView, check

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



@check("language")
def language_check(turn: TurnView, language: str) -> list[Problem]:
    """``language``: :func:`language_problems` as problems."""
    return [Problem("language", p, hint=f"Reply only in {language_name(language)}, the language of this room")
            for p in language_problems(turn.reply, language)]
