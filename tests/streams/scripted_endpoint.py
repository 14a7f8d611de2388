"""A real loopback HTTP server that plays scripted OpenAI-style chat-completion responses (SSE), so tests
exercise the real client (httpx, SSE parsing, timeouts, HTTP errors) without a model.

Queue responses with :meth:`ScriptedEndpoint.add`; each request to ``POST /v1/chat/completions`` takes the
next one. Every request body is recorded in ``requests``, its headers in ``headers``.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml


@dataclass
class Scripted:
    """One response: SSE ``chunks`` (dicts, or raw strings sent as-is after ``data: ``), or an HTTP error.

    ``hang_s`` sleeps before the headers; ``stall_s`` sleeps after ``stall_after`` chunks (mid-stream)."""

    chunks: list[Any] = field(default_factory=list)
    status: int = 200
    error_body: str = ""
    hang_s: float = 0.0
    stall_after: int | None = None
    stall_s: float = 0.0
    done: bool = True


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_chunks(text: str, size: int = 7, *, channel: str = "content") -> list[dict[str, Any]]:
    key = "content" if channel == "content" else "reasoning_content"
    return [_chunk({key: text[i : i + size]}) for i in range(0, len(text), size)]


def tool_call_chunks(calls: list[tuple[str, str]], *, size: int = 5) -> list[dict[str, Any]]:
    """Native tool calls (name, raw arguments string), arguments split across deltas as servers do."""
    out = []
    for index, (name, arguments) in enumerate(calls):
        out.append(_chunk({"tool_calls": [{"index": index, "id": f"chatcmpl-tool-{index}", "type": "function",
                                            "function": {"name": name, "arguments": ""}}]}))
        for i in range(0, len(arguments), size):
            out.append(_chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + size]}}]}))
    return out


def finish_chunk(reason: str = "stop") -> dict[str, Any]:
    return _chunk({}, reason)


def reply(text: str, *, reasoning: str = "", size: int = 7) -> Scripted:
    """A plain streamed text response (optionally preceded by reasoning_content deltas)."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    if reasoning:
        chunks += text_chunks(reasoning, size, channel="reasoning")
    return Scripted(chunks + text_chunks(text, size) + [finish_chunk("stop")])


def native_calls(*calls: tuple[str, dict[str, Any] | str], text: str = "") -> Scripted:
    raw = [(n, a if isinstance(a, str) else json.dumps(a)) for n, a in calls]
    chunks = [_chunk({"role": "assistant", "content": None})]
    if text:
        chunks += text_chunks(text)
    return Scripted(chunks + tool_call_chunks(raw) + [finish_chunk("tool_calls")])


def hermes_calls(*calls: tuple[str, dict[str, Any] | str], prefix: str = "") -> Scripted:
    """Tool calls written as Hermes ``<tool_call>`` text blocks (no native tool_calls)."""
    text = prefix
    for name, args in calls:
        text += "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    return reply(text)


def http_error(status: int, body: str = '{"error": {"message": "scripted failure"}}') -> Scripted:
    return Scripted(status=status, error_body=body)


class ScriptedEndpoint:
    def __init__(self) -> None:
        self.queue: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.stop = threading.Event()
        self.healthy = True  # GET /health and /v1/models (recovery probes): 200, or 503 when False
        self.probes: list[str] = []
        self.no_health = False  # a server without /health (OpenAI): probes fall back to /v1/models
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                endpoint.probes.append(self.path)
                known = ("/v1/models",) if endpoint.no_health else ("/health", "/v1/models")
                ok = endpoint.healthy and self.path in known
                data = b'{"object": "list", "data": [{"id": "scripted"}]}' if ok else b"{}"
                self.send_response(200 if ok else (503 if self.path in known else 404))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                body["_path"] = self.path
                endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
                endpoint.requests.append(body)
                try:
                    s = endpoint.queue.popleft()
                except IndexError:
                    s = http_error(599, '{"error": {"message": "no scripted response left"}}')
                if s.hang_s:
                    endpoint.stop.wait(s.hang_s)
                try:
                    if s.status != 200:
                        data = s.error_body.encode()
                        self.send_response(s.status)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for i, chunk in enumerate(s.chunks):
                        if s.stall_after is not None and i == s.stall_after:
                            self.wfile.flush()
                            endpoint.stop.wait(s.stall_s)
                        payload = chunk if isinstance(chunk, str) else json.dumps(chunk)
                        self.wfile.write(f"data: {payload}\n\n".encode())
                    if s.done:
                        self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def add(self, *responses: Scripted) -> ScriptedEndpoint:
        self.queue.extend(responses)
        return self

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    """A loopback port nobody listens on (for connection-refused tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred: Any, timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


# --- fixtures (imported by tests/streams/conftest.py) ---------------------------------------------

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"


@pytest.fixture
def scripted_endpoint():
    ep = ScriptedEndpoint()
    yield ep
    ep.close()


@pytest.fixture(scope="session")
def _engine_demo_manifest():
    from harness_editor.schemas import manifest_from_yaml

    return manifest_from_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def engine_manifest(_engine_demo_manifest):
    return _engine_demo_manifest


@pytest.fixture(scope="session")
def _engine_demo_room():
    return yaml.safe_load((DEMO / "room.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def engine_room(_engine_demo_room):
    return copy.deepcopy(_engine_demo_room)


@pytest.fixture
def engine_client(scripted_endpoint):
    from streams.engine.client import ModelEndpoint, OpenAIChatClient

    clients = []

    def make(**overrides):
        fields = {"base_url": scripted_endpoint.base_url, "model": "scripted", "timeout_s": 5.0,
                  "connect_timeout_s": 1.0, "kind": "vllm"}
        fields.update(overrides)
        c = OpenAIChatClient(ModelEndpoint(**fields))
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
