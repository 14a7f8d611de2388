"""HSA for any domain (issue 13, section 5): a harness from outside the live room (the order desk: 16 fixture-bound
tools, a written policy) is augmented from its own words, with distractors and decoys of its own domain, builds a
training split although its policy says "obtain", reports per-operator counts, keeps every gold turn legal under
numeric moves, and relabels round trip on arbitrary foreign manifests (hypothesis)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_editor.schemas import parse_manifest
from streams.engine.hooks import validate_arguments
from streams.tool_bindings import call_bound_tool
from training_jobs.hsa import names as N
from training_jobs.hsa import vocabulary as V
from training_jobs.hsa.dataset import OperatorSpec, Recipe, build, write_dataset
from training_jobs.hsa.leaks import heldout_leaks, terms_in
from training_jobs.hsa.operators import (
    OPERATORS,
    apply_chain,
    harness_state,
    operator,
    relabel_target,
    validate_state,
)
from training_jobs.hsa.relabel import RenameMap, relabel_arguments, undeclared_arguments
from training_jobs.hsa.samples import (
    LoadSkill,
    Reply,
    Sample,
    ToolCall,
    canonical_target,
    load_demo_manifest,
)
from training_jobs.hsa.written import (
    WrittenTurnError,
    load_turns,
    written_sample,
    written_samples,
)

MUTATING = {"cancel", "create", "update", "start", "request", "issue", "escalate", "delete", "send", "apply", "book",
            "close"}
TURNS = Path(__file__).parent / "data" / "order_desk_turns.yaml"
LIVE_TOOL_NAMES = {n for pool in N.POOLS for names in N.TOOL_NAMES[pool].values() for n in names}
LIVE_SKILL_IDS = {n for pool in N.POOLS for table in (N.SKILL_SYNONYMS, N.SKILL_FOREIGN)
                  for names in table[pool].values() for n in names}


@pytest.fixture(scope="module")
def desk():
    return load_demo_manifest("order_desk")


@pytest.fixture(scope="module")
def desk_samples(desk):
    return written_samples(desk, load_turns(TURNS))


def _op(name, state, seed, pool="train", **s):
    new, m = operator(name, pool=pool, **s).edit_harness(state, random.Random(seed))
    validate_state(new)
    return new, m


# --- 1. names from the harness's own words ------------------------------------------------------------------


def test_foreign_tools_are_renamed_from_their_own_words(desk):
    state = harness_state(desk)
    assert not V.is_live_commerce(state)
    verbs = {v for p in N.POOLS for v in N.READ_VERBS[p]} | {k for k in N.ACTION_VERBS["train"]}
    seen = 0
    for seed in range(30):
        _, m = _op("rename_tools", state, seed, share=1.0)
        for old, new in m.tools.items():
            seen += 1
            assert new not in LIVE_TOOL_NAMES, (old, new)
            own = set(V.words(old)) - verbs - {"to"}
            assert own & set(V.words(new)), f"{old} -> {new} keeps none of its own words"
            if V.words(old)[0] in MUTATING:  # an action keeps its meaning
                assert V.words(new)[0] not in N.READ_VERBS["train"], (old, new)
            assert not N.is_heldout_name(new)
    assert seen > 100


def test_a_foreign_tool_on_a_built_in_binding_is_not_named_after_the_binding():
    """Today's trial bound get_order_details to campaign.state and HSA called it current_promotions."""
    data = {"name": "x", "skills": [{"id": "orders", "kind": "reply", "description": "Orders.", "body": "Help."}],
            "tools": [{"name": "get_order_details", "description": "Details of one order.", "binding": "campaign.state",
                       "parameters": {"type": "object", "properties": {}}, "argument_map": {}}],
            "prompt": {"blocks": [{"id": "p", "role": "persona", "title": "P"}]}, "constraints": {}}
    state = harness_state(parse_manifest(data))
    names = set()
    for seed in range(20):
        _, m = _op("rename_tools", state, seed, share=1.0)
        names.update(m.tools.values())
    assert names and not names & LIVE_TOOL_NAMES
    assert all("order" in V.words(n) for n in names), names


def test_foreign_parameters_and_skills_are_renamed_from_their_own_words(desk):
    state = harness_state(desk)
    renamed = {}
    for seed in range(20):
        new, m = _op("rename_tool_params", state, seed, share=1.0)
        for tool, moves in m.paths.items():
            for old, path in moves.items():
                renamed[old.rsplit(".", 1)[-1]] = path.rsplit(".", 1)[-1]
        _, sm = _op("rename_skills", state, seed, share=1.0)
        for old, sid in sm.skills.items():
            assert sid not in LIVE_SKILL_IDS
            assert old in sid or N.OPAQUE_SKILL_RE["train"].match(sid), (old, sid)  # never "delivery_help"
    assert "order_id" in renamed and "order" in V.words(renamed["order_id"])
    assert not any(N.is_heldout_name(n) for n in renamed.values())


def test_heldout_pool_names_are_generated_apart_and_caught(desk):
    state = harness_state(desk)
    for seed in range(10):
        new, m = _op("rename_tools", state, seed, pool="heldout", share=1.0)
        assert all(N.is_heldout_name(n) for n in m.tools.values())
        assert all(terms_in(json.dumps(n)) for n in m.tools.values())


# --- 2. distractors and decoys of the harness's domain -------------------------------------------------------


def test_distractors_and_decoys_fit_the_domain(desk):
    state = harness_state(desk)
    nouns = V.domain_nouns(state)
    assert "order" in nouns
    canned_skills = {d[0] for p in N.POOLS for d in N.DISTRACTOR_SKILLS[p]}
    canned_tools = {d[0] for p in N.POOLS for d in N.DECOY_TOOLS[p]}
    for seed in range(10):
        new, _ = _op("add_distractor_skills", state, seed, max_added=2)
        added = [s for s in new["skills"] if s["id"] not in {x["id"] for x in state["skills"]}]
        assert added and not {s["id"] for s in added} & canned_skills
        assert all(any(n in s["id"] for n in nouns) for s in added)
        new, _ = _op("add_decoy_tools", state, seed, max_added=2)
        decoys = [t for t in new["tools"] if t["name"] not in {x["name"] for x in state["tools"]}]
        assert decoys and not {t["name"] for t in decoys} & canned_tools
        manifest = validate_state(new)
        for d in decoys:
            assert d["binding"] == N.DECOY_FIXTURE and any(n in d["name"] for n in nouns)
            assert call_bound_tool(manifest.tool(d["name"]), {}, {}) == {"found": False, "items": []}


def test_the_live_room_keeps_its_own_pools():
    state = harness_state(load_demo_manifest("skincare_v1"))
    assert V.is_live_commerce(state)
    new, _ = _op("add_decoy_tools", state, 1, max_added=2)
    added = {t["name"] for t in new["tools"]} - {t["name"] for t in state["tools"]}
    assert added <= {d[0] for d in N.DECOY_TOOLS["train"]}


# --- 3. the held-out registry holds names and settings, not English words -------------------------------------


def test_registry_has_no_ordinary_words():
    reg = N.heldout_registry()
    assert "obtain" in reg.words and "obtain" not in reg.phrasings and "obtain" not in reg.names
    assert not reg.words & reg.phrasings


def test_leak_check_finds_names_as_names_only():
    assert terms_in("Obtain the customer's consent, then obtain a query.") == set()
    assert terms_in('{"name": "promo_snapshot"}') == {"promo_snapshot"}
    assert terms_in('"arguments": "{\\"query\\": \\"tee\\"}"') == {"query"}  # a plain word in a name position
    assert terms_in("use `payload` here") == {"payload"}
    assert terms_in("see K-0042 and pull_order_record") == {"K-0042", "pull_order_record"}
    assert terms_in("Reply length: 10 to 173 characters") == {"reply_max_chars=173"}


def test_foreign_harness_builds_a_training_split_although_its_policy_says_obtain(desk, desk_samples, tmp_path):
    assert "Obtain the customer" in json.dumps(desk.model_dump(mode="json"))
    result = build(desk_samples, Recipe(seed=3, variants_per_sample=6))
    assert result.rows
    assert heldout_leaks(result.rows, samples=desk_samples) == []
    # the search tool's own "query" parameter is the harness's, not a held-out name
    assert heldout_leaks(result.rows) == ["query"]
    # a held-out name the augmentation would have put there is still caught
    row = dict(result.rows[0])
    row["tools"] = row["tools"].replace('"name": "lookup_order"', '"name": "promo_snapshot"')
    row["messages"] = row["messages"] + [{"role": "assistant", "content": "Intended for: orders"}]
    assert {"promo_snapshot", "Intended for"} <= set(heldout_leaks([row], samples=desk_samples))
    heldout = build(desk_samples, Recipe(seed=3, variants_per_sample=6, names="heldout"))
    assert heldout_leaks(heldout.rows, samples=desk_samples)


# --- 4. per-operator counts ----------------------------------------------------------------------------------


def test_every_build_counts_applied_skipped_dropped_per_operator(desk_samples, tmp_path):
    result = build(desk_samples, Recipe(seed=0, variants_per_sample=8))
    ops = result.stats.to_dict()["operators"]
    assert set(ops) == set(OPERATORS)
    for name, o in ops.items():
        assert {"applied", "skipped", "dropped", "kept"} <= set(o)
        assert o["applied"] + o["skipped"] > 0, f"{name} was never drawn"
    # integer ids that travel as digit strings exist only on built-in bindings: visibly never fires here
    assert ops["switch_id_types"]["applied"] == 0 and ops["switch_id_types"]["skipped"] > 0
    assert ops["rename_tools"]["applied"] > 0 and ops["wrap_tool_arguments"]["applied"] > 0
    out = write_dataset(result, tmp_path / "ds")
    stored = json.loads((out / "stats.json").read_text())["operators"]
    assert stored["switch_id_types"]["skipped"] == ops["switch_id_types"]["skipped"]


# --- 5. numeric moves keep the gold turn legal -------------------------------------------------------------------


def test_numeric_moves_never_make_a_foreign_gold_turn_illegal(desk_samples):
    for pool_size in (4, 0):
        recipe = Recipe(seed=5, variants_per_sample=6, harness_pool_size=pool_size, operators=[
            OperatorSpec(name="move_numeric_constraints", probability=1.0, settings={"share": 1.0}),
            OperatorSpec(name="vary_hook_limits", probability=1.0, settings={"sentence_cap_share": 1.0}),
            OperatorSpec(name="synthesise_hook_correction", probability=0.5)])
        stats = build(desk_samples, recipe).stats
        assert stats.operators["move_numeric_constraints"].applied > 0
        bad = {"max_tool_rounds", "turn_limit", "max_retries", "reply_max_chars", "reply_min_chars", "max_sentences"}
        assert not bad & set(stats.drop_reasons), stats.drop_reasons


def test_needs_bound_the_moves(desk_samples):
    from training_jobs.hsa.prompt_ops import needs_of

    longest = max(desk_samples, key=lambda s: len(s.tool_calls()))
    needs = needs_of(longest, extra_retry=True)
    assert needs.rounds == len(longest.tool_calls()) + 1 and needs.retries == 1
    state = harness_state(longest.manifest)
    for seed in range(40):
        new, _ = operator("move_numeric_constraints", share=1.0).edit_harness(state, random.Random(seed), needs)
        c = new["constraints"]
        assert c["max_tool_rounds"] >= needs.rounds and c["turn_limit"] >= needs.requests
        assert c["reply_max_chars"] >= needs.longest_reply and c["reply_min_chars"] <= needs.shortest_reply


# --- 6. wrapping keeps untyped object arguments inside the wrapper -------------------------------------------------


def _untyped_manifest(binding):
    return parse_manifest({
        "name": "x", "skills": [{"id": "tickets", "kind": "reply", "description": "Tickets.", "body": "Help."}],
        "tools": [{"name": "search_tickets", "description": "Find tickets.", "binding": binding,
                   "parameters": {"type": "object", "properties": {"filters": {"type": "object"},
                                                                   "order_id": {"type": "string"}},
                                  "required": ["filters"]}}],
        "prompt": {"blocks": [{"id": "p", "role": "persona", "title": "P"}]}, "constraints": {}})


def test_wrapping_keeps_untyped_object_arguments_inside_the_wrapper():
    fixture = {"kind": "fixture", "cases": [{"when": {"order_id": "A1"}, "result": {"tickets": ["T-1"]}}],
               "default": {"tickets": []}}
    manifest = _untyped_manifest(fixture)
    args = {"filters": {"status": "open", "tags": {"vip": True}}, "order_id": "A1"}
    state, m = _op("wrap_tool_arguments", harness_state(manifest), 0, share=1.0)
    wrapped = validate_state(state)
    (key,) = wrapped.tools[0].parameters["properties"]
    new = relabel_arguments(m, "search_tickets", args)
    assert new == {key: args}
    assert undeclared_arguments(wrapped.tools[0].parameters, new) == []
    assert validate_arguments(wrapped.tools[0], new) == []
    assert relabel_arguments(m.inverse(), "search_tickets", new) == args
    # the fixture follows the move: the same case answers
    assert call_bound_tool(wrapped.tools[0], {}, new) == call_bound_tool(manifest.tools[0], {}, args) == {
        "tickets": ["T-1"]}
    # the old, broken relabel (leaf paths only) is what the round-trip check now catches
    broken = {key: {"order_id": "A1"}, "filters": {"status": "open", "tags": {"vip": True}}}
    assert undeclared_arguments(wrapped.tools[0].parameters, broken) == ["filters"]
    assert relabel_arguments(RenameMap(paths={"t": {"filters": "x.filters"}}), "t", {"filters": {}}) == {
        "x": {"filters": {}}}  # an empty object argument is kept, not lost


# --- open bindings ------------------------------------------------------------------------------------------------


def test_mcp_tools_keep_their_shape_and_their_server_tool():
    manifest = _untyped_manifest({"kind": "mcp", "server": "tickets"})
    state = harness_state(manifest)
    for name in ("rename_tool_params", "wrap_tool_arguments"):
        new, m = _op(name, state, 0, share=1.0)
        assert new["tools"][0]["parameters"] == state["tools"][0]["parameters"] and not m.paths
    new, m = _op("rename_tools", state, 0, share=1.0)
    assert m.tools and new["tools"][0]["binding"]["tool"] == "search_tickets"


def test_http_templates_follow_renames_unless_the_body_is_the_arguments():
    http = {"kind": "http", "endpoint": "desk", "path": "/orders/{order_id}", "query": {"o": "{order_id}"}}
    state = harness_state(_untyped_manifest(http))
    new, m = _op("wrap_tool_arguments", state, 0, share=1.0)
    key = next(iter(new["tools"][0]["parameters"]["properties"]))
    assert new["tools"][0]["binding"]["path"] == f"/orders/{{{key}.order_id}}"
    assert new["tools"][0]["binding"]["query"] == {"o": f"{{{key}.order_id}}"}
    posted = harness_state(_untyped_manifest({**http, "method": "POST", "body": "arguments"}))
    new, m = _op("wrap_tool_arguments", posted, 0, share=1.0)
    assert not m.paths


# --- written turns -------------------------------------------------------------------------------------------------


def test_written_turns_are_answered_by_the_fixtures_and_checked(desk):
    turns = load_turns(TURNS)
    s = written_sample(desk, turns[0])
    assert [type(x) for x in s.target] == [LoadSkill, ToolCall, ToolCall, Reply]
    assert s.tool_calls()[1].result["tracking_number"] == "PC7781234"
    with pytest.raises(WrittenTurnError, match=r"turns\[2\]\.calls\[0\]\.tool"):
        written_sample(desk, {"comment": "x", "skill": "order_status", "calls": [{"tool": "nope"}], "reply": "Hi."},
                       index=2)
    with pytest.raises(WrittenTurnError, match="will arrive tomorrow"):
        written_sample(desk, {**turns[0], "reply": "Order A1002 will arrive tomorrow."})


# --- 7. the hypothesis round trip on foreign manifests ---------------------------------------------------------------

_ident = st.from_regex(r"[a-z][a-z0-9]{1,7}(_[a-z][a-z0-9]{1,7}){0,2}", fullmatch=True)
_leaf_schema = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "object"},
                                {"type": "array", "items": {"type": "string"}}])
_VALUES = {"string": st.text("abcxyz019 ", min_size=1, max_size=6), "integer": st.integers(-5, 500),
           "boolean": st.booleans(), "object": st.dictionaries(st.sampled_from(["a", "b", "deep"]),
                                                               st.one_of(st.integers(0, 9), st.text("ab", max_size=2),
                                                                         st.just({})), max_size=3),
           "array": st.lists(st.text("xy", min_size=1, max_size=3), max_size=3)}


@st.composite
def foreign_cases(draw):
    """A foreign manifest (arbitrary tool and parameter names, fixture/unbound/mcp bindings, nested and untyped
    object parameters) and a gold turn calling some of its tools with valid arguments."""
    names = draw(st.lists(_ident, min_size=1, max_size=5, unique=True))
    tools, calls = [], []
    for i, name in enumerate(names):
        params = draw(st.lists(_ident, min_size=1, max_size=4, unique=True))
        props, args = {}, {}
        for p in params:
            if draw(st.booleans()) and len(params) > 1:  # a nested object with properties
                inner = draw(st.lists(_ident, min_size=1, max_size=2, unique=True))
                props[p] = {"type": "object", "properties": {q: {"type": "string"} for q in inner}}
                args[p] = {q: draw(_VALUES["string"]) for q in inner}
            else:
                schema = draw(_leaf_schema)
                props[p] = schema
                args[p] = draw(_VALUES[schema["type"]])
        kind = draw(st.sampled_from(["fixture", "fixture", None, "mcp"]))
        if kind == "fixture":
            when = {p: v for p, v in list(args.items())[:1] if not isinstance(v, (dict, list))}
            binding = {"kind": "fixture", "cases": [{"when": when, "result": {"hit": i}}], "default": {"miss": i}}
        elif kind == "mcp":
            binding = {"kind": "mcp", "server": "srv"}
        else:
            binding = None
        tools.append({"name": name, "description": f"Does {name.replace('_', ' ')}.", "binding": binding,
                      "parameters": {"type": "object", "properties": props, "required": list(props)[:1],
                                     "additionalProperties": draw(st.booleans())}})
        if kind is not None and draw(st.booleans()):
            calls.append((name, args))
    data = {"name": "foreign", "skills": [{"id": "help_desk", "kind": "reply", "description": "Answer requests.",
                                           "body": "1. Use the tools.\n2. Answer briefly."}],
            "tools": tools, "prompt": {"blocks": [{"id": "p", "role": "persona", "title": "P", "content": "Agent."}]},
            "constraints": {"reply_min_chars": 1, "max_tool_rounds": 8, "turn_limit": 12}}
    return parse_manifest(data), calls


def _sample(manifest, calls):
    steps = [LoadSkill("c0", "help_desk")]
    for i, (name, args) in enumerate(calls, 1):
        steps.append(ToolCall(f"c{i}", name, args, call_bound_tool(manifest.tool(name), {}, args)))
    steps.append(Reply("Done."))
    return Sample("f", manifest, {}, ({"viewer": "u", "text": "hi"},), tuple(steps), "hypothesis")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=foreign_cases(), chain=st.lists(st.sampled_from(list(OPERATORS)), min_size=1, max_size=10),
       seed=st.integers(0, 2**32 - 1), pool=st.sampled_from(["train", "heldout"]))
def test_relabelling_round_trips_on_foreign_manifests(case, chain, seed, pool):
    manifest, calls = case
    sample = _sample(manifest, calls)
    base = harness_state(manifest)
    frozen = json.dumps(base)
    state, aug, m, _ = apply_chain([operator(n, pool=pool) for n in chain], base, sample, random.Random(seed))
    assert json.dumps(base) == frozen
    new_manifest = validate_state(state)
    assert canonical_target(relabel_target(aug.target, m.inverse())) == canonical_target(sample.target)
    for new, old in zip(canonical_target(aug.target), canonical_target(sample.target), strict=True):
        if isinstance(new, ToolCall):
            tool, orig = new_manifest.tool(new.name), manifest.tool(old.name)
            assert tool is not None
            assert undeclared_arguments(tool.parameters, new.arguments) == []
            assert validate_arguments(tool, copy.deepcopy(dict(new.arguments))) == []
            if orig.binding is not None and orig.binding.kind == "fixture":
                assert call_bound_tool(tool, {}, new.arguments) == call_bound_tool(orig, {}, old.arguments)
            if orig.binding is not None and orig.binding.kind == "mcp":  # the server gets the same call
                assert dict(new.arguments) == dict(old.arguments)
                assert (tool.binding.tool or tool.name) == (orig.binding.tool or orig.name)


# --- the augmented foreign harness runs: the turn engine, its hooks and the fixtures under the new names ----------


def test_relabelled_gold_turns_run_through_the_engine_under_augmented_order_desks(desk_samples):
    """Each written gold turn, relabelled into an augmented order desk (tools, parameters and skills renamed,
    arguments wrapped, decoys and distractors added), played by a scripted model through the one turn engine: the
    fixture bindings answer the renamed calls, the tool-argument hook accepts them, and the regeneration judge
    (same bindings, same arguments, the reply skill, the harness's own hooks) passes every one."""
    from streams.engine.turn import ScriptedBackend
    from training_jobs.hsa.dataset import make_variant
    from training_jobs.hsa.regenerate import Regenerator

    ops = [(operator(n, share=1.0) if "share" in OPERATORS[n].defaults else operator(n), 1.0)
           for n in ("rename_skills", "add_distractor_skills", "rename_tools", "rename_tool_params",
                     "wrap_tool_arguments", "add_decoy_tools", "reorder_tool_properties")]
    verdicts = {}
    for i, sample in enumerate(desk_samples):
        variant = make_variant(harness_state(sample.manifest), ops, random.Random(i))
        assert variant.rename.tools and variant.rename.paths
        reference = sample.with_target(relabel_target(sample.target, variant.rename))
        script = []
        for step in reference.target:
            if isinstance(step, LoadSkill):
                script.append("<tool_call>" + json.dumps({"name": "load_skill", "arguments": {
                    "skill_id": step.skill_id}}) + "</tool_call>")
            elif isinstance(step, ToolCall):
                script.append("<tool_call>" + json.dumps({"name": step.name, "arguments": step.arguments})
                              + "</tool_call>")
            elif isinstance(step, Reply):
                script.append(step.text)
        judged = Regenerator(ScriptedBackend(script)).regenerate(variant.manifest, reference)
        verdicts[sample.id] = judged.reasons
        if judged.passed:
            got = [s for s in judged.target if isinstance(s, ToolCall)]
            assert [s.result for s in got] == [s.result for s in sample.tool_calls()]  # the fixtures answered alike
    # "14 in stock" is backed by the desk's `in_stock` field (streams.engine.rules.facts FIELD_ALIASES)
    assert {k: v for k, v in verdicts.items() if v} == {}
