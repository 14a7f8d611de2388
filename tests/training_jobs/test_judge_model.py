"""Judge models (training_jobs.evals.judge_model, training_jobs.eval_judges): the prompt, robust parsing (a malformed
answer abstains with its raw text kept), voting and disagreements, a judge served by the scripted loopback endpoint
through the real client, evaluation runs with judges (verdicts and vote stored with each sample, the rules' score
kept, agreement with the rules in the summary), and endpoints refused as judges."""

from __future__ import annotations

import json

import pytest

from console.errors import ValidationFailed
from streams.engine.client import ModelEndpoint as EndpointConfig
from streams.engine.client import OpenAIChatClient
from streams.models import ModelEndpoint
from tests.streams.scripted_endpoint import ScriptedEndpoint, http_error, reply
from tests.training_jobs.eval_helpers import ROOM, t1_case
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    BAD, bad, good, play, scripted_endpoint, scripted_model, start, t1_set, t4_set, v1)
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.evals import judge_model as J
from training_jobs.evals.cases import parse_case

CASE = parse_case(t1_case(0))
TOOL_RESULTS = [{"tool": "lookup_product", "arguments": {"link_id": 101},
                 "result": {"link_id": 101, "title": "HydraGlow Hyaluronic Serum 30 ml", "price": 24.9}}]


def verdict(acc, eff, reason="ok") -> str:
    return json.dumps({"accuracy": acc, "effectiveness": eff, "reason": reason})


# --- the prompt ------------------------------------------------------------------------------------------------------


def test_prompt_shows_what_the_turn_saw_and_the_rubric_not_the_gold():
    messages = J.judge_messages(CASE, "It is $24.9 now.", TOOL_RESULTS)
    assert [m["role"] for m in messages] == ["system", "user"]
    system = messages[0]["content"]
    for words in ("Accuracy (0 or 1)", "false promise", "Effectiveness (0, 0.5 or 1)", '"reason"', "JSON"):
        assert words in system
    body = json.loads(messages[1]["content"])
    assert body["viewer_comments"] == ["[viewer0] how much is the serum?? (0)"]
    assert body["reply_to_judge"] == "It is $24.9 now."
    assert body["tool_results"] == TOOL_RESULTS
    facts = body["room_facts"]
    assert facts["currency"] == "$" and facts["minute"] == ROOM["clock_minute"]
    assert {p["link_id"] for p in facts["products"]} == {p["link_id"] for p in ROOM["products"]}
    assert facts["products"][0]["compliance_notes"]  # what may not be promised
    assert "gold" not in messages[1]["content"] and "24.9" not in json.dumps(body["viewer_comments"])


def test_tool_results_are_read_from_the_stored_events():
    events = [
        {"type": "tool_call", "call_id": "a", "name": "load_skill", "arguments": {"skill_id": "price_stock_qa"}},
        {"type": "tool_result", "call_id": "a", "name": "load_skill", "binding": None, "result": "skill body"},
        {"type": "tool_call", "call_id": "b", "name": "lookup_product", "arguments": {"link_id": 101}},
        {"type": "tool_result", "call_id": "b", "name": "lookup_product", "binding": "catalog.product_info",
         "result": {"price": 24.9}},
        {"type": "tool_call", "call_id": "c", "name": "check_stock", "arguments": {"link_id": 9}},
        {"type": "tool_result", "call_id": "c", "name": "check_stock", "binding": "catalog.stock",
         "result": {"error": "timed out", "code": "timeout"}, "error": "timed out", "fault": "timeout"},
        {"type": "reply", "text": "x"},
    ]
    assert J.tool_results_from_events(events) == [
        {"tool": "lookup_product", "arguments": {"link_id": 101}, "result": {"price": 24.9}},
        {"tool": "check_stock", "arguments": {"link_id": 9}, "result": {"error": "timed out", "code": "timeout"},
         "error": "timed out"}]


# --- parsing ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, acc, eff", [
    ('{"accuracy": 1, "effectiveness": 1, "reason": "fine"}', 1, 1.0),
    ('{"accuracy": 0, "effectiveness": 0.5, "reason": "x"}', 0, 0.5),
    ('<think>the price is {maybe} fine</think>\n```json\n{"accuracy": true, "effectiveness": "0.5"}\n```', 1, 0.5),
    ('Verdict: {"note": 1} then {"accuracy": "no", "effectiveness": 0.0, "reason": "invents a price"} done', 0, 0.0),
    ('{"accuracy": 1.0, "effectiveness": 1.0}', 1, 1.0),
])
def test_parse_reads_the_verdict_whatever_surrounds_it(text, acc, eff):
    v = J.parse_model_verdict(text, judge="j")
    assert (v.accuracy, v.effectiveness, v.error) == (acc, eff, "")
    assert v.judge == "j" and v.raw == text


@pytest.mark.parametrize("text, acc, eff, error", [
    ("I think it is fine.", None, None, "no JSON verdict"),
    ('{"accuracy": 1, "effectiveness": 0.7}', 1, None, "effectiveness 0.7 is not 0, 0.5 or 1"),
    ('{"accuracy": 2, "effectiveness": 1}', None, 1.0, "accuracy 2 is not 0 or 1"),
    ('{"accuracy": "maybe"}', None, None, "accuracy 'maybe'"),
    ('{"accuracy": 1, "effectiveness": NaN}', 1, None, "effectiveness"),
    ('{"accuracy": [1], "effectiveness": {"a": 1}, "reason": 5}', None, None, "accuracy [1]"),
    ('{"accuracy": 1, "effectiveness": 1', None, None, "no JSON verdict"),  # cut off
    ("", None, None, "no JSON verdict"),
    ("<think>unclosed reasoning {\"accuracy\": 1, \"effectiveness\": 1}", None, None, "no JSON verdict"),
])
def test_a_malformed_answer_abstains_with_the_raw_text_kept(text, acc, eff, error):
    v = J.parse_model_verdict(text)
    assert (v.accuracy, v.effectiveness) == (acc, eff)
    assert error in v.error and v.raw == text[: J.RAW_KEPT]


def test_parse_never_raises_on_odd_input():
    for text in ["{" * 5000, "}{" * 100, '{"accuracy": 1e999, "effectiveness": -0.0}', "\x00{\"accuracy\":0}",
                 '{"accuracy": 1, "effectiveness": 1, "reason": "' + "x" * 5000 + '"}', None]:
        v = J.parse_model_verdict(text)  # type: ignore[arg-type]
        assert len(v.raw) <= J.RAW_KEPT and len(v.reason) <= J.REASON_KEPT


# --- voting and disagreements ----------------------------------------------------------------------------------------


def V(name, acc, eff):
    return J.ModelVerdict(name, acc, eff)


def test_majority_wins_per_field():
    votes = J.vote([V("a", 1, 1.0), V("b", 1, 0.5), V("c", 0, 0.5)], rules=(0, 1.0))
    assert (votes.accuracy, votes.accuracy_decided) == (1, "majority")
    assert (votes.effectiveness, votes.effectiveness_decided) == (0.5, "majority")
    assert votes.accuracy_votes == {"0": 1, "1": 2} and votes.effectiveness_votes == {"0.5": 2, "1": 1}


def test_ties_go_to_the_rules_when_they_are_among_the_tied_values_else_abstain():
    two = [V("a", 1, 0.0), V("b", 0, 1.0)]
    v = J.vote(two, rules=(0, 0.5))
    assert (v.accuracy, v.accuracy_decided) == (0, "tie_rules")
    assert (v.effectiveness, v.effectiveness_decided) == (None, "tie_abstain")  # the rules' 0.5 was not tied
    strict = J.vote(two, rules=(0, 0.5), tie_break="abstain")
    assert strict.accuracy is None and strict.accuracy_decided == "tie_abstain"
    assert J.vote(two).accuracy is None  # no rules given: a tie abstains
    with pytest.raises(ValueError):
        J.vote(two, tie_break="coin")  # type: ignore[arg-type]


def test_abstaining_judges_do_not_vote():
    v = J.vote([V("a", None, None), V("b", 0, None), V("c", None, 0.5)], rules=(1, 1.0))
    assert (v.accuracy, v.effectiveness, v.judges) == (0, 0.5, 3)
    none = J.vote([V("a", None, None)], rules=(1, 1.0))
    assert none.accuracy is None and none.accuracy_decided == "no_votes"


def test_disagreements_among_judges_and_with_the_rules():
    verdicts = [V("a", 1, 1.0), V("b", 0, 1.0), V("c", 1, 1.0), V("d", None, None)]
    the_vote = J.vote(verdicts, rules=(0, 1.0))
    d = J.disagreements(verdicts, the_vote, rules=(0, 1.0))
    assert d["split"] == {"accuracy": True, "effectiveness": False}
    assert d["against_rules"] == {"accuracy": ["a", "c"], "effectiveness": []}
    assert d["abstained"] == ["d"]
    assert d["vote_against_rules"] == {"accuracy": True, "effectiveness": False}


def test_judges_summary_over_samples():
    def block(*verdicts, rules):
        return J.judge_sample([(v.judge, _Fixed(v)) for v in verdicts], CASE, "r", [], rules=rules)

    samples = [
        (1.0, 1.0, block(V("a", 1, 1.0), V("b", 1, 1.0), rules=(1, 1.0))),
        (0.0, 0.5, block(V("a", 0, 0.5), V("b", 1, 0.5), rules=(0, 0.5))),
        (1.0, 0.0, block(V("a", 1, 0.0), V("b", None, None), rules=(1, 0.0))),
        (0.0, 1.0, block(V("a", 0, 1.0), V("b", 0, 0.5), rules=(0, 1.0))),
        (1.0, 1.0, None),  # not judged (no judges, or an error): left out
    ]
    s = J.judges_summary(samples, ["a", "b"])
    assert s["samples_judged"] == 4 and s["split"] == {"accuracy": 1, "effectiveness": 1}
    a = s["with_rules"]["a"]
    assert a["accuracy"]["kappa"] == 1.0 and a["accuracy"]["n"] == 4 and a["abstained"] == 0
    b = s["with_rules"]["b"]
    assert b["accuracy"]["n"] == 3 and b["accuracy"]["dropped"] == 1 and b["abstained"] == 1
    assert b["accuracy"]["observed"] == pytest.approx(2 / 3, abs=1e-6)
    # the vote: sample 2 ties 0/1 on accuracy → the rules' 0 (among the tied values)
    assert s["with_rules"]["vote"]["accuracy"]["observed"] == 1.0
    assert s["between_judges"][0]["a"] == "a" and s["between_judges"][0]["accuracy"]["n"] == 3


class _Fixed:
    """A backend that answers one verdict."""

    def __init__(self, v: J.ModelVerdict):
        self.text = json.dumps({"accuracy": v.accuracy, "effectiveness": v.effectiveness}) if not v.abstained \
            else "no idea"

    def stream_chat(self, messages, tools=None, **kw):
        yield type("D", (), {"content": self.text})()


# --- a judge behind a real endpoint ----------------------------------------------------------------------------------


@pytest.fixture
def judge_server():
    ep = ScriptedEndpoint()
    yield ep
    ep.close()


def _client(ep) -> OpenAIChatClient:
    return OpenAIChatClient(EndpointConfig(base_url=ep.base_url, model="judge", timeout_s=5.0, connect_timeout_s=1.0))


def test_judge_with_model_through_the_real_client(judge_server):
    judge_server.add(reply('{"accuracy": 0, "effectiveness": 0.5, "reason": "the $34 is the list price"}',
                           reasoning="the tool says 24.9"),
                     reply("Sorry, I cannot judge this."), http_error(500))
    with _client(judge_server) as client:
        v = J.judge_with_model(client, CASE, BAD, TOOL_RESULTS, name="j1", seed=3)
        assert (v.accuracy, v.effectiveness, v.reason) == (0, 0.5, "the $34 is the list price")
        request = judge_server.requests[0]
        assert request["temperature"] == 0.0 and request["seed"] == 3 and not request.get("tools")
        assert json.loads(request["messages"][1]["content"])["reply_to_judge"] == BAD
        malformed = J.judge_with_model(client, CASE, BAD, TOOL_RESULTS, name="j1")
        assert malformed.abstained and malformed.raw == "Sorry, I cannot judge this." and "no JSON" in malformed.error
        failed = J.judge_with_model(client, CASE, BAD, TOOL_RESULTS, name="j1")
        assert failed.abstained and failed.error.startswith("endpoint: http")


# --- evaluation runs with judges -------------------------------------------------------------------------------------


@pytest.fixture
def judges(db, judge_server):
    return [ModelEndpoint.objects.create(name=f"judge-{x}", base_url=judge_server.base_url, model=f"judge-{x}",
                                         kind="vllm", timeout_s=5.0, connect_timeout_s=1.0) for x in "abc"]


def test_a_run_with_judges_stores_verdicts_vote_and_agreement(ml_staff, t1_set, v1, scripted_model,
                                                              scripted_endpoint, judges, judge_server):
    run = start(ml_staff, t1_set, scripted_model, v1, judges=["judge-a", "judge-b", "judge-c"])
    assert run.judges == ["judge-a", "judge-b", "judge-c"]
    # per sample, judges a, b, c in order
    judge_server.add(reply(verdict(1, 1)), reply(verdict(1, 1)), reply(verdict(1, 0.5)),  # t1-000 (good)
                     reply(verdict(1, 1)), reply(verdict(0, 1)), reply("nonsense"),  # t1-001 (bad): a tie
                     reply(verdict(0, 1)), reply(verdict(0, 1)), reply(verdict(1, 1)))  # t1-002 (good)
    run = play(run, scripted_endpoint, [good, bad, good])
    assert run.status == EvalRun.Status.SUCCEEDED, run.error
    assert len(judge_server.requests) == 9
    results = {r.case_id: r for r in EvalResult.objects.filter(run=run)}
    first = results["t1-000"].detail["judges"]
    assert [v["judge"] for v in first["verdicts"]] == ["judge-a", "judge-b", "judge-c"]
    assert first["vote"]["accuracy"] == 1 and first["vote"]["effectiveness"] == 1.0
    assert first["disagreements"]["split"] == {"accuracy": False, "effectiveness": True}
    assert first["disagreements"]["against_rules"]["effectiveness"] == ["judge-c"]
    # the rules stay the score of record
    assert results["t1-000"].solved and results["t1-002"].solved
    bad_one = results["t1-001"]
    assert not bad_one.solved
    tie = bad_one.detail["judges"]
    assert tie["verdicts"][2]["raw"] == "nonsense" and tie["verdicts"][2]["accuracy"] is None
    assert tie["vote"]["accuracy_votes"] == {"0": 1, "1": 1}
    if bad_one.accuracy == 0.0:  # a tie goes to the rules' verdict when it is one of the tied values
        assert tie["vote"]["accuracy"] == 0 and tie["vote"]["accuracy_decided"] == "tie_rules"
    third = results["t1-002"].detail["judges"]
    assert third["vote"]["accuracy"] == 0 and third["disagreements"]["vote_against_rules"]["accuracy"] is True
    summary = run.summary["judges"]
    assert summary["judges"] == ["judge-a", "judge-b", "judge-c"] and summary["samples_judged"] == 3
    assert summary["with_rules"]["judge-c"]["abstained"] == 1
    assert summary["with_rules"]["judge-a"]["accuracy"]["n"] == 3
    assert run.summary["accuracy"]["mean"] == pytest.approx(sum(r.accuracy for r in results.values()) / 3)
    # the judges saw the tool result the turn got
    seen = json.loads(judge_server.requests[0]["messages"][1]["content"])
    assert seen["tool_results"] and seen["tool_results"][0]["result"]["link_id"] == 101
    assert seen["reply_to_judge"] == results["t1-000"].reply


def test_a_run_without_judges_stores_no_judge_detail(ml_staff, t1_set, v1, scripted_model, scripted_endpoint):
    run = play(start(ml_staff, t1_set, scripted_model, v1, max_cases=1), scripted_endpoint, [good])
    assert run.judges == [] and "judges" not in run.summary
    assert "judges" not in EvalResult.objects.get(run=run).detail


def test_a_judge_endpoint_down_abstains_and_the_run_goes_on(ml_staff, t1_set, v1, scripted_model,
                                                            scripted_endpoint, judges, judge_server):
    run = start(ml_staff, t1_set, scripted_model, v1, judges=["judge-a"], max_cases=1)
    judge_server.add(http_error(503))
    run = play(run, scripted_endpoint, [good])
    assert run.status == EvalRun.Status.SUCCEEDED
    detail = EvalResult.objects.get(run=run).detail["judges"]
    assert detail["verdicts"][0]["error"].startswith("endpoint:") and detail["vote"]["accuracy"] is None
    # an endpoint deleted or refused after the start: that judge abstains on every sample
    ModelEndpoint.objects.filter(name="judge-a").update(base_url="http://evil.example/v1")
    run2 = start(ml_staff, t1_set, scripted_model, v1, max_cases=1)
    EvalRun.objects.filter(pk=run2.pk).update(judges=["judge-a"])
    run2 = play(run2, scripted_endpoint, [good])
    v = EvalResult.objects.get(run=run2).detail["judges"]["verdicts"][0]
    assert v["accuracy"] is None and "refused" in v["error"]


def test_judges_are_validated_at_start_with_located_errors(ml_staff, t1_set, t4_set, v1, scripted_model, judges):
    ModelEndpoint.objects.create(name="outside", base_url="http://evil.example/v1", model="m")
    with pytest.raises(ValidationFailed) as exc:
        start(ml_staff, t1_set, scripted_model, v1, judges=["judge-a", "nope", "outside", "judge-a", 7])
    errors = {e["path"]: e["message"] for e in exc.value.errors}
    assert set(errors) == {"judges[1]", "judges[2]", "judges[3]", "judges[4]"}
    assert "no model endpoint 'nope'" in errors["judges[1]"]
    assert "outbound allow-list" in errors["judges[2]"]
    assert "named twice" in errors["judges[3]"]
    with pytest.raises(ValidationFailed) as exc:
        start(ml_staff, t1_set, scripted_model, v1, judges=["judge-b", " "])
    assert [e["path"] for e in exc.value.errors] == ["judges[1]"]
    for bad_value in ("judge-a", {"a": 1}, ["j"] * 6):
        with pytest.raises(ValidationFailed) as exc:
            start(ml_staff, t1_set, scripted_model, v1, judges=bad_value)
        assert [e["path"] for e in exc.value.errors] == ["judges"]
    with pytest.raises(ValidationFailed) as exc:
        start(ml_staff, t4_set, scripted_model, judges=["judge-a"])
    assert [e["path"] for e in exc.value.errors] == ["judges"]
    assert not EvalRun.objects.exists()
