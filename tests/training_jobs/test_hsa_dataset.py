"""The HSA dataset builder: deterministic rows in TRL's conversational format, statistics per operator, the
fixed-harness baseline, held-out leakage guard, drops on the constraint re-check, progress/cancel, writing."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness_editor.render import render_prompt
from streams.scenarios import demo_scenario_paths
from training_jobs.hsa import names as N
from training_jobs.hsa.dataset import (
    BuildCancelled,
    OperatorSpec,
    Recipe,
    build,
    build_fixed_harness,
    heldout_leaks,
    make_variant,
    prompt_messages,
    write_dataset,
)
from training_jobs.hsa.operators import OPERATORS, harness_state
from training_jobs.hsa.samples import DEMO_DIR, render_messages, scenario_samples, target_problems, tiny_model_samples


@pytest.fixture(scope="module")
def samples():
    scen = scenario_samples()
    return tiny_model_samples(60, seed=1) + scen[::6]


@pytest.fixture(scope="module")
def built(samples):
    return build(samples, Recipe(seed=3, variants_per_sample=3, harness_pool_size=24))


def test_rows_are_trl_conversational(built):
    assert built.rows
    for row in built.rows[:200]:
        assert set(row) == {"messages", "tools", "sample_id", "variant", "operators", "harness_hash", "source"}
        tools = json.loads(row["tools"])
        assert tools[-1]["function"]["name"] == "load_skill"
        roles = [m["role"] for m in row["messages"]]
        assert roles[0] == "system" and roles[1] == "user" and roles[-1] == "assistant"
        names = {t["function"]["name"] for t in tools}
        for m in row["messages"]:
            for call in m.get("tool_calls") or []:
                assert isinstance(call["function"]["arguments"], str)
                json.loads(call["function"]["arguments"])
                assert call["function"]["name"] in names


def test_build_is_deterministic_and_seeded(samples, built):
    again = build(samples, Recipe(seed=3, variants_per_sample=3, harness_pool_size=24))
    assert json.dumps(again.rows) == json.dumps(built.rows)
    assert again.stats.to_dict() | {"seconds": 0} == built.stats.to_dict() | {"seconds": 0}
    other = build(samples[:20], Recipe(seed=4, variants_per_sample=3, harness_pool_size=24))
    assert json.dumps(other.rows) != json.dumps(built.rows[: len(other.rows)])


def test_fresh_variant_per_row_is_deterministic_too(samples):
    recipe = Recipe(seed=9, variants_per_sample=2, harness_pool_size=0)
    a, b = build(samples[:15], recipe), build(samples[:15], recipe)
    assert json.dumps(a.rows) == json.dumps(b.rows)
    assert a.stats.harness_variants == 30


def test_statistics_per_operator(built):
    stats = built.stats.to_dict()
    assert set(stats["operators"]) == set(OPERATORS)
    for name, s in stats["operators"].items():
        assert s["applied"] > 0, name
        assert s["mean_prompt_tokens"] > 0, name
        if not OPERATORS[name].touches_checks:
            assert s["dropped"] == 0
    assert stats["rows"] + stats["dropped"] == stats["samples"] * 3
    assert stats["mean_prompt_tokens"] > 0


def test_prompt_is_exactly_render_prompt_under_each_variant(samples):
    """The builder's prompt (renderer parts + one tool list per variant) equals render_prompt."""
    ops = [(op, p) for op, p in Recipe().configured() if op.harness is not None]
    for i, sample in enumerate(samples[::5]):
        variant = make_variant(harness_state(sample.manifest), ops, random.Random(i))
        rendered = render_prompt(variant.manifest, room=dict(sample.room), comments=list(sample.comments))
        assert prompt_messages(variant.manifest, sample) == rendered.messages
        assert json.loads(variant.tools_json) == rendered.tools
        assert variant.tools_json == json.dumps(rendered.tools, ensure_ascii=False)


def test_constraint_moves_never_make_a_gold_turn_illegal(samples):
    """Numeric moves stay within what the gold turns need (issue 13): with every constraint moved on every
    variant, shared or fresh, the re-check drops nothing, and the moves did happen."""
    for pool_size in (16, 0):
        recipe = Recipe(seed=1, variants_per_sample=4, harness_pool_size=pool_size,
                        operators=[OperatorSpec(name="move_numeric_constraints", probability=1.0,
                                                settings={"share": 1.0}),
                                   OperatorSpec(name="vary_hook_limits", probability=1.0,
                                                settings={"sentence_cap_share": 1.0})])
        stats = build(samples, recipe).stats
        assert stats.operators["move_numeric_constraints"].applied > 0
        assert stats.dropped == 0 and stats.drop_reasons == {}
        assert stats.rows == len(samples) * 4


def test_kept_rows_satisfy_their_harness(samples):
    """Every kept row, read back from its messages, fits the harness it was rendered under: prompt, tools,
    tool rounds, model requests, retries and the final reply's format."""
    from streams.engine import hooks as H

    result = build(samples, Recipe(seed=2, variants_per_sample=3, harness_pool_size=0))
    by_id = {s.id: s for s in samples}
    assert result.rows
    for row in result.rows:
        manifest = result.harnesses[row["harness_hash"]]
        sample = by_id[row["sample_id"]]
        rendered = render_prompt(manifest, room=dict(sample.room), comments=list(sample.comments))
        assert row["messages"][:2] == rendered.messages and json.loads(row["tools"]) == rendered.tools
        turn = row["messages"][2:]
        rounds = sum(1 for m in turn if m.get("tool_calls"))
        retries = sum(1 for m in turn if m["role"] == "user")
        c = manifest.constraints
        assert rounds <= c.max_tool_rounds and rounds + retries + 1 <= c.turn_limit
        assert retries <= H.retry_policy(manifest)[0]
        reply = turn[-1]["content"]
        caps = [h.max_sentences for h in manifest.hooks if h.enabled and h.kind == "reply_format"]
        assert H.format_problems(reply, c, speakable=c.speakable, max_sentences=min(
            (x for x in caps if x is not None), default=None)) == []


def test_fixed_harness_rows_are_the_gold_turns(samples):
    result = build_fixed_harness(samples)
    assert result.stats.rows == len(samples) and result.stats.kind == "fixed_harness"
    for row, sample in zip(result.rows, samples, strict=True):
        messages, tools = render_messages(sample.manifest, sample)
        assert row["messages"] == messages and json.loads(row["tools"]) == tools
        assert row["operators"] == []
        assert target_problems(sample.manifest, sample, full=True) == []


def test_no_heldout_name_appears_in_training_rows(samples, built):
    assert heldout_leaks(built.rows) == []
    everything = Recipe(seed=5, variants_per_sample=4, harness_pool_size=0,
                        operators=[OperatorSpec(name=n, probability=1.0) for n in OPERATORS])
    assert heldout_leaks(build(samples, everything).rows) == []
    # the guard can see a leak: the held-out pool's rows are full of reserved names
    heldout = build(samples[:40], everything.model_copy(update={"names": "heldout"}))
    assert heldout_leaks(heldout.rows)


def test_heldout_registry_is_absent_from_the_base_data():
    """Held-out names must not already be in the demo harnesses, rooms or scenarios (or the guard would be
    testing nothing)."""
    reg = N.heldout_registry()
    assert reg.names and reg.phrasings
    texts = [p.read_text(encoding="utf-8") for p in sorted(DEMO_DIR.glob("*.yaml"))]
    texts += [p.read_text(encoding="utf-8") for p in demo_scenario_paths()]
    rows = [{"messages": [{"role": "x", "content": t}], "tools": "[]"} for t in texts]
    assert heldout_leaks(rows) == []


def test_progress_and_cancel(samples):
    seen = []
    recipe = Recipe(variants_per_sample=2, harness_pool_size=8, progress_every=10)
    build(samples[:30], recipe, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (60, 60) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) >= 3

    with pytest.raises(BuildCancelled) as info:
        build(samples[:30], recipe, cancel=cancel)
    assert info.value.done == 30 and info.value.total == 60


def test_recipe_validation():
    with pytest.raises(ValidationError):
        Recipe(operators=[OperatorSpec(name="nope")])
    with pytest.raises(ValidationError):
        Recipe(operators=[OperatorSpec(name="rename_tools", settings={"shar": 1})])
    with pytest.raises(ValidationError):
        Recipe(operators=[OperatorSpec(name="rename_tools"), OperatorSpec(name="rename_tools")])
    with pytest.raises(ValidationError):
        Recipe(variants_per_sample=0)
    assert [o.name for o in Recipe().operators] == list(OPERATORS)
    assert Recipe.model_validate_json(Recipe(seed=4).model_dump_json()) == Recipe(seed=4)


def test_write_dataset_with_recipe_beside_it(tmp_path: Path, samples):
    from datasets import load_from_disk

    result = build(samples[:10], Recipe(seed=1, variants_per_sample=2, harness_pool_size=8))
    out = write_dataset(result, tmp_path / "hsa")
    ds = load_from_disk(str(out / "dataset"))
    assert len(ds) == len(result.rows)
    assert Recipe.model_validate_json((out / "recipe.json").read_text()) == result.recipe
    assert json.loads((out / "stats.json").read_text())["rows"] == len(result.rows)
    row = ds[0]
    assert json.loads(row["tools"]) == json.loads(result.rows[0]["tools"])
    call = next(m for m in row["messages"] if m.get("tool_calls"))
    assert isinstance(call["tool_calls"][0]["function"]["arguments"], str)
    fixed = write_dataset(build_fixed_harness(samples[:10]), tmp_path / "fixed")
    assert len(load_from_disk(str(fixed / "dataset"))) == 10
    assert json.loads((fixed / "recipe.json").read_text()) == {"kind": "fixed_harness"}
    from harness_editor.schemas import manifest_from_json

    lines = (out / "harnesses.jsonl").read_text().splitlines()
    stored = {json.loads(x)["harness_hash"]: json.loads(x)["manifest"] for x in lines}
    assert set(stored) == {r["harness_hash"] for r in result.rows}
    for digest, data in stored.items():
        from harness_editor.schemas import content_hash

        assert content_hash(manifest_from_json(json.dumps(data))) == digest


def test_build_to_disk_streams_the_same_dataset(tmp_path: Path, samples):
    """The streaming path (rows written as they are made) stores exactly what build + write_dataset stores."""
    from datasets import load_from_disk

    from training_jobs.hsa.dataset import build_to_disk, row_features

    recipe = Recipe(seed=5, variants_per_sample=2, harness_pool_size=8)
    in_memory = build(samples[:20], recipe)
    write_dataset(in_memory, tmp_path / "mem")
    streamed = build_to_disk(samples[:20], recipe, tmp_path / "disk", progress_every=7)
    assert streamed.rows == [] and streamed.path == tmp_path / "disk"
    a, b = load_from_disk(str(tmp_path / "mem" / "dataset")), load_from_disk(str(tmp_path / "disk" / "dataset"))
    assert a.features == b.features == row_features()
    assert a.to_list() == b.to_list()
    assert len(b) == in_memory.stats.rows == streamed.stats.rows
    mem_stats = json.loads((tmp_path / "mem" / "stats.json").read_text())
    disk_stats = json.loads((tmp_path / "disk" / "stats.json").read_text())
    assert {**mem_stats, "seconds": 0} == {**disk_stats, "seconds": 0}
    for name in ("recipe.json", "harnesses.jsonl"):
        assert (tmp_path / "mem" / name).read_text() == (tmp_path / "disk" / name).read_text()
    fixed = build_to_disk(samples[:20], None, tmp_path / "fixed")
    write_dataset(build_fixed_harness(samples[:20]), tmp_path / "fixed_mem")
    assert load_from_disk(str(tmp_path / "fixed" / "dataset")).to_list() == load_from_disk(
        str(tmp_path / "fixed_mem" / "dataset")).to_list()
    assert len(load_from_disk(str(tmp_path / "fixed" / "dataset"))) == 20 == fixed.stats.rows


def test_a_cancelled_streamed_build_leaves_no_dataset(tmp_path: Path, samples):
    from training_jobs.hsa.dataset import build_to_disk

    with pytest.raises(BuildCancelled):
        build_to_disk(samples[:20], Recipe(seed=1, variants_per_sample=2, progress_every=5), tmp_path / "c",
                      cancel=lambda: True)
    assert not (tmp_path / "c" / "dataset").exists()
    assert not any(p.name.startswith(".") for p in (tmp_path / "c").iterdir())


def test_prompt_uses_the_harness_speaker_label() -> None:
    """A comment without a name reads ``[customer] ...`` on the order desk, in the builder as in render_prompt."""
    import dataclasses

    from training_jobs.hsa.samples import load_demo_manifest
    from training_jobs.hsa.written import load_turns, written_sample

    desk = load_demo_manifest("order_desk")
    sample = written_sample(desk, load_turns(Path(__file__).parent / "data" / "order_desk_turns.yaml")[0])
    sample = dataclasses.replace(sample, comments=({"text": sample.comments[0]["text"]},))  # no name given
    messages = prompt_messages(desk, sample)
    assert messages[-1]["content"].startswith("[customer] ")
    assert messages == render_prompt(desk, room=dict(sample.room), comments=list(sample.comments)).messages
