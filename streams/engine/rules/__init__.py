"""The reply rules: one implementation, used by the runtime hooks, the RL rewards, the HSA judge and evaluation.

Every rule is a plain function over a :class:`TurnView` (the candidate reply, the turn's comments, the room,
this turn's successful tool results, the skills loaded) returning :class:`Problem` s (rule id, message, span).
Checks are registered by name (:data:`CHECKS`) and always run through :func:`run_check`, so the hooks
(:mod:`streams.engine.hooks`), :func:`judge_turn` and everything built on it call the same function.

Rules (id — what it catches — what it costs a judged turn):

**Accuracy** (any of these: accuracy 0)

- ``facts.unbacked`` — a price, stock count, discount or delivery time no tool result of this turn gives;
- ``facts.wrong_entity`` — the figure is in a result, but for another product (coupon, region) than the one
  the reply names ("We have 15 of HydraGlow Serum left" after a stock call on another product);
- ``facts.wrong_field`` — the figure is in a result for that product, but as another field ("AirSilk Hair
  Dryer is $35" when $35 is the free-shipping threshold; the list price said as the price);
  (claims and fields: :mod:`~streams.engine.rules.claims`; backing: :mod:`~streams.engine.rules.facts`)
- ``facts.gold`` — (judge, with gold facts) a figure for the gold's product and field with another value;
- ``products.unknown`` — names a product or link id the room's catalogue does not have
  (:mod:`~streams.engine.rules.entities`);
- ``coupon.unknown_code`` / ``coupon.not_issued`` — a coupon code no tool returned; a coupon said to be sent
  or applied with none issued; ``claims.forbidden`` — an efficacy, medical or absolute claim the products'
  compliance notes forbid; ``claims.banned`` — a banned phrase of the harness; ``claims.gold_forbidden`` —
  (judge) a phrase the gold forbids (:mod:`~streams.engine.rules.compliance`).

**Effectiveness** (effectiveness 0)

- ``intent.unaddressed`` — the reply does not answer what the comment asks (a coupon question answered with
  a price, a greeting answered with numbers); ``intent.wrong_product`` — answers about another product than
  the one asked; ``intent.wrong_condition`` — about another skin or health condition than the one asked
  (:mod:`~streams.engine.rules.intent`);
- ``quality.empty``, ``quality.truncated``, ``quality.garbled`` — no words, cut off, token soup
  (:mod:`~streams.engine.rules.quality`);
- (judge, with gold) ``expect.wrong_product`` — called tools only for other link ids than the gold's;
  ``expect.off_topic`` — stated no gold fact and called none of the gold's bindings (with a gold that calls
  nothing: called some tool); ``turn.fallback`` — the turn ended in the harness's fallback line.

**Partial** (effectiveness at most 0.5)

- ``quality.repeated`` — a phrase said twice; ``intent.wrong_viewer`` — greets a name that did not write;
- ``format``, ``language``, ``tone`` — the interaction constraints (length, speakable text, sentence cap; the
  room's language; shouting, hostility, the declared tone: :mod:`~streams.engine.rules.form`,
  :mod:`~streams.engine.rules.language`, :mod:`~streams.engine.rules.tone`) — judged when the harness is given;
- (judge, with gold) ``expect.fact_missing`` — a gold fact not stated (exactly, not inside a longer number);
  ``expect.action_missing`` — a room action of the gold (a coupon issued, a card pinned) not carried out by a
  successful call with the gold's implementation arguments; ``expect.call_missing`` — with no fact to state
  (an efficacy question, a link that does not exist), a gold call not made with its arguments.

**Reported only**: ``skills.reply`` — not the gold's reply skill(s) (the RL skill-selection reward).

:func:`judge_turn` runs them on a whole turn: **accuracy** is 1 unless an accuracy rule fires;
**effectiveness** is 0 when an effectiveness rule fires, else 0.5 when a partial one does, else 1. A fallback
line is judged with no tool result behind it (accurate only if it states no facts) and is never effective.
Without gold (``expectation`` None) the judgement rests on the rules alone.

The runtime hooks (:mod:`streams.engine.hooks`) guard live replies with the same checks: the ``factual_risk``
hook runs ``facts`` (for the categories it checks, and delivery times), ``products``, ``coupons`` and
``compliance``; ``banned_phrases`` runs ``banned``; ``reply_format`` (or the built-in constraints check) runs
``format``; and every harness runs ``quality``, ``intent`` + ``greeting`` (as ``constraints.relevance``),
``language`` and ``tone`` as built-in constraints. A failing one retries with its message (the hook's, plus
what to do instead), as every hook does.

The labelled sets in ``data/judging/`` (built by ``python -m training_jobs.judging_sets``) hold bad replies each
rule must catch — from the demo model's recorded turns, the issue's examples and mutations of gold replies —
and good replies every rule must pass (``tests/streams/test_rules_sets.py``). Plain Python, no Django.
"""

from streams.engine.rules import compliance, entities, facts, form, intent, language, quality, tone  # noqa: F401
from streams.engine.rules.base import CHECKS, EFFECTS, Problem, TurnView, check, effect_of, run_check
from streams.engine.rules.claims import Claim, extract_claims
from streams.engine.rules.judge import (
    ROOM_ACTIONS,
    CallRecord,
    ExpectedCall,
    Expectation,
    GoldFact,
    Judgement,
    judge_turn,
    missing_facts,
    states,
)

__all__ = [
    "CHECKS", "EFFECTS", "ROOM_ACTIONS", "CallRecord", "Claim", "ExpectedCall", "Expectation", "GoldFact",
    "Judgement", "Problem", "TurnView", "check", "effect_of", "extract_claims", "judge_turn", "missing_facts",
    "run_check", "states",
]
