"""The manifest's models: skills, tools, hooks, the system prompt and the interaction constraints.

Strict pydantic with ``extra="forbid"`` everywhere (a typo is an error, not an ignored key); the cross-field pass
(:func:`harness_editor.schemas.semantics.validate_semantics`) runs from :meth:`Manifest._semantics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from harness_editor.schemas.bindings import ToolBinding
from harness_editor.schemas.fields import (
    LANGUAGE_RE,
    BlockTitle,
    HookText,
    ManifestName,
    Regex,
    SkillBody,
    SkillDescription,
    SkillId,
    Slug,
    ToolDescription,
    ToolName,
    _matches,
)

LOAD_SKILL_TOOL = "load_skill"  # built-in tool; the renderer adds it, a manifest may not define it


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- skills and tools --------------------------------------------------------------------------------


class Skill(_Model):
    """A Markdown module; the model sees id + description always, the body only after load_skill(id)."""

    id: SkillId
    kind: Literal["reply", "strategy"]
    description: SkillDescription
    body: SkillBody
    allowed_tools: list[str] = Field(default_factory=list)


def argument_path_get(arguments: Any, dotted: str) -> tuple[bool, Any]:
    """The value at a tool argument map's dotted path (``"item.link_id"``) in a call's arguments, if there."""
    node = arguments
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def argument_path_set(arguments: dict[str, Any], dotted: str, value: Any) -> None:
    """Put ``value`` at a dotted argument path, creating the objects on the way."""
    node = arguments
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


class ToolAnnotations(_Model):
    """What a tool says about itself (MCP's tool annotations: ``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``, ``title``). Each field is what was stated, None when nothing was: the
    MCP defaults (not read-only, may be destructive, not idempotent, open world) are applied where the hints are
    read (:func:`harness_editor.schemas.tool_effects.tool_effect`), so the manifest keeps the difference between
    "says it is not destructive" and "says nothing". Hints from a server are claims, not guarantees: nothing here
    makes a tool safe, it only decides what the console shows and asks. The model never sees them."""

    title: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(default=None,
                                                                              exclude_if=lambda v: v is None)
    read_only: bool | None = Field(default=None, exclude_if=lambda v: v is None)
    destructive: bool | None = Field(default=None, exclude_if=lambda v: v is None)
    idempotent: bool | None = Field(default=None, exclude_if=lambda v: v is None)
    open_world: bool | None = Field(default=None, exclude_if=lambda v: v is None)


class Tool(_Model):
    """A JSON-Schema function exposed to the model, bound to an implementation (:mod:`.bindings`: a built-in id,
    an open binding such as ``{kind: http, ...}``, or none: unbound). ``annotations`` and ``output_schema`` (the
    JSON Schema of its result) came later: declared last and left out of the dump when absent, so stored versions
    keep their canonical JSON and content hash."""

    name: ToolName
    description: ToolDescription
    parameters: dict[str, Any]
    binding: ToolBinding = None
    argument_map: dict[str, str] = Field(default_factory=dict)
    annotations: ToolAnnotations | None = Field(default=None, exclude_if=lambda v: v is None)
    output_schema: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)


# --- hooks -------------------------------------------------------------------------------------------


class _HookBase(_Model):
    id: Slug
    kind: str  # narrowed to a Literal by each kind; declared here so it comes right after id in exports
    enabled: bool = True
    on_fail: Literal["retry", "block"] = "retry"
    message: HookText


class ViewerInputHook(_HookBase):
    """Validate viewer comments before the model sees them."""

    kind: Literal["viewer_input"]
    max_chars: int = Field(default=300, ge=1, le=2000)
    blocked_patterns: list[Regex] = Field(default_factory=list)


class ToolArgsHook(_HookBase):
    """Validate tool-call arguments against the tool's JSON Schema."""

    kind: Literal["tool_args"]
    strict: bool = True


class ReplySkillLoadedHook(_HookBase):
    """At least one reply skill must be loaded before the final reply."""

    kind: Literal["reply_skill_loaded"]


class ReplyFormatHook(_HookBase):
    """The reply goes to TTS: no markdown, URLs or emoji when speakable; optional sentence cap."""

    kind: Literal["reply_format"]
    speakable: bool = True
    max_sentences: int | None = Field(default=None, ge=1, le=20)


class BannedPhrasesHook(_HookBase):
    kind: Literal["banned_phrases"]
    phrases: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=1, max_length=500)
    case_sensitive: bool = False


class FactualRiskHook(_HookBase):
    """Numbers of these kinds in a reply must be backed by a tool result in the same turn."""

    kind: Literal["factual_risk"]
    check: list[Literal["price", "stock", "discount"]] = Field(min_length=1)


class RetryControlHook(_HookBase):
    kind: Literal["retry_control"]
    max_retries: int = Field(default=2, ge=0, le=5)
    fallback_reply: HookText


Hook = Annotated[
    ViewerInputHook
    | ToolArgsHook
    | ReplySkillLoadedHook
    | ReplyFormatHook
    | BannedPhrasesHook
    | FactualRiskHook
    | RetryControlHook,
    Field(discriminator="kind"),
]
HOOK_KINDS: tuple[str, ...] = (
    "viewer_input",
    "tool_args",
    "reply_skill_loaded",
    "reply_format",
    "banned_phrases",
    "factual_risk",
    "retry_control",
)


# --- system prompt and constraints --------------------------------------------------------------------

BlockRole = Literal[
    "persona", "room_context", "business_rules", "compliance", "output_format", "skills_index", "custom"
]


class PromptBlock(_Model):
    id: Slug
    role: BlockRole
    title: BlockTitle
    content: str = Field(default="", max_length=20000)
    items: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list)


class SystemPrompt(_Model):
    layout: Literal["markdown", "xml", "json", "plain"] = "markdown"
    blocks: list[PromptBlock] = Field(min_length=1, max_length=50)


DEFAULT_TURN_DEADLINE_S = 20.0
DEFAULT_HISTORY_TURNS = 6


class InteractionConstraints(_Model):
    reply_min_chars: int = Field(default=10, ge=0, le=2000)
    reply_max_chars: int = Field(default=200, ge=1, le=4000)
    language: Annotated[str, _matches(LANGUAGE_RE, "use a BCP-47 language tag such as 'en' or 'zh-CN'")] = "en"
    tone: str = Field(default="friendly", max_length=200)
    speakable: bool = True
    turn_limit: int = Field(default=6, ge=1, le=50)
    max_tool_rounds: int = Field(default=3, ge=0, le=20)
    # Wall-clock budget of a whole turn (all model requests, tool calls and hook retries), in seconds; past it
    # the engine speaks the fallback line. Declared last and left out of the dump at its default (below).
    turn_deadline_s: float = Field(default=DEFAULT_TURN_DEADLINE_S, ge=1, le=300, allow_inf_nan=False)
    # How many previous turns (viewer comments + the avatar's reply) the model sees; 0 = every turn stands
    # alone (a model trained on single turns, like the tiny demo model, is lost in a dialogue history).
    history_turns: int = Field(default=DEFAULT_HISTORY_TURNS, ge=0, le=50)
    # In a live session, a call to a destructive tool (or one that does not say: MCP's default is "may be
    # destructive") waits for an operator to approve or refuse it (streams.services.live_tool_approval).
    destructive_tools_need_approval: bool = False

    @model_serializer(mode="wrap")
    def _omit_defaults_added_later(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Versions stored before these fields existed must keep their canonical JSON and content hash, so a
        # manifest at their defaults serialises exactly as it did then.
        data = handler(self)
        if self.turn_deadline_s == DEFAULT_TURN_DEADLINE_S:
            data.pop("turn_deadline_s", None)
        if self.history_turns == DEFAULT_HISTORY_TURNS:
            data.pop("history_turns", None)
        if not self.destructive_tools_need_approval:
            data.pop("destructive_tools_need_approval", None)
        return data


# --- conventions: the live-room scaffolding a harness may restate for its own domain ----------------------

DEFAULT_SPEAKER_LABEL = "viewer"
DEFAULT_FALLBACK_REPLY = "Let me double-check that for you. Please look at the product card on screen!"
LOAD_SKILL_CALL = "Call load_skill(skill_id) to read a skill's instructions."
REPLY_SKILL_RULE = "Load at least one reply skill before you write your final reply."
SpeakerLabel = Annotated[
    str, Field(min_length=1, max_length=40, pattern=r"^[^\[\]\r\n]+$"),
]
ConventionLine = Annotated[str, Field(min_length=1, max_length=2000)]


class Conventions(_Model):
    """The scaffolding the renderer and the turn engine put around a harness, restated for its domain. Every
    default is the live room's (a manifest without this section reads and behaves exactly as before it existed):

    - ``speaker_label``: who a message without a name comes from (``[viewer] text``; ``[customer] text``);
    - ``require_reply_skill``: a reply skill must be loaded before the final reply (the prompt says so and a
      reply skill must exist); off, skills are optional reading and no ``reply_skill_loaded`` hook may ask it;
    - ``load_skill_instruction``: the skills index's line on ``load_skill`` (default: built from the above);
    - ``output_format``: the generated output-format lines (``true``: from the interaction constraints; ``false``:
      none, and no output-format block is added; a list: these lines instead);
    - ``fallback_reply``: the line spoken when a turn gives up, unless a retry_control hook sets its own.

    Only what a harness changes is written down (``exclude_if``: an export stays short and says what differs)."""

    speaker_label: SpeakerLabel = Field(default=DEFAULT_SPEAKER_LABEL,
                                        exclude_if=lambda v: v == DEFAULT_SPEAKER_LABEL)
    require_reply_skill: bool = Field(default=True, exclude_if=lambda v: v is True)
    load_skill_instruction: Annotated[str, Field(min_length=1, max_length=2000)] | None = Field(
        default=None, exclude_if=lambda v: v is None)
    output_format: bool | Annotated[list[ConventionLine], Field(min_length=1, max_length=50)] = Field(
        default=True, exclude_if=lambda v: v is True)
    fallback_reply: HookText | None = Field(default=None, exclude_if=lambda v: v is None)

    def is_default(self) -> bool:
        return self == _DEFAULT_CONVENTIONS

    def load_skill_text(self) -> str:
        if self.load_skill_instruction is not None:
            return self.load_skill_instruction
        return f"{LOAD_SKILL_CALL} {REPLY_SKILL_RULE}" if self.require_reply_skill else LOAD_SKILL_CALL

    def fallback_line(self) -> str:
        return self.fallback_reply if self.fallback_reply is not None else DEFAULT_FALLBACK_REPLY


_DEFAULT_CONVENTIONS = Conventions()


_SKIP_SEMANTICS = "harness_editor.skip_semantics"


class Manifest(_Model):
    name: ManifestName
    description: str = Field(default="", max_length=2000)
    skills: list[Skill] = Field(min_length=1, max_length=200)
    tools: list[Tool] = Field(default_factory=list, max_length=100)
    hooks: list[Hook] = Field(default_factory=list, max_length=50)
    prompt: SystemPrompt
    constraints: InteractionConstraints
    # Declared last and left out of the dump at its defaults: stored versions keep their canonical JSON and hash.
    conventions: Conventions = Field(default_factory=Conventions,
                                     exclude_if=lambda v: v.is_default())

    @model_validator(mode="after")
    def _semantics(self, info: ValidationInfo) -> Manifest:
        # parse_manifest runs this pass itself to report each error at its own path.
        if isinstance(info.context, dict) and info.context.get(_SKIP_SEMANTICS):
            return self
        from harness_editor.schemas.semantics import validate_semantics
        from harness_editor.schemas.tool_schema import without_schema_lint

        # built from a valid manifest (HSA variants) or stored data; parse_manifest lints what users send
        with without_schema_lint():
            errors = validate_semantics(self)
        if errors:
            raise ValueError("; ".join(f"{e.path}: {e.message}" for e in errors))
        return self

    def skill(self, skill_id: str) -> Skill | None:
        return next((s for s in self.skills if s.id == skill_id), None)

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

