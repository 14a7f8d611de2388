"""A real turn (streams.engine.turn.run_turn, the scripted model endpoint) calling a manifest tool bound to an MCP
server that answers for real: the test MCP server over stdio and over streamable HTTP, through the one dispatcher
(streams.tool_bindings). And the same turn with the server down: the model sees a tool fault, never other data."""

from __future__ import annotations

import json
import uuid

import pytest

from harness_editor.schemas import parse_manifest
from streams.engine.turn import run_turn
from streams.tool_bindings import ToolRuntime
from streams.tool_bindings.mcp import McpServer
from streams.tool_bindings.mcp_sessions import close_mcp_sessions
from tests.streams import mcp_test_server as srv
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply

TOKEN = "tok-turn-5e02aa"
COMMENT = [{"viewer": "amy", "text": "where is my order A100? did it ship?"}]
REPLY = "Good news, your order A100 has shipped and is on its way with SF."


@pytest.fixture(scope="module")
def http_url():
    proc, url = srv.start_http(TOKEN)
    yield url
    srv.stop_http(proc)


def _with_mcp_tool(manifest, server: str):
    """The demo harness plus ``orders_lookup``, bound to the MCP server's ``orders.lookup`` (as an import makes it)."""
    data = manifest.model_dump(mode="json")
    data["tools"].append({
        "name": "orders_lookup",
        "description": "Look up an order by its id: status, total and items.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        "binding": {"kind": "mcp", "server": server, "tool": "orders.lookup", "timeout_s": 20},
    })
    return parse_manifest(data)


def _script(endpoint):
    endpoint.add(hermes_calls(("load_skill", {"skill_id": "shipping_after_sales"})),
                 native_calls(("orders_lookup", {"order_id": "A100"})), reply(REPLY))


@pytest.fixture(params=["stdio", "http"])
def runtime(request):
    tag = uuid.uuid4().hex
    if request.param == "stdio":
        server = McpServer("orders", "stdio", command=srv.stdio_command(tag), timeout_s=30)
        yield ToolRuntime(mcp_servers={"orders": server})
        close_mcp_sessions()
        assert srv.tagged_pids(tag) == []
    else:
        url = request.getfixturevalue("http_url")
        server = McpServer("orders", "http", url=url, headers={"Authorization": "Bearer {secret:orders_token}"})
        yield ToolRuntime(mcp_servers={"orders": server}, secrets={"orders_token": TOKEN})


def test_turn_calls_an_mcp_bound_tool(scripted_endpoint, engine_client, engine_manifest, engine_room, runtime):
    _script(scripted_endpoint)
    manifest = _with_mcp_tool(engine_manifest, "orders")
    result = run_turn(manifest=manifest, room=engine_room, comments=COMMENT, backend=engine_client(timeout_s=30),
                      tools=runtime, deadline_s=120)
    tool_results = [e for e in result.events if e.type == "tool_result" and e.name == "orders_lookup"]
    assert len(tool_results) == 1
    event = tool_results[0]
    assert event.binding == "mcp:orders/orders.lookup"
    assert event.error is None
    assert event.result == {"order_id": "A100", "status": "shipped", "total": 59.9, "items": ["serum 30ml"]}
    # what the model got back for its call: the MCP server's answer, with the call's id
    third = scripted_endpoint.requests[2]["messages"]
    assert third[-1]["role"] == "tool" and third[-1]["tool_call_id"] == "chatcmpl-tool-0"
    assert json.loads(third[-1]["content"])["status"] == "shipped"
    assert (result.reply, result.fallback) == (REPLY, False), result.reason


def test_turn_with_the_mcp_server_down_gets_a_fault(scripted_endpoint, engine_client, engine_manifest, engine_room):
    _script(scripted_endpoint)
    manifest = _with_mcp_tool(engine_manifest, "orders")
    down = McpServer("orders", "http", url=f"http://127.0.0.1:{srv.free_port()}/mcp", timeout_s=5)
    result = run_turn(manifest=manifest, room=engine_room, comments=COMMENT, backend=engine_client(timeout_s=30),
                      tools=ToolRuntime(mcp_servers={"orders": down}), deadline_s=60)
    event = next(e for e in result.events if e.type == "tool_result" and e.name == "orders_lookup")
    assert event.binding == "mcp:orders/orders.lookup"
    seen = json.loads(scripted_endpoint.requests[2]["messages"][-1]["content"])
    assert seen == {"error": "MCP server 'orders' cannot be reached (ConnectError)", "code": "binding_unavailable"}
    assert "campaign" not in json.dumps(seen) and "price" not in json.dumps(seen)


def test_turn_without_the_server_on_this_host(scripted_endpoint, engine_client, engine_manifest, engine_room):
    """A binding to a server not on this host's allow-list: the dispatcher's fault, no call made."""
    _script(scripted_endpoint)
    manifest = _with_mcp_tool(engine_manifest, "elsewhere")
    result = run_turn(manifest=manifest, room=engine_room, comments=COMMENT, backend=engine_client(timeout_s=30),
                      tools=ToolRuntime(), deadline_s=60)
    seen = json.loads(scripted_endpoint.requests[2]["messages"][-1]["content"])
    assert seen["code"] == "binding_unavailable" and "elsewhere" in seen["error"]
    assert any(e.type == "tool_result" and e.name == "orders_lookup" for e in result.events)


@pytest.mark.django_db
def test_a_preview_turn_calls_an_mcp_bound_tool(manager, settings, harness_with_history, scripted_model,
                                                 scripted_endpoint, django_capture_on_commit_callbacks):
    """The preview room's own turn (the service the interactive worker runs) reaches the MCP server of this host's
    allow-list (HAT_MCP_SERVERS) through the same dispatcher, and the stored event says so."""
    from harness_editor import services as registry
    from streams import services
    from streams.models import PreviewEvent

    tag = uuid.uuid4().hex
    settings.HAT_MCP_SERVERS = {"orders": {"transport": "stdio", "command": list(srv.stdio_command(tag)),
                                           "timeout_s": 30}}
    draft = registry.version_create_draft(user=manager, harness=harness_with_history["harness"],
                                          manifest=_with_mcp_tool(harness_with_history["v1"].manifest, "orders"),
                                          parent=harness_with_history["v1"])
    room = services.preview_open(user=manager, version=draft, endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text=COMMENT[0]["text"])
    _script(scripted_endpoint)
    try:
        services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    finally:
        close_mcp_sessions()
    stored = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="tool_result", payload__name="orders_lookup")
    assert stored.payload["binding"] == "mcp:orders/orders.lookup"
    assert stored.payload["result"]["status"] == "shipped" and stored.payload.get("error") is None
    assert srv.tagged_pids(tag) == []
