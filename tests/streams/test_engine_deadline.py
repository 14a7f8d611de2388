"""The whole-turn deadline: constraints.turn_deadline_s (or run_turn's deadline_s) bounds a turn's wall-clock
time across model requests, tool calls and hook retries. Real HTTP through the scripted loopback endpoint.

The machine is shared and noisy: budgets are 1 s and the assertions allow a few seconds of slack; what they
pin down is that a turn that would otherwise take 10 s (a stalled stream, a slow tool) ends near its budget.
"""

from __future__ import annotations

import copy
import json
import time

import pytest

from streams.engine import hooks as H
from streams.engine.client import ChatDelta, ModelError
from streams.engine.events import events_adapter
from streams.engine.faults import ToolFault
from streams.engine.turn import ReplayBackend, ScriptedBackend, run_turn
from tests.streams.scripted_endpoint import Scripted, hermes_calls, native_calls, reply, text_chunks

GOOD = "The HydraGlow serum is $24.9 right now, list price $34, and we have 180 in stock."
LOAD_PRICE_SKILL = ("load_skill", {"skill_id": "price_stock_qa"})
LOOKUP_101 = ("lookup_product", {"link_id": 101})
COMMENT = [{"viewer": "amy", "text": "how much is #101?"}]
SLACK_S = 4.0  # generous: the point is "near the budget", not "10 s later"
STALL_S = 10.0  # what the model would take without the deadline


def with_deadline(manifest, seconds):
    c = manifest.constraints.model_copy(update={"turn_deadline_s": seconds})
    return manifest.model_copy(update={"constraints": c})


def timed(**kw):
    start = time.monotonic()
    result = run_turn(comments=COMMENT, **kw)
    return result, time.monotonic() - start


def of(result, kind):
    return [e for e in result.events if e.type == kind]


def assert_deadline_fallback(result, manifest, stage, budget_ms):
    assert result.fallback and result.reason == "deadline_exceeded"
    assert result.reply == H.retry_policy(manifest)[1]  # the manifest's own fallback line
    [ev] = of(result, "deadline_exceeded")
    assert ev.stage == stage and ev.budget_ms == budget_ms
    assert ev.elapsed_ms >= budget_ms * 0.95  # perf_counter vs the client's monotonic clock
    types = [e.type for e in result.events]
    assert types[-3:] == ["deadline_exceeded", "reply", "timings"]
    assert not [e for e in of(result, "error") if e.kind in ("timeout", "deadline")]  # one event says it
    return ev


def open_connections(client):
    return [c for c in client._http._transport._pool.connections if not c.is_closed()]


# --- the model is too slow ----------------------------------------------------------------------------------


def test_stream_stalled_midway_is_cut_at_the_deadline(scripted_endpoint, engine_client, engine_manifest,
                                                       engine_room):
    m = with_deadline(engine_manifest, 1.0)
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD), stall_after=3, stall_s=STALL_S))
    client = engine_client(timeout_s=30)  # the endpoint's own limit would wait far longer
    r, elapsed = timed(manifest=m, room=engine_room, backend=client)
    assert elapsed < 1.0 + SLACK_S
    assert_deadline_fallback(r, m, "model", 1000.0)
    assert "".join(e.delta for e in of(r, "token"))  # tokens before the stall were streamed
    assert not open_connections(client)  # the model's stream was closed, not left hanging
    assert GOOD not in r.reply and r.messages[-1] == {"role": "assistant", "content": r.reply}


def test_endpoint_that_never_sends_headers_is_cut(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_deadline(engine_manifest, 1.0)
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD), hang_s=STALL_S))
    r, elapsed = timed(manifest=m, room=engine_room, backend=engine_client(timeout_s=30))
    assert elapsed < 1.0 + SLACK_S
    assert_deadline_fallback(r, m, "model", 1000.0)


def test_slow_rounds_stop_before_a_new_request(scripted_endpoint, engine_client, engine_manifest, engine_room):
    # Each response takes 0.6 s: the first round fits in 1 s, the second is cut, no third is sent.
    m = with_deadline(engine_manifest, 1.0)
    for s in (hermes_calls(LOAD_PRICE_SKILL), native_calls(LOOKUP_101), reply(GOOD)):
        s.hang_s = 0.6
        scripted_endpoint.add(s)
    r, elapsed = timed(manifest=m, room=engine_room, backend=engine_client(timeout_s=30))
    assert elapsed < 1.0 + SLACK_S
    assert_deadline_fallback(r, m, "model", 1000.0)
    assert len(scripted_endpoint.requests) <= 2 and len(of(r, "model_request")) <= 2


def test_hook_retries_stop_at_the_deadline(scripted_endpoint, engine_client, engine_manifest, engine_room):
    # Every candidate fails the format hook; retries would go on, but not past the budget.
    m = with_deadline(engine_manifest, 1.0)
    hooks = [h.model_copy(update={"max_retries": 10}) if h.kind == "retry_control" else h for h in m.hooks]
    m = m.model_copy(update={"hooks": hooks})
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL))
    for _ in range(10):
        s = reply("**Only $5!** https://cheap.example.com")
        s.hang_s = 0.3
        scripted_endpoint.add(s)
    r, elapsed = timed(manifest=m, room=engine_room, backend=engine_client(timeout_s=30))
    assert elapsed < 1.0 + SLACK_S
    stage = of(r, "deadline_exceeded")[0].stage
    assert stage in ("model", "hook")  # cut in a request, or stopped before the next retry
    assert_deadline_fallback(r, m, stage, 1000.0)
    assert r.reason != "retries_exhausted" and r.timings.retries < 10
    assert len(scripted_endpoint.requests) <= 5


# --- tools ---------------------------------------------------------------------------------------------------


def test_slow_tool_is_cut_at_the_deadline(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_deadline(engine_manifest, 1.0)
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL), native_calls(LOOKUP_101), reply(GOOD))
    faults = {"lookup_product": ToolFault(binding="lookup_product", kind="slow", delay_ms=int(STALL_S * 1000))}
    r, elapsed = timed(manifest=m, room=engine_room, backend=engine_client(timeout_s=30), faults=faults)
    assert elapsed < 1.0 + SLACK_S
    assert_deadline_fallback(r, m, "tool", 1000.0)
    assert len(scripted_endpoint.requests) == 2  # the reply round never started


# --- within budget, overrides, other backends ---------------------------------------------------------------


def test_turn_within_budget_is_unaffected(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_deadline(engine_manifest, 5.0)
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL), native_calls(LOOKUP_101), reply(GOOD))
    r, _ = timed(manifest=m, room=engine_room, backend=engine_client())
    assert (r.reply, r.fallback, r.reason) == (GOOD, False, "ok")
    assert not of(r, "deadline_exceeded") and len(scripted_endpoint.requests) == 3


def test_deadline_s_overrides_the_manifest(scripted_endpoint, engine_client, engine_manifest, engine_room):
    assert engine_manifest.constraints.turn_deadline_s == 20.0  # the default, not in the demo YAML
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD), stall_after=2, stall_s=STALL_S))
    r, elapsed = timed(manifest=engine_manifest, room=engine_room, backend=engine_client(timeout_s=30),
                       deadline_s=1)
    assert elapsed < 1.0 + SLACK_S
    assert_deadline_fallback(r, engine_manifest, "model", 1000.0)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5"])
def test_deadline_s_must_be_a_positive_number(engine_manifest, engine_room, bad):
    with pytest.raises(ValueError):
        run_turn(manifest=engine_manifest, room=engine_room, comments=COMMENT, backend=ScriptedBackend([GOOD]),
                 deadline_s=bad)


def test_in_process_backend_is_checked_between_deltas_and_closed(engine_manifest, engine_room):
    class Slow:
        closed = False

        def stream_chat(self, messages, tools, **sampling):
            try:
                for word in GOOD.split():
                    time.sleep(0.2)
                    yield ChatDelta(content=word + " ")
                yield ChatDelta(finish_reason="stop")
            finally:
                Slow.closed = True

    m = with_deadline(engine_manifest, 1.0)
    r, elapsed = timed(manifest=m, room=engine_room, backend=Slow())
    assert elapsed < 1.0 + SLACK_S
    assert_deadline_fallback(r, m, "model", 1000.0)
    assert Slow.closed


def test_remaining_budget_is_passed_to_backends_that_take_it(engine_manifest, engine_room):
    seen: list[float] = []

    class Budgeted:
        def stream_chat(self, messages, tools, *, budget_s=None, **sampling):
            seen.append(budget_s)
            yield from ScriptedBackend([GOOD]).stream_chat(messages, tools)

    r, _ = timed(manifest=with_deadline(engine_manifest, 3.0), room=engine_room, backend=Budgeted())
    assert r.reason != "deadline_exceeded"
    assert seen and all(0 < b <= 3.0 for b in seen)


def test_a_deadline_turn_replays_to_the_same_reply(scripted_endpoint, engine_client, engine_manifest,
                                                   _engine_demo_room):
    m = with_deadline(engine_manifest, 1.0)
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL),
                          Scripted(chunks=text_chunks(GOOD), stall_after=3, stall_s=STALL_S))
    recorded, _ = timed(manifest=m, room=copy.deepcopy(_engine_demo_room), backend=engine_client(timeout_s=30))
    assert recorded.reason == "deadline_exceeded"
    stored = events_adapter.validate_json(json.dumps([e.model_dump(mode="json") for e in recorded.events]))
    assert stored == recorded.events  # the new event type round-trips through JSON
    replayed, _ = timed(manifest=m, room=copy.deepcopy(_engine_demo_room), backend=ReplayBackend(stored))
    assert (replayed.reply, replayed.reason) == (recorded.reply, recorded.reason)


# --- the client on its own ----------------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "hi"}]


def test_client_budget_cuts_a_stalled_stream(scripted_endpoint, engine_client):
    scripted_endpoint.add(Scripted(chunks=text_chunks("some words then silence"), stall_after=2, stall_s=STALL_S))
    got: list[str] = []
    start = time.monotonic()
    with pytest.raises(ModelError) as info:
        for d in engine_client(timeout_s=30).stream_chat(MESSAGES, budget_s=0.5):
            got.append(d.content)
    assert info.value.kind == "deadline" and not info.value.transient
    assert time.monotonic() - start < 0.5 + SLACK_S
    assert "".join(got)


def test_client_budget_already_spent(engine_client):
    with pytest.raises(ModelError) as info:
        list(engine_client().stream_chat(MESSAGES, budget_s=0))
    assert info.value.kind == "deadline"


def test_client_budget_longer_than_the_endpoint_timeout(scripted_endpoint, engine_client):
    # The endpoint's own limit comes first: that is an endpoint timeout, not the caller's deadline.
    scripted_endpoint.add(Scripted(chunks=text_chunks("late"), hang_s=STALL_S))
    with pytest.raises(ModelError) as info:
        list(engine_client(timeout_s=0.4).stream_chat(MESSAGES, budget_s=30))
    assert info.value.kind == "timeout"


def test_client_with_budget_still_streams_normally(scripted_endpoint, engine_client):
    scripted_endpoint.add(reply("plenty of time"))
    client = engine_client()
    assert "".join(d.content for d in client.stream_chat(MESSAGES, budget_s=5)) == "plenty of time"
    scripted_endpoint.add(reply("and again"))  # the connection is still usable afterwards
    assert "".join(d.content for d in client.stream_chat(MESSAGES, budget_s=5)) == "and again"
