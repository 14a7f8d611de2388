"""Eval cases and the committed T1, T2, T3 sets (training_jobs.evals): the schema's errors, JSON-lines round trips
and content hashes, and that every label is what the room, the bindings and the harness say. Plain Python, no
database."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import Counter

import pytest

from harness_editor.render import render_prompt
from harness_editor.schemas import ManifestError, content_hash as manifest_hash, parse_manifest
from streams.bindings import BINDINGS
from streams.engine import hooks as H
from streams.reference_policy import call_tool, tool_arguments
from training_jobs.evals import build_t1 as B1
from training_jobs.evals import t2 as T2
from training_jobs.evals import t3 as T3
from training_jobs.evals.cases import (
    EVAL_SETS,
    EvalCase,
    EvalSetError,
    ForbiddenClaim,
    case_texts,
    case_to_json,
    cases_to_jsonl,
    claim_hits,
    content_hash,
    parse_case,
    read_cases,
    write_cases,
)
from training_jobs.hsa import names as N


@pytest.fixture(scope="module")
def t1():
    return EVAL_SETS["t1-live-stream-qa"].load()


@pytest.fixture(scope="module")
def t2():
    return EVAL_SETS["t2-harness-variant-qa"].load()


@pytest.fixture(scope="module")
def t3():
    return EVAL_SETS["t3-robustness"].load()


@pytest.fixture(scope="module")
def base():
    return B1.demo_manifest("skincare_v1")


def _line(case: EvalCase) -> dict:
    return json.loads(case_to_json(case))


# --- schema and files -----------------------------------------------------------------------------------------


def test_errors_name_the_line_and_the_path(t1):
    good = _line(t1[0])
    no_text = copy.deepcopy(good)
    del no_text["comments"][0]["text"]
    bad_price = copy.deepcopy(good)
    bad_price["room"]["products"][1]["price"] = -3
    bad_binding = copy.deepcopy(good)
    bad_binding["expected_tools"] = [{"binding": "catalog.nope", "arguments": {}}]
    bad_arg = copy.deepcopy(good)
    bad_arg["gold_facts"][0]["arguments"] = {"sku": 1}
    unknown = copy.deepcopy(good)
    unknown["comments"][0]["mood"] = "happy"
    lines = [json.dumps(x) for x in (good, no_text, bad_price, bad_binding, bad_arg, unknown)]
    lines += ["{not json", "", json.dumps({**good, "kind": "t9"}), json.dumps(good)]
    with pytest.raises(EvalSetError) as exc:
        read_cases("\n".join(lines))
    got = [str(e) for e in exc.value.errors]
    assert got[0] == "line 2: comments[0].text: field required"
    assert got[1].startswith("line 3: room.products[1].price: ")
    assert got[2].startswith("line 4: expected_tools[0].binding: unknown binding 'catalog.nope'")
    assert got[3] == ("line 5: gold_facts[0].arguments.sku: binding 'catalog.product_info' has no parameter 'sku'; "
                      "its parameters: link_id")
    assert got[4] == "line 6: comments[0].mood: unknown field 'mood'"
    assert got[5].startswith("line 7: invalid JSON at column 2")
    assert got[6].startswith("line 9: kind: ")  # line 8 is blank and skipped
    assert got[7] == "line 10: id: duplicate case id 't1-0001' (first at line 1)"
    assert len(got) == 8


def test_kinds_need_their_fields(t1):
    with pytest.raises(ManifestError) as exc:
        parse_case({"id": "x", "kind": "t1"})
    assert {e.path for e in exc.value.errors} >= {"comments", "room", "harness"}
    with pytest.raises(ManifestError) as exc:
        parse_case({**_line(t1[0]), "kind": "t2"})
    assert [e.path for e in exc.value.errors] == ["harness_variant"]
    with pytest.raises(ManifestError) as exc:
        parse_case({"id": "t4-1", "kind": "t4", "prompt": "Write a haiku.", "instruction_id_list": ["a", "b"],
                    "kwargs": [{}]})
    assert [e.path for e in exc.value.errors] == ["kwargs"]
    t4 = parse_case({"id": "t4-1", "kind": "t4", "prompt": "Write a haiku.",
                     "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]})
    assert read_cases(case_to_json(t4)) == [t4]
    with pytest.raises(ManifestError, match="regular expression"):
        parse_case({**_line(t1[0]), "forbidden_claims": [{"kind": "efficacy", "pattern": "(cures"}]})
    with pytest.raises(ManifestError, match="a text or a pattern"):
        parse_case({**_line(t1[0]), "forbidden_claims": [{"kind": "efficacy"}]})
    with pytest.raises(ValueError):  # a model built directly checks the same
        EvalCase.model_validate({**_line(t1[0]), "room": {}})


def test_jsonl_round_trip_is_byte_stable_and_the_hash_is_the_files(t1, t2, t3, tmp_path):
    for spec, cases in zip(EVAL_SETS.values(), (t1, t2, t3), strict=True):
        text = spec.path.read_text(encoding="utf-8")
        assert cases_to_jsonl(cases) == text
        assert content_hash(cases) == hashlib.sha256(text.encode()).hexdigest()
        again = tmp_path / spec.file
        assert write_cases(read_cases(spec.path), again) == content_hash(cases)
        assert again.read_bytes() == spec.path.read_bytes()
        assert spec.path.stat().st_size < 2_000_000
    assert content_hash(t1) != content_hash(t1[:-1]) != content_hash(list(reversed(t1)))


def test_fields_at_their_default_are_left_out_so_added_fields_keep_old_hashes(t1):
    line = case_to_json(t1[0])
    assert '"tool_faults"' not in line and '"prompt"' not in line and '"parent"' not in line


def test_rebuilding_gives_the_same_sets():
    t1 = B1.build_t1()
    assert content_hash(t1) == content_hash(EVAL_SETS["t1-live-stream-qa"].load())
    assert content_hash(T2.build_t2(t1, 0)) == content_hash(EVAL_SETS["t2-harness-variant-qa"].load())
    assert content_hash(T3.build_t3(t1, 0)) == content_hash(EVAL_SETS["t3-robustness"].load())
    assert content_hash(T2.build_t2(t1, 1)) != content_hash(EVAL_SETS["t2-harness-variant-qa"].load())


# --- T1 -------------------------------------------------------------------------------------------------------


REQUIRED_TAGS = {"typo": 20, "slang": 20, "multi_question": 15, "named_product": 40, "link_id": 20,
                 "not_sold": 6, "wrong_link": 3, "greeting": 5, "coupon": 10, "shipping": 10, "region": 4,
                 "efficacy": 15, "sold_out": 3, "low_stock": 3, "flash_sale": 5, "spec": 10, "warranty": 3,
                 "order_issue": 3, "off_platform": 3, "multi_comment": 10, "expired_coupon": 2, "no_coupon": 2,
                 "returns": 4, "host_personal": 2, "rude": 2}


def test_t1_has_200_cases_covering_how_viewers_write(t1):
    assert len(t1) >= 200
    assert len({c.id for c in t1}) == len(t1)
    tags = Counter(t for c in t1 for t in c.tags)
    short = {t: (tags[t], n) for t, n in REQUIRED_TAGS.items() if tags[t] < n}
    assert not short, short
    assert all(c.kind == "t1" and c.harness == "skincare_v1" and c.comments and c.intents for c in t1)
    assert len({json.dumps(c.room, sort_keys=True) for c in t1}) >= 8  # many rooms, not one catalog
    kinds = Counter(f.kind for c in t1 for f in c.forbidden_claims)
    assert {"invented_price", "false_stock", "efficacy", "false_promise", "invented_product", "invented_coupon",
            "off_platform"} <= set(kinds)
    texts = [c.comments[-1].text for c in t1]  # a comment without a product asked in two rooms is two cases
    assert len(set(texts)) > 0.75 * len(texts)
    assert len({(t, json.dumps(c.room, sort_keys=True)) for t, c in zip(texts, t1)}) == len(t1)


def test_every_t1_label_is_backed_by_the_room_through_the_real_bindings(t1, base):
    for case in t1:
        assert B1.verify_case(case, base) == [], case.id
        for fact in case.gold_facts:  # independently of verify_case: call the binding, read the field
            result = BINDINGS[fact.binding].func(copy.deepcopy(case.room), **fact.arguments)
            node = result
            for part in fact.field.split("."):
                node = node[int(part)] if isinstance(node, list) else node[part]
            assert node == fact.value, (case.id, fact)
            assert fact.say.lower() in case.gold_reply.lower(), (case.id, fact.say)
        if "named_product" in case.tags and "typo" not in case.tags and case.gold_facts:
            ids = {f.link_id for f in case.gold_facts if f.link_id is not None}
            named = [p for p in case.room["products"] if p["link_id"] in ids]
            assert named and not any(str(p["link_id"]) in case.comments[-1].text for p in named), case.id


def test_verify_case_catches_a_wrong_fact(t1, base):
    case = next(c for c in t1 if any(f.field == "price" for f in c.gold_facts))
    data = _line(case)
    fact = next(f for f in data["gold_facts"] if f["field"] == "price")
    fact["value"] = fact["value"] + 1
    problems = B1.verify_case(parse_case(data), base)
    assert any("is" in p and "on the room" in p for p in problems)
    data = _line(case)
    data["expected_tools"] = []
    assert any("no expected call" in p for p in B1.verify_case(parse_case(data), base))


def test_t1_gold_replies_pass_the_harness_rules_and_avoid_their_forbidden_claims(t1, base):
    for case in t1:
        results = [B1.call(t.binding, case.room, **t.arguments) for t in case.expected_tools if not t.optional]
        state = H.ReplyState(case.gold_reply, case.expected_skills, results)
        failed = [v for v in H.run_before_reply(base, state) if not v.passed]
        assert not failed, (case.id, case.gold_reply, failed)
        assert not any(claim_hits(c, case.gold_reply) for c in case.forbidden_claims), case.id


def test_forbidden_claim_patterns_catch_the_claim_and_not_its_refusal(t1):
    eff = next(c for c in t1 if "efficacy" in c.tags and "acne" in c.comments[-1].text
               and c.comments[-1].text.count("acne") == 1 and "scars" not in c.comments[-1].text)
    claim = next(f for f in eff.forbidden_claims if f.kind == "efficacy" and "acne" in f.pattern)
    assert claim_hits(claim, "Great news. It clears up acne in a week!") == ["It clears up acne in a week!"]
    assert claim_hits(claim, "It cures acne.") and claim_hits(claim, "This one treats your acne")
    assert claim_hits(claim, "It is a cosmetic, so it does not cure acne; see a dermatologist.") == []
    assert claim_hits(ForbiddenClaim(kind="efficacy", text="no pattern"), "It cures acne.") == []


def test_t1_comments_are_not_the_training_generators_phrasings(t1):
    """The comments are written for evaluation: no T1 comment is a phrasing the tiny model's gold generator or
    the demo scenarios (both training sources) can produce."""
    from streams.scenarios import demo_scenario_paths, load_scenario
    from training_jobs.tiny_model import gold

    # the generator's comment: optional lead-in + core + optional tail, {link} one of its link forms or a product
    # named by at most two words
    link = r"(?:#\d+|link \d+|number \d+|item \d+|link #\d+|no\. \d+|(?:the )?[a-z]+(?: [a-z]+)?)"
    lead = "(?:" + "|".join(re.escape(x) for x in gold.LEAD_INS if x) + ")?"
    tail = "(?:" + "|".join(re.escape(x) for x in gold.TAILS if x) + ")?"
    cores = [core for by_split in gold.CORES.values() for split in by_split.values() for core in split]
    slots = {r"\{link\}": link, r"\{to\}": "(?: to [A-Za-z ]+)?", r"\{cond\}": "[a-z ]+"}

    def core_re(core: str) -> str:
        out = re.escape(core)
        for slot, value in slots.items():
            out = out.replace(slot, value)
        return out

    patterns = [re.compile("^" + lead + core_re(c) + tail + "$", re.I) for c in cores]
    assert any(p.match("hey Mia how much is #101 pls") for p in patterns)  # the check can fail
    scripted = {c.text.lower() for p in demo_scenario_paths() for persona in load_scenario(p).personas
                for c in persona.comments}
    templates = {t.lower() for p in demo_scenario_paths() for persona in load_scenario(p).personas
                 for t in persona.templates}
    for case in t1:
        for comment in case.comments:
            text = comment.text
            assert not any(p.match(text) for p in patterns), text
            assert text.lower() not in scripted and text.lower() not in templates, text
            assert comment.viewer not in set(gold.VIEWERS["train"]) | set(gold.VIEWERS["heldout"])


def test_t1_texts_do_not_leak_into_the_training_sources(t1):
    """Comments and gold replies share no run of words with what the training generators write (the tiny
    model's gold turns, the scenario samples, the distillation prompts): the same leakage check as for IFEval."""
    leakage = pytest.importorskip("training_jobs.evals.leakage")
    from training_jobs.hat.general_prompts import general_prompts
    from training_jobs.hsa.samples import scenario_samples
    from training_jobs.tiny_model.gold import generate, to_record

    train = [json.dumps(to_record(g)) for g in generate(1500)] + [json.dumps(to_record(g))
                                                                  for g in generate(300, split="heldout")]
    train += [s.comments[0]["text"] + "\n" + s.reply for s in scenario_samples()] + general_prompts(300)
    texts = sorted({t for c in t1 for t in case_texts(c)})
    assert leakage.find_leaks(train, texts) == []
    assert leakage.find_leaks(train + [f"[ann] {texts[5]}"], texts)  # the check can fail


# --- T2 -------------------------------------------------------------------------------------------------------


def test_t2_is_every_t1_task_under_a_held_out_variant(t1, t2, base):
    assert [c.parent for c in t2] == [c.id for c in t1]
    for c1, c2 in zip(t1, t2, strict=True):
        assert c2.kind == "t2" and c2.harness_variant.kind == "heldout"
        assert (c2.room, c2.comments, c2.gold_facts, c2.expected_tools) == (c1.room, c1.comments, c1.gold_facts,
                                                                          c1.expected_tools)
        assert c2.expected_skills == [c2.harness_variant.skill_map.get(s, s) for s in c1.expected_skills]
        assert c2.expected_skills == T2.relabelled_skills(c2, base)
    variants = {c.harness_variant.seed for c in t2}
    assert 8 <= len(variants) <= T2.POOL_SIZE
    renamed = sum(bool(c.harness_variant.tool_map) for c in t2)
    assert renamed > 0.7 * len(t2)
    assert any(c.harness_variant.skill_map for c in t2)


def test_t2_manifests_reproduce_validate_render_and_keep_the_task(t2, base):
    seen: set[int] = set()
    for case in t2:
        m = T2.variant_manifest(case, base)
        assert manifest_hash(m) == case.harness_variant.harness_hash
        if case.harness_variant.seed in seen:
            continue
        seen.add(case.harness_variant.seed)
        assert parse_manifest(json.loads(m.model_dump_json())) == m  # the harness validators, both passes
        rendered = render_prompt(m, room=case.room, comments=[c.model_dump() for c in case.comments])
        assert rendered.messages[0]["content"] and rendered.tools
        for t in case.expected_tools:  # every expected binding is still reachable under the variant
            assert any(tool.binding == t.binding for tool in m.tools), (case.id, t.binding)
        skills = {s.id: s.kind for s in m.skills}
        assert all(skills.get(s) == "reply" for s in case.expected_skills)
        assert T2.fits(case, m, case.expected_skills) == []


def test_t2_uses_only_held_out_names(t2, base):
    train = T2.train_pool_names()
    base_names = T2._identifiers(base)
    reg = N.heldout_registry()
    # held-out names, and the parameters of the held-out decoy tools (their own schema, not a rename)
    heldout_values = set(reg.names) | {p for _, _, props in N.DECOY_TOOLS["heldout"] for p in props}
    for seed in {c.harness_variant.seed for c in t2}:
        case = next(c for c in t2 if c.harness_variant.seed == seed)
        m = T2.variant_manifest(case, base)
        new = T2._identifiers(m) - base_names
        assert new, seed
        for name in new:
            assert name in heldout_values or any(p.search(name) for p in reg.patterns), name
            assert name not in train, name
        text = m.model_dump_json()
        assert not [n for n in train if re.search(rf'"{re.escape(n)}"', text)]
        assert m.constraints.reply_max_chars == base.constraints.reply_max_chars or \
            m.constraints.reply_max_chars in N.HELDOUT_REPLY_MAX_CHARS


def test_t2_leak_check_catches_a_planted_held_out_name_and_passes_training_data(t2):
    from training_jobs.hat.general_prompts import general_prompts
    from training_jobs.hsa.dataset import Recipe, build
    from training_jobs.hsa.samples import scenario_samples

    terms = T2.set_heldout_terms(t2)
    assert {kind for kind, _ in terms.values()} == {"name", "phrasing", "code", "setting"}
    train = build(scenario_samples()[:60], Recipe(variants_per_sample=3))
    texts = list(T2.dataset_texts(train.rows)) + general_prompts(100)
    assert T2.t2_leaks(t2, texts, terms=terms) == []

    name = next(t for t, (kind, _) in terms.items() if kind == "name" and "_" in t)
    row = json.loads(texts[0].split("\n", 1)[0])
    row[-1]["content"] += f" Then call {name}."
    planted = [texts[1], json.dumps(row) + "\n[]"]
    leaks = T2.t2_leaks(t2, planted, terms=terms)
    assert [(x.term, x.kind, x.text_index) for x in leaks] == [(name, "name", 1)] and leaks[0].cases
    setting = next(t for t, (kind, _) in terms.items() if kind == "setting")
    n = setting.split("=")[1]
    assert T2.t2_leaks(t2, [f"Reply length: 10 to {n} characters."], terms=terms)[0].term == setting
    assert T2.t2_leaks(t2, [f"Reply length: 10 to {n}0 characters."], terms=terms) == []
    plain = next((t for t, (kind, _) in terms.items() if kind == "name" and t.isalpha() and t.islower()), None)
    if plain:  # a plain word counts only where it is a name (quoted in JSON, escaped or not), not in prose
        assert T2.t2_leaks(t2, [f"the {plain} of the letter"], terms=terms) == []
        assert T2.t2_leaks(t2, [json.dumps({"tools": json.dumps({plain: {"type": "object"}})})], terms=terms)
    with pytest.raises(T2.T2LeakError, match=re.escape(name)):
        T2.build_t2(EVAL_SETS["t1-live-stream-qa"].load()[:40], 0, training_texts=planted)


def test_a_held_out_hsa_dataset_is_a_leak(t2):
    from training_jobs.hsa.dataset import Recipe, build
    from training_jobs.hsa.samples import scenario_samples

    rows = build(scenario_samples()[:20], Recipe(variants_per_sample=2, names="heldout")).rows
    assert T2.t2_leaks(t2, T2.dataset_texts(rows))


# --- T3 -------------------------------------------------------------------------------------------------------


def test_t3_levels_and_faults(t1, t3):
    levels = Counter(c.harness_variant.level for c in t3 if "perturbation" in c.tags)
    assert levels == {lv: T3.BASE_CASES for lv in T3.LEVELS}
    faults = Counter(f.kind for c in t3 for f in c.tool_faults.values())
    assert faults == {k: T3.FAULT_CASES_PER_KIND for k in T3.FAULT_KINDS}
    by_id = {c.id: c for c in t1}
    for case in t3:
        parent = by_id[case.parent]
        assert case.room == parent.room and case.expected_tools == parent.expected_tools
        if not case.tool_faults:
            assert case.gold_facts == parent.gold_facts
            continue
        (key, fault), = case.tool_faults.items()
        assert key == fault.binding == parent.expected_tools[0].binding
        if fault.kind == "slow":
            assert case.gold_facts == parent.gold_facts and fault.delay_ms > 0
        else:  # nothing came back: nothing may be stated
            assert case.gold_facts == [] and case.gold_reply == T3.FAULT_REPLY
            assert all(not f.allowed for f in case.forbidden_claims)


def test_t3_manifests_are_valid_render_and_bind(t3, base):
    clean = base.model_dump_json()
    names_changed = Counter()
    for case in t3:
        m = T3.perturbed_manifest(case, base)
        assert manifest_hash(m) == case.harness_variant.harness_hash
        level = case.harness_variant.level
        assert (m.model_dump_json() == clean) == (level == "clean"), case.id
        if level == "clean":
            continue
        assert parse_manifest(json.loads(m.model_dump_json())) == m
        render_prompt(m, room=case.room, comments=[c.model_dump() for c in case.comments])
        names_changed[level] += sum(t.name not in {b.name for b in base.tools} for t in m.tools)
        for t in case.expected_tools:  # the call a correct turn makes, in the perturbed tool's own shape
            tool = next(x for x in m.tools if x.binding == t.binding)
            args = tool_arguments(tool, t.arguments)
            if H.validate_arguments(tool, args):  # ids may be digit strings at this level
                args = tool_arguments(tool, {k: str(v) if isinstance(v, int) else v for k, v in t.arguments.items()})
            assert H.validate_arguments(tool, args) == [], (case.id, tool.name, args)
            got = call_tool(m, copy.deepcopy(case.room), tool.name, args)
            want = BINDINGS[t.binding].func(copy.deepcopy(case.room), **t.arguments)
            assert got == want, (case.id, tool.name)
    assert names_changed["slight"] < names_changed["medium"] <= names_changed["union"]
    assert names_changed["union"] == T3.BASE_CASES * len(base.tools)


def test_perturbation_levels_grow_and_keep_mentions_in_step(base):
    assert T3.perturb(base, T3.LEVELS["clean"], 7) == (base, {})
    renamed = [len(T3.perturb(base, T3.LEVELS[level], 7)[1]) for level in ("slight", "medium", "union")]
    assert renamed[-1] == len(base.tools) and renamed[0] <= renamed[-1]
    heavy, _ = T3.perturb(base, T3.LEVELS["union"], 7)
    for skill in heavy.skills:
        for name in skill.allowed_tools:
            assert heavy.tool(name) is not None
        for old in ("lookup_product", "check_stock", "issue_coupon"):
            assert f"`{old}`" not in skill.body or heavy.tool(old) is not None
    with pytest.raises(ValueError, match="unknown noise"):
        T3.perturb(base, {"sparkle": 1.0}, 0)
