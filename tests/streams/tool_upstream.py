"""A real loopback HTTP server playing an order-management JSON API, for the ``http`` tool binding tests.

Routes (GET unless said):

- ``/api/orders/<id>``: ``{"data": {"order": {...}}}`` (404 with ``{"error": "no such order"}`` for ``missing``);
- ``POST /api/orders``: echoes the JSON body under ``{"created": ...}``;
- ``/api/search``: echoes the query parameters;
- ``/api/list``: a JSON list;
- ``/api/slow``: sleeps ``slow_s`` before answering;
- ``/api/trickle``: sends a byte every 0.2 s for 5 s;
- ``/api/fail500``: always 500; ``/api/flaky``: 500 ``flaky_failures`` times, then an answer;
- ``/api/big``: an answer of ``big_bytes`` bytes with a Content-Length; ``/api/big-chunked``: the same, chunked;
- ``/api/malformed``: HTML, not JSON;
- ``/api/echo-headers``: the request's headers as JSON (an upstream that leaks what it was sent).

Every request is recorded (method, raw path, headers, body) in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


class ToolUpstream:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.slow_s = 2.0
        self.flaky_failures = 1
        self.big_bytes = 200_000
        self._flaky_seen = 0
        self._lock = threading.Lock()
        self.stop = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes | str | Any, content_type: str = "application/json") -> None:
                if not isinstance(body, (bytes, str)):
                    body = json.dumps(body)
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _record(self, body: bytes) -> None:
                with upstream._lock:
                    upstream.requests.append({"method": self.command, "path": self.path,
                                              "headers": dict(self.headers.items()), "body": body})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                self._record(body)
                if urlsplit(self.path).path == "/api/orders":
                    self._send(201, {"created": json.loads(body or b"null")})
                else:
                    self._send(404, {"error": "no route"})

            def do_GET(self) -> None:  # noqa: N802
                self._record(b"")
                parts = urlsplit(self.path)
                path = parts.path
                if path.startswith("/api/orders/"):
                    order_id = path[len("/api/orders/"):]
                    if order_id == "missing":
                        return self._send(404, {"error": "no such order"})
                    return self._send(200, {"data": {"order": {"id": order_id, "status": "shipped",
                                                               "items": [{"sku": "MUG-1", "qty": 2}]}}})
                if path == "/api/search":
                    return self._send(200, {"query": dict(parse_qsl(parts.query))})
                if path == "/api/list":
                    return self._send(200, [{"sku": "A"}, {"sku": "B"}])
                if path == "/api/slow":
                    upstream.stop.wait(upstream.slow_s)
                    return self._send(200, {"late": True})
                if path == "/api/trickle":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    try:
                        for _ in range(25):
                            if upstream.stop.wait(0.2):
                                return
                            self.wfile.write(b" ")
                            self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return None
                if path == "/api/fail500":
                    return self._send(500, {"error": "upstream broke"})
                if path == "/api/flaky":
                    with upstream._lock:
                        upstream._flaky_seen += 1
                        fail = upstream._flaky_seen <= upstream.flaky_failures
                    return self._send(503, {"error": "busy"}) if fail else self._send(200, {"ok": True})
                if path == "/api/big":
                    return self._send(200, json.dumps({"pad": "x" * upstream.big_bytes}))
                if path == "/api/big-chunked":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        piece = b"x" * 8192
                        self.wfile.write(b'%x\r\n{"pad": "\r\n' % len(b'{"pad": "'))
                        for _ in range(upstream.big_bytes // len(piece) + 1):
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.write(b'2\r\n"}\r\n0\r\n\r\n')
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return None
                if path == "/api/malformed":
                    return self._send(200, "<html><body>Service temporarily unavailable</body></html>", "text/html")
                if path == "/api/echo-headers":
                    return self._send(200, {"you_sent": dict(self.headers.items())})
                return self._send(404, {"error": "no route"})

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that stops reading (the size cap, a timeout) is what these tests do on purpose

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/api"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        with self._lock:
            return [r["path"] for r in self.requests]

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def wait_for(pred: Any, timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False
