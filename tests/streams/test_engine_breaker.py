"""The circuit breaker, its board and FailoverBackend (streams/engine/breaker.py): every transition with an injected
clock, probes and failover over real HTTP against scripted loopback endpoints (tests/streams/scripted_endpoint.py).
The real-vLLM faults (a server killed mid-stream, a hung proxy) are in test_endpoint_faults.py."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from streams.engine import hooks as H
from streams.engine.breaker import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    BreakerBoard,
    CircuitBreaker,
    FailoverBackend,
    default_board,
    fault_kind,
    probe_endpoint,
)
from streams.engine.client import ModelEndpoint, ModelError, OpenAIChatClient
from streams.engine.turn import run_turn
from tests.streams.scripted_endpoint import (
    Scripted,
    ScriptedEndpoint,
    free_port,
    http_error,
    reply,
    text_chunks,
    wait_until,
)

GOOD = "The HydraGlow serum is $24.9 right now, list price $34, and we have 180 in stock."
COMMENT = [{"viewer": "amy", "text": "hello from Lisbon!"}]
HELLO = "Hi amy, welcome to the stream, great to have you here from Lisbon!"
MSG = [{"role": "user", "content": "hi"}]


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def greeter(engine_manifest):
    """The demo harness without its "load a reply skill first" hook: a greeting is one model call."""
    return engine_manifest.model_copy(update={"hooks": [h for h in engine_manifest.hooks
                                                        if h.kind != "reply_skill_loaded"]})


@pytest.fixture
def second_endpoint():
    ep = ScriptedEndpoint()
    yield ep
    ep.close()


def config(url: str, **kw) -> ModelEndpoint:
    return ModelEndpoint(base_url=url, model="scripted", timeout_s=kw.pop("timeout_s", 10.0),
                         connect_timeout_s=1.0, kind="vllm", **kw)


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.threads: set[int] = set()

    def __call__(self, kind: str, payload: dict) -> None:
        self.threads.add(threading.get_ident())
        self.events.append((kind, payload))

    def of(self, kind: str) -> list[dict]:
        return [p for k, p in self.events if k == kind]

    def types(self) -> list[str]:
        return [k for k, _ in self.events]


def text(backend, **kw) -> str:
    return "".join(d.content for d in backend.stream_chat(MSG, None, **kw))


# --- CircuitBreaker ------------------------------------------------------------------------------------------


def test_opens_after_consecutive_failures_and_a_success_resets_the_count(clock):
    changes = []
    b = CircuitBreaker("http://a/v1", failure_threshold=3, cooldown_s=5, clock=clock,
                       on_change=lambda br, old, new: changes.append((old, new)))
    b.record_failure("x")
    b.record_failure("x")
    b.record_success()
    assert b.failures == 0 and b.state == CLOSED and b.allow()
    for _ in range(3):
        b.record_failure("refused")
    assert b.state == OPEN and not b.allow()
    assert changes == [(CLOSED, OPEN)]
    assert b.retry_in_s() == 5.0 and b.last_error == "refused"
    b.record_failure("more")  # already open: nothing changes
    assert changes == [(CLOSED, OPEN)]


def test_a_fault_that_cost_a_reply_opens_at_once(clock):
    b = CircuitBreaker("k", failure_threshold=5, clock=clock)
    b.record_failure("stream cut", trip=True)
    assert b.state == OPEN


def test_cooldown_then_probe_closes(clock):
    changes = []
    b = CircuitBreaker("k", failure_threshold=1, cooldown_s=5, clock=clock,
                       on_change=lambda br, old, new: changes.append(new))
    b.record_failure("down")
    assert not b.due() and not b.begin_probe()  # still cooling down
    clock.advance(4.9)
    assert not b.due()
    clock.advance(0.2)
    assert b.due()
    assert b.begin_probe()
    assert b.state == HALF_OPEN and not b.allow() and not b.begin_probe()  # one probe at a time
    b.end_probe(True)
    assert b.state == CLOSED and b.allow() and b.failures == 0
    assert changes == [OPEN, HALF_OPEN, CLOSED]


def test_failed_probe_reopens_with_a_doubling_cooldown_up_to_the_cap(clock):
    b = CircuitBreaker("k", failure_threshold=1, cooldown_s=2, max_cooldown_s=5, clock=clock)
    b.record_failure("down")
    seen = []
    for _ in range(4):
        seen.append(b.retry_in_s())
        clock.advance(seen[-1])
        assert b.begin_probe()
        b.end_probe(False, "still refused")
        assert b.state == OPEN and b.last_error == "still refused"
    assert seen == [2.0, 4.0, 5.0, 5.0]
    clock.advance(5)
    b.begin_probe()
    b.end_probe(True)
    b.record_failure("again", trip=True)
    assert b.retry_in_s() == 2.0  # a fresh outage starts from the base cool-down


def test_success_while_open_does_not_close(clock):
    b = CircuitBreaker("k", failure_threshold=1, clock=clock)
    b.record_failure("down")
    b.record_success()  # a stream that began before the outage finished
    assert b.state == OPEN


def test_end_probe_without_a_probe_is_ignored(clock):
    b = CircuitBreaker("k", clock=clock)
    b.end_probe(False)
    assert b.state == CLOSED


def test_exactly_one_thread_wins_the_probe(clock):
    b = CircuitBreaker("k", failure_threshold=1, cooldown_s=1, clock=clock)
    b.record_failure("down")
    clock.advance(1)
    wins = []
    barrier = threading.Barrier(8)

    def go():
        barrier.wait()
        wins.append(b.begin_probe())

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 7 + [True]


@pytest.mark.parametrize("kw", [{"failure_threshold": 0}, {"cooldown_s": 0}, {"cooldown_s": 10, "max_cooldown_s": 5}])
def test_bad_settings(kw):
    with pytest.raises(ValueError):
        CircuitBreaker("k", **kw)


# --- BreakerBoard ----------------------------------------------------------------------------------------------


def test_one_breaker_per_base_url(clock):
    board = BreakerBoard(clock=clock, background=False)
    a = board.breaker(config("http://127.0.0.1:9/v1"))
    assert board.breaker("http://127.0.0.1:9/v1/") is a
    assert board.breaker(config("http://127.0.0.1:9/v1", api_key="k")) is a
    assert board.breaker("http://127.0.0.1:10/v1") is not a
    assert default_board() is default_board()


def test_probe_due_runs_only_due_probes_and_tells_listeners(clock):
    probed = []

    def probe(endpoint, timeout):
        probed.append((endpoint.base_url, timeout))
        return endpoint.base_url.endswith("9/v1"), "scripted"

    board = BreakerBoard(failure_threshold=1, cooldown_s=5, probe_timeout_s=0.5, clock=clock, probe=probe,
                         background=False)
    seen = []
    unsubscribe = board.subscribe(lambda key, old, new: seen.append((key, new)))
    a, b = board.breaker(config("http://127.0.0.1:9/v1")), board.breaker(config("http://127.0.0.1:8/v1"))
    a.record_failure("down")
    b.record_failure("down")
    assert board.probe_due() == [] and probed == []
    clock.advance(5)
    assert sorted(board.probe_due()) == [("http://127.0.0.1:8/v1", False), ("http://127.0.0.1:9/v1", True)]
    assert {t for _, t in probed} == {0.5}
    assert a.state == CLOSED and b.state == OPEN
    assert ("http://127.0.0.1:9/v1", CLOSED) in seen and ("http://127.0.0.1:8/v1", HALF_OPEN) in seen
    unsubscribe()
    n = len(seen)
    a.record_failure("x")
    assert len(seen) == n


def test_a_probe_that_raises_leaves_the_breaker_open(clock):
    def probe(endpoint, timeout):
        raise RuntimeError("bug")

    board = BreakerBoard(failure_threshold=1, cooldown_s=1, clock=clock, probe=probe, background=False)
    b = board.breaker("http://127.0.0.1:9/v1")
    b.record_failure("down")
    clock.advance(1)
    assert board.probe_due() == [("http://127.0.0.1:9/v1", False)]
    assert b.state == OPEN and "bug" in b.last_error


def test_object_listeners_are_held_weakly(clock):
    board = BreakerBoard(failure_threshold=1, clock=clock, background=False)

    class L:
        calls = 0

        def breaker_changed(self, key, old, new):
            L.calls += 1

    listener = L()
    board.subscribe(listener)
    board.breaker("a").record_failure("x")
    assert L.calls == 1
    del listener
    gc.collect()
    board.breaker("b").record_failure("x")
    assert L.calls == 1


def test_background_thread_probes_and_closes_a_recovered_endpoint(scripted_endpoint):
    board = BreakerBoard(failure_threshold=1, cooldown_s=0.2, max_cooldown_s=0.4, probe_timeout_s=1.0)
    try:
        scripted_endpoint.healthy = False
        b = board.breaker(config(scripted_endpoint.base_url))
        b.record_failure("down")
        assert wait_until(lambda: len(scripted_endpoint.probes) >= 2, 10)  # probed, failed, probed again
        assert b.state in (OPEN, HALF_OPEN)
        scripted_endpoint.healthy = True
        assert wait_until(lambda: b.state == CLOSED, 10)
        assert scripted_endpoint.probes[0] == "/health"
        assert wait_until(lambda: board._thread is None, 5)  # nothing open: the thread is gone
    finally:
        board.close()


# --- probes over HTTP --------------------------------------------------------------------------------------------


def test_probe_endpoint(scripted_endpoint):
    ok, seen = probe_endpoint(config(scripted_endpoint.base_url), 2.0)
    assert ok and "/health" in seen
    scripted_endpoint.healthy = False
    ok, seen = probe_endpoint(config(scripted_endpoint.base_url), 2.0)
    assert not ok and "503" in seen
    scripted_endpoint.healthy, scripted_endpoint.no_health = True, True  # an OpenAI-like server
    ok, seen = probe_endpoint(config(scripted_endpoint.base_url, api_key="sk-x"), 2.0)
    assert ok and scripted_endpoint.probes[-2:] == ["/health", "/v1/models"]
    ok, seen = probe_endpoint(config(dead_url()), 1.0)
    assert not ok and "ConnectError" in seen


# --- fault kinds ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "streamed", "budget", "kind"), [
    (ModelError("connect", "refused"), False, 5, "endpoint_down"),
    (ModelError("protocol", "cut"), True, 5, "endpoint_down"),
    (ModelError("timeout", "slow"), False, 5, "endpoint_slow"),
    (ModelError("deadline", "cut"), False, 5, "endpoint_slow"),
    (ModelError("deadline", "cut"), True, 5, None),  # a long reply, not a slow endpoint
    (ModelError("deadline", "cut"), False, 0.2, None),  # the turn left it no time
    (ModelError("http", "busy", 429), False, 5, "endpoint_slow"),
    (ModelError("http", "boom", 503), False, 5, "endpoint_error"),
    (ModelError("http", "bad request", 400), False, 5, None),
    (ModelError("http", "no such model", 404), False, 5, None),
])
def test_fault_kind(error, streamed, budget, kind):
    assert fault_kind(error, streamed=streamed, budget_s=budget) == kind


# --- FailoverBackend over scripted endpoints ---------------------------------------------------------------------


def backend(routes, board, rec=None, **kw):
    return FailoverBackend(routes, kw.pop("request_models", None), board, rec, **kw)


def test_connection_refused_fails_over_within_the_call(second_endpoint, clock):
    board = BreakerBoard(failure_threshold=2, clock=clock, background=False)
    rec = Recorder()
    second_endpoint.add(reply("from b"), reply("b again"))
    with backend([("a", config(dead_url())), ("b", config(second_endpoint.base_url))], board, rec,
                 request_models={"b": "adapter-7"}) as fb:
        assert text(fb, budget_s=10) == "from b"
        assert rec.types() == ["fault", "failover"]
        assert rec.of("fault") == [{"kind": "endpoint_down", "endpoint": "a", "mid_stream": False,
                                    "message": rec.of("fault")[0]["message"]}]
        assert "refused" in rec.of("fault")[0]["message"].lower()
        assert rec.of("failover") == [{"from": "a", "to": "b", "reason": "failed"}]
        assert second_endpoint.requests[0]["model"] == "adapter-7"  # request_models by endpoint name
        assert text(fb, budget_s=10) == "b again"  # second failure: the threshold opens a
        assert rec.types()[2:] == ["fault", "breaker", "failover"]
        assert rec.of("breaker") == [{"endpoint": "a", "state": "open", "failures": 2, "retry_in_s": 5.0}]
    assert rec.threads == {threading.get_ident()}


def test_open_breaker_is_skipped_then_a_probe_brings_it_back(scripted_endpoint, second_endpoint, clock):
    board = BreakerBoard(failure_threshold=1, cooldown_s=5, clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(http_error(503), reply("a is back"))
    second_endpoint.add(reply("b1"), reply("b2"))
    fb = backend([("a", config(scripted_endpoint.base_url)), ("b", config(second_endpoint.base_url))], board, rec)
    assert text(fb, budget_s=10) == "b1"
    assert [p["kind"] for p in rec.of("fault")] == ["endpoint_error"]
    assert rec.types() == ["fault", "breaker", "failover"]
    rec.events.clear()
    assert text(fb, budget_s=10) == "b2"  # a is open: not even tried
    assert len(scripted_endpoint.requests) == 1 and rec.events == []  # already on b: no new failover
    fresh = backend([("a", config(scripted_endpoint.base_url)), ("b", config(second_endpoint.base_url))], board, rec)
    second_endpoint.add(reply("b3"))
    assert text(fresh, budget_s=10) == "b3"  # a new backend (a new turn) on the same board says where it goes
    assert rec.of("failover") == [{"from": "a", "to": "b", "reason": "open"}]
    rec.events.clear()
    clock.advance(5)  # the cool-down is over: the next call probes a first (background=False)
    assert text(fb, budget_s=10) == "a is back"
    assert scripted_endpoint.probes == ["/health"]
    assert rec.types() == ["breaker", "failover"]  # half_open then closed before the call: the latest is told
    assert rec.of("breaker") == [{"endpoint": "a", "state": "closed", "failures": 0, "retry_in_s": None}]
    assert rec.of("failover") == [{"from": "b", "to": "a", "reason": "recovered"}]
    fb.close()
    fresh.close()


def test_every_breaker_open_fails_fast_and_the_turn_speaks_the_fallback(greeter, engine_room, clock):
    board = BreakerBoard(failure_threshold=1, cooldown_s=60, clock=clock, background=False)
    urls = [dead_url(), dead_url()]
    for u in urls:
        board.breaker(u).record_failure("down")
    rec = Recorder()
    fb = backend([("a", config(urls[0])), ("b", config(urls[1]))], board, rec)
    r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=30)
    assert r.fallback and r.reason == "model_error" and r.reply == H.retry_policy(greeter)[1]
    [err] = [e for e in r.events if e.type == "error"]
    assert err.kind == "connect" and "circuit" in err.message
    assert [p["kind"] for p in rec.of("fault")] == ["endpoints_unavailable"]
    assert rec.of("fault")[0]["endpoint"] == "a, b"


def test_a_stream_cut_midway_is_not_sent_again(scripted_endpoint, second_endpoint, greeter, engine_room,
                                               clock):
    board = BreakerBoard(failure_threshold=3, clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD)[:3] + ["<html>proxy error"]))
    second_endpoint.add(reply(HELLO))
    fb = backend([("a", config(scripted_endpoint.base_url)), ("b", config(second_endpoint.base_url))], board, rec)
    r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=30)
    assert r.fallback and r.reason == "model_error"
    assert "".join(e.delta for e in r.events if e.type == "token")  # a part was streamed...
    assert second_endpoint.requests == []  # ...so nothing was re-sent elsewhere
    assert rec.of("fault") == [{"kind": "endpoint_down", "endpoint": "a", "mid_stream": True,
                                "message": rec.of("fault")[0]["message"]}]
    assert board.breaker(scripted_endpoint.base_url).state == OPEN  # it cost a reply: open at once
    assert rec.of("failover") == []


def test_a_5xx_midstream_goes_to_the_turns_retry_which_avoids_the_open_endpoint(
        scripted_endpoint, second_endpoint, greeter, engine_room, clock):
    board = BreakerBoard(clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD)[:2] + [{"error": {"message": "engine died", "code": 500}}]))
    second_endpoint.add(reply(HELLO))
    fb = backend([("a", config(scripted_endpoint.base_url)), ("b", config(second_endpoint.base_url))], board, rec)
    r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=30)
    assert [e.attempt for e in r.events if e.type == "model_request"] == [1, 2]  # the turn's own retry
    assert len(second_endpoint.requests) == 1
    assert rec.types() == ["fault", "breaker", "failover"]
    assert rec.of("failover") == [{"from": "a", "to": "b", "reason": "open"}]
    assert (r.reply, r.fallback) == (HELLO, False)


def test_4xx_is_the_requests_fault_no_failover(scripted_endpoint, second_endpoint, clock):
    board = BreakerBoard(failure_threshold=1, clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(http_error(400, '{"error": {"message": "too long"}}'))
    fb = backend([("a", config(scripted_endpoint.base_url)), ("b", config(second_endpoint.base_url))], board, rec)
    with pytest.raises(ModelError) as e:
        text(fb, budget_s=10)
    assert e.value.status == 400 and rec.events == [] and second_endpoint.requests == []
    assert board.breaker(scripted_endpoint.base_url).state == CLOSED


def test_hang_without_slow_s_speaks_the_fallback_at_the_deadline_then_fails_over(
        scripted_endpoint, second_endpoint, greeter, engine_room, clock):
    board = BreakerBoard(failure_threshold=3, clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD), hang_s=30))
    second_endpoint.add(reply(HELLO))
    fb = backend([("a", config(scripted_endpoint.base_url, timeout_s=60)), ("b", config(second_endpoint.base_url))],
                 board, rec)
    r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=1.5)
    assert r.fallback and r.reason == "deadline_exceeded"
    assert second_endpoint.requests == []  # no time left to try b in this turn
    assert rec.of("fault")[0]["kind"] == "endpoint_slow"
    assert board.breaker(scripted_endpoint.base_url).state == OPEN  # the fault cost a reply
    r2 = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=30)
    assert not r2.fallback and r2.reply == HELLO
    assert rec.of("failover") == [{"from": "a", "to": "b", "reason": "open"}]


def test_hang_with_slow_s_fails_over_within_the_turn(scripted_endpoint, second_endpoint, greeter,
                                                     engine_room, clock):
    board = BreakerBoard(failure_threshold=3, clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD), hang_s=30))
    second_endpoint.add(reply(HELLO))
    fb = backend([("a", config(scripted_endpoint.base_url, timeout_s=60)), ("b", config(second_endpoint.base_url))],
                 board, rec, slow_s=1.0)
    r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=30)
    assert not r.fallback and r.reply == HELLO
    assert rec.types() == ["fault", "failover"]
    assert rec.of("fault")[0]["kind"] == "endpoint_slow" and rec.of("failover")[0]["reason"] == "failed"
    assert board.breaker(scripted_endpoint.base_url).failures == 1  # counted, not yet open
    assert [e.type for e in r.events].count("model_request") == 1  # one model call as the turn sees it


def test_deadline_after_tokens_does_not_blame_the_endpoint(scripted_endpoint, greeter, engine_room, clock):
    board = BreakerBoard(failure_threshold=1, clock=clock, background=False)
    rec = Recorder()
    scripted_endpoint.add(Scripted(chunks=text_chunks(GOOD), stall_after=3, stall_s=30))
    fb = backend([("a", config(scripted_endpoint.base_url))], board, rec)
    r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=fb, deadline_s=1.5)
    assert r.reason == "deadline_exceeded"
    assert rec.events == [] and board.breaker(scripted_endpoint.base_url).state == CLOSED


def test_only_the_clients_sampling_keys_are_passed(scripted_endpoint, clock):
    board = BreakerBoard(clock=clock, background=False)
    scripted_endpoint.add(reply("ok"))
    fb = backend([config(scripted_endpoint.base_url)], board)
    assert text(fb, budget_s=10, max_tokens=7, temperature=0.1, frequency_penalty=1) == "ok"
    body = scripted_endpoint.requests[0]
    assert body["max_tokens"] == 7 and body["temperature"] == 0.1 and "frequency_penalty" not in body


def test_breaker_changes_from_elsewhere_wait_for_the_callers_thread(scripted_endpoint, clock):
    board = BreakerBoard(failure_threshold=1, clock=clock, background=False)
    rec = Recorder()
    fb = backend([("a", config(scripted_endpoint.base_url))], board, rec)
    t = threading.Thread(target=lambda: board.breaker(scripted_endpoint.base_url).record_failure("x"))
    t.start()
    t.join()
    assert rec.events == []
    assert fb.poll_events() == 1
    assert rec.of("breaker")[0]["state"] == "open" and rec.threads == {threading.get_ident()}


def test_failed_probes_between_two_polls_are_not_repeated(clock):
    board = BreakerBoard(failure_threshold=1, cooldown_s=1, clock=clock, probe=lambda e, t: (False, "refused"),
                         background=False)
    rec = Recorder()
    fb = backend([("a", config("http://127.0.0.1:9/v1")), ("b", config("http://127.0.0.1:8/v1"))], board, rec)
    board.breaker("http://127.0.0.1:9/v1").record_failure("down")
    assert fb.poll_events() == 1 and [p["state"] for p in rec.of("breaker")] == ["open"]
    for _ in range(3):  # half_open -> open, three times
        clock.advance(10)
        board.probe_due()
    assert fb.poll_events() == 0
    board.probe = lambda e, t: (True, "200")
    clock.advance(10)
    board.probe_due()
    board.breaker("http://127.0.0.1:8/v1").record_failure("down")
    assert fb.poll_events() == 2
    assert [(p["endpoint"], p["state"]) for p in rec.of("breaker")] == [("a", "open"), ("a", "closed"),
                                                                         ("b", "open")]


def test_needs_an_endpoint():
    with pytest.raises(ValueError):
        FailoverBackend([], None, BreakerBoard(background=False))


# --- the engine's deadline when the connect itself is slow -------------------------------------------------------


def test_a_slow_connect_does_not_add_a_read_timeout_past_the_deadline(greeter, engine_room, monkeypatch):
    """A connect that takes most of the turn's budget (as when a full accept queue drops the SYN and it gets in
    on a retransmission seconds later) to a server that then never answers. The turn still ends at its deadline:
    the client's watchdog is armed when the connection is made, not when the headers arrive (before: deadline +
    up to one more budget). The slow connect is the real socket connect, delayed: a full accept queue's timing
    is the kernel's (a retransmission can miss the freed slot, and a sandboxed kernel reset the connection
    instead), which made the test flaky."""
    import socket as S

    srv = S.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.1)
    port = srv.getsockname()[1]
    held, connects, stop = [], [], threading.Event()

    def hold():  # accept, never answer
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    real_connect = S.create_connection

    def slow_connect(address, *args, **kwargs):  # httpcore's sync backend connects through this
        time.sleep(6.0)
        connects.append(address)
        return real_connect(address, *args, **kwargs)

    monkeypatch.setattr(S, "create_connection", slow_connect)
    t = threading.Thread(target=hold, daemon=True)
    t.start()
    budget = 8.0
    try:
        client = OpenAIChatClient(ModelEndpoint(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=60,
                                                connect_timeout_s=30))
        start = time.monotonic()
        r = run_turn(manifest=greeter, room=engine_room, comments=COMMENT, backend=client, deadline_s=budget)
        elapsed = time.monotonic() - start
        client.close()
    finally:
        stop.set()
        t.join(5)
        for s in held:
            s.close()
        srv.close()
    assert connects == [("127.0.0.1", port)] and held, "the client never got in: the scenario did not happen"
    assert r.reason == "deadline_exceeded"
    assert elapsed < budget + 2.0  # before the fix: connect (6 s) + a full budget of waiting for headers


def test_probing_resumes_when_the_probe_thread_is_gone(scripted_endpoint, second_endpoint):
    """A forked worker inherits open breakers but not the board's thread: the next call starts it again."""
    board = BreakerBoard(failure_threshold=1, cooldown_s=0.2, max_cooldown_s=0.4)
    try:
        board.close()  # no thread can start now: an open breaker stays open...
        board.breaker(config(scripted_endpoint.base_url)).record_failure("down")
        second_endpoint.add(reply("b"))
        fb = backend([("a", config(scripted_endpoint.base_url)), ("b", config(second_endpoint.base_url))], board)
        board._stopped = False  # ...until the next call finds no thread probing
        assert text(fb, budget_s=10) == "b"
        assert wait_until(lambda: board.breaker(scripted_endpoint.base_url).state == CLOSED, 10)
    finally:
        board.close()
