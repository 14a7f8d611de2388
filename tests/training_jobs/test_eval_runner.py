"""The eval runner's core (training_jobs.evals.runner): cases through the real turn engine and HTTP client
against a scripted endpoint, and the aggregates (bootstrap intervals, pass^k, latency), without a database."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from streams.engine.client import ModelEndpoint, OpenAIChatClient
from tests.streams.scripted_endpoint import hermes_calls, reply, scripted_endpoint  # noqa: F401  (fixture)
from training_jobs.evals import runner as R


@dataclass
class _Verdict:
    accuracy: float
    effectiveness: float
    problems: list[Any] = field(default_factory=list)


def _outcome(case: str, sample: int, acc: float, eff: float, turn_s: float = 1.0, **kw: Any) -> R.SampleOutcome:
    return R.SampleOutcome(case_id=case, sample=sample, reply="", reason="ok", fallback=False, accuracy=acc,
                           effectiveness=eff, turn_s=turn_s, **kw)


def test_percentile_interpolates_and_ignores_missing():
    assert R.percentile([], 50) is None
    assert R.percentile([3.0], 95) == 3.0
    assert R.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert R.percentile([1.0, None, 2.0], 100) == 2.0  # type: ignore[list-item]


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_cases():
    few = [1.0, 0.0] * 5
    many = [1.0, 0.0] * 200
    lo_f, hi_f = R.bootstrap_ci(few, seed=1)
    lo_m, hi_m = R.bootstrap_ci(many, seed=1)
    assert lo_f <= 0.5 <= hi_f and lo_m <= 0.5 <= hi_m
    assert (hi_m - lo_m) < (hi_f - lo_f) / 3
    assert R.bootstrap_ci([], seed=0) is None
    assert R.bootstrap_ci([0.7], seed=0) == (0.7, 0.7)
    assert R.bootstrap_ci(few, seed=3) == R.bootstrap_ci(few, seed=3)  # seeded: a rerun reports the same


def test_aggregate_pass_k_needs_every_sample_solved():
    outcomes = [
        _outcome("a", 0, 1, 1), _outcome("a", 1, 1, 1), _outcome("a", 2, 1, 1),  # solved 3/3
        _outcome("b", 0, 1, 1), _outcome("b", 1, 0, 1), _outcome("b", 2, 1, 1),  # 2/3: not pass^3
        _outcome("c", 0, 1, 0.5), _outcome("c", 1, 1, 0.5), _outcome("c", 2, 1, 0.5),  # accurate, not effective
    ]
    agg = R.aggregate(outcomes, k=3, seed=0)
    assert agg["cases"] == 3 and agg["samples"] == 9 and agg["complete"] == 3
    assert agg["pass_k"]["mean"] == pytest.approx(1 / 3)
    assert agg["pass_1"]["mean"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert agg["accuracy"]["mean"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert agg["effectiveness"]["mean"] == pytest.approx((1 + 1 + 0.5) / 3)


def test_aggregate_of_a_cancelled_run_counts_only_complete_cases_for_pass_k():
    agg = R.aggregate([_outcome("a", 0, 1, 1), _outcome("a", 1, 1, 1), _outcome("b", 0, 1, 1)], k=2)
    assert agg["complete"] == 1 and agg["pass_k"]["n"] == 1


def test_latency_figures():
    outcomes = [_outcome(str(i), 0, 1, 1, turn_s=float(i), ttft_s=0.1 * i, decode_tps=10.0 * i)
                for i in range(1, 21)]
    lat = R.latency(outcomes)
    assert lat["turns"] == 20 and lat["p50_s"] == pytest.approx(10.5)
    assert lat["p95_s"] == pytest.approx(19.05)
    assert lat["under_15s"] == pytest.approx(14 / 20)
    assert lat["decode_tps_p50"] == pytest.approx(105.0)


def test_flipped_cases_regressions_first():
    a = {"x": 1.0, "y": 0.0, "z": 1.0, "only_a": 1.0}
    b = {"x": 0.0, "y": 1.0, "z": 1.0}
    assert R.flipped(a, b) == {"regressions": ["x"], "fixes": ["y"]}


def test_decode_speed_from_meters():
    calls = [R.CallMeter(ttft_s=0.5, total_s=1.5, tokens=11), R.CallMeter(ttft_s=None, total_s=2.0, tokens=0)]
    assert R.decode_tokens_per_s(calls) == pytest.approx(10.0)
    assert R.decode_tokens_per_s([R.CallMeter(ttft_s=0.1, total_s=0.1, tokens=1)]) is None


def _client(ep) -> OpenAIChatClient:
    return OpenAIChatClient(ModelEndpoint(base_url=ep.base_url, model="scripted", timeout_s=10))


def test_run_case_plays_the_turn_engine_and_judges_it(scripted_endpoint, demo_manifest):
    manifest = demo_manifest("skincare_v1")
    skill = next(s.id for s in manifest.skills)
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": skill})),
                          reply("Welcome to the room! Ask me anything about today's products."))
    case = SimpleNamespace(id="greet-1", room={"products": [], "coupons": []},
                           comments=[{"viewer": "mia", "text": "hiii everyone"}], tool_faults={})
    seen: dict[str, Any] = {}

    def judge(*, result, manifest, room, case):
        seen.update(result=result, room=room, case=case)
        return _Verdict(1.0, 0.5, [{"rule": "effectiveness.partial", "message": "no facts"}])

    with _client(scripted_endpoint) as client:
        out = R.run_case(case, 0, manifest=manifest, backend=client, judge=judge, sampling={"temperature": 0.7},
                         seed=41)
    assert out.case_id == "greet-1" and out.sample == 0
    assert out.accuracy == 1.0 and out.effectiveness == 0.5
    assert out.problems == [{"rule": "effectiveness.partial", "message": "no facts"}]
    assert out.turn_s > 0 and out.ttft_s is not None
    assert any(e["type"] == "timings" for e in out.events)
    # the sampling and the per-sample seed reached the endpoint; the case's room was not touched
    assert all(r.get("seed") == 41 and r.get("temperature") == 0.7 for r in scripted_endpoint.requests)
    assert seen["room"] == case.room and seen["room"] is not case.room
    assert seen["result"].reply == out.reply


def test_run_instruction_case_sends_only_the_prompt(scripted_endpoint):
    scripted_endpoint.add(reply("one two three"))
    case = SimpleNamespace(id="ifeval-1", prompt="Say three words.")
    with _client(scripted_endpoint) as client:
        out = R.run_instruction_case(case, 0, backend=client, seed=5)
    assert out.reply == "one two three" and out.reason == "ifeval"
    body = scripted_endpoint.requests[0]
    assert body["messages"] == [{"role": "user", "content": "Say three words."}]
    assert "tools" not in body and body["seed"] == 5


def _shipped_case(file: str, case_id: str):
    from training_jobs.evals.cases import EVAL_DATA_DIR, read_cases

    return next(c for c in read_cases(EVAL_DATA_DIR / file) if c.id == case_id)


def test_a_t3_fault_case_runs_under_its_injected_fault(scripted_endpoint, demo_manifest):
    """The case's faults (ToolFault values) reach the engine: the product tool times out, as the case says."""
    from tests.streams.scripted_endpoint import native_calls
    from training_jobs.evals.t3 import perturbed_manifest

    case = _shipped_case("t3_robustness.jsonl", "t3-0251")
    manifest = perturbed_manifest(case, demo_manifest("skincare_v1"))
    tool = next(t.name for t in manifest.tools if t.binding == "catalog.product_info")
    param = next(iter(manifest.tools[[t.name for t in manifest.tools].index(tool)].parameters["properties"]))
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": case.expected_skills[0]})),
                          native_calls((tool, {param: 102})),
                          reply("Sorry, I can't check that right now, please look at the product card."))
    with _client(scripted_endpoint) as client:
        out = R.run_case(case, 0, manifest=manifest, backend=client, judge=lambda **kw: _Verdict(1.0, 1.0))
    results = [e for e in out.events if e["type"] == "tool_result" and e.get("binding") == "catalog.product_info"]
    assert results and results[0]["fault"] == "timeout"


def test_case_forbidden_claims_are_read_sentence_by_sentence():
    from training_jobs.evals.judging import _pattern_problems

    case = _shipped_case("t1_live_stream_qa.jsonl", "t1-0141")
    bad = _pattern_problems("It's not a medicine. But it cures rosacea in a week.", case)
    assert [p.rule for p in bad] == ["claims.case_forbidden"]
    assert _pattern_problems("It does not cure rosacea, it is a moisturizer.", case) == []
