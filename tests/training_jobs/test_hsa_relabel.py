"""HSA label preservation over random operator chains (hypothesis): the inverse map gives back exactly the
original target; every augmented tool call validates against the augmented schema and reaches the same binding
with the same implementation arguments (and the same binding result); chains are deterministic by seed."""

from __future__ import annotations

import copy
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.bound_calls import implementation_arguments
from streams.engine.hooks import validate_arguments
from streams.reference_policy import call_tool
from training_jobs.hsa.operators import (
    OPERATORS,
    apply_chain,
    harness_state,
    operator,
    relabel_target,
    validate_state,
)
from training_jobs.hsa.relabel import (
    TO_STRING,
    RenameMap,
    relabel_arguments,
    undeclared_arguments,
)
from training_jobs.hsa.samples import (
    LoadSkill,
    ToolCall,
    canonical_target,
    scenario_samples,
    tiny_model_samples,
)

NAMES = list(OPERATORS)


@pytest.fixture(scope="module")
def samples():
    scen = scenario_samples()
    by_intent = {}
    for s in scen:  # a few of every intent under every demo manifest, plus the tiny harness
        by_intent.setdefault((s.meta["intent"], s.meta["manifest"]), []).append(s)
    picked = [s for group in by_intent.values() for s in group[:2]]
    return tiny_model_samples(30, seed=5) + picked


def _args_json(target):
    return [json.dumps(s.arguments) for s in target if isinstance(s, ToolCall)]


def _check_chain(sample, chain_names, seed, pool="train"):
    chain = [operator(n, pool=pool) for n in chain_names]
    base = harness_state(sample.manifest)
    frozen = json.dumps(base)
    state, aug, m, applied = apply_chain(chain, base, sample, random.Random(seed))
    assert json.dumps(base) == frozen, "an operator mutated its input harness state"
    manifest = validate_state(state)  # parse_manifest accepts every augmented harness

    # inverse map: exactly the original target (values, types and argument key order)
    back = canonical_target(relabel_target(aug.target, m.inverse()))
    assert back == canonical_target(sample.target)
    assert _args_json(back) == _args_json(canonical_target(sample.target))

    for new, old in zip(canonical_target(aug.target), canonical_target(sample.target), strict=True):
        if isinstance(new, LoadSkill):
            assert manifest.skill(new.skill_id) is not None
            assert manifest.skill(new.skill_id).kind == sample.manifest.skill(old.skill_id).kind
        elif isinstance(new, ToolCall):
            tool, orig = manifest.tool(new.name), sample.manifest.tool(old.name)
            assert tool is not None and tool.binding == orig.binding
            assert validate_arguments(tool, dict(new.arguments)) == []
            # every argument where the augmented schema declares it (additionalProperties allowing strays or not)
            assert undeclared_arguments(tool.parameters, new.arguments) == []
            assert implementation_arguments(tool, new.arguments) == implementation_arguments(orig, old.arguments)
            room = dict(sample.room)
            assert call_tool(manifest, copy.deepcopy(room), new.name, dict(new.arguments)) == call_tool(
                sample.manifest, copy.deepcopy(room), old.name, dict(old.arguments))
    return state, aug, applied


chains = st.lists(st.sampled_from(NAMES), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0, max_value=10_000), chain=chains, seed=st.integers(0, 2**32 - 1))
def test_random_chains_preserve_the_task(samples, index, chain, seed):
    _check_chain(samples[index % len(samples)], chain, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0, max_value=10_000), seed=st.integers(0, 2**32 - 1))
def test_all_operators_in_catalogue_order_with_heldout_names(samples, index, seed):
    _check_chain(samples[index % len(samples)], NAMES, seed, pool="heldout")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0, max_value=10_000), chain=chains, seed=st.integers(0, 2**32 - 1))
def test_chains_are_deterministic_by_seed(samples, index, chain, seed):
    sample = samples[index % len(samples)]
    a = _check_chain(sample, chain, seed)
    b = _check_chain(sample, chain, seed)
    assert json.dumps(a[0]) == json.dumps(b[0])
    assert a[1].target == b[1].target and a[2] == b[2]


def test_applying_everything_twice_still_round_trips(samples):
    for i, sample in enumerate(samples[::4]):
        _check_chain(sample, NAMES + NAMES, seed=i)


# --- the map itself ------------------------------------------------------------------------------------------


def test_compose_and_invert_renames_wraps_and_type_switches():
    rename = RenameMap(tools={"lookup": "fetch"}, paths={"lookup": {"link_id": "item_id"}})
    wrap = RenameMap(paths={"fetch": {"item_id": "args.item_id", "note": "args.note"}})
    switch = RenameMap(conversions={"fetch": {"args.item_id": TO_STRING}})
    m = rename.then(wrap).then(switch)
    assert m.tool("lookup") == "fetch"
    new = relabel_arguments(m, "lookup", {"link_id": 101, "note": "x"})
    assert new == {"args": {"item_id": "101", "note": "x"}}
    assert relabel_arguments(m.inverse(), "fetch", new) == {"link_id": 101, "note": "x"}


def test_compose_ignores_names_the_first_map_created():
    first = RenameMap(tools={"a": "b"})
    second = RenameMap(tools={"b": "c"}, paths={"b": {"x": "y"}})
    m = first.then(second)
    assert m.tools == {"a": "c"}
    assert m.paths == {"a": {"x": "y"}}
    assert m.inverse().tools == {"c": "a"}
