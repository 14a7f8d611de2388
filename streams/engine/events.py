"""Typed events of one turn: every stage of the engine is visible in this stream.

All events carry ``turn_id``, ``seq`` (0, 1, 2, ... within a turn) and ``t_ms`` (milliseconds since the turn
started), and a ``type`` literal that discriminates :data:`TurnEvent`. Load recorded events (JSON) with
:data:`event_adapter` / :data:`events_adapter`. A turn can be re-run from its events with
:class:`streams.engine.turn.ReplayBackend`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

HookPoint = Literal["viewer_input", "tool_args", "before_reply"]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    turn_id: str
    seq: int = Field(ge=0)
    t_ms: float = Field(ge=0)


class CommentReceived(_Event):
    type: Literal["comment_received"] = "comment_received"
    index: int
    viewer: str
    viewer_id: str
    text: str
    truncated: bool = False


class PromptBuilt(_Event):
    type: Literal["prompt_built"] = "prompt_built"
    message_count: int
    tool_count: int
    token_estimate: int
    system_chars: int


class ModelRequest(_Event):
    type: Literal["model_request"] = "model_request"
    round: int  # tool rounds completed before this request
    attempt: int  # 1 = first try of this request, 2 = resent after a transient endpoint error
    call_index: int  # model requests made so far in this turn (0-based)
    message_count: int


class Token(_Event):
    type: Literal["token"] = "token"
    delta: str
    channel: Literal["content", "reasoning"] = "content"


class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments_raw: str
    arguments: dict[str, Any] | None
    source: Literal["native", "text"]
    valid: bool
    error: str | None = None


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    binding: str | None
    result: Any = None  # the JSON object the model saw, or the raw string for a malformed fault
    error: str | None = None
    fault: Literal["timeout", "malformed", "permission_denied", "slow"] | None = None
    duration_ms: float = 0.0


class SkillLoaded(_Event):
    type: Literal["skill_loaded"] = "skill_loaded"
    skill_id: str
    kind: Literal["reply", "strategy"] | None
    ok: bool


class HookResult(_Event):
    type: Literal["hook_result"] = "hook_result"
    hook_id: str
    kind: str
    point: HookPoint
    passed: bool
    on_fail: Literal["retry", "block"]
    message: str = ""  # the hook's message to the model when it failed, else ""
    detail: str = ""  # what exactly failed (for operators; never sent to the viewer)


class Retry(_Event):
    type: Literal["retry"] = "retry"
    hook_id: str
    attempt: int  # 1 for the first retry
    message: str


class Reply(_Event):
    type: Literal["reply"] = "reply"
    text: str
    fallback: bool
    reason: str  # "ok", or why the fallback line was used


class Timings(_Event):
    type: Literal["timings"] = "timings"
    ttft_ms: float | None
    model_ms: float
    tool_ms: float
    engine_ms: float  # total minus model and tool time
    total_ms: float
    rounds: int
    retries: int
    model_calls: int


class DeadlineExceeded(_Event):
    """The turn ran out of its wall-clock budget (constraints.turn_deadline_s, or the caller's deadline_s):
    the model stream or tool call in progress was cut and the fallback line follows."""

    type: Literal["deadline_exceeded"] = "deadline_exceeded"
    stage: Literal["model", "tool", "hook"]  # where the turn was when the budget ran out
    elapsed_ms: float = Field(ge=0)
    budget_ms: float = Field(gt=0)


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    stage: Literal["context", "prompt", "model", "tool", "hook", "dispatch"]
    message: str
    kind: str = ""  # for stage "model": the ModelError kind (timeout, connect, http, protocol, ...)
    status: int | None = None  # HTTP status for kind "http"


TurnEvent = Annotated[
    CommentReceived
    | PromptBuilt
    | ModelRequest
    | Token
    | ToolCallEvent
    | ToolResultEvent
    | SkillLoaded
    | HookResult
    | Retry
    | Reply
    | Timings
    | DeadlineExceeded
    | ErrorEvent,
    Field(discriminator="type"),
]

event_adapter: TypeAdapter[TurnEvent] = TypeAdapter(TurnEvent)
events_adapter: TypeAdapter[list[TurnEvent]] = TypeAdapter(list[TurnEvent])

EVENT_TYPES: tuple[str, ...] = (
    "comment_received",
    "prompt_built",
    "model_request",
    "token",
    "tool_call",
    "tool_result",
    "skill_loaded",
    "hook_result",
    "retry",
    "reply",
    "timings",
    "deadline_exceeded",
    "error",
)
