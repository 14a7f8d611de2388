"""A small order-management MCP server for the MCP binding's tests, built with the SDK's own server (MCPServer).

Run over stdio (``python mcp_test_server.py stdio``: what a stdio binding spawns) or streamable HTTP
(``python mcp_test_server.py http --port N [--token T]``: the tests start it on a free port and stop it after).

Its tools cover what a binding must handle: MCP tool annotations (``orders.lookup`` read-only with a title,
``orders.cancel`` destructive, ``orders.create`` writes but destroys nothing, the rest say nothing), structured output (``orders.lookup``, ``orders.cancel``, and
``orders.create`` with nested models in its input schema), a JSON text answer (``orders.refund_status``), a
plain-text answer with a name that is not a valid manifest tool name (``orders/track``), a tool that raises
(``orders.fail``: an ``isError`` result), one that sleeps (``orders.slow``: timeouts), and ``debug.echo`` that
answers with what it was sent (the request's Authorization header, an environment variable) so tests can prove a
secret reached the server and never came back out. The server and its tools are built on demand
(:func:`build_server`): importing this module for its helpers starts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

ORDERS: dict[str, dict[str, Any]] = {
    "A100": {"order_id": "A100", "status": "shipped", "total": 59.9, "items": ["serum 30ml"], "carrier": "SF"},
    "A101": {"order_id": "A101", "status": "paid", "total": 19.0, "items": ["lip balm"], "carrier": ""},
}


class Order(BaseModel):
    order_id: str
    status: str
    total: float
    items: list[str]


class Item(BaseModel):
    sku: str
    qty: int = 1


class Customer(BaseModel):
    id: str
    email: str | None = None


class Cancellation(BaseModel):
    order_id: str
    cancelled: bool
    reason: str


def build_server() -> MCPServer:
    """The server and its tools (built on demand: importing this module for its helpers starts nothing)."""
    server = MCPServer("orders-test", instructions="Order management for the MCP binding's tests.",
                       log_level="ERROR")

    @server.tool(name="orders.lookup", description="Look up an order by its id: status, total and items.",
                 title="Look up an order", annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def orders_lookup(order_id: str) -> Order:
        order = ORDERS.get(order_id)
        if order is None:
            raise ValueError(f"no order {order_id}")
        return Order(**{k: order[k] for k in ("order_id", "status", "total", "items")})

    @server.tool(name="orders.cancel", description="Cancel an order that has not shipped yet.",
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    def orders_cancel(order_id: str, reason: str = "customer request") -> Cancellation:
        order = ORDERS.get(order_id)
        if order is None:
            raise ValueError(f"no order {order_id}")
        journal = os.environ.get("ORDERS_JOURNAL")  # a side effect a test can see: the cancellation happened
        if journal:
            with open(journal, "a", encoding="utf-8") as f:
                f.write(f"cancel {order_id}\n")
        return Cancellation(order_id=order_id, cancelled=order["status"] != "shipped", reason=reason)

    @server.tool(name="orders.create", description="Create an order for a customer (nested objects: $defs/$ref).",
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def orders_create(customer: Customer, items: list[Item], note: str | None = None) -> dict[str, Any]:
        return {"order_id": "A200", "customer": customer.id, "lines": sum(i.qty for i in items), "note": note}

    @server.tool(name="orders.refund_status", description="Refund status of an order, as JSON text.",
                 structured_output=False)
    def orders_refund_status(order_id: str) -> str:
        return json.dumps({"order_id": order_id, "refund": "none requested"})

    @server.tool(name="orders/track", description="Where an order is, in words.", structured_output=False)
    def orders_track(order_id: str) -> str:
        order = ORDERS.get(order_id, {})
        return f"Order {order_id} is {order.get('status', 'unknown')}" + (
            f" with {order['carrier']}" if order.get("carrier") else "")

    @server.tool(name="orders.fail", description="Always fails: the order system is down.")
    def orders_fail(order_id: str) -> str:
        raise ToolError("order system is down")

    @server.tool(name="orders.slow", description="Answers after a number of seconds.")
    async def orders_slow(seconds: float) -> dict[str, Any]:
        import anyio

        await anyio.sleep(seconds)
        return {"slept": seconds}

    @server.tool(name="debug.echo", description="What the server received: the Authorization header, ORDERS_TOKEN.")
    def debug_echo(ctx: Context) -> dict[str, Any]:
        headers = ctx.headers or {}
        return {"authorization": headers.get("authorization", ""), "env_token": os.environ.get("ORDERS_TOKEN", ""),
                "pid": os.getpid()}

    return server


def _http_app(token: str):
    """The streamable HTTP app; with a token, every request needs ``Authorization: Bearer <token>`` (else 401)."""
    from starlette.responses import JSONResponse

    app = build_server().streamable_http_app(json_response=False)
    if not token:
        return app

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


# --- for the tests: start and find servers ---------------------------------------------------------------------

SCRIPT = os.path.abspath(__file__)


def stdio_command(tag: str = "", *extra: str) -> tuple[str, ...]:
    """The argv a stdio binding spawns (tagged, so a test can look for the process afterwards)."""
    import sys

    return (sys.executable, SCRIPT, "stdio", *(("--tag", tag) if tag else ()), *extra)


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose command line carries ``--tag <tag>`` (zombies are not alive: they are skipped)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if tag.encode() in argv and b"--tag" in argv and state != b"Z":
            found.append(int(entry))
    return found


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http(token: str = "", *, port: int | None = None, timeout_s: float = 30.0):
    """Start the server over streamable HTTP on a free port; returns (process, url). Stop it with
    :func:`stop_http`."""
    import socket
    import subprocess
    import sys

    port = port or free_port()
    proc = subprocess.Popen([sys.executable, SCRIPT, "http", "--port", str(port), "--token", token],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_http(proc)
                raise RuntimeError(f"the MCP test server did not start on port {port}") from None
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/mcp"


def stop_http(proc) -> None:
    import subprocess

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="")
    parser.add_argument("--startup-delay", type=float, default=0.0)
    parser.add_argument("--tag", default="", help="ignored: marks the process so tests can find it")
    args = parser.parse_args()
    time.sleep(args.startup_delay)
    if args.transport == "stdio":
        build_server().run("stdio")
        return
    import uvicorn

    uvicorn.run(_http_app(args.token), host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
