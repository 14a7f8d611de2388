"""The judge of one whole turn: accuracy (0 / 1) and effectiveness (0 / 0.5 / 1) from the reply rules, with
every problem found. The RL rewards (:mod:`training_jobs.hat.rewards`), the HSA regeneration judge
(:mod:`training_jobs.hsa.judging`) and evaluation call :func:`judge_turn`; the runtime hooks run the same
checks on each candidate reply (:mod:`streams.engine.hooks`). Semantics: the package docstring
(:mod:`streams.engine.rules`). Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_editor.schemas import Manifest
from streams.engine.rules.base import Problem, TurnView, run_check
from streams.engine.rules.claims import turn_claims

# Bindings that change the live room (streams.bindings: issuing a coupon, pinning a card): a strategy is carried
# out only when these calls succeeded, not when the reply talks about them.
ROOM_ACTIONS: frozenset[str] = frozenset({"coupons.issue", "room.pin_product"})
COUPON_ISSUE = "coupons.issue"

# A gold fact's field -> the claim fields that state it (see streams.engine.rules.claims).
_GOLD_FIELDS: Mapping[str, frozenset[str]] = {
    "price": frozenset({"price"}), "list_price": frozenset({"list_price"}), "stock": frozenset({"stock"}),
    "discount": frozenset({"amount_off"}), "min_spend": frozenset({"threshold"}),
    "free_over": frozenset({"threshold"}),
}


@dataclass(frozen=True)
class GoldFact:
    """A fact the reply must state, as it must be written (``"19.9"``, ``"GLOW5"``, ``"3-5 business days"``);
    ``link_id`` and ``field`` (price, list_price, stock, discount, min_spend, free_over, delivery_days, code,
    name) when known: a claim about that product and field with another value then contradicts the gold."""

    value: str
    link_id: int | None = None
    field: str = ""


@dataclass(frozen=True)
class ExpectedCall:
    """A call the turn should make, by binding and implementation arguments (whatever the harness names it)."""

    binding: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallRecord:
    """One executed call of a manifest tool in the judged turn: binding, implementation arguments, and whether
    it succeeded (no error, no fault but ``slow``)."""

    binding: str
    arguments: Mapping[str, Any]
    ok: bool = True


@dataclass(frozen=True)
class Expectation:
    """Gold data for one turn (RL builds it from its reference sample, evaluation from an eval case).

    ``facts``: what the reply must state; ``calls``: the calls the turn should make; ``reply_skills``: the reply
    skill(s) it should load (ids under the judged harness); ``forbidden_claims``: phrases it must not say
    (case-insensitive), besides what the rules forbid anyway."""

    facts: tuple[GoldFact, ...] = ()
    calls: tuple[ExpectedCall, ...] = ()
    reply_skills: tuple[str, ...] = ()
    forbidden_claims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Judgement:
    accuracy: int
    effectiveness: float
    problems: tuple[Problem, ...] = ()
    accuracy_reason: str = ""
    effectiveness_reason: str = ""
    skills_ok: bool | None = None  # the expected reply skills and no other (None: no expectation of skills)

    def rules(self) -> list[str]:
        return [p.rule for p in self.problems]

    def as_dict(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "effectiveness": self.effectiveness,
                "accuracy_reason": self.accuracy_reason, "effectiveness_reason": self.effectiveness_reason,
                "skills_ok": self.skills_ok,
                "problems": [{"rule": p.rule, "message": p.message, "span": list(p.span) if p.span else None}
                             for p in self.problems]}


# --- facts stated ---------------------------------------------------------------------------------------------


_NUMBER_FACT = re.compile(r"\d+(?:\.\d+)?")
_NUMBER_IN_TEXT = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?![\d]|\.\d)")


def states(text: str, fact: str) -> bool:
    """Whether ``text`` states ``fact`` exactly (a number not as part of a longer one: "19.9" is not in
    "119.9" nor in "19.95"). A number is stated in any of its written forms: 54, 54.0 and 54.00 are one figure."""
    if _NUMBER_FACT.fullmatch(fact):
        value = round(float(fact), 2)
        return any(round(float(m.group()), 2) == value for m in _NUMBER_IN_TEXT.finditer(text))
    return re.search(rf"(?<![\d.]){re.escape(fact)}(?![\d]|\.\d)", text) is not None


def missing_facts(text: str, facts: Iterable[str]) -> list[str]:
    return [f for f in facts if not states(text, f)]


# --- the checks of a reply --------------------------------------------------------------------------------------


def accuracy_problems(turn: TurnView, *, manifest: Manifest | None = None, link_ids: Iterable[int] = (),
                      issued: bool | None = None, expectation: Expectation | None = None) -> list[Problem]:
    """Everything that makes a reply inaccurate: unbacked or misattributed figures (every category), products
    that do not exist here, false coupon promises, forbidden claims, banned phrases of the harness, claims
    the gold forbids or contradicts."""
    out = run_check("facts", turn)
    out += run_check("products", turn)
    out += run_check("coupons", turn, issued=issued)
    out += run_check("compliance", turn, link_ids=link_ids)
    if manifest is not None:
        for h in manifest.hooks:
            if h.enabled and h.kind == "banned_phrases":
                out += run_check("banned", turn, phrases=h.phrases, case_sensitive=h.case_sensitive)
    if expectation is not None:
        low = turn.reply.casefold()
        out += [Problem("claims.gold_forbidden", f"says {c!r}, which this case forbids")
                for c in expectation.forbidden_claims if c.strip() and c.casefold() in low]
        out += _gold_contradictions(turn, expectation.facts)
    return out


def _gold_contradictions(turn: TurnView, facts: Sequence[GoldFact]) -> list[Problem]:
    out = []
    for c in turn_claims(turn):
        for f in facts:
            fields = _GOLD_FIELDS.get(f.field)
            if not fields or c.field not in fields or f.link_id is None or c.link_id != f.link_id:
                continue
            try:
                gold = float(f.value)
            except ValueError:
                continue
            if round(gold, 2) != round(c.value, 2):
                out.append(Problem("facts.gold", f"{c.text!r} contradicts the gold {f.field} {f.value} of link "
                                                 f"{f.link_id}", c.span))
    return out


def reply_problems(turn: TurnView, *, manifest: Manifest | None = None) -> list[Problem]:
    """Everything that makes a reply less effective whatever the gold: it does not answer the comment, its text
    is broken, and (with the harness) its form, language or tone break the interaction constraints."""
    out = run_check("intent", turn)
    out += run_check("greeting", turn)
    out += run_check("quality", turn)
    if manifest is not None:
        c = manifest.constraints
        formats = [h for h in manifest.hooks if h.enabled and h.kind == "reply_format"]
        if formats:
            for h in formats:
                out += run_check("format", turn, constraints=c, speakable=h.speakable or c.speakable,
                                 max_sentences=h.max_sentences)
        else:
            out += run_check("format", turn, constraints=c)
        out += run_check("language", turn, language=c.language)
        out += run_check("tone", turn, constraints=c)
    return out


# --- the gold ----------------------------------------------------------------------------------------------------


def _link_ids(args: Iterable[Mapping[str, Any]]) -> set[int]:
    out = set()
    for a in args:
        lid = a.get("link_id")
        if isinstance(lid, int) and not isinstance(lid, bool):
            out.add(lid)
    return out


def _status(ref: ExpectedCall, calls: Sequence[CallRecord]) -> str:
    same_binding = [dict(c.arguments) for c in calls if c.binding == ref.binding]
    if not same_binding:
        return "missing"
    return "same" if dict(ref.arguments) in same_binding else "other_arguments"


def expectation_problems(reply: str, expectation: Expectation, calls: Sequence[CallRecord]) -> list[Problem]:
    """What the turn missed of the gold (RL's effectiveness rules, documented in the package docstring):
    ``expect.wrong_product`` and ``expect.off_topic`` (effectiveness 0), ``expect.fact_missing``,
    ``expect.action_missing`` and ``expect.call_missing`` (effectiveness 0.5)."""
    wanted_ids = _link_ids(c.arguments for c in expectation.calls)
    called_ids = _link_ids(c.arguments for c in calls)
    if wanted_ids and called_ids and not wanted_ids & called_ids:
        return [Problem("expect.wrong_product", f"wrong product: called tools for link {sorted(called_ids)}, asked "
                                                f"about {sorted(wanted_ids)}")]
    facts = [f.value for f in expectation.facts]
    missing = missing_facts(reply, facts)
    statuses = [(ref, _status(ref, calls)) for ref in expectation.calls]
    stated_any = len(missing) < len(facts)
    used = any(s in ("same", "other_arguments") for _, s in statuses)
    if not (stated_any or used or (not statuses and not calls)):
        why = ("off topic: no reference fact stated and no reference tool called" if statuses or facts
               else "off topic: called tools the question did not need")
        return [Problem("expect.off_topic", why)]
    out = [Problem("expect.fact_missing", f"fact {f} not stated") for f in missing]
    for ref, status in statuses:
        done = any(c.binding == ref.binding and dict(c.arguments) == dict(ref.arguments) and c.ok for c in calls)
        if ref.binding in ROOM_ACTIONS and not done:
            out.append(Problem("expect.action_missing", f"{ref.binding} {dict(ref.arguments)} not carried out"))
        elif not facts and status != "same":
            out.append(Problem("expect.call_missing", f"{ref.binding} {dict(ref.arguments)} not called"))
    return out


def _skills_ok(expectation: Expectation, loaded: Sequence[str], manifest: Manifest | None) -> tuple[bool, str]:
    kinds = {s.id: s.kind for s in manifest.skills} if manifest is not None else {}
    wanted = [s for s in expectation.reply_skills if not kinds or kinds.get(s) == "reply"]
    got = [s for s in loaded if (kinds.get(s) == "reply" if kinds else True)]
    missing = [s for s in wanted if s not in got]
    others = [s for s in got if s not in wanted]
    why = []
    if missing:
        why.append(f"did not load {', '.join(missing)}")
    if others:
        why.append(f"loaded other reply skill(s) {', '.join(others)}")
    return not why, "; ".join(why)


# --- the judge ---------------------------------------------------------------------------------------------------


def judge_turn(*, reply: str, comments: Sequence[Mapping[str, Any]], room: Mapping[str, Any] | None,
               tool_results: Sequence[Any], loaded_skills: Sequence[str] = (), manifest: Manifest | None = None,
               expectation: Expectation | None = None, calls: Sequence[CallRecord] | None = None,
               outcome: str = "ok") -> Judgement:
    """Judge one turn (package docstring). ``tool_results``: the parsed results of the turn's successful calls
    (what backs facts); ``calls``: its executed manifest-tool calls, bound (needed to judge ``expectation``'s
    calls and whether a coupon was issued; else read from the results); ``outcome``: the turn's reason,
    ``"ok"`` or why the harness's fallback line was spoken (then the reply is that line, judged with no result
    behind it)."""
    fallback = outcome != "ok"
    turn = TurnView(reply, list(comments), room, [] if fallback else list(tool_results), list(loaded_skills))
    calls = list(calls or [])
    link_ids = _link_ids(c.arguments for c in calls)
    if expectation is not None:
        link_ids |= _link_ids(c.arguments for c in expectation.calls)
    issued = any(c.ok and c.binding == COUPON_ISSUE for c in calls) if calls else None
    if fallback:
        issued = False
    acc = accuracy_problems(turn, manifest=manifest, link_ids=link_ids, issued=issued, expectation=expectation)
    problems = list(acc)
    skills_ok = None
    if expectation is not None and expectation.reply_skills:
        skills_ok, why = _skills_ok(expectation, loaded_skills, manifest)
        if not skills_ok:
            problems.append(Problem("skills.reply", why))
    if fallback:
        eff = [Problem("turn.fallback", f"fallback ({outcome})")]
    else:
        eff = reply_problems(turn, manifest=manifest)
        if expectation is not None:
            eff += expectation_problems(reply, expectation, calls)
    problems += eff
    accuracy = 0 if acc else 1
    if any(p.effect == "effectiveness" for p in eff):
        effectiveness = 0.0
    elif any(p.effect == "partial" for p in eff):
        effectiveness = 0.5
    else:
        effectiveness = 1.0
    acc_reason = "; ".join(p.message for p in acc) if acc else (
        "fallback line states no facts" if fallback else "every claim backed, nothing forbidden")
    if effectiveness == 1.0:
        facts = [f.value for f in expectation.facts] if expectation is not None else []
        eff_reason = "answered" + (f" ({', '.join(facts)})" if facts else "")
    else:
        worst = [p for p in eff if p.effect == ("effectiveness" if effectiveness == 0 else "partial")]
        eff_reason = "; ".join(p.message for p in worst)
        if effectiveness == 0.5:
            eff_reason = "incomplete: " + eff_reason
    return Judgement(accuracy, effectiveness, tuple(problems), acc_reason, eff_reason, skills_ok)
