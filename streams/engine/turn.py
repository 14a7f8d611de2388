"""One turn: (manifest, live room, comments, history) → a speakable reply, with every stage as typed events.

Stages (issue 3 §1):

1. **context** — normalise the room and the comments (``comment_received``); viewer_input hooks.
2. **prompt assembly** — :func:`harness_editor.render.render_prompt` (the one renderer) → messages + tools
   (``prompt_built``).
3. **agent loop** — stream the model (``model_request``, ``token``); tool calls, native or Hermes text
   (``tool_call`` with validation), run through the manifest tool's binding by the one dispatcher
   (:func:`streams.tool_bindings.prepare_call`: built-in, http, fixture, mcp; unbound → the fault ``unbound``),
   under injected faults (``tool_result``); ``load_skill`` is built in (``skill_loaded``). Bounded by
   ``constraints.max_tool_rounds`` (tool rounds) and ``constraints.turn_limit`` (model requests).
4. **hooks** — before each candidate final reply (``hook_result``); a failing ``retry`` hook sends its
   message back to the model (``retry``) up to retry_control.max_retries; ``block`` or exhaustion → the
   retry_control fallback line.
5. **dispatch** — only speakable text leaves (``reply``), then ``timings``.

The whole turn has a wall-clock budget: ``constraints.turn_deadline_s``, or the caller's ``deadline_s``. The
remaining budget caps each model request (passed to backends that take ``budget_s``, so the HTTP client cuts
a stalled stream at the deadline) and each injected tool delay; no model request, retry or tool call starts
past it. Running out records ``deadline_exceeded`` (stage, elapsed, budget), closes the model stream and
speaks the fallback line with reason ``deadline_exceeded``. A candidate reply that is complete and passes the
hooks is still spoken, even if the hooks finished just after the deadline.

Nothing the model or an endpoint does crashes a turn: bad tool JSON, unknown tools and schema-invalid
arguments become tool errors the model sees; endpoint errors become an ``error`` event and the fallback.
Plain Python (no Django): the preview room, live sessions, RL rollouts, evaluation and replay all call
:func:`run_turn`.
"""

from __future__ import annotations

import inspect
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from harness_editor.render import render_prompt, render_skill_body
from harness_editor.schemas import LOAD_SKILL_TOOL, Manifest, Tool
from harness_editor.schemas.bindings import binding_label
from streams.engine import hooks as H
from streams.engine.client import ChatDelta, ModelError, NativeToolCall
from streams.engine.events import (
    CommentReceived,
    DeadlineExceeded,
    ErrorEvent,
    HookResult,
    ModelRequest,
    PromptBuilt,
    Reply,
    Retry,
    SkillLoaded,
    Timings,
    Token,
    ToolCallEvent,
    ToolResultEvent,
    TurnEvent,
    event_adapter,
)
from streams.engine.faults import ToolFault, apply_fault, find_fault
from streams.engine.toolcalls import ParsedToolCall, from_native, split_content
from streams.tool_bindings import EMPTY_RUNTIME, ToolRuntime, prepare_call

HOOK_FEEDBACK_ROLE = "user"  # mid-conversation "system" messages are rejected by some chat templates
HOOK_FEEDBACK_PREFIX = "[harness check — not a viewer] "
MAX_COMMENT_CHARS = 2000  # hard cap before anything else sees a comment


class ChatBackend(Protocol):
    def stream_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], **sampling: Any
                    ) -> Iterator[ChatDelta]: ...


@dataclass
class TurnResult:
    turn_id: str
    reply: str
    fallback: bool
    # "ok", "model_error", "blocked:<hook id>", "retries_exhausted", "turn_limit", "deadline_exceeded",
    # "internal_error"
    reason: str
    events: list[TurnEvent]
    messages: list[dict[str, Any]]  # the full transcript: prompt, tool calls and results, hook feedback, reply
    timings: Timings
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    loaded_skills: list[str] = field(default_factory=list)
    verdicts: list[H.Verdict] = field(default_factory=list)


def hook_feedback_message(messages: Iterable[str]) -> dict[str, Any]:
    """The message a failing hook adds before the model is asked again."""
    unique = list(dict.fromkeys(m.strip() for m in messages if m and m.strip()))
    return {"role": HOOK_FEEDBACK_ROLE, "content": HOOK_FEEDBACK_PREFIX + " ".join(unique)}


# --- context ------------------------------------------------------------------------------------------------


def normalise_comments(comments: Iterable[Any]) -> list[dict[str, str]]:
    """Accept dicts (viewer/user/name, viewer_id/user_id, text/content/comment) or plain strings."""
    out = []
    for c in comments or ():
        if isinstance(c, str):
            c = {"text": c}
        elif not isinstance(c, Mapping):
            c = {"text": str(c)}
        viewer = str(c.get("viewer") or c.get("user") or c.get("name") or c.get("nickname") or "viewer")
        viewer_id = str(c.get("viewer_id") or c.get("user_id") or viewer)
        text = str(c.get("text") or c.get("content") or c.get("comment") or "")[:MAX_COMMENT_CHARS]
        out.append({"viewer": viewer, "viewer_id": viewer_id, "text": text})
    return out


def normalise_room(room: Any) -> dict[str, Any]:
    """The room is mutated by bindings (coupons issued, cards pinned), so it is normalised in place."""
    if not isinstance(room, dict):
        room = {}
    if not isinstance(room.get("products"), list):
        room["products"] = []
    for p in room["products"]:
        if isinstance(p, dict) and isinstance(p.get("link_id"), str) and p["link_id"].strip().isdigit():
            p["link_id"] = int(p["link_id"].strip())
    return room


# --- replay -------------------------------------------------------------------------------------------------


class ReplayBackend:
    """Plays back the model outputs recorded in a turn's events (tokens, native tool calls, endpoint errors),
    one recorded ``model_request`` per :meth:`stream_chat` call, so re-running the turn gives the same events.

    A turn that ran out of time replays to the same reply and reason: a stream cut by the deadline ends with a
    ``deadline`` error where it was cut, and a request the deadline stopped from starting gets one."""

    def __init__(self, events: Iterable[TurnEvent | dict[str, Any]]):
        self.responses: list[tuple[list[ChatDelta], list[NativeToolCall], ModelError | None]] = []
        self.deadline_after: bool = False  # the recorded turn hit its deadline outside a stream
        current: tuple[list[ChatDelta], list[NativeToolCall], list[ModelError]] | None = None
        last = ""
        for raw in events:
            e = raw if isinstance(raw, BaseModel) else event_adapter.validate_python(raw)
            streaming, last = last in ("model_request", "token"), e.type
            if e.type == "deadline_exceeded":
                if e.stage == "model" and streaming and current is not None:
                    current[2].append(ModelError("deadline", "turn deadline reached (replayed)"))
                else:
                    self.deadline_after = True
            elif e.type == "model_request":
                current = ([], [], [])
                self.responses.append(current)  # type: ignore[arg-type]
            elif current is None:
                continue
            elif e.type == "token":
                delta = ChatDelta(content=e.delta) if e.channel == "content" else ChatDelta(reasoning=e.delta)
                current[0].append(delta)
            elif e.type == "tool_call" and e.source == "native":
                current[1].append(NativeToolCall(len(current[1]), e.call_id, e.name, e.arguments_raw))
            elif e.type == "error" and e.stage == "model":
                current[2].append(ModelError(e.kind or "protocol", e.message, e.status))
        self.responses = [(d, n, errs[0] if errs else None) for d, n, errs in self.responses]  # type: ignore[misc]
        self.calls = 0

    def stream_chat(self, messages: Any, tools: Any = None, **sampling: Any) -> Iterator[ChatDelta]:
        if self.calls >= len(self.responses):
            if self.deadline_after:
                raise ModelError("deadline", "turn deadline reached (replayed)")
            raise ModelError("replay", f"no recorded model response left (recorded {len(self.responses)})")
        deltas, native, error = self.responses[self.calls]
        self.calls += 1
        yield from deltas
        if error is not None:
            raise error
        yield ChatDelta(tool_calls=tuple(native), finish_reason="tool_calls" if native else "stop")


class ScriptedBackend:
    """An in-process backend that returns prepared responses (text with Hermes tool-call blocks, or
    ChatDelta lists), for benchmarks and tests that do not need HTTP."""

    def __init__(self, responses: Sequence[str | Sequence[ChatDelta] | ModelError]):
        self.responses = list(responses)
        self.calls = 0

    def stream_chat(self, messages: Any, tools: Any = None, **sampling: Any) -> Iterator[ChatDelta]:
        r = self.responses[self.calls % len(self.responses)]
        self.calls += 1
        if isinstance(r, ModelError):
            raise r
        if isinstance(r, str):
            yield ChatDelta(content=r)
            yield ChatDelta(finish_reason="stop")
            return
        yield from r


# --- the turn ------------------------------------------------------------------------------------------------


class _Recorder:
    __slots__ = ("turn_id", "emit", "t0", "events", "seq")

    def __init__(self, turn_id: str, emit: Callable[[TurnEvent], None] | None, t0: float):
        self.turn_id, self.emit, self.t0 = turn_id, emit, t0
        self.events: list[TurnEvent] = []
        self.seq = 0

    def __call__(self, cls: type, **fields: Any) -> Any:
        t_ms = round((time.perf_counter() - self.t0) * 1000, 3)
        if cls is Token:  # the bulk of a turn's events, built only here from str deltas: skip validation
            ev = Token.model_construct(turn_id=self.turn_id, seq=self.seq, t_ms=t_ms, **fields)
        else:
            ev = cls(turn_id=self.turn_id, seq=self.seq, t_ms=t_ms, **fields)
        self.seq += 1
        self.events.append(ev)
        if self.emit is not None:
            try:
                self.emit(ev)
            except BaseException as exc:
                raise _EmitFailed(exc) from exc
        return ev


class _EmitFailed(BaseException):  # not Exception: no handler in the engine may swallow it
    """The caller's ``emit`` raised (e.g. to cancel the turn): re-raised unchanged out of run_turn."""

    def __init__(self, original: BaseException):
        self.original = original


class _Blocked(Exception):
    def __init__(self, reason: str):
        self.reason = reason


class _DeadlineHit(Exception):
    """The turn's wall-clock budget ran out during ``stage``; run_turn turns it into the fallback."""

    def __init__(self, stage: str):
        self.stage = stage


_TAKES_BUDGET: dict[type, bool] = {}


def _takes_budget(backend: Any) -> bool:
    """Whether ``backend.stream_chat`` names a ``budget_s`` parameter. Only then is it passed: a backend with
    a bare ``**kwargs`` may forward it somewhere that rejects it. Per backend class (inspect is slow)."""
    kind = type(backend)
    if kind not in _TAKES_BUDGET:
        try:
            _TAKES_BUDGET[kind] = "budget_s" in inspect.signature(backend.stream_chat).parameters
        except (TypeError, ValueError, AttributeError):
            return False
    return _TAKES_BUDGET[kind]


def recent_history(history: Sequence[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """The last ``turns`` turns of a dialogue history: from the ``turns``-th last user message on (a turn is
    a user message and what followed it), nothing when ``turns`` is 0."""
    starts = [i for i, m in enumerate(history) if m.get("role") == "user"]
    if turns <= 0 or not starts:
        return []
    return list(history[starts[-turns] if turns <= len(starts) else starts[0]:])


def _arguments_for_transcript(call: ParsedToolCall) -> str:
    # vLLM json-parses assistant tool-call arguments when it applies the chat template: keep them valid JSON.
    return json.dumps(call.arguments if call.arguments is not None else {}, ensure_ascii=False)


class _Turn:
    def __init__(self, manifest: Manifest, room: dict[str, Any], backend: ChatBackend, rec: _Recorder,
                 faults: Mapping[str, ToolFault] | None, sampling: dict[str, Any], budget_s: float,
                 tools: ToolRuntime = EMPTY_RUNTIME):
        self.m = manifest
        self.tools = tools
        self.deadline = rec.t0 + budget_s  # perf_counter time, like rec.t0
        self.takes_budget = _takes_budget(backend)
        self.room = room
        self.backend = backend
        self.rec = rec
        self.faults = faults
        self.sampling = sampling
        self.loaded: list[str] = []
        self.tool_results: list[Any] = []
        self.tool_calls: list[ParsedToolCall] = []
        self.verdicts: list[H.Verdict] = []
        self.model_ms = 0.0
        self.tool_ms = 0.0
        self.ttft_ms: float | None = None
        self.model_calls = 0
        self.tool_args_hooks = H.enabled_hooks(manifest, "tool_args")

    # -- deadline --
    def remaining(self) -> float:
        return self.deadline - time.perf_counter()

    def check_deadline(self, stage: str) -> None:
        if time.perf_counter() >= self.deadline:
            raise _DeadlineHit(stage)

    def capped_sleep(self, seconds: float) -> None:
        """Injected tool delays never sleep past the turn's deadline."""
        time.sleep(max(0.0, min(seconds, self.remaining())))

    # -- hooks --
    def verdict(self, v: H.Verdict) -> H.Verdict:
        self.verdicts.append(v)
        self.rec(HookResult, hook_id=v.hook_id, kind=v.kind, point=v.point, passed=v.passed, on_fail=v.on_fail,
                 message=v.message, detail=v.detail)
        return v

    # -- model --
    def call_model(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], rounds: int
                   ) -> tuple[str, list[NativeToolCall]] | ModelError:
        attempt = 0
        while True:
            attempt += 1
            self.check_deadline("model")  # no request (nor a resend) starts past the deadline
            self.rec(ModelRequest, round=rounds, attempt=attempt, call_index=self.model_calls,
                     message_count=len(messages))
            self.model_calls += 1
            content: list[str] = []
            native: list[NativeToolCall] = []
            error: ModelError | None = None
            cut = False
            start = time.perf_counter()
            stream: Any = None
            try:
                extra = {"budget_s": self.remaining()} if self.takes_budget else {}
                stream = self.backend.stream_chat(messages, tools, **self.sampling, **extra)
                for d in stream:
                    if self.ttft_ms is None and (d.content or d.reasoning or d.tool_calls):
                        self.ttft_ms = round((time.perf_counter() - self.rec.t0) * 1000, 3)
                    if d.reasoning:
                        self.rec(Token, delta=d.reasoning, channel="reasoning")
                    if d.content:
                        self.rec(Token, delta=d.content, channel="content")
                        content.append(d.content)
                    if d.tool_calls:
                        native.extend(d.tool_calls)
                    # backends without budget_s (in-process ones) are checked here, between deltas; a
                    # finished response is kept
                    if d.finish_reason is None and time.perf_counter() >= self.deadline:
                        cut = True
                        break
            except ModelError as exc:
                error = exc
            except Exception as exc:  # a backend bug is an endpoint failure, not a crashed turn
                error = ModelError("protocol", f"{type(exc).__name__}: {exc}")
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    try:  # closes the HTTP response of an abandoned stream now, not when garbage-collected
                        close()
                    except Exception:
                        pass
                self.model_ms += (time.perf_counter() - start) * 1000
            if cut or (error is not None and (error.kind == "deadline" or self.remaining() <= 0)):
                raise _DeadlineHit("model")
            if error is None:
                return "".join(content), native
            self.rec(ErrorEvent, stage="model", message=error.message[:2000], kind=error.kind, status=error.status)
            if error.transient and attempt < 2 and self.model_calls < self.m.constraints.turn_limit:
                continue
            return error

    # -- tools --
    def run_call(self, call: ParsedToolCall, allowed: bool) -> str:
        """Validate, execute (or refuse) one call; returns the tool message content the model sees."""
        name = call.name
        error: str | None = call.error
        code = "invalid_json" if error else ""
        tool: Tool | None = None
        hook_verdicts: list[H.Verdict] = []
        if error is None:
            if name == LOAD_SKILL_TOOL:
                sid = (call.arguments or {}).get("skill_id")
                if not isinstance(sid, str) or self.m.skill(sid) is None:
                    error = (f"unknown skill {sid!r}; skills: {', '.join(s.id for s in self.m.skills)}"
                             if isinstance(sid, str) else "load_skill needs a string 'skill_id'")
                    code = "invalid_argument"
            else:
                tool = self.m.tool(name)
                if tool is None:
                    known = ", ".join([t.name for t in self.m.tools] + [LOAD_SKILL_TOOL])
                    error, code = f"unknown tool {name!r}; available tools: {known}", "unknown_tool"
                else:
                    strict = all(h.strict for h in self.tool_args_hooks) if self.tool_args_hooks else True
                    try:
                        problems = H.validate_arguments(tool, call.arguments or {}, strict=strict)
                    except H.ToolSchemaFault as fault:  # the harness's fault, not the model's: no hook verdict
                        error, code = f"tool {name!r} cannot be used, its schema is at fault: {fault}", "schema_fault"
                    else:
                        hook_verdicts = [H.check_tool_args(h, name, problems) for h in self.tool_args_hooks]
                        if problems:
                            error = "arguments do not match the tool schema: " + "; ".join(problems)
                            code = "invalid_arguments"
        if error is None and not allowed:
            error = (f"tool round limit ({self.m.constraints.max_tool_rounds}) reached: answer the viewer now "
                     "without calling tools")
            code = "round_limit"
        self.rec(ToolCallEvent, call_id=call.id, name=name, arguments_raw=call.arguments_raw[:20000],
                 arguments=call.arguments, source=call.source, valid=error is None or code == "round_limit",
                 error=error)
        for v in hook_verdicts:
            self.verdict(v)
        failed = [v for v in hook_verdicts if not v.passed]
        if any(v.on_fail == "block" for v in failed):
            self.rec(ToolResultEvent, call_id=call.id, name=name,
                     binding=binding_label(tool.binding) if tool else None, result={"error": error, "code": code},
                     error=error)
            raise _Blocked("blocked:" + next(v.hook_id for v in failed if v.on_fail == "block"))
        if error is not None:
            if failed:
                error = f"{error}. {' '.join(v.message for v in failed)}"
            result = {"error": error, "code": code}
            self.rec(ToolResultEvent, call_id=call.id, name=name,
                     binding=binding_label(tool.binding) if tool else None, result=result, error=error)
            return json.dumps(result, ensure_ascii=False)

        start = time.perf_counter()
        if name == LOAD_SKILL_TOOL:
            sid = call.arguments["skill_id"]  # type: ignore[index]
            body = render_skill_body(self.m, sid) or ""
            outcome = apply_fault(find_fault(self.faults, name, None), lambda: {"skill_id": sid}, name=name,
                                  sleep=self.capped_sleep)
            self.tool_ms += (time.perf_counter() - start) * 1000
            ok = outcome.error is None and outcome.fault in (None, "slow")
            if ok:
                if sid not in self.loaded:
                    self.loaded.append(sid)
                content = body
            else:
                content = outcome.raw if outcome.raw is not None else json.dumps(outcome.result, ensure_ascii=False)
            skill = self.m.skill(sid)
            self.rec(SkillLoaded, skill_id=sid, kind=skill.kind if skill else None, ok=ok)
            self.rec(ToolResultEvent, call_id=call.id, name=name, binding=None,
                     result=content if ok or outcome.raw is not None else outcome.result, error=outcome.error,
                     fault=outcome.fault, duration_ms=round((time.perf_counter() - start) * 1000, 3))
            return content

        assert tool is not None
        label = binding_label(tool.binding)
        prepared = prepare_call(tool, self.room, call.arguments, self.tools, time_left_s=self.remaining)
        if isinstance(prepared, dict):  # unbound, unavailable here, or a missing argument: the binding never runs
            self.rec(ToolResultEvent, call_id=call.id, name=name, binding=label, result=prepared,
                     error=prepared["error"])
            return json.dumps(prepared, ensure_ascii=False)
        if self.tools.approval is not None:  # a live session may ask its operator first (ToolRuntime.approval)
            refused = self.tools.approval(tool, call.id, call.arguments or {}, self.remaining)
            if refused is not None:
                self.rec(ToolResultEvent, call_id=call.id, name=name, binding=label, result=refused,
                         error=refused["error"])
                return json.dumps(refused, ensure_ascii=False)
            start = time.perf_counter()  # the wait for the operator is not the tool's time
        outcome = apply_fault(find_fault(self.faults, name, label), prepared, name=name, sleep=self.capped_sleep)
        ms = (time.perf_counter() - start) * 1000
        self.tool_ms += ms
        if outcome.raw is not None:
            content, shown = outcome.raw, outcome.raw
        else:
            content, shown = json.dumps(outcome.result, ensure_ascii=False), outcome.result
            if outcome.error is None:
                self.tool_results.append(outcome.result)
        self.rec(ToolResultEvent, call_id=call.id, name=name, binding=label, result=shown,
                 error=outcome.error, fault=outcome.fault, duration_ms=round(ms, 3))
        return content


def run_turn(
    *,
    manifest: Manifest,
    room: dict[str, Any],
    comments: Sequence[dict[str, Any]],
    history: Sequence[dict[str, Any]] = (),
    backend: ChatBackend,
    emit: Callable[[TurnEvent], None] | None = None,
    faults: Mapping[str, ToolFault] | None = None,
    turn_id: str | None = None,
    sampling: dict[str, Any] | None = None,
    deadline_s: float | None = None,
    tools: ToolRuntime | None = None,
) -> TurnResult:
    """Run one turn. ``room`` is mutated by bindings (as in a live room); pass a copy to keep yours.
    ``faults`` is keyed by manifest tool name or binding id. ``sampling`` goes to ``backend.stream_chat``
    (temperature, max_tokens, top_p, seed, stop). ``emit`` is called synchronously with every event; an
    exception it raises (e.g. to cancel the turn) propagates unchanged and ends the turn without a reply.
    ``deadline_s`` replaces the manifest's ``constraints.turn_deadline_s`` as the turn's wall-clock budget
    (evaluation may tighten it, a slow CPU endpoint may need more). ``tools`` is what the manifest's tool bindings
    may reach on this host (:func:`streams.services.tool_runtime.tool_runtime_for` builds it from settings and a
    scenario's fixtures); without it, built-in and fixture bindings work and http/mcp ones get
    ``binding_unavailable``."""
    t0 = time.perf_counter()
    if deadline_s is not None and not (isinstance(deadline_s, (int, float)) and math.isfinite(deadline_s)
                                       and deadline_s > 0):
        raise ValueError(f"deadline_s must be a positive number of seconds, not {deadline_s!r}")
    turn_id = turn_id or uuid.uuid4().hex
    rec = _Recorder(turn_id, emit, t0)
    c = manifest.constraints
    budget_s = float(deadline_s) if deadline_s is not None else c.turn_deadline_s
    max_retries, fallback_line, retry_hook = H.retry_policy(manifest)
    turn = _Turn(manifest, room, backend, rec, faults, dict(sampling or {}), budget_s, tools or EMPTY_RUNTIME)
    messages: list[dict[str, Any]] = []
    rounds = retries = 0
    reply, fallback, reason = "", True, "internal_error"
    stage = "context"
    try:
        # 1. context
        room = turn.room = normalise_room(room)
        normal = normalise_comments(comments)
        viewer_hooks = H.enabled_hooks(manifest, "viewer_input")
        cap = min((h.max_chars for h in viewer_hooks), default=MAX_COMMENT_CHARS)
        shown = []
        for i, cm in enumerate(normal):
            text = cm["text"]
            rec(CommentReceived, index=i, viewer=cm["viewer"], viewer_id=cm["viewer_id"], text=text,
                truncated=len(text) > cap)
            shown.append({**cm, "text": text[:cap]})
        notes: list[str] = []
        stage = "hook"
        for h in viewer_hooks:
            v = turn.verdict(H.check_viewer_input(h, normal))
            if not v.passed:
                if v.on_fail == "block":
                    raise _Blocked(f"blocked:{v.hook_id}")
                notes.append(v.message)

        # 2. prompt assembly
        stage = "prompt"
        rendered = render_prompt(manifest, room=room, comments=shown,
                                 history=recent_history(history, manifest.constraints.history_turns))
        messages = rendered.messages
        if notes:
            messages.append(hook_feedback_message(notes))
        tools = rendered.tools
        rec(PromptBuilt, message_count=len(messages), tool_count=len(tools),
            token_estimate=rendered.estimated_tokens(), system_chars=len(rendered.system_text))

        # 3. agent loop + 4. hooks
        while True:
            stage = "model"
            if turn.model_calls >= c.turn_limit:
                reason = "turn_limit"
                break
            out = turn.call_model(messages, tools, rounds)
            if isinstance(out, ModelError):
                reason = "model_error"
                break
            content, native = out
            stage = "tool"
            prefix = f"call_{turn.model_calls - 1}"
            split = split_content(content, id_prefix=prefix)
            calls = from_native(native) + list(split.calls)
            seen: set[str] = set()
            for i, call in enumerate(calls):
                if not call.id or call.id in seen:
                    call = ParsedToolCall(f"{prefix}_{i}", call.name, call.arguments_raw, call.arguments,
                                          call.source, call.error)
                    calls[i] = call
                seen.add(call.id)
            if calls:
                allowed = rounds < c.max_tool_rounds
                if allowed:
                    rounds += 1
                messages.append({
                    "role": "assistant",
                    "content": split.text,
                    "tool_calls": [
                        {"id": k.id, "type": "function",
                         "function": {"name": k.name or "invalid_tool_call", "arguments": _arguments_for_transcript(k)}}
                        for k in calls
                    ],
                })
                turn.tool_calls.extend(calls)
                for call in calls:
                    turn.check_deadline("tool")
                    result = turn.run_call(call, allowed)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    turn.check_deadline("tool")  # a call that overran ends the turn here
                continue

            stage = "hook"
            state = H.ReplyState(split.text, turn.loaded, turn.tool_results, shown, room)
            verdicts = [turn.verdict(v) for v in H.run_before_reply(manifest, state)]
            if not split.text.strip() and all(v.passed for v in verdicts):  # nothing else caught it
                verdicts.append(turn.verdict(H.Verdict(
                    H.CONSTRAINTS_HOOK_ID, "reply_format", "before_reply", False, "retry",
                    "Answer the viewer now in plain spoken sentences.", "empty reply")))
            failed = [v for v in verdicts if not v.passed]
            if not failed:
                reply, fallback, reason = split.text, False, "ok"
                break
            blocking = next((v for v in failed if v.on_fail == "block"), None)
            if blocking is not None:
                reason = f"blocked:{blocking.hook_id}"
                break
            if retry_hook is not None:
                allowed_retry = turn.verdict(H.check_retry_control(retry_hook, retries)).passed
            else:
                allowed_retry = retries < max_retries
            if not allowed_retry:
                reason = "retries_exhausted"
                break
            turn.check_deadline("hook")  # no retry starts past the deadline
            retries += 1
            feedback = hook_feedback_message(v.message for v in failed)
            rec(Retry, hook_id=",".join(dict.fromkeys(v.hook_id for v in failed)), attempt=retries,
                message=feedback["content"][len(HOOK_FEEDBACK_PREFIX):])
            messages.append({"role": "assistant", "content": split.text})
            messages.append(feedback)
    except _EmitFailed as failed:
        raise failed.original from None
    except _Blocked as b:
        reason = b.reason
    except _DeadlineHit as hit:
        rec(DeadlineExceeded, stage=hit.stage, elapsed_ms=round((time.perf_counter() - t0) * 1000, 3),
            budget_ms=round(budget_s * 1000, 3))
        reason = "deadline_exceeded"
    except Exception as exc:  # an engine bug must not take the room down: report it, speak the fallback
        rec(ErrorEvent, stage=stage, message=f"internal error: {type(exc).__name__}: {exc}"[:2000], kind="internal")
        reason = "internal_error"

    # 5. dispatch
    if fallback:
        reply = fallback_line
    messages.append({"role": "assistant", "content": reply})
    rec(Reply, text=reply, fallback=fallback, reason=reason)
    total = (time.perf_counter() - t0) * 1000
    timings = rec(
        Timings,
        ttft_ms=turn.ttft_ms,
        model_ms=round(turn.model_ms, 3),
        tool_ms=round(turn.tool_ms, 3),
        engine_ms=round(max(0.0, total - turn.model_ms - turn.tool_ms), 3),
        total_ms=round(total, 3),
        rounds=rounds,
        retries=retries,
        model_calls=turn.model_calls,
    )
    return TurnResult(turn_id, reply, fallback, reason, rec.events, messages, timings, turn.tool_calls,
                      list(turn.loaded), turn.verdicts)
