"""Judging an eval case's turn with the one set of reply rules (:func:`streams.engine.rules.judge.judge_turn`).

Evaluation adds nothing to the rules: it only turns an :class:`~training_jobs.evals.cases.EvalCase` into the
rules' :class:`~streams.engine.rules.judge.Expectation` (gold facts, expected binding calls, the reply skills of
the harness the case runs under, forbidden phrases) and a played turn into the calls and results the rules read,
exactly as the RL rewards do for a rollout. A forbidden claim given as a regular expression (``pattern``) that
the reply matches costs accuracy like any rule's claim problem.

Which reply skills a case expects depends on the harness it runs under: the case's own ``expected_skills``
when they exist there, else the reply skill each of its ``intents`` picks in that harness
(:func:`streams.reference_policy.pick_reply_skill`: the same choice the reference policy makes), so a T1 case
written for one harness can be run under another. Plain Python, no Django.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest
from streams import bound_calls
from streams.engine.events import ToolCallEvent
from streams.engine.rules.base import Problem
from streams.engine.rules.judge import (
    CallRecord,
    Expectation,
    ExpectedCall,
    GoldFact,
    Judgement,
    judge_turn,
)
from streams.engine.turn import TurnResult
from training_jobs.evals.open_calls import call_identity, expected_identity


def reply_skills_for(case: Any, manifest: Manifest) -> tuple[str, ...]:
    """The reply skills a correct turn loads under ``manifest`` (see the module docstring)."""
    from streams.reference_policy import ReferencePolicyError, pick_reply_skill

    have = {s.id for s in manifest.skills if s.kind == "reply"}
    own = [s for s in case.expected_skills if s in have]
    if own and len(own) == len(case.expected_skills):
        return tuple(own)
    picked: list[str] = []
    for intent in case.intents:
        try:
            sid = pick_reply_skill(manifest, intent)
        except ReferencePolicyError:
            continue
        if sid not in picked:
            picked.append(sid)
    return tuple(picked)


def _expected_call(t: Any, base: Manifest) -> ExpectedCall:
    if not t.tool:
        return ExpectedCall(t.binding, dict(t.arguments))
    bound = expected_identity(t.tool, t.arguments, base)
    return ExpectedCall(bound.binding, bound.arguments)


def expectation_for(case: Any, manifest: Manifest, base_manifest: Manifest | None = None) -> Expectation:
    """The rules' gold for ``case`` judged under ``manifest``. A call the case names by ``tool`` is read in the
    terms of ``base_manifest`` (the harness the case is written for, before its T2/T3 variant; default:
    ``manifest``) and compared by what carries it out (:mod:`training_jobs.evals.open_calls`)."""
    base = base_manifest if base_manifest is not None else manifest
    facts = tuple(GoldFact(value=f.say, link_id=f.link_id, field=f.field.rsplit(".", 1)[-1])
                  for f in case.gold_facts)
    calls = tuple(_expected_call(t, base) for t in case.expected_tools if not t.optional)
    return Expectation(facts=facts, calls=calls, reply_skills=reply_skills_for(case, manifest))


def turn_calls(result: TurnResult, manifest: Manifest) -> tuple[list[CallRecord], list[Any], list[str]]:
    """What the rules read of a played turn: its executed manifest-tool calls (bound, with success), the
    results of the successful ones (what backs facts) and the skills loaded (the runtime's reading,
    :func:`streams.bound_calls.turn_calls`), with open-bound calls identified as evaluation compares them
    (:func:`training_jobs.evals.open_calls.call_identity`; built-in calls are the runtime's reading as is)."""
    calls, backing, loaded = bound_calls.turn_calls(result.events, manifest)
    if all(isinstance(t.binding, str) for t in manifest.tools):
        return calls, backing, loaded
    # the runtime's records are in call order, one per executed manifest-tool call: re-identify those
    executed = [e for e in result.events if isinstance(e, ToolCallEvent) and e.valid and e.error is None
                and e.name != LOAD_SKILL_TOOL and manifest.tool(e.name) is not None]
    if len(executed) != len(calls):
        return calls, backing, loaded
    out = []
    for e, record in zip(executed, calls):
        bound = call_identity(manifest.tool(e.name), e.arguments)  # type: ignore[arg-type]
        out.append(CallRecord(bound.binding, dict(bound.arguments), record.ok))
    return out, backing, loaded


def _pattern_problems(reply: str, case: Any) -> list[Problem]:
    """The case's own forbidden claims the reply makes (their patterns are read sentence by sentence, so a
    sentence that refuses the claim is not one)."""
    from training_jobs.evals.cases import claim_hits

    out = []
    for claim in case.forbidden_claims:
        for sentence in claim_hits(claim, reply):
            start = reply.find(sentence)
            out.append(Problem("claims.case_forbidden", f"says {sentence.strip()!r}: {claim.text or claim.kind}",
                               span=(start, start + len(sentence)) if start >= 0 else None))
    return out


def judge_case(*, result: TurnResult, manifest: Manifest, room: Mapping[str, Any], case: Any,
               base_manifest: Manifest | None = None) -> Judgement:
    """Judge one sample of an eval case (the runner's ``judge``): the one rule set, with the case as gold.
    ``base_manifest``: the run's harness before the case's T2/T3 variant (what ``tool`` calls are written in)."""
    calls, backing, loaded = turn_calls(result, manifest)
    verdict = judge_turn(reply=result.reply, comments=[dict(c) for c in case.comments], room=room,
                         tool_results=backing, loaded_skills=loaded, manifest=manifest,
                         expectation=expectation_for(case, manifest, base_manifest), calls=calls,
                         outcome="ok" if not result.fallback else (result.reason or "fallback"))
    extra = _pattern_problems(result.reply, case) if not result.fallback else []
    if not extra:
        return verdict
    return Judgement(0, verdict.effectiveness, tuple(verdict.problems) + tuple(extra),
                     "; ".join(p.message for p in extra), *_rest(verdict))


def _rest(verdict: Judgement) -> Sequence[Any]:
    """The fields of a Judgement after accuracy_reason, whatever they are (kept as the rules set them)."""
    names = [f for f in verdict.__dataclass_fields__ if f not in ("accuracy", "effectiveness", "problems",
                                                                   "accuracy_reason")]
    return [getattr(verdict, n) for n in names]
