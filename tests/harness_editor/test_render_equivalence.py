"""The cached renderer (per-manifest plans, pieces joined, tools copied through JSON) against the previous
renderer (tests/harness_editor/render_reference.py, a frozen copy): byte-identical system text and equal tools
for the demo manifests in every layout, with and without a room, and for many HSA variants of them (block
order, titles, duplicate titles, renamed skills and tools, reshaped schemas, moved constraints)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_editor import render as new
from harness_editor.schemas import load_yaml, parse_manifest
from tests.harness_editor import render_reference as old

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
MANIFESTS = ("skincare_v1", "skincare_v2", "skincare_v3", "tiny_room")
ROOM = yaml.safe_load((DEMO / "room.yaml").read_text(encoding="utf-8"))
COMMENTS = [{"viewer": "amy", "text": "how much is the serum #101?"}]


def _data(name: str) -> dict:
    return load_yaml((DEMO / f"{name}.yaml").read_text(encoding="utf-8"))


def _rooms() -> list[dict | None]:
    sale_over = copy.deepcopy(ROOM)
    sale_over["clock_minute"] = 10_000
    bare = {"room_id": "r", "products": [{"link_id": 7, "title": "A & <b>", "price": 1.5, "stock": 0}]}
    return [None, ROOM, sale_over, bare, {}]


def _same(manifest) -> None:
    for room in _rooms():
        a = old.render_prompt(manifest, room=room, comments=COMMENTS)
        b = new.render_prompt(manifest, room=room, comments=COMMENTS)
        assert b.system_text == a.system_text
        assert b.messages == a.messages
        assert json.dumps(b.tools, ensure_ascii=False) == json.dumps(a.tools, ensure_ascii=False)
        assert new.render_system_text(manifest, room) == a.system_text
        if room is not None:
            assert new.render_system_text(manifest, None, room_lines=new.room_lines(room)) == a.system_text


@pytest.mark.parametrize("layout", ["markdown", "xml", "json", "plain"])
@pytest.mark.parametrize("name", MANIFESTS)
def test_demo_manifests_in_every_layout(name, layout):
    d = _data(name)
    d["prompt"]["layout"] = layout
    _same(parse_manifest(d))


@pytest.mark.parametrize("layout", ["markdown", "xml", "json", "plain"])
def test_duplicate_titles_missing_and_repeated_generated_blocks(layout):
    d = _data("skincare_v1")
    d["prompt"]["layout"] = layout
    blocks = d["prompt"]["blocks"]
    for b in blocks:
        b["title"] = "Same"
    room_block = next(b for b in blocks if b["role"] == "room_context")
    blocks.append({**room_block, "id": "room-again", "content": "Second room block & <more>"})
    d["prompt"]["blocks"] = [b for b in blocks if b["role"] not in ("skills_index", "output_format")]
    _same(parse_manifest(d))


def test_tools_are_fresh_copies():
    m = parse_manifest(_data("skincare_v1"))
    a = new.render_tools(m)
    a[0]["function"]["parameters"]["properties"]["link_id"]["type"] = "mutated"
    assert new.render_tools(m)[0]["function"]["parameters"] == m.tools[0].parameters


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(MANIFESTS), seed=st.integers(0, 2**32 - 1),
       ops=st.lists(st.sampled_from(["reorder_prompt_blocks", "change_prompt_layout", "rename_skills",
                                     "rename_tools", "wrap_tool_arguments", "switch_id_types",
                                     "move_numeric_constraints", "add_distractor_skills", "mask_skill_descriptions",
                                     "add_decoy_tools", "reorder_tool_properties"]), min_size=1, max_size=8))
def test_hsa_variants_render_identically(name, seed, ops):
    from training_jobs.hsa.operators import harness_state, operator, validate_state

    state = harness_state(parse_manifest(_data(name)))
    rng = random.Random(seed)
    for op in ops:
        state, _ = operator(op).edit_harness(state, rng)
    _same(validate_state(state))
