"""Label preservation by regeneration (DESIGN.md section 6, the optional path behind a model endpoint).

A *teacher* endpoint re-answers a sample under the augmented harness by running the one turn engine
(:func:`streams.engine.turn.run_turn`: the augmented manifest, the sample's room and comments, tools through
the real bindings, the harness's own hooks with their retries). A *judge* keeps only answers that pass:

1. **rules** (deterministic, always on) — the engine's own verdicts: the turn ended ``ok`` (no fallback, no
   block, no exhausted retries, no endpoint error) and every tool call was valid against the augmented schema;
   then the reference facts of the sample, judged by the helpers the HAT rewards share
   (:mod:`training_jobs.hsa.judging`): every reference tool call has a teacher call bound to the same binding
   with the same implementation arguments (:func:`streams.bound_calls.implementation_arguments`: the right
   tool and link id, whatever the augmented harness calls them), no call to a binding the reference did not
   need, the reference's skills loaded, and the exact facts (price, stock, codes) stated in the reply
   (:func:`streams.engine.rules.judge.states`, the evaluation's own check), and the reply judged accurate by
   the reply rules (:func:`training_jobs.hsa.judging.judge_result`: the judge the RL rewards and evaluation use);
2. **judge endpoint** (optional) — an LLM is asked for a ``{"pass": true|false, "reason": "..."}`` verdict;
   the answer is parsed defensively (reasoning and prose around the JSON are ignored). A malformed verdict or
   an endpoint that is down rejects the sample with that reason; nothing here raises for an endpoint.

A kept answer becomes the sample's new target (steps: skill loads, tool calls with the engine's results, hook
retries, the reply), rendered exactly like a mechanical row. A recipe names its teacher and judge by the model
endpoint records administrators created (never a URL or a key); the console resolves a name to the engine's
:class:`streams.engine.client.ModelEndpoint` (checked against the outbound allow-list, the key read from the
named secret on the worker) and hands it here. Plain Python, no Django.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest
from streams.engine.client import ModelEndpoint, ModelError, OpenAIChatClient
from streams.engine.toolcalls import strip_think
from streams.engine.turn import HOOK_FEEDBACK_ROLE, ChatBackend, TurnResult, run_turn
from training_jobs.hsa.judging import (
    bound_calls,
    expectation_from_sample,
    extra_bindings,
    judge_result,
    match_reference_calls,
    missing_skills,
    reference_facts,
    states_facts,
)
from training_jobs.hsa.samples import (
    LoadSkill,
    Reply,
    Retry,
    Sample,
    Step,
    ToolCall,
    target_messages,
    target_problems,
)

LabelMode = Literal["mechanical", "regenerate"]


# --- configuration ------------------------------------------------------------------------------------------


class RegenerateSettings(BaseModel):
    """How the teacher is asked and what the judge demands."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(256, ge=1, le=32768)
    seed: int | None = Field(0, description="Sampling seed sent to the teacher (None: not sent).")
    turn_deadline_s: float | None = Field(None, gt=0, le=3600, description="Wall-clock budget per teacher turn "
                                          "(None: the harness's constraints.turn_deadline_s).")
    concurrency: int = Field(1, ge=1, le=64, description="Teacher turns in flight at once (threads).")
    require_skills: bool = Field(True, description="The reference's skill loads must be among the teacher's.")
    forbid_extra_tools: bool = Field(True, description="Reject calls to bindings the reference did not need.")
    judge_max_tokens: int = Field(200, ge=16, le=4096)


# --- the judge's verdict ------------------------------------------------------------------------------------------


@dataclass
class Judgement:
    """``reasons``: rejection codes (empty = kept); ``detail``: for people."""

    reasons: list[str] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)
    target: tuple[Step, ...] | None = None  # the teacher's answer as steps (kept ones only)
    judge_raw: str = ""

    @property
    def passed(self) -> bool:
        return not self.reasons

    def reject(self, code: str, detail: str = "") -> Judgement:
        if code not in self.reasons:
            self.reasons.append(code)
        if detail:
            self.detail.append(f"{code}: {detail}")
        return self


def turn_target(result: TurnResult, prompt_count: int) -> tuple[tuple[Step, ...] | None, str]:
    """The engine's transcript after the prompt as target steps, or (None, why) when a step has no form."""
    steps: list[Step] = []
    msgs = result.messages[prompt_count:]
    results: dict[str, str] = {m["tool_call_id"]: m["content"] for m in msgs if m.get("role") == "tool"}
    i = 0
    while i < len(msgs):
        m = msgs[i]
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            for call in m["tool_calls"]:
                fn = call["function"]
                try:
                    args = json.loads(fn["arguments"])
                except ValueError:
                    return None, "unparsable tool arguments in the transcript"
                if fn["name"] == LOAD_SKILL_TOOL:
                    steps.append(LoadSkill(call["id"], str(args.get("skill_id"))))
                else:
                    text = results.get(call["id"], "")
                    try:
                        parsed = json.loads(text)
                    except ValueError:
                        return None, "a tool result that is not JSON"
                    if not isinstance(parsed, dict):
                        return None, "a tool result that is not an object"
                    steps.append(ToolCall(call["id"], fn["name"], args, parsed, text))
        elif role == "assistant":
            nxt = msgs[i + 1] if i + 1 < len(msgs) else None
            if nxt is not None and nxt.get("role") == HOOK_FEEDBACK_ROLE:
                steps.append(Retry(m.get("content") or ""))
                i += 1  # the feedback is rendered from the harness again
            else:
                steps.append(Reply(m.get("content") or ""))
        elif role != "tool":
            return None, f"an unexpected {role!r} message in the transcript"
        i += 1
    if not steps or not isinstance(steps[-1], Reply):
        return None, "the transcript does not end with a reply"
    return tuple(steps), ""


def rule_check(manifest: Manifest, reference: Sample, result: TurnResult, prompt_count: int,
               settings: RegenerateSettings) -> Judgement:
    """The deterministic rules (module docstring, 1)."""
    j = Judgement()
    if result.fallback or result.reason != "ok":
        reason = result.reason.split(":", 1)[0]
        return j.reject(f"teacher_{reason}", result.reason + (f" ({_error_text(result)})" if _error_text(result)
                                                               else ""))
    invalid = [e for e in result.events if e.type == "tool_call" and not e.valid]
    if invalid:
        j.reject("invalid_tool_call", "; ".join(f"{e.name}: {e.error}" for e in invalid)[:500])
    target, why = turn_target(result, prompt_count)
    if target is None:
        return j.reject("not_representable", why)
    candidate = reference.with_target(target)

    # reference facts: same bindings with the same implementation arguments, skills, stated facts
    teacher = bound_calls(manifest, ((s.name, s.arguments) for s in target if isinstance(s, ToolCall)))
    for m in match_reference_calls(manifest, reference, teacher):
        ref = m.reference
        if m.status == "unmapped":  # the reference was relabelled into this harness, so this is a builder bug
            j.reject("reference_unmapped", ref.name)
        elif m.status == "missing":
            j.reject("wrong_tool", f"no call bound to {ref.bound.binding} (reference: {ref.name})")
        elif m.status == "other_arguments":
            j.reject("wrong_arguments", f"{ref.bound.binding} with {m.got}, reference {ref.bound.arguments}")
    if settings.forbid_extra_tools:
        extra = extra_bindings(manifest, reference, teacher)
        if extra:
            j.reject("extra_tool_call", ", ".join(extra))
    if settings.require_skills:
        missing = missing_skills(reference.loaded_skills(), candidate.loaded_skills())
        if missing:
            j.reject("wrong_skill", f"did not load {', '.join(missing)}")
    facts = reference_facts(reference)
    reply = target[-1].text  # type: ignore[union-attr]
    if not states_facts(reply, facts):
        j.reject("missing_fact", f"reply does not state {', '.join(facts)}")
    # the reply rules the RL accuracy reward and evaluation judge by (streams.engine.rules), whatever hooks the
    # augmented harness happens to have: every figure backed for its product and field, no invented product,
    # no false promise, no forbidden claim
    if "reference_unmapped" not in j.reasons:
        verdict = judge_result(result, manifest, reference.room, expectation_from_sample(manifest, reference))
        if not verdict.accuracy:
            j.reject("inaccurate", verdict.accuracy_reason[:500])
    # the answer must be a target the harness accepts as it will be rendered (and a trainable row)
    problems = target_problems(manifest, candidate)
    if problems:
        j.reject("not_representable", "; ".join(problems)[:500])
    else:
        engine_feedback = [m["content"] for m in result.messages[prompt_count:] if m.get("role") == HOOK_FEEDBACK_ROLE]
        rendered = [m["content"] for m in target_messages(manifest, candidate) if m.get("role") == HOOK_FEEDBACK_ROLE]
        if engine_feedback != rendered:
            j.reject("not_representable", "hook feedback differs when re-rendered")
    if j.passed:
        j.target = target
    return j


def _error_text(result: TurnResult) -> str:
    errs = [f"{e.kind}: {e.message}" if e.kind else e.message for e in result.events if e.type == "error"]
    return errs[-1][:300] if errs else ""


# --- the judge endpoint -----------------------------------------------------------------------------------------

JUDGE_SYSTEM = (
    "You judge one reply of a live-commerce host to a viewer. The reply passes only if it answers the viewer, "
    "states no fact that the tool results do not support, makes no false promise, and agrees with the reference "
    "facts. Answer with one JSON object and nothing else: {\"pass\": true or false, \"reason\": \"...\"}."
)


def judge_messages(reference: Sample, target: Sequence[Step]) -> list[dict[str, Any]]:
    results = [s.result_text or json.dumps(dict(s.result), ensure_ascii=False) for s in target if isinstance(s, ToolCall)]
    facts = [str(f) for f in (reference.meta.get("facts") or [])]
    body = {
        "viewer_comments": [f"[{c.get('viewer', 'viewer')}] {c.get('text', '')}" for c in reference.comments],
        "tool_results": results,
        "reference_facts": facts,
        "reference_reply": reference.reply,
        "reply_to_judge": target[-1].text,  # type: ignore[union-attr]
    }
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": json.dumps(body, ensure_ascii=False, indent=1)}]


_TRUE = {"pass", "passed", "true", "yes", "ok", "accept", "accepted"}
_FALSE = {"fail", "failed", "false", "no", "reject", "rejected"}


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """(True/False, reason) from a judge's answer, or (None, why) when no verdict can be read. Reasoning
    blocks, code fences and prose around the JSON object are ignored; the first object with a verdict key
    (``pass``, ``passed``, ``verdict``) wins."""
    visible, _ = strip_think(text or "")
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", visible):
        try:
            obj, _ = decoder.raw_decode(visible, m.start())
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        for key in ("pass", "passed", "verdict"):
            if key not in obj:
                continue
            value = obj[key]
            reason = obj.get("reason")
            reason = reason if isinstance(reason, str) else ""
            if isinstance(value, bool):
                return value, reason
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE, reason
            return None, f"verdict {key!r} is {value!r}, not true/false"
    return None, "no JSON verdict object in the judge's answer: " + repr(visible.strip()[:200])


def ask_judge(client: ChatBackend, reference: Sample, target: Sequence[Step], *, max_tokens: int = 200
              ) -> tuple[bool | None, str, str]:
    """(verdict or None, reason, raw answer). Endpoint failures are (None, 'endpoint: ...', '')."""
    try:
        parts = []
        for d in client.stream_chat(judge_messages(reference, target), None, temperature=0.0, max_tokens=max_tokens):
            if d.content:
                parts.append(d.content)
    except ModelError as exc:
        return None, f"endpoint: {exc}", ""
    except Exception as exc:  # a client bug is an endpoint failure here, never a crashed build
        return None, f"endpoint: {type(exc).__name__}: {exc}", ""
    raw = "".join(parts)
    verdict, reason = parse_verdict(raw)
    return verdict, reason, raw


# --- the regenerator --------------------------------------------------------------------------------------------


class Regenerator:
    """Re-answers samples under augmented harnesses with a teacher and judges them. Thread-safe (one HTTP
    client per endpoint, shared). ``teacher``/``judge``: the engine's endpoints (resolved and checked by the
    caller), or ready backends (tests, in-process models) with ``stream_chat``."""

    def __init__(self, teacher: ModelEndpoint | ChatBackend,
                 judge: ModelEndpoint | ChatBackend | None = None,
                 settings: RegenerateSettings | None = None):
        self.settings = settings or RegenerateSettings()
        self._owned: list[OpenAIChatClient] = []
        self.teacher = self._client(teacher)
        self.judge = self._client(judge) if judge is not None else None

    def _client(self, what: Any) -> ChatBackend:
        if isinstance(what, ModelEndpoint):
            client = OpenAIChatClient(what)
            self._owned.append(client)
            return client
        return what

    def close(self) -> None:
        for c in self._owned:
            c.close()

    def __enter__(self) -> Regenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sampling(self) -> dict[str, Any]:
        s = self.settings
        out: dict[str, Any] = {"temperature": s.temperature, "max_tokens": s.max_tokens}
        if s.seed is not None:
            out["seed"] = s.seed
        return out

    def answer(self, manifest: Manifest, reference: Sample) -> tuple[TurnResult | None, str]:
        """One teacher turn under ``manifest`` (the room is copied: bindings mutate it)."""
        try:
            result = run_turn(manifest=manifest, room=copy.deepcopy(dict(reference.room)),
                              comments=[dict(c) for c in reference.comments], backend=self.teacher,
                              sampling=self.sampling(), deadline_s=self.settings.turn_deadline_s)
        except Exception as exc:  # run_turn reports endpoint failures itself; this is anything else
            return None, f"{type(exc).__name__}: {exc}"
        return result, ""

    def regenerate(self, manifest: Manifest, reference: Sample) -> Judgement:
        """The teacher's answer to ``reference`` under ``manifest``, judged. ``reference`` is the sample already
        relabelled into ``manifest``'s names (its tool calls and skill loads are the reference facts)."""
        result, error = self.answer(manifest, reference)
        if result is None:
            return Judgement().reject("teacher_internal_error", error)
        prompt_count = next((e.message_count for e in result.events if e.type == "prompt_built"), None)
        if prompt_count is None:  # blocked before the prompt (viewer_input hook)
            return Judgement().reject(f"teacher_{result.reason.split(':', 1)[0]}", result.reason)
        if prompt_count != 1 + bool(reference.comments):  # e.g. a viewer_input hook's note after the prompt
            return Judgement().reject("not_representable", "the teacher saw more than the row's prompt")
        j = rule_check(manifest, reference, result, prompt_count, self.settings)
        if not j.passed or self.judge is None:
            return j
        assert j.target is not None
        verdict, reason, raw = ask_judge(self.judge, reference, j.target, max_tokens=self.settings.judge_max_tokens)
        j.judge_raw = raw
        if verdict is None:
            code = "judge_error" if reason.startswith("endpoint:") else "judge_malformed"
            j.reject(code, reason)
        elif not verdict:
            j.reject("judge_fail", reason or "the judge said fail")
        if not j.passed:
            j.target = None
        return j


def reasons_count(judgements: Sequence[Judgement]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for j in judgements:
        for r in j.reasons:
            out[r] = out.get(r, 0) + 1
    return out
