"""HSA operators one by one: valid harness out, pure, seeded, does what it says, and the samples/checks they
rely on (gold samples from the reference policy, the constraint re-check, re-rendering under the new harness)."""

from __future__ import annotations

import json
import random

import pytest

from harness_editor.render import render_prompt
from harness_editor.schemas import InteractionConstraints
from streams.engine.turn import HOOK_FEEDBACK_PREFIX, hook_feedback_message
from training_jobs.hsa import names as N
from training_jobs.hsa.operators import (
    DIMENSIONS,
    LEGAL,
    OPERATORS,
    harness_state,
    leaf_paths,
    operator,
    validate_state,
)
from training_jobs.hsa.samples import (
    LoadSkill,
    Reply,
    Retry,
    ToolCall,
    infer_intent,
    load_demo_manifest,
    render_messages,
    scenario_samples,
    target_problems,
    tiny_model_samples,
)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_samples(12, seed=3)


@pytest.fixture(scope="module")
def scen():
    out = scenario_samples(("skincare_v1", "skincare_v3"))
    price = [s for s in out if s.meta["intent"] == "price"][:4]
    other = [s for s in out if s.meta["intent"] in ("shipping", "chit_chat", "stock")][:6]
    return price + other


def _run(name, sample, seed, **settings):
    op = operator(name, **settings)
    base = harness_state(sample.manifest)
    frozen = json.dumps(base)
    state, out, m = op(base, sample, random.Random(seed))
    assert json.dumps(base) == frozen  # pure: the input state is never mutated
    manifest = validate_state(state)
    return state, manifest, out, m


# --- every operator ----------------------------------------------------------------------------------------------


def test_catalogue_covers_all_five_dimensions():
    assert {op.dimension for op in OPERATORS.values()} == set(DIMENSIONS)


@pytest.mark.parametrize("name", list(OPERATORS))
def test_operator_is_valid_seeded_and_changes_something(name, tiny, scen):
    changed = 0
    for i, sample in enumerate(scen[:4] + tiny[:4]):
        state, manifest, out, m = _run(name, sample, seed=i)
        again = _run(name, sample, seed=i)
        assert json.dumps(again[0]) == json.dumps(state) and again[2].target == out.target  # seeded
        changed += json.dumps(state) != json.dumps(harness_state(sample.manifest)) or out.target != sample.target
        assert not target_problems(manifest, out) or OPERATORS[name].touches_checks
    assert changed, f"{name} never changed anything on the demo harnesses"


@pytest.mark.parametrize("name", list(OPERATORS))
def test_augmented_sample_renders_with_the_augmented_harness(name, scen):
    sample = scen[0]
    state, manifest, out, _ = _run(name, sample, seed=7)
    messages, tools = render_messages(manifest, out)
    rendered = render_prompt(manifest, room=dict(sample.room), comments=list(sample.comments))
    assert messages[: len(rendered.messages)] == rendered.messages
    assert tools == rendered.tools
    for msg in messages:
        for call in msg.get("tool_calls") or []:
            assert isinstance(call["function"]["arguments"], str)  # JSON strings, as datasets need


def test_unknown_settings_are_rejected():
    with pytest.raises(ValueError):
        operator("rename_tools", sharre=0.3)
    with pytest.raises(KeyError):
        operator("rename_everything")


# --- skill identifiers -----------------------------------------------------------------------------------------------


def test_rename_skills_relabels_load_skill_and_the_enum(scen):
    for style in ("synonym", "foreign", "opaque"):
        weights = {"synonym": 0, "foreign": 0, "opaque": 0, style: 1}
        sample = scen[0]
        state, manifest, out, m = _run("rename_skills", sample, 1, share=1.0, **weights)
        old = sample.loaded_skills()[0]
        new = out.loaded_skills()[0]
        assert new != old and m.skill(old) == new and manifest.skill(new) is not None
        if style == "opaque":
            assert N.OPAQUE_SKILL_RE["train"].match(new)
        enum = render_prompt(manifest).tools[-1]["function"]["parameters"]["properties"]["skill_id"]["enum"]
        assert new in enum and old not in enum


def test_opaque_ids_and_masked_descriptions_never_meet(scen):
    for seed in range(30):
        state = harness_state(scen[0].manifest)
        for name in ("mask_skill_descriptions", "rename_skills", "mask_skill_descriptions"):
            state, _ = operator(name, share=1.0).edit_harness(state, random.Random(seed))
        masked = {t for p in N.POOLS for t in N.MASKED_DESCRIPTIONS[p]}
        for sk in state["skills"]:
            opaque = any(p.match(sk["id"]) for p in N.OPAQUE_SKILL_RE.values())
            assert not (opaque and sk["description"] in masked), sk


def test_distractor_skills_are_added_and_never_loaded(tiny):
    sample = tiny[0]
    state, manifest, out, _ = _run("add_distractor_skills", sample, 2, max_added=2)
    added = {s.id for s in manifest.skills} - {s.id for s in sample.manifest.skills}
    assert added and added <= {d[0] for d in N.DISTRACTOR_SKILLS["train"]}
    assert not added & set(out.loaded_skills())


# --- skill content ------------------------------------------------------------------------------------------------------


def test_reorder_rules_keeps_every_rule_and_renumbers(scen):
    sample = scen[0]
    state, manifest, _, _ = _run("reorder_skill_rules", sample, 4, share=1.0)
    for old, new in zip(sample.manifest.skills, manifest.skills, strict=True):
        strip = lambda body: sorted(line.split(". ", 1)[-1] for line in body.splitlines())  # noqa: E731
        assert strip(old.body) == strip(new.body)
        numbers = [int(line.split(".")[0]) for line in new.body.splitlines() if line[:1].isdigit()]
        assert numbers == list(range(1, len(numbers) + 1))


def test_mask_skill_rule_drops_one_rule_that_names_no_tool_and_forbids_nothing(scen):
    sample = scen[0]
    for seed in range(5):
        state, manifest, _, _ = _run("mask_skill_rule", sample, seed)
        diffs = [(o, n) for o, n in zip(sample.manifest.skills, manifest.skills, strict=True) if o.body != n.body]
        assert len(diffs) == 1
        old, new = diffs[0]
        dropped = len(old.body.splitlines()) - len(new.body.splitlines())
        assert dropped >= 1
        for tool in sample.manifest.tools:
            assert old.body.count(tool.name) == new.body.count(tool.name)


def test_reword_skill_rules_keeps_code_spans(scen):
    sample = scen[0]
    state, manifest, _, _ = _run("reword_skill_rules", sample, 5, share=1.0, density=1.0)
    for old, new in zip(sample.manifest.skills, manifest.skills, strict=True):
        assert old.body.split("`")[1::2] == new.body.split("`")[1::2]
    assert any(o.body != n.body for o, n in zip(sample.manifest.skills, manifest.skills, strict=True))


# --- tools ------------------------------------------------------------------------------------------------------------------


def test_rename_tools_follows_into_skills_and_prose(scen):
    sample = scen[0]  # a price question: lookup_product
    state, manifest, out, m = _run("rename_tools", sample, 3, share=1.0)
    old = sample.tool_calls()[0].name
    new = out.tool_calls()[0].name
    assert new != old and manifest.tool(old) is None
    text = json.dumps(state)
    assert f"`{old}`" not in text and f'"{old}"' not in text
    assert any(new in s.allowed_tools for s in manifest.skills)
    assert new in dict((m["role"], m["content"]) for m in render_messages(manifest, out)[0] if m["role"] == "tool"
                       and m["name"] == "load_skill").get("tool", "")


def test_wrap_and_rename_params_move_the_argument(tiny):
    sample = next(s for s in tiny if s.tool_calls() and s.tool_calls()[0].arguments)
    state, manifest, out, _ = _run("wrap_tool_arguments", sample, 1, share=1.0)
    call = out.tool_calls()[0]
    (key, inner), = call.arguments.items()
    assert key in N.WRAP_KEYS["train"] and isinstance(inner, dict)
    tool = manifest.tool(call.name)
    assert all(p.startswith(f"{key}.") for p in tool.argument_map.values())
    state, manifest, out, _ = _run("rename_tool_params", sample, 1, share=1.0)
    tool = manifest.tool(out.tool_calls()[0].name)
    assert set(out.tool_calls()[0].arguments) == set(leaf_paths(tool.parameters)) & set(out.tool_calls()[0].arguments)
    assert "link_id" not in json.dumps(tool.parameters)


def test_switch_id_types_sends_link_ids_as_digit_strings(tiny):
    sample = next(s for s in tiny if s.tool_calls() and "link_id" in s.tool_calls()[0].arguments)
    state, manifest, out, m = _run("switch_id_types", sample, 0, share=1.0)
    value = out.tool_calls()[0].arguments["link_id"]
    assert value == str(sample.tool_calls()[0].arguments["link_id"])
    assert m.conversions
    # a plain digit-string schema (no anyOf workaround): the validator accepts it for coercing parameters only
    node = manifest.tool(out.tool_calls()[0].name).parameters["properties"]["link_id"]
    assert {k: v for k, v in node.items() if k != "description"} == {"type": "string", "pattern": "^[0-9]+$"}
    assert "anyOf" not in json.dumps(state)


def test_switch_id_types_leaves_integer_parameters_that_do_not_coerce(tiny, monkeypatch):
    from harness_editor.schemas.bindings import BUILTIN_BINDINGS as BINDINGS, BindingParam
    from training_jobs.hsa import operators as ops

    sample = next(s for s in tiny if s.tool_calls() and "link_id" in s.tool_calls()[0].arguments)
    binding = BINDINGS[sample.manifest.tool(sample.tool_calls()[0].name).binding]
    strict = {**binding.params, "link_id": BindingParam("link_id", "integer", True, coerces_digit_strings=False)}
    monkeypatch.setitem(BINDINGS, binding.id, type(binding)(binding.id, binding.description, strict))
    ops._string_id_schema_allowed.cache_clear()
    try:
        state, manifest, out, m = _run("switch_id_types", sample, 0, share=1.0)
        assert out.tool_calls()[0].arguments == sample.tool_calls()[0].arguments
        assert binding.id not in {t["binding"] for t in state["tools"] if t["name"] in m.conversions}
    finally:
        ops._string_id_schema_allowed.cache_clear()


def test_optional_params_and_decoys_are_never_used_by_the_gold_call(scen):
    sample = scen[0]
    state, manifest, out, _ = _run("add_optional_params", sample, 2, share=1.0, max_added=2)
    added = {n for n, _ in N.OPTIONAL_PARAMS["train"]}
    assert any(added & set(t.parameters["properties"]) for t in manifest.tools)
    assert not added & set(out.tool_calls()[0].arguments)
    for t in manifest.tools:
        assert not added & set(t.parameters.get("required", []))
    state, manifest, out, _ = _run("add_decoy_tools", sample, 2, max_added=2)
    decoys = {t.name for t in manifest.tools} - {t.name for t in sample.manifest.tools}
    assert decoys and all(manifest.tool(d).binding == "campaign.state" for d in decoys)
    assert not decoys & {c.name for c in out.tool_calls()}


# --- system prompt ---------------------------------------------------------------------------------------------------------


def test_layout_and_headings_change_in_the_rendered_prompt(scen):
    sample = scen[0]
    seen = set()
    for seed in range(12):
        state, manifest, out, _ = _run("change_prompt_layout", sample, seed, layout_share=1.0, title_share=1.0)
        seen.add(manifest.prompt.layout)
        system = render_messages(manifest, out)[0][0]["content"]
        for block in manifest.prompt.blocks:
            assert block.title in system or block.title.upper() in system or json.dumps(block.title)[1:-1] in system
    assert seen == set(N.LAYOUTS) - {sample.manifest.prompt.layout}


def test_numeric_constraints_stay_in_their_legal_ranges(scen, tiny):
    for seed in range(40):
        for sample in (scen[0], tiny[0]):
            state, manifest, out, _ = _run("move_numeric_constraints", sample, seed, share=1.0)
            c = manifest.constraints
            for name, (lo, hi) in LEGAL.items():
                assert lo <= getattr(c, name) <= hi
            assert c.reply_max_chars not in N.HELDOUT_REPLY_MAX_CHARS
            assert c.reply_min_chars <= c.reply_max_chars
    assert LEGAL["reply_max_chars"] == (1, 4000) and InteractionConstraints.model_fields["turn_limit"]


def test_constraint_recheck_drops_a_reply_that_no_longer_fits(tiny):
    sample = tiny[0]
    state = harness_state(sample.manifest)
    short = {**state, "constraints": {**state["constraints"], "reply_max_chars": len(sample.reply) - 1}}
    assert any("more than" in p for p in target_problems(validate_state(short), sample))
    rounds = {**state, "constraints": {**state["constraints"], "max_tool_rounds": 1}}
    if len(sample.target) > 2:
        assert any("max_tool_rounds" in p for p in target_problems(validate_state(rounds), sample))


# --- hooks -------------------------------------------------------------------------------------------------------------------


def test_hook_limits_and_messages_vary_within_legal_ranges(scen):
    sample = scen[0]
    state, manifest, _, _ = _run("vary_hook_limits", sample, 3)
    retry = next(h for h in manifest.hooks if h.kind == "retry_control")
    assert 0 <= retry.max_retries <= 5
    state, manifest, _, _ = _run("reword_hook_messages", sample, 3, share=1.0, density=1.0)
    old = [h.message for h in sample.manifest.hooks]
    assert [h.message for h in manifest.hooks] != old


def test_hook_correction_trajectory_matches_the_engine(tiny, scen):
    made = 0
    for i, sample in enumerate(tiny + scen):
        state, manifest, out, _ = _run("synthesise_hook_correction", sample, i)
        retries = [s for s in out.target if isinstance(s, Retry)]
        if not retries:
            continue
        made += 1
        assert isinstance(out.target[-1], Reply) and out.target[-1] == sample.target[-1]
        assert target_problems(manifest, out) == []
        messages, _ = render_messages(manifest, out)
        at = next(j for j, msg in enumerate(messages) if msg["role"] == "assistant" and msg["content"] == retries[0].reply)
        feedback = messages[at + 1]
        assert feedback["role"] == "user" and feedback["content"].startswith(HOOK_FEEDBACK_PREFIX)
        hook_messages = {h.message for h in manifest.hooks} | {"Reply in"}
        assert any(h in feedback["content"] for h in hook_messages)
        assert messages[-1] == {"role": "assistant", "content": sample.reply}
        assert feedback == hook_feedback_message([feedback["content"][len(HOOK_FEEDBACK_PREFIX):]])
    assert made >= 5


def test_reworded_hook_messages_reach_the_correction_feedback(tiny):
    sample = tiny[0]
    state = harness_state(sample.manifest)
    state, _ = operator("reword_hook_messages", share=1.0, density=1.0).edit_harness(state, random.Random(1))
    op = operator("synthesise_hook_correction")
    for seed in range(10):
        _, out, _ = op(state, sample, random.Random(seed))
        if any(isinstance(s, Retry) for s in out.target):
            break
    manifest = validate_state(state)
    messages, _ = render_messages(manifest, out)
    feedback = next(m for m in messages if m["role"] == "user" and m["content"].startswith(HOOK_FEEDBACK_PREFIX))
    assert any(h.message in feedback["content"] for h in manifest.hooks)


# --- samples --------------------------------------------------------------------------------------------------------------------


def test_samples_render_back_to_the_reference_policy_messages():
    from training_jobs.tiny_model.gold import generate

    gold = generate(15, seed=3)
    for traj, sample in zip(gold, tiny_model_samples(15, seed=3), strict=True):
        messages, tools = render_messages(sample.manifest, sample)
        assert messages == traj.messages and tools == traj.tools


def test_scenario_samples_cover_intents_and_pass_the_full_hooks():
    samples = scenario_samples(("skincare_v2",))
    assert {s.meta["intent"] for s in samples} >= {"price", "stock", "shipping", "chit_chat", "compliance"}
    for s in samples[::10]:
        assert target_problems(s.manifest, s, full=True) == []
        assert isinstance(s.target[0], LoadSkill) and isinstance(s.target[-1], Reply)
        assert all(isinstance(t, ToolCall) for t in s.target[2:-1])


def test_infer_intent():
    assert infer_intent("does the serum cure acne?", "compliance_trap") == "compliance"
    assert infer_intent("how many serums are left??", "price_asker") == "stock"
    assert infer_intent("what's the price on the serum today?", "price_asker") == "price"
    assert infer_intent("when will it ship to Alaska", "after_sales") == "shipping"
    assert infer_intent("love the show", "chit_chat") == "chit_chat"
    assert infer_intent("hmm", "skeptic") is None


def test_demo_manifests_load():
    assert load_demo_manifest("skincare_v3").tool("get_product_details") is not None


def test_memoised_before_reply_verdicts_equal_the_engine_hooks(tiny, scen):
    """samples.before_reply_verdicts (language/tone memoised) is exactly hooks.run_before_reply, on gold replies
    and on the failing first replies the correction operator writes, under augmented harnesses."""
    from streams.engine import hooks as H
    from training_jobs.hsa.samples import before_reply_verdicts

    checked = 0
    for i, sample in enumerate(scen + tiny):
        for seed in range(3):
            state = harness_state(sample.manifest)
            rng = random.Random(seed * 100 + i)
            for name in ("reword_hook_messages", "vary_hook_limits", "move_numeric_constraints"):
                state, _ = operator(name).edit_harness(state, rng)
            manifest = validate_state(state)
            out = operator("synthesise_hook_correction").edit_sample(state, sample, rng, m=__import__(
                "training_jobs.hsa.relabel", fromlist=["IDENTITY"]).IDENTITY)
            results = [s.result for s in out.tool_calls()]
            for reply in [s.reply for s in out.target if isinstance(s, Retry)] + [sample.reply]:
                for _ in range(2):  # the second call is served from the memo
                    a = before_reply_verdicts(manifest, H.ReplyState(reply, out.loaded_skills(), results))
                    b = H.run_before_reply(manifest, H.ReplyState(reply, out.loaded_skills(), results))
                    assert a == b
                    checked += 1
    assert checked > 50
