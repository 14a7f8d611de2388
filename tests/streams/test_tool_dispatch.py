"""The one tool-binding dispatcher (streams.tool_bindings): built-in, http, fixture, mcp and unbound tools in the
turn engine, the reference policy and a preview room; a tool with no working binding gets a clear fault and never
another tool's data."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from harness_editor.schemas import parse_manifest
from streams.bindings import BINDINGS
from streams.engine.faults import ToolFault
from streams.engine.turn import run_turn
from streams.reference_policy import call_tool
from streams.tool_bindings import EMPTY_RUNTIME, ToolRuntime, binding_availability, call_bound_tool
from streams.tool_bindings.http import HttpEndpoint
from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply

SECRET = "tok-9f8e7d6c5b4a"
REPLY = "Your order has shipped, and you can return mugs within the return window."

FOREIGN_TOOLS = [
    {"name": "get_order", "description": "Look up an order by its id.",
     "parameters": {"type": "object", "properties": {"order": {"type": "object", "properties": {
         "id": {"type": "string", "description": "The order id."}}, "required": ["id"]}}, "required": ["order"]},
     "binding": {"kind": "http", "endpoint": "orders", "path": "/orders/{order.id}", "result": "data.order",
                 "timeout_s": 2}},
    {"name": "return_policy", "description": "The return policy of a product category.",
     "parameters": {"type": "object", "properties": {"category": {"type": "string"}}},
     "binding": {"kind": "fixture", "cases": [{"when": {"category": "mugs"}, "result": {"days": 30}}],
                 "default": {"days": 14}}},
    {"name": "cancel_order", "description": "Cancel an order.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
     "binding": None},
    {"name": "read_file", "description": "Read a file from the document server.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
     "binding": {"kind": "mcp", "server": "docs"}},
]
CALLS = (("get_order", {"order": {"id": "A-17"}}), ("return_policy", {"category": "mugs"}),
         ("cancel_order", {"order_id": "A-17"}))



@pytest.fixture
def foreign_manifest(engine_manifest):
    data = engine_manifest.model_dump(mode="json")
    data["tools"] = data["tools"] + copy.deepcopy(FOREIGN_TOOLS)
    return parse_manifest(data)


def runtime_for(up) -> ToolRuntime:
    return ToolRuntime(http_endpoints={"orders": HttpEndpoint(name="orders", base_url=up.base_url,
                                                              headers={"Authorization": "Bearer {secret:ORDERS}"})},
                       secrets={"ORDERS": SECRET})


def results_by_name(result):
    return {e.name: e for e in result.events if e.type == "tool_result"}


def script_foreign_turn(ep):
    ep.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})), native_calls(*CALLS), reply(REPLY))


# --- the dispatcher alone -----------------------------------------------------------------------------------


def test_builtin_is_the_catalog_through_the_argument_map(foreign_manifest, engine_room):
    tool = foreign_manifest.tool("lookup_product")
    assert call_bound_tool(tool, copy.deepcopy(engine_room), {"link_id": 101}) == BINDINGS[
        "catalog.product_info"].func(copy.deepcopy(engine_room), link_id=101)
    assert call_bound_tool(tool, engine_room, {}) == {"error": "missing argument(s): link_id",
                                                      "code": "invalid_argument"}


def test_unbound_is_a_fault_and_nothing_else(foreign_manifest, engine_room):
    before = copy.deepcopy(engine_room)
    r = call_bound_tool(foreign_manifest.tool("cancel_order"), engine_room, {"order_id": "A-17"})
    assert r == {"error": "tool 'cancel_order' has no binding: nothing carries it out, so it has no data",
                 "code": "unbound"}
    assert engine_room == before


def test_open_bindings_off_the_allow_list_are_unavailable(foreign_manifest, engine_room):
    r = call_bound_tool(foreign_manifest.tool("get_order"), engine_room, {"order": {"id": "A"}}, EMPTY_RUNTIME)
    assert r["code"] == "binding_unavailable" and "'orders'" in r["error"] and "HAT_TOOL_ENDPOINTS" in r["error"]
    r = call_bound_tool(foreign_manifest.tool("read_file"), engine_room, {"path": "a.txt"}, EMPTY_RUNTIME)
    assert r["code"] == "binding_unavailable" and "'docs'" in r["error"] and "HAT_MCP_SERVERS" in r["error"]


def test_fixture_with_the_runtimes_scenario_cases_first(foreign_manifest, engine_room):
    tool = foreign_manifest.tool("return_policy")
    assert call_bound_tool(tool, engine_room, {"category": "mugs"}) == {"days": 30}
    assert call_bound_tool(tool, engine_room, {"category": "lamps"}) == {"days": 14}
    scenario = ToolRuntime(fixtures={"return_policy": [{"when": {"category": "mugs"}, "result": {"days": 60}}]})
    assert call_bound_tool(tool, engine_room, {"category": "mugs"}, scenario) == {"days": 60}


def test_http_through_the_dispatcher(foreign_manifest, engine_room, upstream):
    r = call_bound_tool(foreign_manifest.tool("get_order"), engine_room, {"order": {"id": "A-17"}},
                        runtime_for(upstream))
    assert r["id"] == "A-17" and r["status"] == "shipped"
    assert upstream.requests[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"


def test_reference_policy_uses_the_same_dispatcher(foreign_manifest, engine_room):
    assert call_tool(foreign_manifest, engine_room, "cancel_order", {"order_id": "A"})["code"] == "unbound"
    assert call_tool(foreign_manifest, engine_room, "return_policy", {"category": "mugs"}) == {"days": 30}
    assert call_tool(foreign_manifest, copy.deepcopy(engine_room), "lookup_product", {"link_id": 101})["price"] \
        == 24.9


def test_binding_availability_says_what_this_host_cannot_call(foreign_manifest, upstream):
    names = {i: t.name for i, t in enumerate(foreign_manifest.tools)}
    by_tool = {names[int(e.path.split("]")[0][6:])]: e for e in binding_availability(foreign_manifest,
                                                                                      EMPTY_RUNTIME)}
    assert set(by_tool) == {"get_order", "read_file"}
    assert by_tool["get_order"].path.endswith(".binding.endpoint")
    assert by_tool["read_file"].path.endswith(".binding.server")
    missing_secret = ToolRuntime(http_endpoints=runtime_for(upstream).http_endpoints)
    (problem,) = [e for e in binding_availability(foreign_manifest, missing_secret) if "secret" in e.message]
    assert "ORDERS" in problem.message and SECRET not in problem.message
    assert [e for e in binding_availability(foreign_manifest, runtime_for(upstream))
            if "get_order" in names[int(e.path.split("]")[0][6:])]] == []


# --- a turn ---------------------------------------------------------------------------------------------------


def test_a_turn_calls_http_fixture_and_unbound_tools(scripted_endpoint, engine_client, foreign_manifest, engine_room,
                                                     upstream):
    script_foreign_turn(scripted_endpoint)
    result = run_turn(manifest=foreign_manifest, room=engine_room, comments=[{"viewer": "amy", "text":
                      "where is my order A-17, and can I return the mugs?"}], backend=engine_client(),
                      tools=runtime_for(upstream))
    got = results_by_name(result)
    assert got["get_order"].binding == "http:orders" and got["get_order"].error is None
    assert got["get_order"].result == {"id": "A-17", "status": "shipped", "items": [{"sku": "MUG-1", "qty": 2}]}
    assert got["return_policy"].binding == "fixture" and got["return_policy"].result == {"days": 30}
    assert got["cancel_order"].binding == "unbound"
    assert got["cancel_order"].result == {"error": "tool 'cancel_order' has no binding: nothing carries it out, so "
                                                   "it has no data", "code": "unbound"}
    assert got["cancel_order"].error.startswith("tool 'cancel_order' has no binding")
    # what the model read back: each tool's own answer, the unbound one only its fault
    sent = {m["tool_call_id"]: json.loads(m["content"]) for m in scripted_endpoint.requests[2]["messages"]
            if m["role"] == "tool" and m["content"].startswith("{")}
    by_name = {e.name: sent[e.call_id] for e in result.events if e.type == "tool_result" and e.call_id in sent}
    assert by_name["cancel_order"] == {"error": got["cancel_order"].result["error"], "code": "unbound"}
    assert by_name["get_order"]["status"] == "shipped" and by_name["return_policy"] == {"days": 30}
    # the secret went to the upstream, never into an event or the conversation
    assert upstream.requests[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"
    everything = json.dumps([e.model_dump(mode="json") for e in result.events]) + json.dumps(
        scripted_endpoint.requests)
    assert SECRET not in everything
    assert result.reply == REPLY and result.reason == "ok"


def test_without_a_runtime_http_is_unavailable_and_fixtures_still_answer(scripted_endpoint, engine_client,
                                                                         foreign_manifest, engine_room, upstream):
    script_foreign_turn(scripted_endpoint)
    result = run_turn(manifest=foreign_manifest, room=engine_room, comments=[{"viewer": "amy", "text": "order A-17?"}],
                      backend=engine_client())
    got = results_by_name(result)
    assert got["get_order"].result["code"] == "binding_unavailable"
    assert got["return_policy"].result == {"days": 30}
    assert upstream.requests == []


def test_injected_faults_by_label_and_by_tool_name(scripted_endpoint, engine_client, foreign_manifest, engine_room,
                                                   upstream):
    script_foreign_turn(scripted_endpoint)
    faults = {"http:orders": ToolFault(binding="http:orders", kind="timeout"),
              "return_policy": ToolFault(binding="return_policy", kind="permission_denied")}
    result = run_turn(manifest=foreign_manifest, room=engine_room, comments=[{"viewer": "amy", "text": "order?"}],
                      backend=engine_client(), tools=runtime_for(upstream), faults=faults)
    got = results_by_name(result)
    assert (got["get_order"].fault, got["get_order"].result["code"]) == ("timeout", "timeout")
    assert got["return_policy"].fault == "permission_denied"
    assert upstream.requests == []  # a timeout fault never calls the binding


def test_an_http_upstream_failure_is_a_tool_fault_in_the_turn(scripted_endpoint, engine_client, foreign_manifest,
                                                              engine_room, upstream):
    script_foreign_turn(scripted_endpoint)
    data = foreign_manifest.model_dump(mode="json")
    data["tools"][[t["name"] for t in data["tools"]].index("get_order")]["binding"]["path"] = "/malformed"
    result = run_turn(manifest=parse_manifest(data), room=engine_room, comments=[{"viewer": "amy", "text": "o?"}],
                      backend=engine_client(), tools=runtime_for(upstream))
    got = results_by_name(result)["get_order"]
    assert got.result == {"error": "orders answered with something that is not JSON", "code": "bad_response"}
    assert got.error == "orders answered with something that is not JSON"


# --- the service layer: settings and a preview room ----------------------------------------------------------


def test_tool_runtime_for_reads_settings_and_the_environment(settings, monkeypatch, upstream):
    from streams.services.tool_runtime import tool_runtime_for

    settings.HAT_TOOL_ENDPOINTS = json.dumps({"orders": {"base_url": upstream.base_url,
                                                         "headers": {"Authorization": "Bearer {secret:ORDERS}"}}})
    settings.HAT_MCP_SERVERS = {"docs": {"transport": "http", "url": "http://127.0.0.1:9/mcp"}}
    settings.HAT_TOOL_SECRETS = {"OTHER": "x"}
    monkeypatch.setenv("HAT_TOOL_SECRETS_ORDERS", SECRET)
    rt = tool_runtime_for()
    assert rt.http_endpoints["orders"].base_url == upstream.base_url
    assert rt.mcp_servers["docs"].url == "http://127.0.0.1:9/mcp"
    assert rt.secrets == {"OTHER": "x", "ORDERS": SECRET}
    assert rt.fixtures == {}


def test_tool_bindings_available_lists_unbound_and_unavailable(settings, foreign_manifest):
    from streams.services.tool_runtime import tool_bindings_available

    settings.HAT_TOOL_ENDPOINTS, settings.HAT_MCP_SERVERS = {}, {}
    messages = [e.message for e in tool_bindings_available(foreign_manifest)]
    assert any("'cancel_order' has no binding" in m for m in messages)
    assert any("'orders' is not on this host's allow-list" in m for m in messages)
    assert any("MCP server 'docs'" in m for m in messages)
    settings.HAT_TOOL_ENDPOINTS = {"orders": {"base_url": "http://127.0.0.1:6379"}}
    messages = [e.message for e in tool_bindings_available(foreign_manifest)]
    assert any("'orders' is refused: the host 127.0.0.1:6379 is not on the outbound allow-list" in m
               for m in messages)


@pytest.mark.django_db
def test_a_preview_turn_with_foreign_tools_and_scenario_fixtures(manager, settings, monkeypatch, foreign_manifest,
                                                                 scripted_model, scripted_endpoint, upstream,
                                                                 django_capture_on_commit_callbacks):
    from harness_editor import services as harness_services
    from streams import services
    from streams.models import PreviewEvent
    from streams.scenarios import demo_scenario_paths

    settings.HAT_TOOL_ENDPOINTS = {"orders": {"base_url": upstream.base_url,
                                              "headers": {"Authorization": "Bearer {secret:ORDERS}"}}}
    settings.HAT_OUTBOUND_HOSTS = [*settings.HAT_OUTBOUND_HOSTS, f"127.0.0.1:{upstream.port}"]
    monkeypatch.setenv("HAT_TOOL_SECRETS_ORDERS", SECRET)
    version = harness_services.harness_create(user=manager, slug="order-desk", name="Order desk",
                                              manifest=foreign_manifest)
    data = yaml.safe_load(demo_scenario_paths()[0].read_text(encoding="utf-8"))
    data["id"] = "order-desk-day"
    data["fixtures"] = {"return_policy": [{"when": {"category": "mugs"}, "result": {"days": 45}}]}
    scenario = services.scenario_import(yaml_text=yaml.safe_dump(data), user=manager)
    room = services.preview_open(user=manager, version=version, scenario=scenario, endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="where is A-17? can I return mugs?")
    script_foreign_turn(scripted_endpoint)
    services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    stored = {e.payload["name"]: e.payload for e in PreviewEvent.objects.filter(room=room, turn_id=turn_id,
                                                                                 type="tool_result")}
    assert stored["get_order"]["binding"] == "http:orders" and stored["get_order"]["result"]["status"] == "shipped"
    assert stored["return_policy"]["result"] == {"days": 45}  # the scenario's fixture came first
    assert stored["cancel_order"]["result"]["code"] == "unbound"
    all_payloads = json.dumps(list(PreviewEvent.objects.filter(room=room).values_list("payload", flat=True)))
    assert SECRET not in all_payloads


def test_a_turn_calls_an_mcp_bound_tool(scripted_endpoint, engine_client, engine_manifest, engine_room):
    """The MCP binding through the same dispatcher: a real stdio MCP server (tests/streams/mcp_test_server.py)."""
    import uuid

    from streams.tool_bindings.mcp import McpServer
    from streams.tool_bindings.mcp_sessions import close_mcp_sessions
    from tests.streams import mcp_test_server as srv

    data = engine_manifest.model_dump(mode="json")
    data["tools"].append({"name": "lookup_order", "description": "Look up an order by its id.",
                          "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                         "required": ["order_id"]},
                          "binding": {"kind": "mcp", "server": "orders", "tool": "orders.lookup"}})
    tag = uuid.uuid4().hex
    runtime = ToolRuntime(mcp_servers={"orders": McpServer("orders", "stdio", command=srv.stdio_command(tag),
                                                           env={"ORDERS_TOKEN": "{secret:orders_token}"})},
                          secrets={"orders_token": SECRET})
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
                          native_calls(("lookup_order", {"order_id": "A100"})), reply(REPLY))
    try:
        result = run_turn(manifest=parse_manifest(data), room=engine_room, comments=[{"viewer": "amy", "text":
                          "where is A100?"}], backend=engine_client(), tools=runtime)
    finally:
        close_mcp_sessions()
    got = results_by_name(result)["lookup_order"]
    assert got.binding == "mcp:orders/orders.lookup" and got.error is None
    assert got.result == {"order_id": "A100", "status": "shipped", "total": 59.9, "items": ["serum 30ml"]}
    assert SECRET not in json.dumps([e.model_dump(mode="json") for e in result.events])
