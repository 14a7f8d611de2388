"""Written gold turns → an eval set: how a team that brings its own harness (the order desk) gets cases to evaluate
it on, from the same turns it writes for HSA (:mod:`training_jobs.hsa.written`).

Each turn is first checked exactly as the HSA build checks it (:func:`training_jobs.hsa.written.written_sample`: the
skills and tools exist, the arguments are what the ``tool_args`` hook accepts, every call is answered by its recorded
result or through the real dispatcher where that cannot act), then becomes a T1 case like a recorded turn does
(:mod:`training_jobs.evals.turn_case`): its calls named by tool with the tool's own arguments, the gold facts the
written reply states of those answers, its reply skills, the reply as ``gold_reply``. A harness without built-in
bindings gives cases without a room.

The turns stay the one source: a set is built from them when needed (the walk test, a notebook, an import), so the
gold never drifts from what HSA trains on. Plain Python, no Django.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness_editor.schemas import FieldError, Manifest, ManifestError
from streams.tool_bindings import EMPTY_RUNTIME, ToolRuntime
from training_jobs.evals.cases import EvalCase, parse_case
from training_jobs.evals.turn_case import SKIPPED_ARGUMENTS, gold_facts


def _case_id(prefix: str, turn: Mapping[str, Any], index: int) -> str:
    raw = re.sub(r"[^A-Za-z0-9_.:\-]", "-", str(turn.get("id") or index))
    return f"{prefix}{raw}"[:120]


def case_from_written_turn(manifest: Manifest, turn: Mapping[str, Any], *, harness: str, index: int = 0,
                           prefix: str = "written-", tags: Sequence[str] = ("written",),
                           runtime: ToolRuntime = EMPTY_RUNTIME) -> EvalCase:
    """One written turn as a T1 case of ``harness`` (the name the case is written for: a demo manifest name or
    'slug@version'). Raises ManifestError with paths inside ``turns[index]``."""
    from training_jobs.hsa.samples import LoadSkill, ToolCall
    from training_jobs.hsa.written import WrittenTurnError, written_sample

    try:
        sample = written_sample(manifest, turn, index=index, runtime=runtime)
        assert sample is not None  # remote calls allowed: a sample or an error
    except WrittenTurnError as exc:
        raise ManifestError([FieldError(path=exc.path, message=exc.reason)]) from None
    calls, skills = [], []
    for step in sample.target:
        if isinstance(step, LoadSkill):
            skill = manifest.skill(step.skill_id)
            if skill is not None and skill.kind == "reply" and step.skill_id not in skills:
                skills.append(step.skill_id)
        elif isinstance(step, ToolCall) and isinstance(step.result, Mapping) and "error" not in step.result:
            args = {k: v for k, v in dict(step.arguments).items() if k not in SKIPPED_ARGUMENTS}
            calls.append({"tool": step.name, "arguments": args, "result": dict(step.result)})
    expected: list[dict[str, Any]] = []
    for call in calls:
        entry = {"tool": call["tool"], "arguments": call["arguments"]}
        if entry not in expected:
            expected.append(entry)
    reply = str(turn.get("reply") or "")
    data: dict[str, Any] = {
        "id": _case_id(prefix, turn, index), "kind": "t1", "harness": harness,
        "room": dict(sample.room), "comments": [dict(c) for c in sample.comments],
        "gold_facts": gold_facts(calls, reply), "expected_tools": expected, "expected_skills": skills,
        "gold_reply": reply[:2000], "tags": list(dict.fromkeys(tags)), "source": f"written:{harness}"[:200],
    }
    try:
        return parse_case(data, manifest=manifest)
    except ManifestError as exc:
        at = f"turns[{index}]"
        raise ManifestError([FieldError(path=f"{at}.{e.path}" if e.path else at, message=e.message)
                             for e in exc.errors]) from None


def cases_from_written_turns(manifest: Manifest, turns: Sequence[Mapping[str, Any]], *, harness: str,
                             prefix: str = "written-", runtime: ToolRuntime = EMPTY_RUNTIME) -> list[EvalCase]:
    """Every turn as a case; ManifestError with every refused turn located (``turns[3].calls[0].tool``), nothing
    returned unless all are good."""
    cases: list[EvalCase] = []
    errors: list[FieldError] = []
    for i, turn in enumerate(turns):
        try:
            cases.append(case_from_written_turn(manifest, turn, harness=harness, index=i, prefix=prefix,
                                                runtime=runtime))
        except ManifestError as exc:
            errors += exc.errors
    if errors:
        raise ManifestError(errors)
    return cases
