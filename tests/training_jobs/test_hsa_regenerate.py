"""HSA label preservation by regeneration: a teacher re-answers under the augmented harness through the one
turn engine, a judge (rules + an optional judge endpoint) keeps only answers that pass.

Scripted teachers/judges (in-process and over loopback HTTP) pin the judge's edge cases: malformed verdicts,
endpoints that are down, wrong link ids, missing facts — always a rejected sample with its reason, never a
crash. The last tests run the REAL tiny model behind its OpenAI-compatible server as the teacher."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError

from streams.engine.client import ModelEndpoint
from streams.engine.turn import ScriptedBackend
from streams.reference_policy import GoldComment, call_tool, gold_trajectory
from tests.streams.scripted_endpoint import ScriptedEndpoint, free_port, http_error, reply
from training_jobs.hsa.dataset import OperatorSpec, Recipe, build, build_to_disk
from training_jobs.hsa.regenerate import Regenerator, RegenerateSettings, parse_verdict
from training_jobs.hsa.samples import from_gold_trajectory
from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest

PRICE_102 = "Barrier Repair Ceramide Moisturizer is $29 right now, down from $39."


def _sample(text: str, intent: str, link_id: int | None = None, sid: str = "s"):
    manifest, room = load_tiny_manifest(), load_demo_room()
    traj = gold_trajectory(manifest, copy.deepcopy(room), GoldComment(text, intent, "max", link_id=link_id))
    return from_gold_trajectory(traj, manifest, room, [{"viewer": "max", "text": text}], source="test",
                                sample_id=sid)


@pytest.fixture(scope="module")
def price():
    return _sample("how much is #102?", "price", 102, "price-102")


def _call(name, args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def teacher(link_id=102, text=PRICE_102):
    return ScriptedBackend([_call("load_skill", {"skill_id": "price_stock"}),
                            _call("lookup_product", {"link_id": link_id}), text])


@pytest.fixture
def judge_endpoint():
    ep = ScriptedEndpoint()
    yield ep
    ep.close()


def _judge(ep: ScriptedEndpoint) -> ModelEndpoint:
    return ModelEndpoint(base_url=ep.base_url, model="scripted", timeout_s=5, connect_timeout_s=1, kind="vllm")


# --- rules ------------------------------------------------------------------------------------------------------------


def test_a_right_answer_is_kept_as_the_new_target(price):
    j = Regenerator(teacher()).regenerate(price.manifest, price)
    assert j.passed, j.detail
    assert [type(s).__name__ for s in j.target] == ["LoadSkill", "ToolCall", "Reply"]
    assert j.target[-1].text == PRICE_102
    call = j.target[1]
    assert call.result == call_tool(price.manifest, copy.deepcopy(dict(price.room)), "lookup_product", {"link_id": 102})


def test_wrong_link_id_and_missing_fact_are_rejected_with_reasons(price):
    j = Regenerator(teacher(link_id=101, text="Sorry, please check the card for the price.")).regenerate(
        price.manifest, price)
    assert not j.passed and j.target is None
    assert {"wrong_arguments", "missing_fact"} <= set(j.reasons)
    j = Regenerator(teacher(text="The moisturizer has a lovely price today, grab it now.")).regenerate(
        price.manifest, price)
    assert j.reasons == ["missing_fact"]
    # #101's price said for a question about #102: the engine's own hooks (streams.engine.rules) retry it
    j = Regenerator(teacher(link_id=101, text="It is $24.9 today.")).regenerate(price.manifest, price)
    assert not j.passed and j.target is None


def test_extra_tools_and_wrong_skill_are_rejected(price):
    backend = ScriptedBackend([_call("load_skill", {"skill_id": "chit_chat"}), _call("get_deals", {}),
                               _call("lookup_product", {"link_id": 102}), PRICE_102])
    j = Regenerator(backend).regenerate(price.manifest, price)
    assert {"extra_tool_call", "wrong_skill"} <= set(j.reasons)
    lenient = RegenerateSettings(forbid_extra_tools=False, require_skills=False)
    backend.calls = 0
    assert Regenerator(backend, settings=lenient).regenerate(price.manifest, price).passed


def test_a_teacher_that_is_down_rejects_never_crashes(price):
    down = ModelEndpoint(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", timeout_s=2, connect_timeout_s=0.5)
    with Regenerator(down) as regen:
        j = regen.regenerate(price.manifest, price)
    assert j.reasons == ["teacher_model_error"] and "connect" in j.detail[0]


def test_hook_retries_of_the_teacher_become_retry_steps(price):
    backend = ScriptedBackend([_call("load_skill", {"skill_id": "price_stock"}),
                               _call("lookup_product", {"link_id": 102}), f"**{PRICE_102}**", PRICE_102])
    j = Regenerator(backend).regenerate(price.manifest, price)
    assert j.passed, j.detail
    assert [type(s).__name__ for s in j.target] == ["LoadSkill", "ToolCall", "Retry", "Reply"]


# --- the judge endpoint --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer,passed,code", [
    ('{"pass": true, "reason": "states the price from the tool"}', True, None),
    ('<think>the price is backed</think>Sure! ```json\n{"verdict": "pass"}\n```', True, None),
    ('{"pass": false, "reason": "invented a discount"}', False, "judge_fail"),
    ("PASS, looks great", False, "judge_malformed"),
    ('{"pass": "maybe"}', False, "judge_malformed"),
    ('{"pass": tru', False, "judge_malformed"),
    ("", False, "judge_malformed"),
])
def test_judge_verdicts_are_parsed_defensively(price, judge_endpoint, answer, passed, code):
    judge_endpoint.add(reply(answer))
    with Regenerator(teacher(), _judge(judge_endpoint)) as regen:
        j = regen.regenerate(price.manifest, price)
    assert j.passed is passed
    assert j.reasons == ([] if code is None else [code])
    sent = judge_endpoint.requests[0]["messages"][1]["content"]
    assert PRICE_102 in sent and "29" in sent  # the reply and the reference facts went to the judge


def test_judge_endpoint_errors_reject_with_the_reason(price, judge_endpoint):
    judge_endpoint.add(http_error(503))
    with Regenerator(teacher(), _judge(judge_endpoint)) as regen:
        j = regen.regenerate(price.manifest, price)
    assert j.reasons == ["judge_error"] and "503" in j.detail[0]
    down = ModelEndpoint(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", timeout_s=2, connect_timeout_s=0.5)
    with Regenerator(teacher(), down) as regen:
        j = regen.regenerate(price.manifest, price)
    assert j.reasons == ["judge_error"] and "connect" in j.detail[0]


def test_judge_is_not_asked_when_the_rules_reject(price, judge_endpoint):
    with Regenerator(teacher(link_id=101), _judge(judge_endpoint)) as regen:
        assert not regen.regenerate(price.manifest, price).passed
    assert judge_endpoint.requests == []


def test_parse_verdict():
    assert parse_verdict('{"passed": false}') == (False, "")
    assert parse_verdict('noise {"a": 1} then {"pass": true, "reason": "ok"}') == (True, "ok")
    assert parse_verdict("<think>{\"pass\": false}</think>{\"pass\": true}")[0] is True  # reasoning is ignored
    assert parse_verdict(None)[0] is None  # type: ignore[arg-type]


# --- in the builder ---------------------------------------------------------------------------------------------------


def test_recipe_names_its_teacher_and_judge_never_writes_them_out():
    with pytest.raises(ValueError):
        Recipe(label_mode="regenerate")
    r = Recipe(label_mode="regenerate", teacher=" teacher-1 ", judge="judge")
    assert (r.teacher, r.judge) == ("teacher-1", "judge")
    assert Recipe.model_validate_json(r.model_dump_json()) == r
    assert Recipe().label_mode == "mechanical"
    # the old form (a URL and the name of an environment variable of the worker) is refused, located
    for bad in ({"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "HAT_SECRET_KEY"},
                "http://127.0.0.1:9/v1", "", "x" * 65, 7):
        with pytest.raises(ValidationError) as info:
            Recipe.model_validate({"label_mode": "regenerate", "teacher": "ok", "judge": bad})
        assert [e["loc"] for e in info.value.errors()] == [("judge",)], info.value.errors()


def test_engine_endpoint_never_shows_its_key_and_speaks_http_only():
    ep = ModelEndpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-secret")
    assert "sk-secret" not in repr(ep) and "sk-secret" not in ep.model_dump_json()
    assert "api_key" not in ep.model_dump()
    for url in ("file:///etc/passwd", "gopher://127.0.0.1:70/", "http://user:pw@127.0.0.1/v1", "127.0.0.1:8011/v1"):
        with pytest.raises(ValidationError):
            ModelEndpoint(base_url=url, model="m")


def test_a_regenerate_build_needs_its_endpoints_resolved(price):
    recipe = Recipe(variants_per_sample=1, operators=[], label_mode="regenerate", teacher="nowhere")
    with pytest.raises(ValueError, match="recipe.teacher"):
        build([price], recipe)


def test_build_in_regenerate_mode_counts_kept_and_rejected(price, judge_endpoint, tmp_path):
    samples = [price, _sample("how much is #101?", "price", 101, "price-101")]
    judge_endpoint.add(reply('{"pass": true}'), reply("no idea"))
    recipe = Recipe(seed=2, variants_per_sample=1, harness_pool_size=0, operators=[], label_mode="regenerate",
                    teacher="unused")
    seen = []
    with Regenerator(teacher(), _judge(judge_endpoint)) as regen:  # the script answers #102 for both
        result = build(samples, recipe, regenerator=regen, progress=lambda d, t: seen.append(d))
    s = result.stats
    assert (s.label_mode, s.rows, s.regenerated, s.rejected) == ("regenerate", 1, 1, 1)
    # #102's price for a question about #101: the engine's relevance hook retries it until the turn limit
    assert s.reject_reasons == {"teacher_turn_limit": 1}
    assert s.reject_examples[0]["sample_id"] == "price-101"
    assert seen[:2] == [1, 2]  # progress on every row in regenerate mode
    assert judge_endpoint.requests and len(judge_endpoint.requests) == 1
    row = result.rows[0]
    assert row["messages"][-1] == {"role": "assistant", "content": PRICE_102}
    assert json.loads(json.dumps(s.to_dict()))["regenerated"] == 1


def test_teacher_down_in_a_build_rejects_every_row(price, tmp_path):
    recipe = Recipe(variants_per_sample=2, harness_pool_size=0, operators=[], label_mode="regenerate",
                    teacher="down")
    down = ModelEndpoint(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", timeout_s=2, connect_timeout_s=0.5)
    result = build_to_disk([price], recipe, tmp_path / "regen", endpoints={"down": down})
    assert (result.stats.rows, result.stats.rejected) == (0, 2)
    assert result.stats.reject_reasons == {"teacher_model_error": 2}
    stats = json.loads((tmp_path / "regen" / "stats.json").read_text())
    assert stats["reject_reasons"] == {"teacher_model_error": 2}


# --- the real local model -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_teacher(local_model_server):
    return ModelEndpoint(base_url=local_model_server.openai_base_url, model=local_model_server.model, timeout_s=60)


def test_real_tiny_model_regenerates_on_its_own_harness(local_teacher):
    """The tiny model was trained on tiny_room: on that harness, with comments phrased like its training data,
    it answers price/stock questions right and the judge keeps them; whatever it gets wrong is rejected with a
    reason (never a crash)."""
    samples = [_sample("how much is #102?", "price", 102, "p102"), _sample("how many #101 left?", "stock", 101, "s101"),
               _sample("so how long is shipping?", "shipping", None, "ship")]
    recipe = Recipe(seed=0, variants_per_sample=1, harness_pool_size=0, operators=[], label_mode="regenerate",
                    teacher="tiny")
    result = build(samples, recipe, endpoints={"tiny": local_teacher})
    s = result.stats
    assert s.rows + s.rejected == 3 and s.regenerated == s.rows
    assert s.rows >= 1, s.reject_examples
    assert all(e["reasons"] for e in s.reject_examples)
    manifest = samples[0].manifest
    by_id = {x.id: x for x in samples}
    for row in result.rows:
        gold = by_id[row["sample_id"]]
        calls = [c["function"] for m in row["messages"] for c in (m.get("tool_calls") or [])
                 if c["function"]["name"] != "load_skill"]
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
            (t.name, dict(t.arguments)) for t in gold.tool_calls()]
        assert all(f in row["messages"][-1]["content"] for f in gold.meta["facts"])
        assert manifest.tool(calls[0]["name"]) is not None


def test_real_tiny_model_under_augmented_harnesses_is_judged_not_trusted(local_teacher):
    """Under renamed tools and a new layout the fixed-harness tiny model mostly fails (the shortcut HSA exists
    to remove); every row ends kept-and-correct or rejected-with-a-reason."""
    samples = [_sample("how much is #102?", "price", 102, "p102")]
    ops = ["change_prompt_layout", "rename_tools", "switch_id_types"]
    recipe = Recipe(seed=1, variants_per_sample=2, harness_pool_size=0, label_mode="regenerate",
                    teacher="tiny", operators=[OperatorSpec(name=n, probability=1.0) for n in ops])
    result = build(samples, recipe, endpoints={"tiny": local_teacher})
    s = result.stats
    assert s.rows + s.rejected == 2 and sum(s.reject_reasons.values()) >= s.rejected
    for row in result.rows:
        assert "29" in row["messages"][-1]["content"]
