"""The MCP binding (streams.tool_bindings.mcp, .mcp_sessions) against a real MCP server the tests start:
tests/streams/mcp_test_server.py, spawned over stdio by the binding itself (kept running between calls, stopped
when idle, on a timeout, and by close_mcp_sessions), and over streamable HTTP on a free port. No database."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from streams.tool_bindings import mcp_sessions
from streams.tool_bindings.mcp import McpFault, McpServer, call_mcp_tool, list_mcp_tools
from streams.tool_bindings.mcp_sessions import close_mcp_sessions, running_stdio_servers
from tests.streams import mcp_test_server as srv

TOKEN = "tok-4f1c9e2b7a"  # the HTTP server's bearer token: a secret of the binding
SECRETS = {"orders_token": TOKEN}
ORDER_TOOLS = {"orders.lookup", "orders.cancel", "orders.create", "orders.refund_status", "orders/track", "orders.fail",
               "orders.slow", "debug.echo"}


@pytest.fixture(scope="module")
def http_url():
    proc, url = srv.start_http(TOKEN)
    yield url
    srv.stop_http(proc)


@pytest.fixture
def tag():
    """Marks the stdio servers a test starts; after the test, stopping this process's servers leaves none."""
    tag = uuid.uuid4().hex
    yield tag
    close_mcp_sessions()
    assert srv.tagged_pids(tag) == [], "a stdio MCP server outlived close_mcp_sessions"


@pytest.fixture
def stdio_server(tag):
    return McpServer("orders", "stdio", command=srv.stdio_command(tag), env={"ORDERS_TOKEN": "{secret:orders_token}"})


@pytest.fixture
def http_server(http_url):
    return McpServer("orders", "http", url=http_url, headers={"Authorization": "Bearer {secret:orders_token}"})


@pytest.fixture(params=["stdio", "http"])
def server(request):
    return request.getfixturevalue(f"{request.param}_server")


# --- list and call, both transports ---------------------------------------------------------------------------


def test_list_tools(server):
    tools = list_mcp_tools(server, secrets=SECRETS)
    assert {t["name"] for t in tools} == ORDER_TOOLS
    lookup = next(t for t in tools if t["name"] == "orders.lookup")
    assert lookup["description"] == "Look up an order by its id: status, total and items."
    assert lookup["inputSchema"]["type"] == "object"
    assert lookup["inputSchema"]["properties"]["order_id"]["type"] == "string"
    assert lookup["inputSchema"]["required"] == ["order_id"]
    # what it says beyond its input, in MCP's keys (the importer carries them into the manifest)
    assert set(lookup) == {"name", "description", "inputSchema", "title", "annotations", "outputSchema"}
    assert lookup["title"] == "Look up an order"
    assert lookup["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert lookup["outputSchema"]["properties"]["status"]["type"] == "string"
    track = next(t for t in tools if t["name"] == "orders/track")
    assert set(track) == {"name", "description", "inputSchema"}  # says nothing: nothing is made up


def test_call_structured_output(server):
    assert call_mcp_tool(server, "orders.lookup", {"order_id": "A100"}, timeout_s=10, secrets=SECRETS) == {
        "order_id": "A100", "status": "shipped", "total": 59.9, "items": ["serum 30ml"]}
    assert call_mcp_tool(server, "orders.cancel", {"order_id": "A101", "reason": "late"}, timeout_s=10,
                         secrets=SECRETS) == {"order_id": "A101", "cancelled": True, "reason": "late"}


def test_call_with_nested_arguments(server):
    tools = {t["name"]: t for t in list_mcp_tools(server, secrets=SECRETS)}
    assert tools["orders.create"]["inputSchema"]["properties"]["customer"] == {"$ref": "#/$defs/Customer"}
    result = call_mcp_tool(server, "orders.create", {"customer": {"id": "c7"}, "items": [{"sku": "s1", "qty": 2},
                                                                                          {"sku": "s2"}]},
                           timeout_s=10, secrets=SECRETS)
    assert result == {"order_id": "A200", "customer": "c7", "lines": 3, "note": None}


def test_call_json_text_and_plain_text(server):
    assert call_mcp_tool(server, "orders.refund_status", {"order_id": "A1"}, timeout_s=10, secrets=SECRETS) == {
        "order_id": "A1", "refund": "none requested"}
    assert call_mcp_tool(server, "orders/track", {"order_id": "A100"}, timeout_s=10, secrets=SECRETS) == {
        "text": "Order A100 is shipped with SF"}


def test_tool_error(server):
    result = call_mcp_tool(server, "orders.fail", {"order_id": "A100"}, timeout_s=10, secrets=SECRETS)
    assert result["code"] == "tool_error"
    assert "order system is down" in result["error"]
    invalid = call_mcp_tool(server, "orders.lookup", {"order_id": 5}, timeout_s=10, secrets=SECRETS)
    assert invalid["code"] == "tool_error" and "order_id" in invalid["error"]


def test_timeout(server, tag):
    started = time.monotonic()
    result = call_mcp_tool(server, "orders.slow", {"seconds": 30}, timeout_s=1.5, secrets=SECRETS)
    elapsed = time.monotonic() - started
    assert result == {"error": "MCP server 'orders' did not answer within 1.5 s", "code": "timeout"}
    # the SDK's stdio shutdown waits at most a few bounded grace periods for the sleeping server
    assert elapsed < 12, elapsed


def test_secret_reaches_the_server_and_never_comes_back(server):
    echoed = call_mcp_tool(server, "debug.echo", {}, timeout_s=10, secrets=SECRETS)
    assert TOKEN not in repr(echoed)
    if server.transport == "http":
        assert echoed["authorization"] == "Bearer [secret]"  # the server got the token; the answer hides it
    else:
        assert echoed["env_token"] == "[secret]"


def test_missing_secret_is_a_fault(server):
    result = call_mcp_tool(server, "orders.lookup", {"order_id": "A100"}, timeout_s=5, secrets={})
    assert result == {"error": "the secret 'orders_token' (" + ("header Authorization" if server.transport == "http"
                                                               else "env ORDERS_TOKEN") + ") is not configured",
                      "code": "binding_unavailable"}


def test_server_timeout_bounds_the_binding_timeout(http_url):
    server = McpServer("orders", "http", url=http_url, headers={"Authorization": "Bearer {secret:orders_token}"},
                       timeout_s=1.0)
    result = call_mcp_tool(server, "orders.slow", {"seconds": 10}, timeout_s=60, secrets=SECRETS)
    assert result["code"] == "timeout" and "1 s" in result["error"]


# --- servers that are not there ---------------------------------------------------------------------------------


def test_http_server_not_running():
    server = McpServer("gone", "http", url=f"http://127.0.0.1:{srv.free_port()}/mcp")
    result = call_mcp_tool(server, "orders.lookup", {"order_id": "A100"}, timeout_s=5)
    assert result == {"error": "MCP server 'gone' cannot be reached (ConnectError)", "code": "binding_unavailable"}
    with pytest.raises(McpFault) as caught:
        list_mcp_tools(server, timeout_s=5)
    assert caught.value.code == "binding_unavailable"


def test_http_wrong_token_is_a_fault_without_the_token(http_url):
    server = McpServer("orders", "http", url=http_url, headers={"Authorization": "Bearer {secret:orders_token}"})
    wrong = "wrong-token-0042"
    result = call_mcp_tool(server, "orders.lookup", {"order_id": "A100"}, timeout_s=5,
                           secrets={"orders_token": wrong})
    assert result["code"] == "binding_unavailable"
    assert wrong not in result["error"] and TOKEN not in result["error"]


def test_stdio_command_not_found():
    server = McpServer("gone", "stdio", command=("/nonexistent/mcp-server", "--stdio"))
    assert call_mcp_tool(server, "orders.lookup", {}, timeout_s=5) == {
        "error": "MCP server 'gone': its command cannot be started (FileNotFoundError)",
        "code": "binding_unavailable"}


def test_stdio_server_that_dies_at_start_says_why(tag):
    import sys

    server = McpServer("broken", "stdio", command=(
        sys.executable, "-c", "import sys; sys.stderr.write('config file orders.toml missing\\n'); sys.exit(3)",
        "--tag", tag))
    result = call_mcp_tool(server, "orders.lookup", {}, timeout_s=5)
    assert result["code"] == "binding_unavailable"
    assert "config file orders.toml missing" in result["error"]
    assert srv.tagged_pids(tag) == []


def test_a_secret_in_a_dying_servers_stderr_is_hidden(tag):
    import sys

    server = McpServer("broken", "stdio", env={"ORDERS_TOKEN": "{secret:orders_token}"}, command=(
        sys.executable, "-c",
        "import os, sys; sys.stderr.write('bad token ' + os.environ['ORDERS_TOKEN']); sys.exit(3)",
        "--tag", tag))
    result = call_mcp_tool(server, "orders.lookup", {}, timeout_s=5, secrets=SECRETS)
    assert result["code"] == "binding_unavailable"
    assert "bad token [secret]" in result["error"] and TOKEN not in result["error"]


# --- stdio servers: kept running between calls, never left behind ------------------------------------------------


def _pid(server, **kw):
    return call_mcp_tool(server, "debug.echo", {}, timeout_s=20, **kw)["pid"]


def test_a_stdio_server_serves_many_calls_then_stops(tag):
    server = McpServer("orders", "stdio", command=srv.stdio_command(tag))
    first = _pid(server)
    for order_id in ("A100", "A101", "A100"):
        assert call_mcp_tool(server, "orders.lookup", {"order_id": order_id}, timeout_s=10)["order_id"] == order_id
    assert _pid(server) == first and srv.tagged_pids(tag) == [first] and running_stdio_servers() == 1
    close_mcp_sessions()
    assert srv.tagged_pids(tag) == [] and running_stdio_servers() == 0
    assert _pid(server) != first  # the next call starts a fresh one


def test_a_timeout_stops_the_server_before_the_call_returns(tag):
    server = McpServer("orders", "stdio", command=srv.stdio_command(tag))
    _pid(server)
    assert call_mcp_tool(server, "orders.slow", {"seconds": 60}, timeout_s=1)["code"] == "timeout"
    assert srv.tagged_pids(tag) == []  # the sleeping server was killed, not left behind
    assert call_mcp_tool(server, "orders.lookup", {"order_id": "A101"}, timeout_s=20)["status"] == "paid"


def test_an_idle_server_is_stopped(tag, monkeypatch):
    monkeypatch.setattr(mcp_sessions, "STDIO_IDLE_S", 0.5)
    server = McpServer("orders", "stdio", command=srv.stdio_command(tag))
    _pid(server)
    deadline = time.monotonic() + 15
    while srv.tagged_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert srv.tagged_pids(tag) == [] and running_stdio_servers() == 0


def test_a_server_that_died_while_idle(tag):
    """The next call gets a fault (it is not retried: tools may not be idempotent) unless the death was noticed
    first (then it starts afresh); either way the call after it runs on a fresh server."""
    import os
    import signal

    server = McpServer("orders", "stdio", command=srv.stdio_command(tag))
    first = _pid(server)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while srv.tagged_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    first_call = call_mcp_tool(server, "orders.lookup", {"order_id": "A100"}, timeout_s=10)
    assert first_call.get("code") == "mcp_error" or first_call.get("status") == "shipped", first_call
    assert _pid(server) not in (first, None)


def test_a_changed_secret_starts_another_server(tag):
    server = McpServer("orders", "stdio", command=srv.stdio_command(tag), env={"ORDERS_TOKEN": "{secret:t}"})
    one = call_mcp_tool(server, "debug.echo", {}, timeout_s=20, secrets={"t": "first-secret"})
    two = call_mcp_tool(server, "debug.echo", {}, timeout_s=20, secrets={"t": "second-secret"})
    assert one["env_token"] == two["env_token"] == "[secret]" and one["pid"] != two["pid"]
    assert running_stdio_servers() == 2


def test_calls_from_several_threads_at_once(tag, http_server):
    """The turn engine runs in threads: stdio calls share their server's connection, HTTP calls have their own."""
    from concurrent.futures import ThreadPoolExecutor

    stdio = McpServer("orders", "stdio", command=srv.stdio_command(tag))
    jobs = [(stdio, "A100"), (stdio, "A101"), (http_server, "A100"), (http_server, "A101")]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: call_mcp_tool(job[0], "orders.lookup", {"order_id": job[1]},
                                                           timeout_s=20, secrets=SECRETS), jobs))
    assert [r["order_id"] for r in results] == ["A100", "A101", "A100", "A101"]
    assert len(srv.tagged_pids(tag)) == 1


def test_a_stdio_call_spawns_its_server(tag):
    """The call really runs the tagged process (so the leak checks look for the right thing)."""
    server = McpServer("orders", "stdio", command=srv.stdio_command(tag))
    pid = _pid(server)
    assert srv.tagged_pids(tag) == [pid]


def test_called_from_inside_a_running_event_loop(http_server):
    """An async caller (a Channels consumer, say) is not blocked inside its own loop: the call runs in a private
    loop on a thread of its own."""

    async def caller():
        return call_mcp_tool(http_server, "orders.lookup", {"order_id": "A101"}, timeout_s=10, secrets=SECRETS)

    assert asyncio.run(caller())["status"] == "paid"


# --- configuration -----------------------------------------------------------------------------------------------


def test_server_config_is_checked():
    with pytest.raises(ValueError, match="needs a command"):
        McpServer("x", "stdio")
    with pytest.raises(ValueError, match="http"):
        McpServer("x", "http", url="ftp://example.org/")
    with pytest.raises(ValueError, match="transport"):
        McpServer("x", "ws", url="http://127.0.0.1/")  # type: ignore[arg-type]
    assert McpServer("x", "stdio", command="python -m srv --flag").command == ("python", "-m", "srv", "--flag")


def test_result_conversion_of_other_content():
    from mcp_types import CallToolResult, ImageContent, TextContent

    from streams.tool_bindings.mcp import result_to_dict

    image = ImageContent(type="image", data="aGVsbG8=", mime_type="image/png")
    assert result_to_dict(CallToolResult(content=[TextContent(type="text", text="a chart"), image])) == {
        "text": "a chart", "content": [{"type": "image", "mimeType": "image/png"}]}
    assert result_to_dict(CallToolResult(content=[TextContent(type="text", text="[1, 2]")])) == {"result": [1, 2]}
    assert result_to_dict(CallToolResult(content=[], structured_content=[1, 2])) == {"result": [1, 2]}
    assert result_to_dict(CallToolResult(content=[], is_error=True)) == {
        "error": "the tool reported an error", "code": "tool_error"}


# --- the outbound allow-list (issue 26) -------------------------------------------------------------------------


def test_an_http_server_on_a_port_not_allowed_is_refused_without_connecting():
    import socket

    from streams.tool_bindings.allow_lists import parse_mcp_servers

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        server = McpServer("cache", "http", url=f"http://127.0.0.1:{port}/mcp", outbound_hosts=("127.0.0.1",))
        result = call_mcp_tool(server, "orders.lookup", {"order_id": "A100"}, timeout_s=5)
        assert result["code"] == "binding_unavailable" and "HAT_OUTBOUND_HOSTS" in result["error"]
        with pytest.raises(McpFault) as caught:
            list_mcp_tools(server, timeout_s=5)
        assert caught.value.code == "binding_unavailable"
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing ever connected
    entry = {"cache": {"transport": "http", "url": f"http://LOCALHOST.:{port}/mcp"}}
    with pytest.raises(ValueError, match=rf"HAT_MCP_SERVERS\.cache\.url: the host localhost:{port} is not on"):
        parse_mcp_servers(entry, outbound_hosts=["127.0.0.1", "localhost"])
    assert parse_mcp_servers(entry, outbound_hosts=[f"localhost:{port}"])["cache"].url.endswith("/mcp")
