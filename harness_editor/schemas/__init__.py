"""The manifest: one harness written down (skills, tools, hooks, system prompt blocks, constraints).

Plain pydantic, no Django: the turn engine, GPU workers (HSA, training, evaluation) and the CLI import it.

Validation happens in two passes. The structural pass is pydantic (strict types, ``extra="forbid"`` on every
model, so a typo is an error and not a silently ignored key). The semantic pass (:func:`validate_semantics`)
checks what one field cannot see alone: unique ids, references between skills and tools, tool schemas
against the JSON Schema meta-schema, tool bindings against their contract. :func:`parse_manifest`
reports *all* errors of a pass as :class:`FieldError` with a precise path such as
``tools[3].parameters.properties.sku.type``, so the editor can put each message next to its field.

A :class:`Manifest` built any other way (``Manifest.model_validate``) runs the semantic pass too and fails
with one combined message: an instance is always a valid harness.

Canonical form: :func:`manifest_to_json` (compact, fields in declared order, dict order as given: JSON
Schema property order is part of what the model sees, so nothing is ever sorted). :func:`content_hash` is
the sha256 of that text.

Modules: :mod:`.errors` (located errors), :mod:`.fields` (constrained field types), :mod:`.manifest` (the models),
:mod:`.locations` (pydantic's errors located), :mod:`.tool_schema` (a tool's parameters schema),
:mod:`.semantics` (the cross-field pass), :mod:`.loading` (text in and out). This package re-exports what callers
use.
"""

from harness_editor.schemas.binding_checks import manifest_warnings
from harness_editor.schemas.errors import FieldError, ManifestError
from harness_editor.schemas.fields import (
    LANGUAGE_RE,
    SKILL_ID_RE,
    SLUG_RE,
    TOOL_NAME_RE,
)
from harness_editor.schemas.loading import (
    MAX_MANIFEST_BYTES,
    MAX_YAML_NODES,
    content_hash,
    control_character_errors,
    load_json,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    manifest_to_json,
    manifest_to_yaml,
    parse_manifest,
)
from harness_editor.schemas.locations import format_loc, pydantic_errors
from harness_editor.schemas.manifest import (
    DEFAULT_FALLBACK_REPLY,
    DEFAULT_HISTORY_TURNS,
    DEFAULT_SPEAKER_LABEL,
    DEFAULT_TURN_DEADLINE_S,
    HOOK_KINDS,
    LOAD_SKILL_TOOL,
    BannedPhrasesHook,
    BlockRole,
    Conventions,
    FactualRiskHook,
    Hook,
    InteractionConstraints,
    Manifest,
    PromptBlock,
    ReplyFormatHook,
    ReplySkillLoadedHook,
    RetryControlHook,
    Skill,
    SystemPrompt,
    Tool,
    ToolArgsHook,
    ViewerInputHook,
    argument_path_get,
    argument_path_set,
)
from harness_editor.schemas.semantics import validate_semantics
from harness_editor.schemas.tool_schema import (
    _META_VALIDATOR,
    _schema_errors,
    _schema_errors_cached,
    _schema_own_valid,
    _schema_valid,
    resolve_param_path,
)

__all__ = [
    "DEFAULT_FALLBACK_REPLY", "DEFAULT_SPEAKER_LABEL", "Conventions",
    "DEFAULT_HISTORY_TURNS", "DEFAULT_TURN_DEADLINE_S", "HOOK_KINDS", "LANGUAGE_RE", "LOAD_SKILL_TOOL",
    "MAX_MANIFEST_BYTES", "MAX_YAML_NODES", "SKILL_ID_RE", "SLUG_RE", "TOOL_NAME_RE", "BannedPhrasesHook",
    "BlockRole", "FactualRiskHook", "FieldError", "Hook", "InteractionConstraints", "Manifest", "ManifestError",
    "PromptBlock", "ReplyFormatHook", "ReplySkillLoadedHook", "RetryControlHook", "Skill", "SystemPrompt", "Tool",
    "ToolArgsHook", "ViewerInputHook", "_META_VALIDATOR", "_schema_errors", "_schema_errors_cached",
    "_schema_own_valid", "_schema_valid", "argument_path_get", "argument_path_set", "content_hash",
    "control_character_errors", "format_loc", "load_json", "load_yaml", "manifest_from_json", "manifest_from_yaml",
    "manifest_to_json", "manifest_to_yaml", "manifest_warnings", "parse_manifest", "pydantic_errors",
    "resolve_param_path", "validate_semantics",
]
