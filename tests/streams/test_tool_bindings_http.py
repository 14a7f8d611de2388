"""The ``http`` tool binding against a real loopback server: templates, retries, timeouts, the size cap, bad
answers, secrets (sent, never shown), and the allow-list settings."""

from __future__ import annotations

import json
import socket
import time

import pytest

from harness_editor.schemas.bindings import HttpBinding
from streams.tool_bindings.allow_lists import parse_mcp_servers, parse_tool_endpoints, tool_secrets
from streams.tool_bindings.http import HttpEndpoint, call_http, json_path_get
from tests.streams.scripted_endpoint import free_port

SECRET = "s3cr3t-token-value-123"



def endpoint(up, **kw) -> HttpEndpoint:
    fields = {"name": "orders", "base_url": up.base_url, "methods": ("GET", "POST"),
              "headers": {"Authorization": "Bearer {secret:ORDERS_TOKEN}"}, "timeout_s": 5.0,
              "max_response_bytes": 100_000, "max_retries": 2}
    fields.update(kw)
    return HttpEndpoint(**fields)


def binding(**kw) -> HttpBinding:
    return HttpBinding.model_validate({"kind": "http", "endpoint": "orders", **kw})


def call(up, b, args, *, secrets=None, **ep):
    return call_http(endpoint(up, **ep), b, args, secrets={"ORDERS_TOKEN": SECRET} if secrets is None else secrets,
                     sleep=lambda s: None)


# --- good answers -----------------------------------------------------------------------------------------


def test_path_template_result_path_and_secret_header(upstream):
    r = call(upstream, binding(path="/orders/{order.id}", result="data.order"), {"order": {"id": "A-17"}})
    assert r == {"id": "A-17", "status": "shipped", "items": [{"sku": "MUG-1", "qty": 2}]}
    sent = upstream.requests[-1]
    assert sent["path"] == "/api/orders/A-17"
    assert sent["headers"]["Authorization"] == f"Bearer {SECRET}"  # the secret is sent...
    assert SECRET not in json.dumps(r)  # ...and never in what the model sees


def test_path_values_are_url_encoded_and_stay_under_the_base_url(upstream):
    call(upstream, binding(path="/orders/{id}", result="data.order"), {"id": "a/b c?x=1#f..%"})
    assert upstream.requests[-1]["path"] == "/api/orders/a%2Fb%20c%3Fx%3D1%23f..%25"


@pytest.mark.parametrize(("path", "args"), [
    ("/../admin", {}),
    ("/%2e%2e/outside", {}),  # a stored manifest from before the validation rule
    ("/..;/admin", {}),
    ("/orders/{id}", {"id": "../../admin"}),  # decoded by the upstream: /api/orders/../../admin
    ("/orders/{id}", {"id": "..\\..\\admin"}),
    ("/orders/{id}", {"id": "%2e%2e"}),  # decoded twice
    ("/orders/{id}", {"id": ".."}),
    ("/orders/{id}", {"id": "\uff0e\uff0e"}),
])
def test_a_path_that_leaves_the_base_url_is_refused_without_a_request(upstream, path, args):
    r = call(upstream, binding(path=path), args)
    assert r["code"] == "invalid_argument" and "leaves its base URL" in r["error"], r
    assert upstream.requests == []


def test_a_missing_path_argument_is_an_invalid_argument_fault(upstream):
    r = call(upstream, binding(path="/orders/{order_id}"), {"other": 1})
    assert r == {"error": "missing argument 'order_id' (the URL needs it)", "code": "invalid_argument"}
    assert upstream.requests == []
    r = call(upstream, binding(path="/orders/{order}"), {"order": {"id": 1}})
    assert r["code"] == "invalid_argument" and "goes into the URL" in r["error"]


def test_query_templates_fill_and_optional_ones_drop(upstream):
    b = binding(path="/search", query={"q": "{text}", "region": "{region}", "page": "p{page}"}, result="query")
    assert call(upstream, b, {"text": "blue mug & co", "page": 2}) == {"q": "blue mug & co", "page": "p2"}
    r = call(upstream, b, {"text": "x"})
    assert r["code"] == "invalid_argument" and "'page'" in r["error"]  # a mixed template needs its argument


def test_post_sends_the_arguments_as_json(upstream):
    args = {"sku": "MUG-1", "qty": 2, "note": "gift"}
    r = call(upstream, binding(method="POST", path="/orders", body="arguments", result="created"), args)
    assert r == args
    assert json.loads(upstream.requests[-1]["body"]) == args


def test_a_list_answer_goes_under_result(upstream):
    assert call(upstream, binding(path="/list"), {}) == {"result": [{"sku": "A"}, {"sku": "B"}]}
    assert call(upstream, binding(path="/list", result="[1].sku"), {}) == {"result": "B"}


# --- failures become tool faults ---------------------------------------------------------------------------


def test_slow_answer_is_a_timeout(upstream):
    t0 = time.monotonic()
    r = call(upstream, binding(path="/slow", timeout_s=0.4), {})
    assert r["code"] == "timeout" and "orders" in r["error"]
    assert time.monotonic() - t0 < 1.5


def test_trickling_answer_is_a_timeout(upstream):
    t0 = time.monotonic()
    r = call(upstream, binding(path="/trickle", timeout_s=0.7), {})
    assert r["code"] == "timeout"
    assert time.monotonic() - t0 < 2.0


def test_endpoint_timeout_caps_the_binding(upstream):
    t0 = time.monotonic()
    r = call(upstream, binding(path="/slow", timeout_s=30), {}, timeout_s=0.3)
    assert r["code"] == "timeout" and time.monotonic() - t0 < 1.5


def test_500_is_retried_within_bounds_then_a_fault(upstream):
    r = call(upstream, binding(path="/fail500", retries=3), {}, max_retries=1)  # the endpoint caps retries
    assert r == {"error": "orders answered 500 Internal Server Error", "code": "http_error", "status": 500}
    assert upstream.paths().count("/api/fail500") == 2


def test_a_5xx_then_success_with_a_retry(upstream):
    upstream.flaky_failures = 1
    assert call(upstream, binding(path="/flaky", retries=1), {}) == {"ok": True}
    assert upstream.paths().count("/api/flaky") == 2


def test_no_retries_unless_asked(upstream):
    upstream.flaky_failures = 1
    assert call(upstream, binding(path="/flaky"), {})["code"] == "http_error"
    assert upstream.paths().count("/api/flaky") == 1


def test_4xx_is_not_retried_and_says_what_the_upstream_said(upstream):
    r = call(upstream, binding(path="/orders/{id}", retries=2), {"id": "missing"})
    assert r == {"error": "orders answered 404: no such order", "code": "http_error", "status": 404}
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("route", ["/big", "/big-chunked"])
def test_oversized_answer_is_too_large(upstream, route):
    upstream.big_bytes = 500_000
    r = call(upstream, binding(path=route, max_response_bytes=50_000), {})
    assert r == {"error": "the answer of orders is larger than 50000 bytes", "code": "too_large"}


def test_endpoint_size_cap_wins_over_the_binding(upstream):
    upstream.big_bytes = 20_000
    assert call(upstream, binding(path="/big", max_response_bytes=1_000_000), {}, max_response_bytes=10_000)[
        "code"] == "too_large"
    assert "pad" in call(upstream, binding(path="/big"), {}, max_response_bytes=100_000)


def test_malformed_answer_is_a_bad_response(upstream):
    r = call(upstream, binding(path="/malformed"), {})
    assert r == {"error": "orders answered with something that is not JSON", "code": "bad_response"}


def test_result_path_missing_is_a_bad_response(upstream):
    r = call(upstream, binding(path="/orders/{id}", result="data.shipment"), {"id": "A"})
    assert r == {"error": "the answer of orders has no 'data.shipment'", "code": "bad_response"}


def test_connect_refused_is_retried_then_a_fault():
    ep = HttpEndpoint(name="down", base_url=f"http://127.0.0.1:{free_port()}", max_retries=2)
    t0 = time.monotonic()
    r = call_http(ep, binding(endpoint="down", retries=2), {}, secrets={}, sleep=lambda s: None)
    assert r["code"] == "http_error" and "cannot be reached" in r["error"]
    assert time.monotonic() - t0 < 3


def test_method_the_endpoint_does_not_allow(upstream):
    r = call(upstream, binding(method="DELETE", path="/orders/1"), {})
    assert r["code"] == "binding_unavailable" and "DELETE" in r["error"]
    assert upstream.requests == []


def test_a_missing_secret_means_no_request(upstream):
    r = call(upstream, binding(path="/orders/1"), {}, secrets={})
    assert r == {"error": "the endpoint 'orders' needs the secret ORDERS_TOKEN, which is not set on this host",
                 "code": "binding_unavailable"}
    assert upstream.requests == []


def test_an_upstream_echoing_the_secret_does_not_leak_it(upstream):
    r = call(upstream, binding(path="/echo-headers"), {})
    assert upstream.requests[-1]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps(r)
    assert r["you_sent"]["Authorization"] == "Bearer [secret]"


def test_the_turn_deadline_bounds_the_call(upstream):
    ep = endpoint(upstream)
    t0 = time.monotonic()
    r = call_http(ep, binding(path="/slow", timeout_s=10), {}, secrets={"ORDERS_TOKEN": SECRET}, time_left_s=0.3)
    assert r["code"] == "timeout" and time.monotonic() - t0 < 1.5


def test_a_tool_endpoint_on_a_port_not_allowed_is_refused_without_connecting(settings):
    """A bare loopback entry of HAT_OUTBOUND_HOSTS let a tool endpoint reach any loopback port (Redis's 6379);
    for tool endpoints it now allows port 80 only, and the call never opens a connection."""
    from streams.services.tool_runtime import tool_runtime_for

    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        settings.HAT_OUTBOUND_HOSTS = ["127.0.0.1", "localhost", "::1"]
        settings.HAT_TOOL_ENDPOINTS = {"cache": {"base_url": f"http://127.0.0.1:{port}", "timeout_s": 1}}
        b = binding(endpoint="cache", path="/x", timeout_s=0.5)
        r = call_http(tool_runtime_for().http_endpoints["cache"], b, {}, secrets={})
        assert r["code"] == "binding_unavailable", r
        assert f"127.0.0.1:{port} is not on the outbound allow-list" in r["error"]
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection was opened
        # listed with its port, the same endpoint is called (and this silent socket times it out)
        settings.HAT_OUTBOUND_HOSTS = ["localhost", f"127.0.0.1.:{port}"]
        r = call_http(tool_runtime_for().http_endpoints["cache"], b, {}, secrets={})
        assert r["code"] == "timeout", r
        listener.accept()[0].close()
    finally:
        listener.close()


def test_a_tool_endpoint_the_outbound_list_does_not_allow_stops_the_start(monkeypatch):
    from console.config import load_settings

    monkeypatch.setenv("HAT_TOOL_ENDPOINTS", '{"cache": {"base_url": "http://LOCALHOST.:6379"}}')
    with pytest.raises(SystemExit, match=r"HAT_TOOL_ENDPOINTS\.cache\.base_url: the host localhost:6379 is not on "
                                         r"the outbound allow-list"):
        load_settings()
    monkeypatch.setenv("HAT_OUTBOUND_HOSTS", '["localhost:6379"]')
    assert parse_tool_endpoints(load_settings().tool_endpoints)["cache"].base_url == "http://LOCALHOST.:6379"


def test_json_path():
    doc = {"data": {"items": [{"sku": "A"}, {"sku": "B", "tags": [["x", "y"]]}]}}
    assert json_path_get(doc, "data.items[1].sku") == (True, "B")
    assert json_path_get(doc, "data.items[1].tags[0][1]") == (True, "y")
    assert json_path_get(doc, "data.items[2]") == (False, None)
    assert json_path_get(doc, "data.nope") == (False, None)
    assert json_path_get(doc, "") == (True, doc)


# --- the allow-list settings --------------------------------------------------------------------------------


def test_allow_list_inline_json_and_list_form():
    eps = parse_tool_endpoints('{"orders": {"base_url": "https://api.example.com/v1/", "methods": ["get", "post"], '
                               '"headers": {"X-Key": "{secret:K}"}, "timeout_s": 3}}')
    assert eps["orders"] == HttpEndpoint(name="orders", base_url="https://api.example.com/v1", methods=("GET", "POST"),
                                         headers={"X-Key": "{secret:K}"}, timeout_s=3.0)
    assert eps["orders"].secret_names() == ["K"]
    assert set(parse_tool_endpoints([{"name": "a", "base_url": "http://a"}, {"name": "b", "base_url": "http://b"}])) \
        == {"a", "b"}
    assert parse_tool_endpoints("") == {}


def test_allow_list_from_a_yaml_file(tmp_path):
    f = tmp_path / "endpoints.yaml"
    f.write_text("orders:\n  base_url: http://127.0.0.1:9/api\n  max_retries: 1\n", encoding="utf-8")
    assert parse_tool_endpoints(str(f))["orders"].max_retries == 1


@pytest.mark.parametrize(("value", "message"), [
    ('{"a": {"base_url": "ftp://x"}}', "HAT_TOOL_ENDPOINTS.a.base_url"),
    ('{"a": {"base_url": "http://u:p@x"}}', "user name or password"),
    ('{"a": {"base_url": "http://x", "methods": ["FETCH"]}}', "HAT_TOOL_ENDPOINTS.a.methods"),
    ('{"a": {"base_url": "http://x", "timeout": 3}}', "HAT_TOOL_ENDPOINTS.a.timeout"),
    ('{"a": {"base_url": "http://x", "headers": {"K": "{secret:bad name}"}}}', "HAT_TOOL_ENDPOINTS.a.headers"),
    ('{"bad name": {"base_url": "http://x"}}', "not an allow-list name"),
    ('[{"name": "a", "base_url": "http://x"}, {"name": "a", "base_url": "http://y"}]', "listed twice"),
    ("{not json", "inline JSON does not parse"),
    ("/nonexistent/endpoints.yaml", "cannot be read"),
])
def test_allow_list_errors_say_where(value, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("[", r"\[")):
        parse_tool_endpoints(value)


def test_mcp_allow_list_parses_into_servers():
    servers = parse_mcp_servers({"files": {"transport": "stdio", "command": "python -m files_server"},
                                 "remote": {"transport": "http", "url": "http://127.0.0.1:9/mcp",
                                            "headers": {"Authorization": "Bearer {secret:MCP}"}}})
    assert servers["files"].command == ("python", "-m", "files_server")
    assert servers["remote"].url == "http://127.0.0.1:9/mcp"
    with pytest.raises(ValueError, match="HAT_MCP_SERVERS.files"):
        parse_mcp_servers({"files": {"transport": "stdio"}})
    with pytest.raises(ValueError, match=r"HAT_MCP_SERVERS\.x\.bogus"):
        parse_mcp_servers({"x": {"transport": "http", "url": "http://h/mcp", "bogus": 1}})


def test_secrets_come_only_from_the_prefixed_variables():
    env = {"HAT_TOOL_SECRETS_ORDERS_TOKEN": "abc", "HAT_SECRET_KEY": "never", "HAT_TOOL_SECRETS_EMPTY": "",
           "DATABASE_URL": "postgres://x"}
    assert tool_secrets(env, {"FROM_SETTINGS": "v", "ORDERS_TOKEN": "old"}) == {"ORDERS_TOKEN": "abc",
                                                                               "FROM_SETTINGS": "v"}


def test_a_bad_allow_list_stops_the_start_with_what_to_fix(monkeypatch):
    from console.config import load_settings

    monkeypatch.setenv("HAT_TOOL_ENDPOINTS", '{"orders": {"base_url": "ftp://orders"}}')
    with pytest.raises(SystemExit, match=r"HAT_TOOL_ENDPOINTS\.orders\.base_url: .*http\(s\) URL"):
        load_settings()
    monkeypatch.setenv("HAT_TOOL_ENDPOINTS", '{"orders": {"base_url": "https://orders.example.com/v1"}}')
    monkeypatch.setenv("HAT_OUTBOUND_HOSTS", '["orders.example.com"]')
    monkeypatch.setenv("HAT_MCP_SERVERS", '{"docs": {"transport": "carrier-pigeon"}}')
    with pytest.raises(SystemExit, match=r"HAT_MCP_SERVERS\.docs"):
        load_settings()
    monkeypatch.setenv("HAT_MCP_SERVERS", '[{"name": "docs", "transport": "stdio", "command": ["docs-server"]}]')
    env = load_settings()
    assert parse_tool_endpoints(env.tool_endpoints)["orders"].base_url == "https://orders.example.com/v1"
    assert parse_mcp_servers(env.mcp_servers)["docs"].command == ("docs-server",)
