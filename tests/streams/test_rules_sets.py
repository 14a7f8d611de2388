"""The labelled judging sets (data/judging/, built by ``python -m training_jobs.judging_sets``): every bad reply is
caught by the rule its label names and judged as labelled, by the judge and by the live hooks; every good reply
passes every rule."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from streams.engine import hooks as H
from streams.engine.rules import CallRecord, judge_turn
from streams.engine.rules.base import EFFECTS
from training_jobs.hsa.samples import load_demo_manifest
from training_jobs.tiny_model.gold import load_tiny_manifest

DATA = Path(__file__).resolve().parents[2] / "data" / "judging"


def _lines(name):
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


BAD = _lines("bad_replies.jsonl")
GOOD = _lines("good_replies.jsonl")
ROOMS = json.loads((DATA / "rooms.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def harness(name):
    return load_tiny_manifest() if name == "tiny_room" else load_demo_manifest(name)


def judged(r):
    return judge_turn(reply=r["reply"], comments=r["comments"], room=ROOMS[r["room"]], tool_results=r["tool_results"],
                      loaded_skills=r["loaded_skills"], manifest=harness(r["harness"]),
                      calls=[CallRecord(c["binding"], c["arguments"], c["ok"]) for c in r["calls"]])


def hooks_failed(r):
    state = H.ReplyState(r["reply"], r["loaded_skills"], r["tool_results"], r["comments"], ROOMS[r["room"]])
    return [v for v in H.run_before_reply(harness(r["harness"]), state) if not v.passed]


def test_the_sets_are_large_varied_and_from_recorded_turns():
    assert len(BAD) >= 100 and len(GOOD) >= 50
    sources = Counter(r["source"].split(":")[0] for r in BAD)
    assert sources["demo-model"] >= 50 and sources["issue-11"] == 4 and sources["mutation"] >= 50
    mutations = {r["source"].split(":")[1] for r in BAD if r["source"].startswith("mutation:")}
    assert {"wrong_product_figure", "repeated_phrase", "truncated_start", "truncated_end", "swapped_field",
            "threshold_as_price", "invented_product"} <= mutations
    labelled = Counter(rule for r in BAD for rule in r["label"]["rules"])
    for family in ("facts.unbacked", "facts.wrong_entity", "facts.wrong_field", "products.unknown",
                   "intent.unaddressed", "intent.wrong_product", "quality.repeated", "quality.truncated",
                   "quality.garbled", "claims.forbidden", "coupon.not_issued", "coupon.unknown_code"):
        assert labelled[family] >= 3, family
    assert all(r["room"] in ROOMS for r in BAD + GOOD)
    assert {r["harness"] for r in GOOD} >= {"tiny_room", "skincare_v1", "skincare_v3"}
    assert all(rule.split(".")[0] in EFFECTS for rule in labelled)


def test_the_issues_four_replies_are_in_the_set():
    replies = {r["reply"] for r in BAD if r["source"] == "issue-11"}
    assert "AirSilk Hair Dryer is $35 in the flash sale until minute 55 in the flash sale until minute 55." in replies
    assert ".55 in the flash sale until minute 29." in replies
    assert "We have 15 of HydraGlow Serum left." in replies


@pytest.mark.parametrize("r", BAD, ids=[r["id"] for r in BAD])
def test_every_bad_reply_is_caught_by_its_rule(r):
    j = judged(r)
    missing = [rule for rule in r["label"]["rules"] if rule not in j.rules()]
    assert not missing, (missing, r["reply"], [(p.rule, p.message) for p in j.problems])
    expect = r["label"]["expect"]
    if "accuracy" in expect:
        assert j.accuracy == expect["accuracy"]
    if "effectiveness" in expect:
        assert j.effectiveness == expect["effectiveness"]
    if "effectiveness_below" in expect:
        assert j.effectiveness < expect["effectiveness_below"]
    assert hooks_failed(r), "a live turn would speak it"


@pytest.mark.parametrize("r", GOOD, ids=[r["id"] for r in GOOD])
def test_every_good_reply_passes_every_rule(r):
    j = judged(r)
    assert (j.accuracy, j.effectiveness, j.problems) == (1, 1.0, ()), [(p.rule, p.message) for p in j.problems]
    assert not hooks_failed(r)
