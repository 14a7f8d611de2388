"""Comparing a recorded turn with the same turn played again (session replays): plain Python, no Django.

Both sides are described the same way (:func:`turn_side`) from the turn engine's events — the recorded ones read
back from the session, the new ones as :func:`streams.engine.turn.run_turn` emitted them — and judged with the one
set of reply rules (:func:`streams.engine.rules.judge.judge_turn`), reading the turn's calls and results exactly as
evaluation does (:func:`streams.bound_calls.turn_calls`). A live turn has no gold: the rules judge what they
can without it (facts backed by the turn's own tool results, the catalogue, claims, form, language, tone, intent).

:func:`compare` says whether the new reply changed (its words), regressed (judged worse on any measure:
accuracy, effectiveness, or a fallback where the original spoke) or improved (better on one, worse on none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from streams.bound_calls import turn_calls
from streams.engine.events import (
    HookResult,
    Reply,
    SkillLoaded,
    Timings,
    ToolCallEvent,
    ToolResultEvent,
    TurnEvent,
    event_adapter,
)
from streams.engine.rules.judge import judge_turn

ENGINE_EVENT_TYPES = frozenset({"comment_received", "prompt_built", "model_request", "tool_call", "tool_result",
                                "skill_loaded", "hook_result", "retry", "reply", "timings", "deadline_exceeded",
                                "error"})
MAX_ARGUMENT_CHARS = 2000  # a tool call's arguments as shown side by side


def parse_events(payloads: Iterable[Mapping[str, Any]]) -> list[TurnEvent]:
    """Recorded engine event payloads → typed events, in order; tokens and anything that is not an engine event
    (or no longer reads as one) are left out."""
    out = []
    for p in payloads:
        if not isinstance(p, Mapping) or p.get("type") not in ENGINE_EVENT_TYPES:
            continue
        try:
            out.append(event_adapter.validate_python(dict(p)))
        except ValidationError:
            continue
    return out


def _short(arguments: Any) -> Any:
    text = json.dumps(arguments, ensure_ascii=False, default=str)
    return arguments if len(text) <= MAX_ARGUMENT_CHARS else text[:MAX_ARGUMENT_CHARS] + "…"


def turn_side(*, events: Sequence[TurnEvent], manifest: Any, comments: Sequence[Mapping[str, Any]],
              room: Mapping[str, Any] | None, reply: str | None = None, fallback: bool | None = None,
              reason: str | None = None, version: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One side of the comparison (see :class:`streams.replay_models.SessionReplayTurn`): the reply (``reply`` /
    ``fallback`` / ``reason`` override the events' ``reply``), hook verdicts, tool calls, skills, timings and the
    rules' judgement. ``manifest``: the harness the turn ran under (None when it is no longer on record: the rules
    then judge without its reply-skill and constraint settings)."""
    last = next((e for e in reversed(events) if isinstance(e, Reply)), None)
    text = reply if reply is not None else (last.text if last is not None else "")
    fell_back = fallback if fallback is not None else (last.fallback if last is not None else True)
    why = reason if reason is not None else (last.reason if last is not None else "no reply recorded")
    results = {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}
    tools = []
    for e in events:
        if isinstance(e, ToolCallEvent):
            res = results.get(e.call_id)
            tools.append({"name": e.name, "arguments": _short(e.arguments if e.arguments is not None
                                                              else e.arguments_raw),
                          "ok": bool(e.valid and res is not None and res.error is None
                                     and res.fault in (None, "slow")),
                          "error": e.error or (res.error if res is not None else None),
                          "fault": res.fault if res is not None else None})
    skills = [{"skill_id": e.skill_id, "kind": e.kind, "ok": e.ok} for e in events if isinstance(e, SkillLoaded)]
    hooks = [{"hook_id": e.hook_id, "kind": e.kind, "point": e.point, "passed": e.passed, "on_fail": e.on_fail,
              "message": e.message, "detail": e.detail} for e in events if isinstance(e, HookResult)]
    timing = next((e for e in reversed(events) if isinstance(e, Timings)), None)
    if manifest is not None:
        calls, backing, loaded = turn_calls(events, manifest)
    else:
        calls, loaded = [], [s["skill_id"] for s in skills if s["ok"]]
        backing = [e.result for e in results.values() if e.error is None and e.fault in (None, "slow")
                   and e.binding is not None and isinstance(e.result, dict)]
    judgement = judge_turn(reply=text, comments=[dict(c) for c in comments], room=room or {}, tool_results=backing,
                           loaded_skills=loaded, manifest=manifest, calls=calls,
                           outcome="ok" if not fell_back else (why or "fallback")).as_dict()
    return {"reply": text, "fallback": bool(fell_back), "reason": why, "version": dict(version or {}),
            "hooks": hooks, "hook_failures": sum(1 for h in hooks if not h["passed"]), "tools": tools,
            "skills": skills, "judgement": judgement,
            "timings": timing.model_dump(exclude={"turn_id", "seq", "t_ms", "type"}) if timing else None}


def _words(text: str) -> str:
    return " ".join((text or "").split())


def compare(original: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``{changed, regressed, improved, why}``: ``why`` lists what got worse (or better) in words."""
    a, b = original.get("judgement") or {}, new.get("judgement") or {}
    worse, better = [], []
    if new.get("fallback") and not original.get("fallback"):
        worse.append(f"fallback now ({new.get('reason')})")
    elif original.get("fallback") and not new.get("fallback"):
        better.append("answers where the original fell back")
    for key, label in (("accuracy", "accuracy"), ("effectiveness", "effectiveness")):
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            continue
        if y < x:
            worse.append(f"{label} {x:g} → {y:g}")
        elif y > x:
            better.append(f"{label} {x:g} → {y:g}")
    return {"changed": _words(original.get("reply", "")) != _words(new.get("reply", "")),
            "regressed": bool(worse), "improved": bool(better) and not worse, "why": worse or better}


def _side_figures(sides: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    judged = [s.get("judgement") or {} for s in sides]
    eff = [j["effectiveness"] for j in judged if isinstance(j.get("effectiveness"), (int, float))]
    acc = [j["accuracy"] for j in judged if isinstance(j.get("accuracy"), (int, float))]
    total_ms = [s["timings"]["total_ms"] for s in sides if isinstance((s.get("timings") or {}).get("total_ms"),
                                                                      (int, float))]
    return {"fallbacks": sum(1 for s in sides if s.get("fallback")),
            "judge_problems": sum(len(j.get("problems") or []) for j in judged),
            "turns_with_problems": sum(1 for j in judged if j.get("problems")),
            "inaccurate": sum(1 for a in acc if a < 1),
            "accuracy_mean": round(sum(acc) / len(acc), 4) if acc else None,
            "effectiveness_mean": round(sum(eff) / len(eff), 4) if eff else None,
            "hook_failures": sum(int(s.get("hook_failures") or 0) for s in sides),
            "total_ms_mean": round(sum(total_ms) / len(total_ms), 1) if total_ms else None}


def summarise(rows: Sequence[Mapping[str, Any]], *, turns: int) -> dict[str, Any]:
    """The replay's summary from its stored turns (``original``, ``new``, ``changed``, ``regressed``, ``improved``,
    ``skipped``, ``error`` each): counts, and per side the fallbacks, judge problems, turns judged inaccurate, mean
    scores, hook failures and mean turn time — over the turns played on both sides."""
    played = [r for r in rows if not r.get("skipped") and not r.get("error")]
    return {"turns": turns, "stored": len(rows), "replayed": len(played),
            "skipped": sum(1 for r in rows if r.get("skipped")), "failed": sum(1 for r in rows if r.get("error")),
            "changed": sum(1 for r in played if r.get("changed")),
            "regressed": sum(1 for r in played if r.get("regressed")),
            "improved": sum(1 for r in played if r.get("improved")),
            "original": _side_figures([r["original"] for r in played]),
            "new": _side_figures([r["new"] for r in played])}
