"""The rewards of HAT stage 3, HSA agentic RL (DESIGN.md sections 7 and 8), and how they become advantages.

A rollout is one turn of the one turn engine (:func:`streams.engine.turn.run_turn`) under some harness state
(original or augmented); it is judged against the reference :class:`~training_jobs.hsa.samples.Sample` for the
same room and comment, relabelled into that harness's names (:func:`training_jobs.hsa.operators.relabel_target`).
Calls are compared by binding and implementation arguments, so a renamed tool or a moved parameter changes
nothing. The reference judgments (same call, extra binding, skills, facts stated) are the ones the regeneration
judge uses (:mod:`training_jobs.hsa.judging`); the evaluation suite reuses these functions as its rules.

Every reward has the signature ``reward(result, manifest, room, reference) -> RewardScore``:

**accuracy** (0 or 1; the spoken reply, ``result.reply``) — 1 unless the reply

1. states a price, stock or discount (:func:`streams.engine.hooks.extract_claims`) that no tool result of this
   turn backs, *kind for kind* (:func:`unbacked_claims`): a price or an amount off must be a money figure of a
   result (``price``, ``list_price``, ``discount``, ``min_spend``, ``free_over``, or the saving of a price
   below its list price), a percentage off must be the share off of such a pair, a stock count must be a
   ``stock`` or ``remaining`` figure. So "only 102 left" is not backed by link id 102, nor "$25" by 25% off,
   though the factual-risk hook, which accepts any number of any result, lets both through. Results that failed
   (binding errors, faults) back nothing, as for the hook;
2. names a coupon code (one of the room's, or a capitalised token after "code", "coupon" or "voucher") that
   no tool result of this turn returned, or says a coupon was sent, issued, given, added or applied without a
   successful ``coupons.issue`` call this turn (a false promise);
3. makes a forbidden claim about a product of the turn (:data:`MEDICAL_RE`, :data:`CHANGE_RE` +
   :data:`CONDITION_RE`, :data:`PROMISE_RE`; see :func:`forbidden_claims`).

A fallback line is judged the same way with no tool result at all, so it is accurate only if it states no
facts.

**effectiveness** (0, 0.5 or 1):

- 0 — the turn ended in a fallback (any reason but ``ok``); or the wrong product: the reference is about link
  ids the rollout never called a tool with, while it called tools with other link ids; or off topic: the
  rollout stated none of the reference facts and called none of the reference's bindings (when the reference
  calls no tool: it called some tool instead of answering from the prompt);
- 1 — every reference fact is stated (:func:`training_jobs.hsa.judging.missing_facts`), every room action of
  the reference (:data:`ROOM_ACTIONS`: a coupon issued, a card pinned) was carried out by a successful call with
  the reference's implementation arguments, and, when the reference has no facts to state (an efficacy
  question, a link that does not exist), every reference call was made with its implementation arguments;
- 0.5 — on topic but incomplete: anything else (e.g. the right tool called but the fact missing, the coupon
  code said but never issued).

**tool_rationality** (0..1) — ``right / (1 + invalid + wasted)``:

- ``right``: each distinct reference call earns 1 when a call to the same binding with the same implementation
  arguments was made, 0.5 when only calls to that binding with other arguments were made (each distinct
  wrong-argument call earns one half credit at most once), 0 otherwise; the mean over reference calls, 1 when
  the reference calls no tool;
- ``invalid``: tool_call events the engine rejected (unknown tool or skill, unparsable JSON, schema-invalid
  arguments), ``load_skill`` included;
- ``wasted``: distinct calls to bindings the reference did not need, distinct wrong-argument calls on a
  reference binding not credited above, calls refused past the tool-round limit, and repeats of an identical
  call (``load_skill`` of the same skill included) whose earlier twin succeeded (a retry after a tool fault is
  not wasted).

So one needless or invalid call halves the score, two leave a third.

**skill_selection** (0 or 1) — 1 when every reply skill the reference loaded was loaded (by the manifest's id,
which augmentation may rename; failed loads do not count) and no other reply skill was. Strategy skills are
not judged here: what a strategy must do is judged by effectiveness.

:func:`combine` turns per-prompt groups of scores into advantages: each reward is normalised within its group
before the weighted sum, and the reasoning-length penalty (:func:`reasoning_length_penalty`) is added centred.
Plain Python, no Django.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest
from streams.engine.events import ToolCallEvent, ToolResultEvent
from streams.engine.hooks import backed_numbers, extract_claims, walk_results
from streams.engine.toolcalls import strip_think
from streams.engine.turn import TurnResult
from training_jobs.hsa.judging import (
    BoundCall,
    CallMatch,
    bound_call,
    extra_bindings,
    match_reference_calls,
    missing_facts,
    missing_skills,
    reference_facts,
)
from training_jobs.hsa.samples import Sample
from training_jobs.tiny_model.gold import product_aliases

REWARDS: tuple[str, ...] = ("accuracy", "effectiveness", "tool_rationality", "skill_selection")
DEFAULT_WEIGHTS: Mapping[str, float] = {name: 1.0 for name in REWARDS}

# Bindings that change the live room (streams.bindings: issuing a coupon, pinning a card): a strategy is carried
# out only when these calls succeeded, not when the reply talks about them.
ROOM_ACTIONS: frozenset[str] = frozenset({"coupons.issue", "room.pin_product"})
COUPON_ISSUE = "coupons.issue"

MONEY_KEYS: frozenset[str] = frozenset({"price", "list_price", "discount", "min_spend", "free_over"})
STOCK_KEYS: frozenset[str] = frozenset({"stock", "remaining"})

# Forbidden claims (accuracy, rule 3). Medical verbs: medicines cure, cosmetics and appliances never do ("treat
# yourself" and "a treat" are not claims). Change verbs count with a condition in the same clause ("removes
# makeup" is fine, "removes acne" is not). Promises are absolute whatever follows.
MEDICAL_RE = re.compile(r"\b(?:cur(?:e|es|ed|ing)|heal(?:s|ed|ing)?|detox(?:es|ed|ing)?|"
                        r"treat(?:s|ed|ing|ments?)?)\b", re.I)
_NOT_A_CLAIM_RE = re.compile(r"\btreat\s+(?:yourself|yourselves|you)\b|\ba\s+(?:little\s+|real\s+)?treat\b", re.I)
CHANGE_RE = re.compile(r"\b(?:remov(?:e|es|ed|ing)|repair(?:s|ed|ing)?|clear(?:s|ed|ing)?|"
                       r"fix(?:es|ed|ing)?|eliminat(?:e|es|ed|ing)|revers(?:e|es|ed|ing)|get(?:s)?\s+rid\s+of)\b",
                       re.I)
CONDITION_RE = re.compile(r"\b(?:acne|eczema|dermatitis|rosacea|psoriasis|rash(?:es)?|wrinkles?|dark\s+circles|"
                          r"sinus(?:es)?|damaged\s+hair|hair\s+loss|scars?|diseases?|conditions?|infections?)\b",
                          re.I)
PROMISE_RE = re.compile(r"\b(?:guarantee(?:s|d)?|clinically\s+proven|permanent(?:ly)?)\b|\b100\s?%", re.I)
# A product's notes restrict efficacy claims when they call it a cosmetic, not a medical device, or name a claim.
_RESTRICTING_NOTE_RE = re.compile(r"\b(?:cosmetic|medical)\b", re.I)
_CLAUSE_RE = re.compile(r"[.!?;:,]|\bbut\b|\bhowever\b|\bthough\b", re.I)
_NEGATION_RE = re.compile(r"\b(?:not|never|no|cannot|nor|without)\b|n't\b|\bcan\s+not\b", re.I)
_ISSUED_RE = re.compile(
    r"\b(?:sent|issued|given|added|applied)\b(?:\W+\w+){0,5}?\W+(?:coupons?|codes?|vouchers?)\b"
    r"|\b(?:coupons?|codes?|vouchers?)\b(?:\W+\w+){0,4}?\W+(?:sent|issued|added|applied)\b", re.I)
_CODE_WORD_RE = re.compile(r"\b(?:[Cc]odes?|[Cc]oupons?|[Vv]ouchers?)\s+([A-Z][A-Z0-9]{3,})\b")  # "code VIP50"
_LINK_ID_RE = re.compile(r"(?<![\d.$])#?(\d{2,})(?![\d.%])")


@dataclass(frozen=True)
class RewardScore:
    """One reward's value and why (for people reading a rollout, and for evaluation reports)."""

    value: float
    reason: str


# --- what a rollout did ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    event: ToolCallEvent
    result: ToolResultEvent | None
    bound: BoundCall | None  # None for load_skill and for calls the engine rejected

    @property
    def executed(self) -> bool:
        """Valid and run (a call refused past the round limit is valid but never ran)."""
        return self.event.valid and self.event.error is None

    @property
    def succeeded(self) -> bool:
        return self.executed and self.result is not None and self.result.error is None

    @property
    def faulted(self) -> bool:
        return self.result is not None and self.result.fault not in (None, "slow")

    def key(self) -> tuple[str, str]:
        if self.bound is None:
            return self.event.name, _canonical_json(self.event.arguments or {})
        return self.bound.binding, _canonical_json(self.bound.arguments)


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _calls(result: TurnResult, manifest: Manifest) -> list[_Call]:
    results = {e.call_id: e for e in result.events if isinstance(e, ToolResultEvent)}
    out = []
    for e in result.events:
        if isinstance(e, ToolCallEvent):
            bound = bound_call(manifest, e.name, e.arguments) if e.valid and e.name != LOAD_SKILL_TOOL else None
            out.append(_Call(e, results.get(e.call_id), bound))
    return out


def _tool_calls(calls: Iterable[_Call]) -> list[_Call]:
    """Executed calls of manifest tools (``load_skill`` left out), in order."""
    return [c for c in calls if c.executed and c.bound is not None]


def _bound(calls: Iterable[_Call]) -> list[BoundCall]:
    return [c.bound for c in calls if c.bound is not None]


def backing_results(result: TurnResult) -> list[dict[str, Any]]:
    """The tool results that back facts this turn: successful binding results (what the factual-risk hook reads);
    none for a fallback line, which no result stands behind."""
    if result.fallback:
        return []
    return [e.result for e in result.events
            if isinstance(e, ToolResultEvent) and e.binding is not None and e.error is None
            and isinstance(e.result, dict)]


def _checked_matches(manifest: Manifest, reference: Sample, calls: Sequence[BoundCall]
                     ) -> list[tuple[BoundCall, CallMatch]]:
    """Each reference call (bound) with how the rollout covers it; a reference that was not relabelled into the
    rollout's harness is a caller's bug, not a bad rollout, so it raises."""
    out = []
    unmapped = []
    for m in match_reference_calls(manifest, reference, calls):
        if m.reference.bound is None:
            unmapped.append(m.reference.name)
        else:
            out.append((m.reference.bound, m))
    if unmapped:
        raise ValueError(f"the reference calls {', '.join(unmapped)}, which this harness does not have: relabel it "
                         "into the rollout's harness (training_jobs.hsa.operators.relabel_target)")
    return out


def _link_ids(calls: Iterable[BoundCall]) -> set[int]:
    out = set()
    for c in calls:
        lid = c.arguments.get("link_id")
        if isinstance(lid, int) and not isinstance(lid, bool):
            out.add(lid)
    return out


# --- accuracy ------------------------------------------------------------------------------------------------------


def _project(value: Any, keys: frozenset[str]) -> Any:
    """The result with only the figures under ``keys`` (containers kept)."""
    if isinstance(value, Mapping):
        return {k: _project(v, keys) for k, v in value.items() if k in keys or isinstance(v, (Mapping, list))}
    if isinstance(value, list):
        return [_project(v, keys) for v in value]
    return value


def _figure(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def money_figures(results: Iterable[Any]) -> tuple[set[float], set[float]]:
    """(amounts, percentages) the results back: the figures under :data:`MONEY_KEYS`, and the savings
    :func:`streams.engine.hooks.walk_results` derives from a price below a list price (the amount saved, the
    share off)."""
    amounts: set[float] = set()

    def leaf(key: Any, value: Any) -> None:
        n = _figure(value)
        if key in MONEY_KEYS and n is not None:
            amounts.add(round(n, 2))

    saved, percents = walk_results(results, leaf)
    return amounts | saved, percents


def unbacked_claims(reply: str, results: Sequence[Any]) -> list[str]:
    """Prices, discounts and stock counts of the reply that no result backs with a figure of the same kind:
    prices and amounts off by :func:`money_figures` amounts, percentages off by its percentages, stock by the
    ``stock`` / ``remaining`` figures (the factual-risk hook's :func:`~streams.engine.hooks.backed_numbers` on
    just those)."""
    amounts, percents = money_figures(results)
    stock = backed_numbers([_project(r, STOCK_KEYS) for r in results])
    out = []
    for claim in extract_claims(reply):
        if claim.category == "stock":
            backed = stock
        elif claim.category == "discount" and _percent(reply, claim.text):
            backed = percents
        else:
            backed = amounts
        if round(claim.value, 2) not in backed:
            out.append(f"{claim.category} {claim.text!r}")
    return out


def _percent(reply: str, claim_text: str) -> bool:
    """A discount given as a share ("25% off", "save 25 percent"), not an amount."""
    return bool(re.search(r"%|percent", claim_text, re.I)
                or re.search(rf"{re.escape(claim_text)}\s*(?:%|percent)", reply, re.I))


def _result_strings(results: Sequence[Any]) -> str:
    return " ".join(_canonical_json(r) for r in results)


def false_promises(reply: str, room: Mapping[str, Any], results: Sequence[Any], coupon_issued: bool) -> list[str]:
    """Coupon codes no result returned, and coupons said to be issued without a successful issue call."""
    out = []
    returned = _result_strings(results)
    codes = [str(c.get("code") or "") for c in room.get("coupons") or [] if isinstance(c, Mapping)]
    said = [code for code in codes if code and _mentions(reply, code)]
    said += [m.group(1) for m in _CODE_WORD_RE.finditer(reply) if not any(_mentions(m.group(1), c) for c in said)]
    for code in dict.fromkeys(said):
        if not _mentions(returned, code):
            out.append(f"coupon code {code} that no tool returned")
    if not coupon_issued:
        for clause in _clauses(reply):
            m = _ISSUED_RE.search(clause)
            if m and not _NEGATION_RE.search(clause[:m.start()]):
                out.append(f"{m.group(0)!r} without issuing a coupon")
    return out


def _mentions(text: str, code: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(code)}(?!\w)", text, re.I) is not None


def _clauses(text: str) -> list[str]:
    return [c for c in _CLAUSE_RE.split(text) if c.strip()]


def restricts_claims(product: Mapping[str, Any]) -> bool:
    """Whether a product's compliance notes forbid efficacy claims: they call it a cosmetic or not a medical
    device, or name a medical verb, a change of a condition or an absolute promise."""
    for note in product.get("compliance_notes") or []:
        note = str(note)
        if (_RESTRICTING_NOTE_RE.search(note) or MEDICAL_RE.search(note) or PROMISE_RE.search(note)
                or (CHANGE_RE.search(note) and CONDITION_RE.search(note))):
            return True
    return False


def turn_products(room: Mapping[str, Any], reply: str, link_ids: Iterable[int]) -> list[Mapping[str, Any]]:
    """The products a turn is about: those the rollout or the reference called tools with, and those the reply
    names (link id or the short-title words viewers use); every product of the room when none can be told."""
    products = [p for p in room.get("products") or [] if isinstance(p, Mapping)]
    wanted = set(link_ids)
    ids = {p.get("link_id") for p in products}
    wanted |= {int(m.group(1)) for m in _LINK_ID_RE.finditer(reply)} & ids
    low = reply.lower()
    titled = [p for p in products if isinstance(p.get("title"), str) and "link_id" in p]
    for lid, aliases in product_aliases({"products": titled}).items():
        if any(re.search(rf"\b{re.escape(a)}\b", low) for a in aliases):
            wanted.add(lid)
    named = [p for p in products if p.get("link_id") in wanted]
    return named or products


def forbidden_claims(reply: str, products: Sequence[Mapping[str, Any]]) -> list[str]:
    """Claims the products' compliance notes forbid, when any of the products restricts claims
    (:func:`restricts_claims`). A claim is a clause of the reply (split at punctuation and but/however/though)
    with no negation before it in that clause ("I cannot promise it fixes acne" is compliant) holding

    - a medical verb: cure, treat, heal, detox (any form; not "treat yourself" or "a treat"),
    - a change verb (remove, repair, clear, fix, eliminate, reverse, get rid of) and a condition (acne, eczema,
      wrinkles, dark circles, sinuses, damaged hair, ...), or
    - an absolute promise: guarantee(d), clinically proven, permanent(ly), 100%.
    """
    if not any(restricts_claims(p) for p in products):
        return []
    out = []
    for clause in _clauses(reply):
        hits = [m for m in MEDICAL_RE.finditer(clause) if not _exempt(clause, m)]
        hits += list(PROMISE_RE.finditer(clause))
        if CONDITION_RE.search(clause):
            hits += list(CHANGE_RE.finditer(clause))
        for m in sorted(hits, key=lambda m: m.start()):
            if not _NEGATION_RE.search(clause[:m.start()]):
                out.append(clause.strip())
                break
    return out


def _exempt(clause: str, m: re.Match[str]) -> bool:
    return any(n.start() <= m.start() < n.end() for n in _NOT_A_CLAIM_RE.finditer(clause))


def accuracy(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample) -> RewardScore:
    """1 when the spoken reply states nothing false or unsupported (module docstring), else 0."""
    calls = _calls(result, manifest)
    results = backing_results(result)
    issued = any(c.succeeded and c.bound is not None and c.bound.binding == COUPON_ISSUE for c in calls)
    refs = [ref for ref, _ in _checked_matches(manifest, reference, [])]
    products = turn_products(room, result.reply, _link_ids(_bound(_tool_calls(calls)) + refs))
    problems = [f"unbacked {c}" for c in unbacked_claims(result.reply, results)]
    problems += false_promises(result.reply, room, results, issued)
    problems += [f"forbidden claim {c!r}" for c in forbidden_claims(result.reply, products)]
    if problems:
        return RewardScore(0.0, "; ".join(problems))
    what = "fallback line states no facts" if result.fallback else "every claim backed, nothing forbidden"
    return RewardScore(1.0, what)


# --- effectiveness ----------------------------------------------------------------------------------------------


def effectiveness(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                  ) -> RewardScore:
    """1 answered and the strategy carried out, 0.5 on topic but incomplete, 0 fallback / wrong product / off
    topic (module docstring)."""
    if result.fallback or result.reason != "ok":
        return RewardScore(0.0, f"fallback ({result.reason})")
    calls = _tool_calls(_calls(result, manifest))
    bound = _bound(calls)
    matches = _checked_matches(manifest, reference, bound)
    wanted_ids = _link_ids(ref for ref, _ in matches)
    called_ids = _link_ids(bound)
    if wanted_ids and called_ids and not wanted_ids & called_ids:
        return RewardScore(0.0, f"wrong product: called tools for link {sorted(called_ids)}, asked about "
                                f"{sorted(wanted_ids)}")
    facts = reference_facts(reference)
    missing = missing_facts(result.reply, facts)
    stated_any = len(missing) < len(facts)
    used_reference_binding = any(m.status in ("same", "other_arguments") for _, m in matches)
    on_topic = stated_any or used_reference_binding or (not matches and not calls)
    if not on_topic:
        return RewardScore(0.0, "off topic: no reference fact stated and no reference tool called"
                           if matches or facts else "off topic: called tools the question did not need")
    gaps = [f"fact {f} not stated" for f in missing]
    for ref, m in matches:
        done = any(c.bound == ref and c.succeeded for c in calls)
        if ref.binding in ROOM_ACTIONS and not done:
            gaps.append(f"{ref.binding} {ref.arguments} not carried out")
        elif not facts and m.status != "same":
            gaps.append(f"{ref.binding} {ref.arguments} not called")
    if gaps:
        return RewardScore(0.5, "incomplete: " + "; ".join(gaps))
    return RewardScore(1.0, "answered" + (f" ({', '.join(facts)})" if facts else ""))


# --- tool rationality -------------------------------------------------------------------------------------------


def tool_rationality(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                     ) -> RewardScore:
    """``right / (1 + invalid + wasted)`` (module docstring)."""
    calls = _calls(result, manifest)
    invalid = [c.event for c in calls if not c.event.valid]
    refused = [c for c in calls if c.event.valid and c.event.error is not None]  # past the round limit
    tools = _tool_calls(calls)
    bound = _bound(tools)
    matches = _checked_matches(manifest, reference, bound)

    repeats = 0
    done: set[tuple[str, str]] = set()
    for c in calls:
        if not c.executed:
            continue
        key = c.key()
        if key in done:
            repeats += 1
        elif not c.faulted:
            done.add(key)

    distinct = {c.key() for c in tools}
    wanted: dict[tuple[str, str], CallMatch] = {}
    for ref, m in matches:
        wanted.setdefault((ref.binding, _canonical_json(ref.arguments)), m)
    credit = sum(1.0 for m in wanted.values() if m.status == "same")
    wasted_other = 0
    for binding in {k[0] for k in wanted}:
        attempts = [k for k in distinct if k[0] == binding and k not in wanted]  # wrong-argument calls
        missed = [m for k, m in wanted.items() if k[0] == binding and m.status == "other_arguments"]
        credited = min(len(attempts), len(missed))
        credit += 0.5 * credited
        wasted_other += len(attempts) - credited
    extra = set(extra_bindings(manifest, reference, bound))
    wasted_extra = sum(1 for k in distinct if k[0] in extra)
    wasted = wasted_extra + wasted_other + repeats + len(refused)
    right = credit / len(wanted) if wanted else 1.0
    value = right / (1 + len(invalid) + wasted)

    parts = [f"right {credit:g}/{len(wanted)}" if wanted else "no tool needed"]
    if invalid:
        parts.append(f"{len(invalid)} invalid ({'; '.join(f'{e.name}: {e.error}' for e in invalid)[:200]})")
    if wasted_extra:
        parts.append(f"{wasted_extra} to bindings not needed ({', '.join(sorted(extra))})")
    if wasted_other:
        parts.append(f"{wasted_other} with wrong arguments after the right call")
    if repeats:
        parts.append(f"{repeats} repeated")
    if refused:
        parts.append(f"{len(refused)} past the round limit")
    return RewardScore(round(value, 6), "; ".join(parts))


# --- skill selection -------------------------------------------------------------------------------------------


def skill_selection(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                    ) -> RewardScore:
    """1 when the reference's reply skill(s) were loaded and no other reply skill, else 0."""
    unknown = [sid for sid in reference.loaded_skills() if manifest.skill(sid) is None]
    if unknown:
        raise ValueError(f"the reference loads {', '.join(unknown)}, which this harness does not have: relabel it "
                         "into the rollout's harness (training_jobs.hsa.operators.relabel_target)")
    kinds = {s.id: s.kind for s in manifest.skills}
    wanted = [sid for sid in reference.loaded_skills() if kinds.get(sid) == "reply"]
    loaded = [sid for sid in result.loaded_skills if kinds.get(sid) == "reply"]
    missing = missing_skills(wanted, loaded)
    others = [sid for sid in loaded if sid not in wanted]
    if missing or others:
        why = []
        if missing:
            why.append(f"did not load {', '.join(missing)}")
        if others:
            why.append(f"loaded other reply skill(s) {', '.join(others)}")
        return RewardScore(0.0, "; ".join(why))
    return RewardScore(1.0, f"loaded {', '.join(wanted) or 'no reply skill, as the reference'}")


# --- one rollout --------------------------------------------------------------------------------------------------


def score_rollout(result: TurnResult, manifest: Manifest, room: Mapping[str, Any], reference: Sample
                  ) -> dict[str, RewardScore]:
    """The four rewards of one rollout, keyed by :data:`REWARDS`. ``room``: the room the turn ran in (its
    products' compliance notes and coupon codes are read, nothing else)."""
    return {name: fn(result, manifest, room, reference)
            for name, fn in (("accuracy", accuracy), ("effectiveness", effectiveness),
                             ("tool_rationality", tool_rationality), ("skill_selection", skill_selection))}


# --- internal reasoning ---------------------------------------------------------------------------------------------


def reasoning_text(result: TurnResult) -> str:
    """The model's internal reasoning in this turn: reasoning-channel tokens (a server's reasoning parser) and
    ``<think>`` blocks left in the content of each model request, in order."""
    parts: list[str] = []
    content: list[str] = []

    def flush() -> None:
        if content:
            _, thought = strip_think("".join(content))
            if thought:
                parts.append(thought)
            content.clear()

    for e in result.events:
        if e.type == "model_request":
            flush()
        elif e.type == "token":
            if e.channel == "reasoning":
                parts.append(e.delta)
            else:
                content.append(e.delta)
    flush()
    return "".join(parts)


def reasoning_length_penalty(length: float, budget: float, coef: float) -> float:
    """A non-positive price for internal reasoning over ``budget`` (characters or tokens, as ``length``):
    0 within budget, then ``-coef`` times the excess as a share of the budget, capped at ``-coef`` (reached at
    twice the budget) so a runaway reasoning never outweighs the rewards themselves."""
    if not (math.isfinite(length) and length >= 0):
        raise ValueError(f"length must be a non-negative number, not {length!r}")
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number, not {budget!r}")
    if not (math.isfinite(coef) and coef >= 0):
        raise ValueError(f"coef must be a non-negative number, not {coef!r}")
    excess = max(0.0, length - budget)
    return -coef * min(1.0, excess / budget)


# --- advantages -------------------------------------------------------------------------------------------------


def _value(score: RewardScore | float) -> float:
    v = score.value if isinstance(score, RewardScore) else float(score)
    if not math.isfinite(v):
        raise ValueError(f"a reward must be finite, not {v!r}")
    return v


def normalise(values: Sequence[float], eps: float = 1e-6) -> list[float]:
    """``(v - mean) / (std + eps)`` within one group (population std); all zero when the group has no spread
    (every rollout equally good: nothing to learn from this reward here)."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    if std < 1e-12:
        return [0.0] * n
    return [(v - mean) / (std + eps) for v in values]


def combine(groups: Sequence[Sequence[Mapping[str, RewardScore | float]]],
            weights: Mapping[str, float] = DEFAULT_WEIGHTS, *,
            length_penalties: Sequence[Sequence[float]] | None = None, eps: float = 1e-6) -> list[float]:
    """Advantages of every rollout, group after group (a group: the rollouts of one prompt under one harness
    state). Each weighted reward is normalised within its group *before* the weighted sum, so a group that
    differs only in accuracy and one that differs only in effectiveness keep their own signal (summing first
    would give both the same advantages). ``length_penalties`` (same shape, from
    :func:`reasoning_length_penalty`) are added centred within the group but not scaled: each rollout pays the
    configured price relative to its siblings, and a tiny spread is not inflated to a full standard deviation."""
    if not weights:
        raise ValueError("no reward weights")
    for name, w in weights.items():
        if not math.isfinite(w):
            raise ValueError(f"weight of {name!r} must be finite, not {w!r}")
    if length_penalties is not None and [len(g) for g in length_penalties] != [len(g) for g in groups]:
        raise ValueError("length_penalties must have the shape of groups")
    out: list[float] = []
    for gi, group in enumerate(groups):
        totals = [0.0] * len(group)
        for name, w in weights.items():
            if w == 0:
                continue
            try:
                values = [_value(rollout[name]) for rollout in group]
            except KeyError:
                raise ValueError(f"a rollout of group {gi} has no {name!r} reward") from None
            for i, v in enumerate(normalise(values, eps)):
                totals[i] += w * v
        if length_penalties is not None:
            penalties = [float(p) for p in length_penalties[gi]]
            mean = sum(penalties) / len(penalties) if penalties else 0.0
            totals = [t + p - mean for t, p in zip(totals, penalties)]
        out.extend(totals)
    return out
