"""What a live session's comment handling is set to, and what a comment sent to the ingest looks like.

- :class:`CommentHandling` is stored in ``LiveSession.handling`` (defaults fill what an operator leaves out): the
  batching window, comments per turn, the per-viewer, per-token and per-session rate limits, the oldest comment still
  worth answering and the longest one accepted. Every field is bounded, so no setting can stall a session or flood a
  turn.
- :class:`IncomingComment` is one viewer comment as a platform, the REST API, the ingest WebSocket or the webhook
  sends it; :func:`parse_ingest` takes one comment or a batch (``{"comments": [...]}``) and reports every problem
  with its path (``comments[2].text``), so a bad batch is refused as a whole and nothing of it is stored.

Plain pydantic, no Django (the runner's plain parts and the replay feed use it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness_editor.schemas import FieldError, format_loc, pydantic_errors

MAX_BATCH = 100  # comments in one ingest request or frame
MAX_TEXT_CHARS = 4000  # LiveComment.text's limit; CommentHandling.max_chars filters long comments below it


class CommentHandling(BaseModel):
    """How a live session turns viewer comments into turns (``LiveSession.handling``)."""

    model_config = ConfigDict(extra="forbid")

    batch_window_s: float = Field(
        default=1.5, ge=0.0, le=30.0,
        description="After the first comment queues, wait up to this long for more to answer in the same turn "
                    "(never longer: a lone comment is answered when the window closes). 0 answers at once.")
    max_comments_per_turn: int = Field(
        default=3, ge=1, le=20, description="At most this many comments go into one turn, highest priority first.")
    per_viewer_per_minute: int = Field(
        default=6, ge=1, le=120,
        description="A viewer's comments beyond this many in the last 60 s are stored as rate_limited and not "
                    "answered (a viewer spamming cannot take the queue over).")
    per_token_per_minute: int = Field(
        default=120, ge=MAX_BATCH, le=6000,
        description="At most this many new comments a minute through one ingest token (REST or WebSocket); a "
                    "request that would go past it is refused whole (HTTP 429 with Retry-After, a 'refused' frame "
                    "on the socket) and nothing of it is stored. At least one full batch.")
    per_session_per_minute: int = Field(
        default=240, ge=MAX_BATCH, le=12000,
        description="At most this many new comments a minute into the session from every platform together "
                    "(tokens and the webhook; the replay feed is the operator's own and not limited). About five "
                    "times what a turn every few seconds answers: beyond that comments only queue to expire.")
    max_age_s: float = Field(
        default=60.0, ge=5.0, le=3600.0,
        description="A queued comment older than this when its turn would come is expired instead of answered "
                    "(the broadcast has moved on).")
    max_chars: int = Field(
        default=500, ge=1, le=MAX_TEXT_CHARS,
        description="Longer comments are stored as filtered (too long to read out), not answered.")


def handling_from(data: Any) -> CommentHandling:
    """The session's stored handling (a dict, maybe empty or from an older default set) as a model; keys it no
    longer knows are ignored rather than breaking a running session."""
    if isinstance(data, CommentHandling):
        return data
    known = {k: v for k, v in (data or {}).items() if k in CommentHandling.model_fields}
    return CommentHandling(**known)


def handling_errors(data: Any) -> list[FieldError]:
    """Problems of handling settings an operator sent (``handling.batch_window_s: ...``), empty when valid."""
    try:
        CommentHandling.model_validate(data if data is not None else {})
    except ValidationError as exc:
        return [FieldError(path=f"handling.{e.path}" if e.path else "handling", message=e.message)
                for e in pydantic_errors(exc)]
    return []


MAX_REPLAY_SPEED = 1000.0


class ReplayConfig(BaseModel):
    """``feed_config`` of a replay session: what to play (a stored scenario's viewer comments, or a recorded
    session's comments) and how fast (``speed`` times real speed: 1 plays a scenario minute in a real minute)."""

    model_config = ConfigDict(extra="forbid")

    scenario: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[-a-zA-Z0-9_]+$")] | None = None
    session: UUID | None = None
    speed: float = Field(default=1.0, gt=0.0, le=MAX_REPLAY_SPEED)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1,
                             description="the scenario's seed for generated comments (default: its own)")

    @model_validator(mode="after")
    def _one_source(self) -> ReplayConfig:
        if (self.scenario is None) == (self.session is None):
            raise ValueError("give exactly one of 'scenario' (a scenario's slug) or 'session' (a recorded "
                             "session's id)")
        return self


class PassiveConfig(BaseModel):
    """``feed_config`` of the webhook and API feeds: nothing to set (comments are pushed)."""

    model_config = ConfigDict(extra="forbid")


def feed_config_errors(feed: str, data: Any) -> tuple[dict[str, Any], list[FieldError]]:
    """(the config as stored, problems located under ``feed_config``)."""
    model = ReplayConfig if feed == "replay" else PassiveConfig
    try:
        parsed = model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        return {}, [FieldError(path=f"feed_config.{e.path}" if e.path else "feed_config", message=e.message)
                    for e in pydantic_errors(exc)]
    return parsed.model_dump(mode="json", exclude_none=True), []


Id = Annotated[str, Field(min_length=1, max_length=200)]


class IncomingComment(BaseModel):
    """One viewer comment. ``id`` (or ``external_id``) is the platform's id of the comment: a comment sent
    again with the same id is answered ``duplicate`` and stored once. Without one, the ingest derives a key from
    the viewer, the text and ``ts`` (see :func:`streams.live.handling.dedupe_key`)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    external_id: Id | None = Field(default=None, validation_alias=AliasChoices("id", "external_id"))
    viewer_id: Id
    viewer: Annotated[str, Field(max_length=120)] = ""
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    ts: datetime | None = Field(default=None, description="when the viewer sent it (ISO 8601 or Unix seconds)")

    @field_validator("external_id", "viewer_id", mode="before")
    @classmethod
    def _number_ids(cls, value: Any) -> Any:
        # platforms send numeric ids as JSON numbers; they are ids all the same (a bool is not)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    def display_name(self) -> str:
        return self.viewer or self.viewer_id

    def as_dict(self) -> dict[str, Any]:
        return {"external_id": self.external_id, "viewer_id": self.viewer_id, "viewer": self.display_name(),
                "text": self.text, "ts": self.ts.timestamp() if self.ts else None}


class IngestBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comments: Annotated[list[IncomingComment], Field(min_length=1, max_length=MAX_BATCH)]


class IngestInvalid(ValueError):
    """The payload is not one comment or a batch of them: every problem, located."""

    def __init__(self, errors: list[FieldError]):
        super().__init__("; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors))
        self.errors = errors


def parse_ingest(data: Any) -> list[IncomingComment]:
    """One comment (an object with ``text``) or a batch (``{"comments": [...]}``) → the comments, in order.
    Raises :class:`IngestInvalid` with every problem's path when any comment is bad (nothing is taken)."""
    if isinstance(data, dict) and "comments" in data:
        model = IngestBatch
    elif isinstance(data, dict):
        model = IncomingComment
    else:
        raise IngestInvalid([FieldError(path="", message="send one comment (an object with viewer_id and text) "
                                                         "or a batch: {\"comments\": [...]}")])
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        raise IngestInvalid(pydantic_errors(exc, loc_format=format_loc)) from None
    return list(parsed.comments) if isinstance(parsed, IngestBatch) else [parsed]
