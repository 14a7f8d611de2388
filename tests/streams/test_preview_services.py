"""Preview-room services through the real HTTP client against the scripted loopback endpoint: a comment
becomes a turn whose every engine event is stored with the next seq; tools change the room state; the clock
applies the timeline and turns due comments into turns; scenario faults reach the engine."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from console.errors import NotAllowed, ValidationFailed
from streams import selectors, services, tasks
from streams.models import ModelEndpoint, PreviewEvent, PreviewRoom
from streams.simulator import ScenarioRun
from tests.streams.preview_helpers import GOOD, coupon_script, event_types, price_script
from tests.streams.scripted_endpoint import native_calls, reply, hermes_calls


def _open(user, version, model, scenario=None, **kw):
    return services.preview_open(user=user, version=version, scenario=scenario, endpoint=model, **kw)


def _comment_turn(room, user, text, capture):
    with capture(execute=False) as callbacks:
        turn_id = services.preview_comment_post(user=user, room=room, text=text)
    # nothing runs in the request: the event is published and the turn queued when the transaction commits
    assert [cb.__qualname__.split(".")[0] for cb in callbacks] == ["publish_on_commit", "publish_on_commit",
                                                                      "_turn_enqueue"]  # turn_queued
    return turn_id


def test_open_records_the_room(manager, harness_with_history, scripted_model):
    v3 = harness_with_history["v3"]  # a draft
    room = _open(manager, v3, scripted_model)
    assert room.harness_version == v3 and room.status == "open" and not room.paused
    assert room.room_state["coupons"][0]["code"] == "GLOW5"  # the demo live room
    events = selectors.preview_event_list(room_id=room.pk)
    assert [(e["seq"], e["type"]) for e in events] == [(1, "room_opened")]
    assert events[0]["payload"]["version"]["number"] == 3 and room.last_seq == 1


def test_default_endpoint_from_settings(manager, harness_with_history, settings):
    settings.HAT_LOCAL_MODEL_URL = "http://127.0.0.1:8999/v1"
    settings.HAT_LOCAL_MODEL_NAME = "demo-tiny"
    ep = services.model_endpoint_ensure_default()
    assert (ep.name, ep.base_url, ep.model, ep.is_default) == ("local", "http://127.0.0.1:8999/v1", "demo-tiny", True)
    assert services.model_endpoint_ensure_default().pk == ep.pk and ModelEndpoint.objects.count() == 1
    cfg = ep.as_config()
    assert (cfg.base_url, cfg.model, cfg.kind) == ("http://127.0.0.1:8999/v1", "demo-tiny", "local")
    room = services.preview_open(user=manager, version=harness_with_history["v1"])
    assert room.endpoint == ep
    # another default endpoint stays the default; "local" is kept up to date
    ModelEndpoint.objects.filter(pk=ep.pk).update(is_default=False)
    vllm = ModelEndpoint.objects.create(name="vllm", base_url="http://gpu:8000/v1", model="m", kind="vllm",
                                        is_default=True)
    assert services.model_endpoint_ensure_default() == vllm


def test_comment_becomes_a_turn_with_ordered_stored_events(manager, harness_with_history, scripted_model,
                                                           scripted_endpoint, django_capture_on_commit_callbacks):
    room = _open(manager, harness_with_history["v1"], scripted_model)
    turn_id = _comment_turn(room, manager, "how much is #101?", django_capture_on_commit_callbacks)
    price_script(scripted_endpoint)
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert (result.reply, result.fallback, result.reason) == (GOOD, False, "ok")

    seqs = list(PreviewEvent.objects.filter(room=room).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))  # room-wide, gapless, increasing
    types = event_types(room.pk, turn_id)
    assert types[:4] == ["viewer_comment", "turn_queued", "turn_started", "comment_received"]
    assert types[-2:] == ["reply", "timings"]
    for needed in ("token", "tool_call", "tool_result", "skill_loaded", "hook_result", "model_request"):
        assert needed in types
    # every engine event is stored as the engine emitted it
    stored = [e.payload for e in PreviewEvent.objects.filter(room=room, turn_id=turn_id).order_by("seq")][3:]
    assert [p["seq"] for p in stored] == list(range(len(result.events)))
    assert stored == [e.model_dump(mode="json") for e in result.events]
    tokens = "".join(p["delta"] for p in stored if p["type"] == "token" and p["channel"] == "content")
    assert GOOD in tokens
    assert scripted_endpoint.requests[0]["messages"][-1]["content"] == "[cm_alice] how much is #101?"  # the sender
    room.refresh_from_db()
    assert room.last_seq == seqs[-1]
    # the transcript folds the turn
    (t,) = selectors.preview_transcript(room_id=room.pk)
    assert t["reply"]["text"] == GOOD and t["state"] == "done" and t["comments"][0]["text"] == "how much is #101?"
    assert [c["name"] for c in t["tools"]] == ["load_skill", "lookup_product"]
    assert t["timings"]["total_ms"] > 0 and t["version"]["number"] == 1


def test_history_carries_previous_turns(manager, harness_with_history, scripted_model, scripted_endpoint,
                                        django_capture_on_commit_callbacks):
    room = _open(manager, harness_with_history["v1"], scripted_model)
    first = _comment_turn(room, manager, "how much is #101?", django_capture_on_commit_callbacks)
    price_script(scripted_endpoint)
    services.preview_turn_run(room_id=room.pk, turn_id=first)
    second = _comment_turn(room, manager, "and is it in stock?", django_capture_on_commit_callbacks)
    n = len(scripted_endpoint.requests)
    price_script(scripted_endpoint)
    services.preview_turn_run(room_id=room.pk, turn_id=second)
    sent = scripted_endpoint.requests[n]["messages"]
    assert sent[1:3] == [{"role": "user", "content": "[cm_alice] how much is #101?"}, {"role": "assistant", "content": GOOD}]


def test_coupon_tool_mutates_room_state(manager, harness_with_history, scripted_model, scripted_endpoint,
                                        django_capture_on_commit_callbacks):
    room = _open(manager, harness_with_history["v1"], scripted_model)
    assert room.room_state["coupons"][0]["remaining"] == 200
    turn_id = _comment_turn(room, manager, "can I get a coupon?", django_capture_on_commit_callbacks)
    coupon_script(scripted_endpoint)
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert not result.fallback, result.reason
    room.refresh_from_db()
    assert room.room_state["coupons"][0]["code"] == "GLOW5" and room.room_state["coupons"][0]["remaining"] == 199
    result_event = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="tool_result",
                                            payload__name="issue_coupon")
    assert result_event.payload["error"] is None


def test_version_switch_applies_to_the_next_turn(manager, harness_with_history, scripted_model, scripted_endpoint,
                                                 django_capture_on_commit_callbacks, demo_manifest):
    from harness_editor import services as editor

    h = harness_with_history
    room = _open(manager, h["v1"], scripted_model)
    first = _comment_turn(room, manager, "how much is #101?", django_capture_on_commit_callbacks)
    services.preview_version_switch(user=manager, room=room, version=h["v3"])  # before the queued turn runs
    assert event_types(room.pk)[-1] == "version_switched"
    price_script(scripted_endpoint)  # v3 renamed lookup_product: the call is an unknown tool, still a turn
    services.preview_turn_run(room_id=room.pk, turn_id=first)
    started = PreviewEvent.objects.get(room=room, turn_id=first, type="turn_started")
    assert started.payload["version"]["number"] == 3
    tool_names = {t["function"]["name"] for t in scripted_endpoint.requests[0]["tools"]}
    assert "get_product_details" in tool_names and "lookup_product" not in tool_names
    # a version of another harness is refused
    other = editor.harness_create(user=manager, slug="other", name="Other", manifest=demo_manifest("skincare_v1"))
    with pytest.raises(ValidationFailed):
        services.preview_version_switch(user=manager, room=room, version=other)
    room.refresh_from_db()
    assert room.harness_version == h["v3"]


def test_step_applies_timeline_and_turns_comments(manager, harness_with_history, scripted_model, scripted_endpoint,
                                                  demo_scenarios, django_capture_on_commit_callbacks, enqueued):
    scenario = demo_scenarios["after-sales-faults"]
    room = _open(manager, harness_with_history["v1"], scripted_model, scenario=scenario)
    assert room.seed == 23 and room.scenario_minute == 0
    assert event_types(room.pk) == ["room_opened", "timeline_event"]  # the minute-0 phase change
    assert room.room_state["products"][3]["stock"] == 9

    del enqueued[:]
    with django_capture_on_commit_callbacks(execute=True):
        out = services.preview_clock_step(user=manager, room=room, minutes=11)
    room.refresh_from_db()
    assert room.scenario_minute == 11 and out["minute"] == 11
    hair_dryer = next(p for p in room.room_state["products"] if p["link_id"] == 202)
    assert hair_dryer["stock"] == 3  # the timeline's stock change at minute 10
    assert [e["kind"] for e in out["events"]] == ["stock_change"]
    assert enqueued == [(str(room.pk), t) for t in out["turn_ids"]] and len(enqueued) >= 2  # <= 5 comments a turn
    stored = [e.payload for e in PreviewEvent.objects.filter(room=room, type="viewer_comment").order_by("seq")]
    expected = ScenarioRun(scenario.parsed(), 23).advance_to(11)  # deterministic: same comments, same order
    assert [(p["viewer"], p["text"]) for p in stored] == [(c.viewer_name, c.text) for c in expected]
    assert event_types(room.pk)[-1] == "clock"

    # a produced turn answers the scenario comments
    turn_id = out["turn_ids"][0]
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "after_sales"})),
                          reply("Sorry about that! Please message our support team with your order number."))
    services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    sent = scripted_endpoint.requests[0]["messages"][-1]["content"]
    assert "[Brenda_K] my order from last week still hasn't arrived" in sent
    assert "reply" in event_types(room.pk, turn_id)

    # stepping continues from the stored state: a coupon expires at 16 on top of it
    services.preview_clock_step(user=manager, room=room, minutes=6)
    room.refresh_from_db()
    gadget = next(c for c in room.room_state["coupons"] if c["code"] == "GADGET15")
    assert room.scenario_minute == 17 and gadget["expires_at_minute"] == 16


def test_scenario_faults_reach_the_engine(manager, harness_with_history, scripted_model, scripted_endpoint,
                                          demo_scenarios, django_capture_on_commit_callbacks):
    room = _open(manager, harness_with_history["v1"], scripted_model, scenario=demo_scenarios["after-sales-faults"])
    with django_capture_on_commit_callbacks(execute=False):
        services.preview_clock_step(user=manager, room=room, minutes=12)  # catalog.stock denied 11-13
    turn_id = _comment_turn(room, manager, "is the hair dryer in stock?", django_capture_on_commit_callbacks)
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
                          native_calls(("check_stock", {"link_id": 202})),
                          reply("I can't check the stock right now, please look at the product card."))
    services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    started = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="turn_started")
    assert started.payload["faults"]["catalog.stock"] == "permission_denied"
    result = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="tool_result", payload__name="check_stock")
    assert result.payload["fault"] == "permission_denied"


def test_endpoint_down_gives_a_stored_fallback(manager, harness_with_history, django_capture_on_commit_callbacks):
    from tests.streams.scripted_endpoint import free_port

    dead = ModelEndpoint.objects.create(name="dead", base_url=f"http://127.0.0.1:{free_port()}/v1", model="x",
                                        timeout_s=2, connect_timeout_s=0.5)
    room = _open(manager, harness_with_history["v1"], dead)
    turn_id = _comment_turn(room, manager, "hello?", django_capture_on_commit_callbacks)
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert result.fallback and result.reason == "model_error"
    types = event_types(room.pk, turn_id)
    assert "error" in types and types[-2:] == ["reply", "timings"]


def test_task_runs_the_turn_once(manager, harness_with_history, scripted_model, scripted_endpoint,
                                 django_capture_on_commit_callbacks):
    room = _open(manager, harness_with_history["v1"], scripted_model)
    turn_id = _comment_turn(room, manager, "how much is #101?", django_capture_on_commit_callbacks)
    price_script(scripted_endpoint)
    out = tasks.preview_turn.apply(args=(str(room.pk), turn_id)).get()
    assert out == {"turn_id": turn_id, "ran": True, "reason": "ok", "fallback": False}
    assert tasks.preview_turn.apply(args=(str(room.pk), turn_id)).get()["ran"] is False  # redelivered: skipped
    assert event_types(room.pk, turn_id).count("turn_started") == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL (SQLite serialises writers)")
@pytest.mark.django_db(transaction=True)
def test_two_deliveries_at_once_run_the_turn_once(manager, harness_with_history, scripted_model,
                                                  scripted_endpoint, enqueued, monkeypatch):
    """Both deliveries pass the cheap "already ran?" check before either has started the turn (a barrier holds
    them there); the room's row lock lets exactly one store turn_started and run it."""
    room = _open(manager, harness_with_history["v1"], scripted_model)
    turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    assert enqueued == [(str(room.pk), turn_id)]
    price_script(scripted_endpoint)
    barrier = threading.Barrier(2, timeout=10)
    history = selectors.preview_history

    def both_past_the_check(**kw):
        barrier.wait()
        return history(**kw)

    monkeypatch.setattr(selectors, "preview_history", both_past_the_check)
    results, errors = [], []

    def deliver():
        try:
            results.append(services.preview_turn_run(room_id=room.pk, turn_id=turn_id))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r is None for r in results) == [False, True]
    assert next(r for r in results if r is not None).reply == GOOD
    assert event_types(room.pk, turn_id).count("turn_started") == 1


def test_permissions_and_validation(manager, operator, outsider, reviewer, ml_staff, harness_with_history,
                                    scripted_model, django_capture_on_commit_callbacks):
    v1 = harness_with_history["v1"]
    for user in (operator, outsider):
        with pytest.raises(NotAllowed):
            _open(user, v1, scripted_model)
    for user in (reviewer, ml_staff):
        assert _open(user, v1, scripted_model).created_by == user
    room = _open(manager, v1, scripted_model)
    with pytest.raises(NotAllowed):
        services.preview_comment_post(user=operator, room=room, text="hi")
    for text in ("", "   ", "x" * 501):
        with pytest.raises(ValidationFailed):
            services.preview_comment_post(user=manager, room=room, text=text)
    with pytest.raises(ValidationFailed):  # no scenario, no clock
        services.preview_clock_step(user=manager, room=room, minutes=1)
    services.preview_pause(user=manager, room=room)
    services.preview_pause(user=manager, room=room)  # idempotent: recorded once
    services.preview_resume(user=manager, room=room)
    assert event_types(room.pk)[1:] == ["paused", "resumed"]
    room.refresh_from_db()
    assert room.paused is False


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL (SQLite serialises writers)")
@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_never_collide(manager, harness_with_history, scripted_model):
    room = _open(manager, harness_with_history["v1"], scripted_model)
    errors = []

    def worker(n):
        try:
            for i in range(15):
                services.preview_event_append(room_id=room.pk, type="token", turn_id=f"t{n}", payload={"i": i})
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seqs = list(PreviewEvent.objects.filter(room=room).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 62))
    for n in range(4):  # each writer's events keep their order
        mine = [e.payload["i"] for e in PreviewEvent.objects.filter(room=room, turn_id=f"t{n}").order_by("seq")]
        assert mine == list(range(15))
    assert PreviewRoom.objects.get(pk=room.pk).last_seq == 61


def test_a_turn_that_crashes_stores_what_it_emitted_before_turn_failed(
        manager, harness_with_history, scripted_model, monkeypatch, django_capture_on_commit_callbacks):
    """Events held for batching are stored, in order, before the turn_failed event of a crashed turn."""
    from streams.engine import turn as engine_turn
    from streams.engine.events import Token

    room = _open(manager, harness_with_history["v1"], scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="price of #101?")

    def crashing_turn(*, emit, turn_id, **kwargs):
        for i, text in enumerate(("The ", "serum ", "is ")):
            emit(Token(turn_id=turn_id, seq=i, t_ms=float(i), delta=text))
        raise RuntimeError("engine bug")

    monkeypatch.setattr(engine_turn, "run_turn", crashing_turn)
    with pytest.raises(RuntimeError, match="engine bug"):
        services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    stored = [(e["type"], e["payload"].get("delta")) for e in selectors.preview_event_list(room_id=room.pk)
              if e["turn_id"] == turn_id and e["type"] in ("token", "turn_failed")]
    assert stored == [("token", "The "), ("token", "serum "), ("token", "is "), ("turn_failed", None)]
