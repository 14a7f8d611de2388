"""HSA operators: task-preserving variations of a harness state (DESIGN.md section 6).

Every operator is ``op(harness_state, sample, rng) -> (harness_state', sample', rename_map)``: pure (inputs are
never mutated; unchanged parts are shared, changed parts copied) and seeded (all randomness from ``rng``). The
harness state is the manifest as plain JSON data (``manifest.model_dump(mode="json")``) so a chain of edits
costs dict copies, not a pydantic validation per step; :func:`validate_state` turns the final state into a
:class:`Manifest` through ``parse_manifest``, and every operator's output passes it (tests check each one).

The harness edit of an operator never reads the sample (:meth:`Operator.edit_harness`); the sample edit
relabels the target through the rename map and, for the correction operator, adds a hook retry
(:meth:`Operator.edit_sample`). That split lets the dataset builder share one validated harness variant among
many samples (``Recipe.harness_pool_size``) without changing what any operator does.

Names, phrasings and held-out settings come from :mod:`training_jobs.hsa.names`: an operator configured with
``pool="train"`` only ever draws training values, ``pool="heldout"`` only evaluation values.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from training_jobs.hsa import names as N
from training_jobs.hsa.prompt_ops import (  # noqa: F401 (re-exported)
    LEGAL,
    LEGAL_MAX_RETRIES,
    LEGAL_MAX_SENTENCES,
    Needs,
    _change_prompt_layout,
    _move_numeric_constraints,
    _reorder_prompt_blocks,
    _reword_hook_messages,
    _synthesise_hook_correction,
    _vary_hook_limits,
    needs_of,
)
from training_jobs.hsa.relabel import IDENTITY, RenameMap
from training_jobs.hsa.samples import Reply, Sample, Step
from training_jobs.hsa.skill_ops import (  # noqa: F401 (re-exported)
    _add_distractor_skills,
    _mask_skill_descriptions,
    _mask_skill_rule,
    _rename_skills,
    _reorder_skill_rules,
    _reword_skill_rules,
    _rewrite_skill_descriptions,
)
from training_jobs.hsa.state import (  # noqa: F401 (re-exported)
    HarnessState,
    _distinctive,
    harness_state,
    relabel_target,
    rename_in_texts,
    rename_mentions,
    reword,
    validate_state,
)
from training_jobs.hsa.tool_ops import (  # noqa: F401 (re-exported)
    _add_decoy_tools,
    _add_optional_params,
    _is_decoy,
    _rename_tool_params,
    _rename_tools,
    _reorder_tool_properties,
    _rewrite_tool_descriptions,
    _string_id_schema_allowed,
    _switch_id_types,
    _wrap_tool_arguments,
    leaf_paths,
)

# --- the operator type ---------------------------------------------------------------------------------------------

HarnessEdit = Callable[[HarnessState, random.Random, N.Pool, Mapping[str, Any]], tuple[HarnessState, RenameMap]]
SampleEdit = Callable[[HarnessState, Sample, random.Random, N.Pool, Mapping[str, Any]], Sample]


@dataclass(frozen=True)
class Operator:
    """One HSA operator, configured with a name pool and settings; call it as ``op(state, sample, rng)``."""

    name: str
    dimension: str  # skill_ids | skill_content | tools | system_prompt | hooks
    description: str
    harness: HarnessEdit | None = None
    sample: SampleEdit | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    touches_checks: bool = False  # can make a valid target invalid: the builder re-checks and drops
    pool: N.Pool = "train"
    settings: Mapping[str, Any] = field(default_factory=dict)

    def configured(self, *, pool: N.Pool = "train", **settings: Any) -> Operator:
        unknown = set(settings) - set(self.defaults)
        if unknown:
            raise ValueError(f"operator {self.name!r} has no settings {sorted(unknown)}; it has {sorted(self.defaults)}")
        return replace(self, pool=pool, settings={**self.defaults, **settings})

    def _settings(self) -> Mapping[str, Any]:
        return self.settings or self.defaults

    def edit_harness(self, state: HarnessState, rng: random.Random, needs: Needs | None = None
                     ) -> tuple[HarnessState, RenameMap]:
        """``needs``: what the gold turns served by the result need from its numbers (operators that touch the
        checks stay within them; None: no gold turn to keep legal)."""
        if self.harness is None:
            return state, IDENTITY
        if self.touches_checks:
            return self.harness(state, rng, self.pool, self._settings(), needs=needs)
        return self.harness(state, rng, self.pool, self._settings())

    def edit_sample(self, state: HarnessState, sample: Sample, rng: random.Random, m: RenameMap) -> Sample:
        if not m.empty:
            sample = sample.with_target(relabel_target(sample.target, m))
        if self.sample is not None:
            sample = self.sample(state, sample, rng, self.pool, self._settings())
        return sample

    def __call__(self, state: HarnessState, sample: Sample, rng: random.Random
                 ) -> tuple[HarnessState, Sample, RenameMap]:
        new_state, m = self.edit_harness(state, rng, needs_of(sample))
        return new_state, self.edit_sample(new_state, sample, rng, m), m


# --- the catalogue ------------------------------------------------------------------------------------------------------

_SHARE = {"share": 0.5}
OPERATORS: dict[str, Operator] = {op.name: op for op in (
    Operator("rename_skills", "skill_ids", "Rename skill ids: readable synonyms, other languages, opaque codes.",
             _rename_skills, defaults={"share": 0.5, "synonym": 0.4, "foreign": 0.3, "opaque": 0.3}),
    Operator("rewrite_skill_descriptions", "skill_ids", "Reword skill descriptions and reframe them.",
             _rewrite_skill_descriptions, defaults={"share": 0.5, "density": 0.6}),
    Operator("mask_skill_descriptions", "skill_ids",
             "Replace descriptions with a blank line (never where the id is an opaque code).",
             _mask_skill_descriptions, defaults={"share": 0.3}),
    Operator("add_distractor_skills", "skill_ids", "Add plausible skills that no demo task needs.",
             _add_distractor_skills, defaults={"max_added": 2}),
    Operator("reword_skill_rules", "skill_content", "Reword skill bodies from the synonym table.",
             _reword_skill_rules, defaults={"share": 0.5, "density": 0.5}),
    Operator("reorder_skill_rules", "skill_content", "Shuffle the rules of skill bodies (and renumber them).",
             _reorder_skill_rules, defaults=dict(_SHARE)),
    Operator("mask_skill_rule", "skill_content", "Drop one rule no task depends on.", _mask_skill_rule),
    Operator("rename_tools", "tools", "Rename tools (the binding stays); skills and prose follow.",
             _rename_tools, defaults=dict(_SHARE)),
    Operator("rename_tool_params", "tools", "Rename parameters; argument maps, required lists and prose follow.",
             _rename_tool_params, defaults=dict(_SHARE)),
    Operator("rewrite_tool_descriptions", "tools", "Reword and reframe tool descriptions.",
             _rewrite_tool_descriptions, defaults={"share": 0.5, "density": 0.6}),
    Operator("reorder_tool_properties", "tools", "Shuffle property order (and the order of the tools).",
             _reorder_tool_properties, defaults={"reorder_tools": True}),
    Operator("wrap_tool_arguments", "tools", "Nest a tool's arguments inside one object parameter.",
             _wrap_tool_arguments, defaults={"share": 0.4}),
    Operator("switch_id_types", "tools", "Integer ids become digit strings where the binding coerces them.",
             _switch_id_types, defaults={"share": 0.5}),
    Operator("add_optional_params", "tools", "Add optional parameters the gold call does not use.",
             _add_optional_params, defaults={"share": 0.4, "max_added": 2}),
    Operator("add_decoy_tools", "tools", "Add plausible tools no demo task needs.",
             _add_decoy_tools, defaults={"max_added": 2}),
    Operator("reorder_prompt_blocks", "system_prompt", "Shuffle prompt blocks and the items inside blocks.",
             _reorder_prompt_blocks, defaults={"block_share": 0.8, "item_share": 0.6}),
    Operator("change_prompt_layout", "system_prompt", "Switch layout (markdown/xml/json/plain) and headings.",
             _change_prompt_layout, defaults={"layout_share": 0.8, "title_share": 0.5}),
    Operator("move_numeric_constraints", "system_prompt",
             "Move reply length, tool rounds and request limit within their legal ranges.",
             _move_numeric_constraints, defaults={"share": 0.5}, touches_checks=True),
    Operator("vary_hook_limits", "hooks", "Vary retry limits, the fallback line and the sentence cap.",
             _vary_hook_limits, defaults={"sentence_cap_share": 0.4}, touches_checks=True),
    Operator("reword_hook_messages", "hooks", "Reword hook messages and change their structure.",
             _reword_hook_messages, defaults={"share": 0.6, "density": 0.5}),
    Operator("synthesise_hook_correction", "hooks",
             "Add a first reply a hook rejects, the hook's feedback and the corrected reply.",
             sample=_synthesise_hook_correction, touches_checks=True),
)}
DIMENSIONS = ("skill_ids", "skill_content", "tools", "system_prompt", "hooks")


def operator(name: str, *, pool: N.Pool = "train", **settings: Any) -> Operator:
    if name not in OPERATORS:
        raise KeyError(f"unknown HSA operator {name!r}; known: {', '.join(OPERATORS)}")
    return OPERATORS[name].configured(pool=pool, **settings)


def apply_chain(ops: Iterable[Operator], state: HarnessState, sample: Sample, rng: random.Random
                ) -> tuple[HarnessState, Sample, RenameMap, list[str]]:
    """Apply operators in order; returns the final state, sample, the composed map and the names of the
    operators that changed something."""
    m = IDENTITY
    applied: list[str] = []
    for op in ops:
        new_state, new_sample, step = op(state, sample, rng)
        if new_state is not state or new_sample is not sample:
            applied.append(op.name)
        state, sample, m = new_state, new_sample, m.then(step)
    return state, sample, m, applied


def reply_of(target: Sequence[Step]) -> str:
    last = target[-1]
    assert isinstance(last, Reply)
    return last.text
