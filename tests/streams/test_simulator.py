"""The live-room simulator: clock, determinism, timeline, comments, faults, and the bindings working on the
simulated room unchanged. Pure Python: no Django, no database, no sleeping."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from streams.bindings import BINDINGS
from streams.engine.faults import ToolFault, apply_fault
from streams.scenarios import demo_scenario_paths, load_scenario, parse_scenario
from streams.simulator import ScenarioRun, SimComment, SimulatedClock, Tick

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "streams" / "scenarios"
DEMO_ROOM = yaml.safe_load((ROOT / "harness_editor" / "demo" / "room.yaml").read_text(encoding="utf-8"))


def call(room: dict, binding: str, **kwargs):
    return BINDINGS[binding].func(room, **kwargs)


def scenario(name: str):
    return load_scenario(SCENARIOS / f"{name}.yaml")


class FakeTime:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def small(**overrides):
    room = copy.deepcopy(DEMO_ROOM)
    room["clock_minute"] = 0
    room["campaign"] = {"phase": "regular", "flash_sale": None}
    data = {"id": "small", "title": "Small", "seed": 3, "duration_minutes": 10, "room": room,
            "timeline": [], "personas": [], "faults": []}
    data.update(overrides)
    return parse_scenario(data)


# --- the clock ----------------------------------------------------------------------------------------


def test_clock_speed_is_simulated_minutes_per_real_second():
    t = FakeTime()
    clock = SimulatedClock(speed=2.0, time_source=t)
    assert clock.minute == 0
    t.now += 1.5
    assert clock.minute == pytest.approx(3.0)
    clock.speed = 10
    t.now += 0.5
    assert clock.minute == pytest.approx(8.0)


def test_clock_pause_resume_step():
    t = FakeTime()
    clock = SimulatedClock(speed=1.0, start_minute=5, time_source=t)
    t.now += 2
    assert clock.pause() == pytest.approx(7)
    assert clock.paused
    t.now += 100
    assert clock.minute == pytest.approx(7)  # frozen while paused
    assert clock.step(1) == pytest.approx(8)  # stepping works while paused
    assert clock.step() == pytest.approx(9)
    t.now += 50
    assert clock.minute == pytest.approx(9)
    clock.resume()
    t.now += 3
    assert clock.minute == pytest.approx(12)
    clock.step(0.5)  # and while running
    t.now += 1
    assert clock.minute == pytest.approx(13.5)


def test_clock_end_and_bad_input():
    t = FakeTime()
    clock = SimulatedClock(speed=60, end_minute=30, paused=True, time_source=t)
    t.now += 10
    assert clock.minute == 0
    clock.resume()
    t.now += 10
    assert clock.minute == 30 and clock.finished
    assert clock.step(5) == 30
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            SimulatedClock(speed=bad, time_source=t)
    with pytest.raises(ValueError):
        clock.step(-1)


def test_clock_drives_a_run():
    t = FakeTime()
    run = ScenarioRun(scenario("evening-flash-sale"))
    clock = SimulatedClock(speed=5, end_minute=run.duration, time_source=t)
    t.now += 1.2  # six simulated minutes
    run.advance_to(clock.minute)
    assert run.minute == pytest.approx(6) and run.room["campaign"]["flash_sale"]["link_id"] == 101


# --- determinism --------------------------------------------------------------------------------------


def _play(run: ScenarioRun, step: float) -> list[dict]:
    return [c.to_dict() for tick in run.iter_ticks(step) for c in tick.comments]


@pytest.mark.parametrize("name", ["multi-intent-rush", "evening-flash-sale"])
def test_same_seed_same_run_whatever_the_step(name):
    s = scenario(name)
    a, b, c = ScenarioRun(s), ScenarioRun(s), ScenarioRun(s)
    by_minute = _play(a, 1.0)
    assert by_minute == _play(b, 0.25)
    assert by_minute == [x.to_dict() for x in c.advance_to(s.duration_minutes)]  # one jump
    assert by_minute == [x.to_dict() for x in c.comment_log]
    assert a.room == b.room == c.room
    assert [e.to_dict() for e in a.event_log] == [e.to_dict() for e in c.event_log]
    assert len(a.event_log) == len(s.timeline)


def test_seed_changes_generated_comments_but_not_scripted_ones():
    s = scenario("multi-intent-rush")
    default = ScenarioRun(s)
    other = ScenarioRun(s, seed=s.seed + 1)
    assert default.seed == s.seed and other.seed == s.seed + 1
    a, b = default.advance_to(15), other.advance_to(15)
    assert [c.to_dict() for c in a] != [c.to_dict() for c in b]
    scripted = lambda cs: [c.to_dict() for c in cs if c.source == "scripted"]  # noqa: E731
    assert scripted(a) == scripted(b) and scripted(a)


def test_generated_comment_rate_is_roughly_respected():
    s = small(duration_minutes=200, personas=[{"id": "t", "kind": "troll", "names": ["a", "b"],
                                               "templates": ["lol"], "rate_per_minute": 1.5}])
    comments = ScenarioRun(s).advance_to(200)
    assert 260 <= len(comments) <= 340
    assert [c.minute for c in comments] == sorted(c.minute for c in comments)
    assert {c.viewer_id for c in comments} == {"t-1", "t-2"}


# --- the timeline applied to the room, seen through the bindings ---------------------------------------


def test_flash_sale_start_shows_the_flash_price_in_the_bindings():
    run = ScenarioRun(scenario("evening-flash-sale"))
    run.advance_to(4.9)
    before = call(run.room, "catalog.product_info", link_id=101)
    assert "flash_sale" not in before and before["price"] == 24.9
    assert call(run.room, "campaign.state")["flash_sale"] is None
    run.advance_to(5)
    info = call(run.room, "catalog.product_info", link_id=101)
    assert info["flash_sale"] == {"price": 19.9, "ends_at_minute": 20}
    state = call(run.room, "campaign.state")
    assert state["phase"] == "flash_sale" and state["clock_minute"] == 5
    assert state["flash_sale"]["link_id"] == 101 and state["flash_sale"]["price"] == 19.9
    assert run.event_log[-1].kind == "flash_sale_start" and "$19.90" in run.event_log[-1].summary
    run.advance_to(20)
    assert "flash_sale" not in call(run.room, "catalog.product_info", link_id=101)
    assert call(run.room, "campaign.state")["phase"] == "regular"


def test_stock_runs_low_then_restocks():
    run = ScenarioRun(scenario("evening-flash-sale"))
    run.advance_to(8)
    assert call(run.room, "catalog.stock", link_id=101) == {
        "link_id": 101, "title": "HydraGlow Hyaluronic Serum 30 ml", "stock": 70, "low_stock": False}
    run.advance_to(13)
    low = call(run.room, "catalog.stock", link_id=101)
    assert low["stock"] == 9 and low["low_stock"] is True
    assert "running low" in run.event_log[-1].summary
    run.advance_to(22)
    assert call(run.room, "catalog.stock", link_id=101)["stock"] == 62


def test_coupon_expiry_and_coupon_add_through_the_bindings():
    run = ScenarioRun(scenario("evening-flash-sale"))
    run.advance_to(11)
    ok = call(run.room, "coupons.issue", coupon_code="EARLYBIRD", viewer_id="v1")
    assert ok["issued"] is True and ok["remaining"] == 39
    assert run.room["coupons"][1]["remaining"] == 39  # bindings mutate the run's live room
    run.advance_to(12)
    expired = call(run.room, "coupons.issue", coupon_code="EARLYBIRD", viewer_id="v2")
    assert expired["code"] == "expired"
    assert "EARLYBIRD" not in [c["code"] for c in call(run.room, "campaign.state")["coupons"]]
    assert call(run.room, "coupons.issue", coupon_code="NIGHTOWL", viewer_id="v3")["code"] == "not_found"
    run.advance_to(25)
    issued = call(run.room, "coupons.issue", coupon_code="NIGHTOWL", viewer_id="v3")
    assert issued["issued"] is True and issued["discount"] == 8.0
    run.advance_to(30)
    assert call(run.room, "coupons.issue", coupon_code="NIGHTOWL", viewer_id="v4")["code"] == "expired"


def test_price_change_and_sold_out():
    run = ScenarioRun(scenario("evening-flash-sale"))
    run.advance_to(24)
    assert call(run.room, "catalog.product_info", link_id=202)["price"] == 55.0
    rush = ScenarioRun(scenario("multi-intent-rush"))
    rush.advance_to(7)
    assert call(rush.room, "catalog.stock", link_id=202)["stock"] == 0
    assert "sold out" in rush.event_log[-1].summary
    rush.advance_to(8)
    assert call(rush.room, "catalog.stock", link_id=203)["stock"] == 30


def test_every_binding_works_on_the_simulated_room():
    run = ScenarioRun(scenario("after-sales-faults"))
    run.advance_to(3)
    room = run.room
    assert call(room, "catalog.product_info", link_id=201)["title"] == "NanoMist Facial Steamer"
    assert call(room, "policy.shipping", region="Alaska")["free_over"] == 60.0
    assert call(room, "room.pin_product", link_id=201, duration_s=30)["pinned"] is True
    assert room["pinned"]["pinned_at_minute"] == 3
    assert call(room, "catalog.product_info", link_id=999)["code"] == "not_found"


def test_room_is_the_bindings_shape_and_snapshots_are_copies():
    s = small()
    run = ScenarioRun(s)
    assert run.room == s.initial_room()
    assert set(run.room) == set(DEMO_ROOM)
    snap = run.snapshot()
    run.room["products"][0]["stock"] = 1
    assert snap["products"][0]["stock"] == 180
    assert s.initial_room()["products"][0]["stock"] == 180  # the scenario is never mutated


def test_advancing_rules():
    run = ScenarioRun(small())
    run.advance_to(3)
    assert run.advance_to(3) == []
    with pytest.raises(ValueError):
        run.advance_to(2)
    with pytest.raises(ValueError):
        run.advance_to(float("nan"))
    run.advance_to(99)
    assert run.minute == 10 and run.room["clock_minute"] == 10 and run.finished


# --- comments -----------------------------------------------------------------------------------------


def test_scripted_comments_become_due_at_their_minute():
    run = ScenarioRun(scenario("evening-flash-sale"))
    early = run.advance_to(5.4)
    assert not any("19.90 now" in c.text for c in early)
    due = run.advance_to(5.5)
    mine = [c for c in due if c.source == "scripted"]
    assert [c.to_dict() for c in mine] == [{
        "minute": 5.5, "viewer_id": "bargain-hunters-2", "viewer_name": "deal_dan",
        "persona_id": "bargain-hunters", "persona_kind": "price_asker",
        "text": "wait is the serum really 19.90 now??", "link_ids": [101], "source": "scripted"}]


def test_templates_are_filled_from_the_room_at_the_comment_minute():
    s = small(
        duration_minutes=6,
        timeline=[{"at_minute": 3, "kind": "flash_sale_start", "params": {"link_id": 102, "price": 21.5}}],
        personas=[{"id": "asker", "kind": "price_asker", "names": ["ann"], "focus_link_ids": [102],
                   "templates": ["is {product} (link {link_id}, {product_short}) {price}? was {list_price} {{really}}"],
                   "rate_per_minute": 3}],
    )
    comments = ScenarioRun(s).advance_to(6)
    assert comments
    for c in comments:
        price = "$21.50" if c.minute >= 3 else "$29.00"
        assert c.text == (f"is Barrier Repair Ceramide Moisturizer 50 ml (link 102, ceramide moisturizer) {price}? "
                          "was $39.00 {really}")
        assert c.link_ids == (102,) and c.source == "template" and c.persona_kind == "price_asker"


def test_second_product_coupon_and_region_slots():
    s = small(personas=[{"id": "multi", "kind": "multi_intent", "names": ["bo"],
                         "templates": ["{link_id} vs {link_id2}, {coupon}, ship to {region}?"],
                         "rate_per_minute": 2}])
    comments = ScenarioRun(s).advance_to(10)
    codes = {c["code"] for c in DEMO_ROOM["coupons"]}
    regions = set(DEMO_ROOM["shipping"]["regions"])
    links = {p["link_id"] for p in DEMO_ROOM["products"]}
    for c in comments:
        m = re.fullmatch(r"(\d+) vs (\d+), (\w+), ship to (.+)\?", c.text)
        assert m, c.text
        a, b = int(m[1]), int(m[2])
        assert a != b and {a, b} <= links and c.link_ids == (a, b)
        assert m[3] in codes and m[4] in regions


def test_every_demo_comment_is_about_products_in_the_room():
    for path in demo_scenario_paths():
        run = ScenarioRun(load_scenario(path))
        links = {p["link_id"] for p in run.room["products"]}
        for c in run.advance_to(run.duration):
            assert isinstance(c, SimComment)
            assert set(c.link_ids) <= links
            assert "{" not in c.text and c.text.strip()


# --- faults -------------------------------------------------------------------------------------------


def test_fault_windows():
    run = ScenarioRun(scenario("after-sales-faults"))
    assert "catalog.product_info" not in run.active_faults(2.9)
    f = run.active_faults(3)["catalog.product_info"]
    assert isinstance(f, ToolFault) and f == ToolFault(binding="catalog.product_info", kind="timeout", delay_ms=3000)
    assert run.active_faults(6.99)["catalog.product_info"].kind == "timeout"
    assert "catalog.product_info" not in run.active_faults(7)  # to_minute is exclusive
    assert run.active_faults(12)["catalog.stock"].kind == "permission_denied"
    assert "catalog.stock" not in run.active_faults(13)
    run.advance_to(18)
    assert run.active_faults()["coupons.issue"] == ToolFault(binding="coupons.issue", kind="timeout", delay_ms=1500)


def test_fault_probability_is_a_deterministic_draw():
    s = scenario("after-sales-faults")
    a, b = ScenarioRun(s), ScenarioRun(s)
    minutes = [10 + i / 100 for i in range(400)]
    draws = [("catalog.product_info" in a.active_faults(m)) for m in minutes]
    assert draws == [("catalog.product_info" in b.active_faults(m)) for m in minutes]
    assert 0.35 < sum(draws) / len(draws) < 0.65  # probability 0.5
    assert all(a.active_faults(m)["catalog.product_info"].kind == "malformed" for m, d in zip(minutes, draws) if d)
    other = ScenarioRun(s, seed=s.seed + 1)
    assert draws != [("catalog.product_info" in other.active_faults(m)) for m in minutes]


def test_faults_plug_into_the_engine_fault_runner():
    run = ScenarioRun(scenario("after-sales-faults"))
    run.advance_to(4)
    fault = run.active_faults()["catalog.product_info"]
    slept: list[float] = []
    out = apply_fault(fault, lambda: call(run.room, "catalog.product_info", link_id=201),
                      name="product_info", sleep=slept.append)
    assert out.fault == "timeout" and out.result["code"] == "timeout" and slept == [3.0]


# --- playing every demo scenario ----------------------------------------------------------------------


@pytest.mark.parametrize("path", demo_scenario_paths(), ids=lambda p: p.stem)
def test_every_demo_scenario_runs_to_the_end(path):
    s = load_scenario(path)
    run = ScenarioRun(s)
    ticks = list(run.iter_ticks(2.5))
    assert all(isinstance(t, Tick) for t in ticks)
    assert ticks[0].minute == 0 and ticks[-1].minute == s.duration_minutes
    assert [t.minute for t in ticks] == sorted(t.minute for t in ticks)
    assert run.finished and len(run.event_log) == len(s.timeline)
    comments = [c for t in ticks for c in t.comments]
    assert comments == run.comment_log and len(comments) >= 20
    assert ticks[-1].room["clock_minute"] == s.duration_minutes
    # each tick's room is a snapshot, and every binding still answers on it
    for t in ticks:
        for link_id in (p["link_id"] for p in t.room["products"]):
            assert "error" not in call(t.room, "catalog.product_info", link_id=link_id)
        assert "error" not in call(t.room, "campaign.state")
    with pytest.raises(ValueError):
        list(ScenarioRun(s).iter_ticks(0))


def test_iter_ticks_continues_from_where_the_run_is():
    run = ScenarioRun(scenario("compliance-traps"))
    run.advance_to(3.3)
    minutes = [t.minute for t in run.iter_ticks(5)]
    assert minutes == [3.3, 8.3, 13.3, 18.3, 20]


def test_a_room_that_starts_later_applies_earlier_events_but_skips_earlier_comments():
    s = small(duration_minutes=20,
              timeline=[{"at_minute": 2, "kind": "phase_change", "params": {"phase": "late"}}],
              personas=[{"id": "p", "kind": "chit_chat", "names": ["a"],
                         "comments": [{"at_minute": 1, "text": "early"}, {"at_minute": 6, "text": "on time"}]}])
    data = s.model_dump()
    data["room"]["clock_minute"] = 5
    run = ScenarioRun(parse_scenario(data))
    assert run.minute == 5
    comments = run.advance_to(6)
    assert [c.text for c in comments] == ["on time"]
    assert run.room["campaign"]["phase"] == "late" and run.room["clock_minute"] == 6


def test_next_at_walks_the_schedule_to_the_end():
    s = small(timeline=[{"at_minute": 2, "kind": "phase_change", "params": {"phase": "peak"}}],
              personas=[{"id": "p", "kind": "chit_chat", "names": ["a"],
                         "comments": [{"at_minute": 1.5, "text": "one"}, {"at_minute": 2, "text": "two"}]}])
    run = ScenarioRun(s)
    seen = []
    while (at := run.next_at) is not None:  # jumping from item to item: what "as fast as turns finish" does
        seen.append((at, [c.text for c in run.advance_to(at)], run.room["campaign"]["phase"]))
    assert seen == [(1.5, ["one"], "regular"), (2.0, ["two"], "peak")]  # the event first at equal minutes
    assert run.next_at is None and not run.finished
    run.advance_to(run.duration)
    assert run.finished

    late = s.model_dump()
    late["room"]["clock_minute"] = 2
    assert ScenarioRun(parse_scenario(late)).next_at == 2.0  # the comment at 1.5 is never said: skipped


@pytest.mark.parametrize("name", ["evening-flash-sale", "after-sales-faults"])
def test_resumed_run_goes_on_as_if_never_stopped(name):
    whole = ScenarioRun(scenario(name))
    first = whole.advance_to(7)
    rest = whole.advance_to(whole.duration)
    stored = ScenarioRun(scenario(name))
    stored.advance_to(7)
    room = stored.snapshot()
    room["coupons"][0]["remaining"] -= 1  # a turn changed the stored room (a coupon issued)
    resumed = ScenarioRun.resumed(scenario(name), None, 7, room)
    assert resumed.minute == 7 and resumed.room["coupons"][0]["remaining"] == room["coupons"][0]["remaining"]
    assert resumed.room is not room  # a copy: the run never writes into the caller's dict
    assert [(c.minute, c.viewer_id) for c in resumed.advance_to(resumed.duration)] == [
        (c.minute, c.viewer_id) for c in rest]
    assert first and len(resumed.event_log) == len(whole.event_log)
