"""The ``fixture`` tool binding: argument patterns -> answers, a scenario's fixtures first, deterministic."""

from __future__ import annotations

import copy

import pytest
import yaml

from harness_editor.schemas.bindings import FixtureBinding, FixtureCase
from streams.scenarios import ScenarioError, demo_scenario_paths, parse_scenario
from streams.tool_bindings.fixture import call_fixture

TABLE = FixtureBinding.model_validate({"kind": "fixture", "cases": [
    {"when": {"order.id": "A1", "include": True}, "result": {"id": "A1", "status": "shipped", "lines": 2}},
    {"when": {"order.id": "A1"}, "result": {"id": "A1", "status": "shipped"}},
    {"when": {"order.id": "B2"}, "result": ["not", "an", "object"]},
    {"when": {"qty": 1}, "result": {"matched": "number one"}},
]})


def test_first_matching_case_answers():
    assert call_fixture("get_order", TABLE, {"order": {"id": "A1"}, "include": True})["lines"] == 2
    assert call_fixture("get_order", TABLE, {"order": {"id": "A1"}}) == {"id": "A1", "status": "shipped"}
    assert call_fixture("get_order", TABLE, {"order": {"id": "A1"}, "include": False}) == {"id": "A1",
                                                                                          "status": "shipped"}


def test_a_non_object_answer_goes_under_result():
    assert call_fixture("get_order", TABLE, {"order": {"id": "B2"}}) == {"result": ["not", "an", "object"]}


def test_no_match_and_no_default_is_not_found():
    assert call_fixture("get_order", TABLE, {"order": {"id": "Z9"}}) == {
        "error": "no fixture of 'get_order' matches these arguments", "code": "not_found"}
    assert call_fixture("get_order", TABLE, {})["code"] == "not_found"


def test_default_answers_what_no_case_matches():
    b = TABLE.model_copy(update={"default": {"status": "unknown"}})
    assert call_fixture("get_order", b, {"order": {"id": "Z9"}}) == {"status": "unknown"}


def test_true_is_not_one():
    assert call_fixture("get_order", TABLE, {"qty": True})["code"] == "not_found"
    assert call_fixture("get_order", TABLE, {"qty": 1}) == {"matched": "number one"}
    assert call_fixture("get_order", TABLE, {"qty": 1.0}) == {"matched": "number one"}


def test_empty_when_matches_every_call():
    b = FixtureBinding.model_validate({"kind": "fixture", "cases": [{"result": {"always": 1}}]})
    assert call_fixture("t", b, {"anything": [1, 2]}) == {"always": 1}


def test_scenario_cases_come_first():
    scenario = [FixtureCase(when={"order.id": "A1"}, result={"id": "A1", "status": "lost in the scenario"}),
                {"when": {"order.id": "C3"}, "result": {"id": "C3"}}]
    assert call_fixture("get_order", TABLE, {"order": {"id": "A1"}}, scenario)["status"] == "lost in the scenario"
    assert call_fixture("get_order", TABLE, {"order": {"id": "C3"}}, scenario) == {"id": "C3"}
    assert call_fixture("get_order", TABLE, {"order": {"id": "A1"}, "include": True}, scenario)["status"] == \
        "lost in the scenario"


def test_answers_are_copies_and_deterministic():
    before = copy.deepcopy(TABLE.model_dump())
    first = call_fixture("get_order", TABLE, {"order": {"id": "A1"}})
    first["status"] = "changed by a turn"
    assert call_fixture("get_order", TABLE, {"order": {"id": "A1"}}) == {"id": "A1", "status": "shipped"}
    assert TABLE.model_dump() == before
    assert all(call_fixture("get_order", TABLE, {"order": {"id": "A1"}, "include": True})["lines"] == 2
               for _ in range(20))


# --- a scenario's fixtures -----------------------------------------------------------------------------------


def _scenario_data():
    return yaml.safe_load(demo_scenario_paths()[0].read_text(encoding="utf-8"))


def test_scenario_fixtures_parse():
    d = _scenario_data()
    d["fixtures"] = {"get_order": [{"when": {"order.id": "A1"}, "result": {"status": "shipped"}}]}
    s = parse_scenario(d)
    assert s.fixtures["get_order"][0] == FixtureCase(when={"order.id": "A1"}, result={"status": "shipped"})


def test_scenario_without_fixtures_keeps_its_canonical_form():
    from streams.scenarios import scenario_hash, scenario_to_json

    d = _scenario_data()
    plain = parse_scenario(d)
    assert plain.fixtures == {} and '"fixtures"' not in scenario_to_json(plain)  # stored scenarios keep their hash
    assert scenario_hash(plain) == scenario_hash(parse_scenario(dict(d, fixtures={})))
    with_fixtures = parse_scenario(dict(d, fixtures={"get_order": [{"result": {"status": "shipped"}}]}))
    assert scenario_hash(with_fixtures) != scenario_hash(plain)


@pytest.mark.parametrize(("fixtures", "path"), [
    ({"get_order": [{"when": {"order.id": "A1"}}]}, "fixtures.get_order[0].result"),
    ({"get_order": [{"when": {"order..id": 1}, "result": 1}]}, 'fixtures.get_order[0].when["order..id"]'),
    ({"get_order": [{"when": {"": 1}, "result": 1}]}, 'fixtures.get_order[0].when[""]'),
    ({"9orders": [{"result": 1}]}, 'fixtures["9orders"]'),
    ({"get_order": [{"result": 1, "extra": 2}]}, "fixtures.get_order[0].extra"),
    ({"get_order": {"when": {}}}, "fixtures.get_order"),
])
def test_scenario_fixture_errors_are_located(fixtures, path):
    d = _scenario_data()
    d["fixtures"] = fixtures
    with pytest.raises(ScenarioError) as e:
        parse_scenario(d)
    assert path in [err.path for err in e.value.errors], [err.path for err in e.value.errors]


def test_scenario_faults_may_name_a_tool_or_an_open_binding():
    from streams.simulator import ScenarioRun

    d = _scenario_data()
    d["faults"] = [{"tool": "get_order", "kind": "timeout"},
                   {"binding": "http:orders-api", "kind": "slow", "delay_ms": 10},
                   {"binding": "fixture", "kind": "permission_denied"}]
    s = parse_scenario(d)
    assert {k: f.kind for k, f in ScenarioRun(s, 0).active_faults(0).items()} == {
        "get_order": "timeout", "http:orders-api": "slow", "fixture": "permission_denied"}


@pytest.mark.parametrize(("fault", "path", "message"), [
    ({"binding": "catalog.nope", "kind": "timeout"}, "faults[0].binding", "unknown binding 'catalog.nope'"),
    ({"binding": "get_order", "kind": "timeout"}, "faults[0].binding", "a manifest tool goes in 'tool'"),
    ({"tool": "get.order", "kind": "timeout"}, "faults[0].tool", "is not a tool name"),
    ({"kind": "timeout"}, "faults[0]", "either a binding"),
    ({"tool": "get_order", "binding": "catalog.stock", "kind": "timeout"}, "faults[0]", "either a binding"),
])
def test_scenario_fault_targets_are_checked(fault, path, message):
    d = _scenario_data()
    d["faults"] = [fault]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(d)
    assert [(err.path, message in err.message) for err in e.value.errors] == [(path, True)], e.value.errors


def test_scenarios_without_tool_faults_keep_their_canonical_form():
    from streams.scenarios import scenario_to_json

    d = _scenario_data()
    d["faults"] = [{"binding": "catalog.stock", "kind": "timeout"}]
    assert '"tool"' not in scenario_to_json(parse_scenario(d))
