"""Importing an MCP server's tools into a harness (streams.services.mcp_import, its page and its API) against the
real MCP test server (tests/streams/mcp_test_server.py): renames reported before saving, a new draft saved through
the registry's services, every 403/404 path of the page and the API."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest
from rest_framework.test import APIClient

from console.errors import NotAllowed, ValidationFailed
from harness_editor.models import HarnessVersion
from harness_editor.schemas.bindings import McpBinding
from streams.services import mcp_import as services
from streams.tool_bindings.mcp import McpServer
from tests.streams import mcp_test_server as srv

TOKEN = "tok-import-93c1d0"
REMOTE = ["orders.lookup", "orders.cancel", "orders.create", "orders.refund_status", "orders/track", "orders.fail",
          "orders.slow", "debug.echo"]
IMPORTED = ["orders_lookup", "orders_cancel", "orders_create", "orders_refund_status", "orders_track", "orders_fail",
            "orders_slow", "debug_echo"]


@pytest.fixture(scope="module")
def http_url():
    proc, url = srv.start_http(TOKEN)
    yield url
    srv.stop_http(proc)


@pytest.fixture
def tag():
    return uuid.uuid4().hex


@pytest.fixture
def mcp_settings(settings, tag):
    down = srv.free_port()
    settings.HAT_OUTBOUND_HOSTS = [*settings.HAT_OUTBOUND_HOSTS, f"127.0.0.1:{down}"]
    settings.HAT_MCP_SERVERS = {
        "orders": McpServer("orders", "stdio", command=srv.stdio_command(tag)),
        "down": McpServer("down", "http", url=f"http://127.0.0.1:{down}/mcp", timeout_s=3),
    }
    settings.HAT_TOOL_SECRETS = {"orders_token": TOKEN}
    yield settings
    assert srv.tagged_pids(tag) == [], "an import left the stdio MCP server running"


@pytest.fixture
def draft(harness_with_history):
    return harness_with_history["v3"]


def _tool(manifest, name):
    return next(t for t in manifest.tools if t.name == name)


# --- the service --------------------------------------------------------------------------------------------------


def test_preview_renames_and_reports_and_saves_nothing(mcp_settings, manager, draft):
    count = HarnessVersion.objects.count()
    plan = services.mcp_import_preview(user=manager, version=draft, server="orders")
    assert [t["name"] for t in plan.remote] == REMOTE
    assert [t["name"] for t in plan.tools] == IMPORTED
    lookup = plan.tools[0]
    assert lookup["binding"] == {"kind": "mcp", "server": "orders", "tool": "orders.lookup"}
    assert lookup["description"] == "Look up an order by its id: status, total and items."
    assert lookup["parameters"]["properties"]["order_id"]["type"] == "string"
    renames = {c["remote"]: c for c in plan.change_dicts() if c["kind"] == "renamed"}
    assert set(renames) == set(REMOTE)  # every one of these names has a dot or a slash
    assert renames["orders/track"]["message"].startswith("'orders/track' -> 'orders_track'")
    assert renames["orders/track"]["path"] == "tools[4].name"
    assert HarnessVersion.objects.count() == count


def test_save_creates_a_draft_with_bound_tools(mcp_settings, manager, draft):
    new, plan = services.mcp_import_save(user=manager, version=draft, server="orders",
                                         select=["orders/track", "orders.lookup", "orders.create"])
    assert new.status == HarnessVersion.Status.DRAFT and new.parent_id == draft.id and new.author_id == manager.id
    assert new.number == draft.number + 1
    assert new.change_note == "Imported 3 tools from MCP server 'orders'"
    manifest = new.manifest
    assert [t.name for t in manifest.tools] == [t.name for t in draft.manifest.tools] + [
        "orders_lookup", "orders_create", "orders_track"]  # the server's order
    assert _tool(manifest, "orders_create").parameters["$defs"]["Item"]["required"] == ["sku"]
    binding = _tool(manifest, "orders_track").binding
    assert isinstance(binding, McpBinding) and (binding.server, binding.tool) == ("orders", "orders/track")
    from console.models import AuditEvent

    event = AuditEvent.objects.filter(action="version.tools_imported").latest("id")
    assert event.data["server"] == "orders"
    assert event.data["tools"] == [{"name": "orders_lookup", "remote": "orders.lookup"},
                                   {"name": "orders_create", "remote": "orders.create"},
                                   {"name": "orders_track", "remote": "orders/track"}]
    assert {c["kind"] for c in event.data["changes"]} == {"renamed", "annotated"}  # hints carried: reported


def test_conflicts_rename_replace_skip(mcp_settings, manager, draft):
    first, _ = services.mcp_import_save(user=manager, version=draft, server="orders", select=["orders.lookup"])
    again = services.mcp_import_preview(user=manager, version=first, server="orders", select=["orders.lookup"])
    assert [t["name"] for t in again.tools] == ["orders_lookup_2"]
    assert any(c.kind == "conflict" and "imported as 'orders_lookup_2'" in c.message for c in again.changes)
    replaced = services.mcp_import_preview(user=manager, version=first, server="orders", select=["orders.lookup"],
                                           on_conflict="replace")
    assert replaced.tools == []  # the same tool again: nothing changes
    with pytest.raises(ValidationFailed) as caught:
        services.mcp_import_save(user=manager, version=first, server="orders", select=["orders.lookup"],
                                 on_conflict="skip")
    assert caught.value.errors[0]["path"] == "tools"


def test_bad_input_is_located(mcp_settings, manager, draft):
    with pytest.raises(ValidationFailed) as caught:
        services.mcp_import_preview(user=manager, version=draft, server="nope")
    assert caught.value.errors == [{"path": "server", "message": "'nope' is not an allow-listed MCP server "
                                                                  "(down, orders)"}]
    with pytest.raises(ValidationFailed) as caught:
        services.mcp_import_preview(user=manager, version=draft, server="orders", select=["orders.lookup", "x.y"])
    assert caught.value.errors == [{"path": "tools[1]", "message": "the server lists no tool 'x.y'"}]
    with pytest.raises(ValidationFailed):
        services.mcp_import_preview(user=manager, version=draft, server="orders", on_conflict="merge")


def test_server_down_is_a_502_naming_no_address(mcp_settings, manager, draft):
    with pytest.raises(services.McpServerUnavailable) as caught:
        services.mcp_import_preview(user=manager, version=draft, server="down")
    assert caught.value.status_code == 502
    assert caught.value.errors == [{"path": "server", "message": "binding_unavailable"}]
    assert "127.0.0.1" not in caught.value.message


def test_http_server_with_a_secret_header(mcp_settings, manager, draft, http_url):
    mcp_settings.HAT_OUTBOUND_HOSTS = [*mcp_settings.HAT_OUTBOUND_HOSTS, urlsplit(http_url).netloc]
    mcp_settings.HAT_MCP_SERVERS = {**mcp_settings.HAT_MCP_SERVERS, "orders-http": McpServer(
        "orders-http", "http", url=http_url, headers={"Authorization": "Bearer {secret:orders_token}"})}
    plan = services.mcp_import_preview(user=manager, version=draft, server="orders-http")
    assert [t["binding"]["server"] for t in plan.tools] == ["orders-http"] * len(REMOTE)
    assert TOKEN not in repr(plan.as_dict())


def test_an_http_server_the_outbound_list_does_not_allow_is_never_connected(mcp_settings, manager, draft,
                                                                           http_url):
    """Issue 26: HTTP MCP servers were not held to HAT_OUTBOUND_HOSTS (tool endpoints were). A bare loopback entry
    allows 80/443 only, so the test server's port is refused before any connection, naming no address."""
    mcp_settings.HAT_MCP_SERVERS = {**mcp_settings.HAT_MCP_SERVERS, "orders-http": McpServer(
        "orders-http", "http", url=http_url, headers={"Authorization": "Bearer {secret:orders_token}"})}
    with pytest.raises(services.McpServerUnavailable) as caught:
        services.mcp_import_preview(user=manager, version=draft, server="orders-http")
    assert caught.value.errors == [{"path": "server", "message": "binding_unavailable"}]
    assert "HAT_OUTBOUND_HOSTS" in caught.value.message and "127.0.0.1" not in caught.value.message


def test_roles_are_checked_by_the_service(mcp_settings, reviewer, ml_staff, draft):
    for user in (reviewer, ml_staff):
        with pytest.raises(NotAllowed):
            services.mcp_import_preview(user=user, version=draft, server="orders")


# --- the page -----------------------------------------------------------------------------------------------------


def _page(draft, **query):
    url = f"/harnesses/{draft.harness.slug}/v{draft.number}/mcp-import/"
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_page_lists_servers_then_tools_then_imports(mcp_settings, client, manager, draft):
    client.force_login(manager)
    version_page = client.get(f"/harnesses/{draft.harness.slug}/v{draft.number}/")
    assert f'href="{_page(draft)}">Import tools from an MCP server</a>'.encode() in version_page.content
    page = client.get(_page(draft))
    assert page.status_code == 200
    assert b'<option value="orders">orders</option>' in page.content
    assert b"127.0.0.1" not in page.content  # no addresses
    listed = client.get(_page(draft, server="orders"))
    assert listed.status_code == 200
    html = listed.content.decode()
    assert "<code>orders/track</code>" in html and "<code>orders_track</code>" in html
    assert "&#x27;orders/track&#x27; -&gt; &#x27;orders_track&#x27;" in html
    fragment = client.get(_page(draft, server="orders"), headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert fragment.content.decode().lstrip().startswith('<div id="tools">')
    saved = client.post(_page(draft), {"server": "orders", "tools": ["orders.cancel"], "on_conflict": "rename",
                                       "change_note": "cancel via MCP"})
    new = HarnessVersion.objects.get(harness=draft.harness, number=draft.number + 1)
    assert saved.status_code == 302 and saved["Location"] == f"/harnesses/{draft.harness.slug}/v{new.number}/"
    assert new.change_note == "cancel via MCP"
    assert _tool(new.manifest, "orders_cancel").binding.tool == "orders.cancel"


def test_page_errors(mcp_settings, client, manager, draft):
    client.force_login(manager)
    unknown = client.get(_page(draft, server="nope"))
    assert unknown.status_code == 400 and b"is not an allow-listed MCP server" in unknown.content
    down = client.get(_page(draft, server="down"))
    assert down.status_code == 502 and b"could not be listed" in down.content
    nothing = client.post(_page(draft), {"server": "orders", "on_conflict": "rename"})
    assert nothing.status_code == 400 and b"choose at least one tool" in nothing.content
    assert b'name="tools" value="orders.lookup"' in nothing.content  # the tools are shown again to choose from
    count = HarnessVersion.objects.count()
    assert client.post(_page(draft), {"server": "orders", "tools": ["ghost"]}).status_code == 400
    assert HarnessVersion.objects.count() == count


def test_page_403_and_404(mcp_settings, client, manager, reviewer, operator, outsider, draft):
    for user in (reviewer, operator, outsider):
        client.force_login(user)
        assert client.get(_page(draft)).status_code == 403
        assert client.get(_page(draft, server="orders")).status_code == 403
        assert client.post(_page(draft), {"server": "orders", "tools": ["orders.lookup"]}).status_code == 403
    client.logout()
    anonymous = client.get(_page(draft))
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    client.force_login(manager)
    assert client.get("/harnesses/ghost/v1/mcp-import/").status_code == 404
    assert client.get(f"/harnesses/{draft.harness.slug}/v99/mcp-import/").status_code == 404
    assert client.post(f"/harnesses/{draft.harness.slug}/v99/mcp-import/",
                       {"server": "orders", "tools": ["orders.lookup"]}).status_code == 404
    assert client.put(_page(draft)).status_code == 405


# --- the API ------------------------------------------------------------------------------------------------------


@pytest.fixture
def api():
    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


def _api_url(draft, slug=None, number=None):
    return f"/api/harnesses/{slug or draft.harness.slug}/versions/{number or draft.number}/mcp-import"


def test_api_servers_and_dry_run_and_import(mcp_settings, api, manager, draft):
    client = api(manager)
    servers = client.get("/api/mcp-servers/")
    assert servers.status_code == 200 and servers.json() == [{"name": "down"}, {"name": "orders"}]
    count = HarnessVersion.objects.count()
    dry = client.post(_api_url(draft), {"server": "orders", "dry_run": True}, format="json")
    assert dry.status_code == 200, dry.json()
    body = dry.json()
    assert body["version"] is None and [t["name"] for t in body["tools"]] == IMPORTED
    assert [r["name"] for r in body["remote"]] == REMOTE
    assert {c["remote"] for c in body["changes"] if c["kind"] == "renamed"} == set(REMOTE)
    assert HarnessVersion.objects.count() == count
    made = client.post(_api_url(draft), {"server": "orders", "tools": ["orders.refund_status"]}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["version"] == draft.number + 1
    assert made.json()["tools"][0]["binding"] == {"kind": "mcp", "server": "orders", "tool": "orders.refund_status"}


def test_api_errors(mcp_settings, api, manager, draft):
    client = api(manager)
    unknown = client.post(_api_url(draft), {"server": "nope"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["path"] == "server"
    ghost = client.post(_api_url(draft), {"server": "orders", "tools": ["orders.lookup", "ghost"]}, format="json")
    assert ghost.status_code == 400 and ghost.json()["errors"] == [
        {"path": "tools[1]", "message": "the server lists no tool 'ghost'"}]
    bad = client.post(_api_url(draft), {"server": "orders", "on_conflict": "merge"}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "on_conflict"
    missing = client.post(_api_url(draft), {}, format="json")
    assert missing.status_code == 400 and missing.json()["errors"][0]["path"] == "server"
    down = client.post(_api_url(draft), {"server": "down", "dry_run": True}, format="json")
    assert down.status_code == 502 and down.json()["code"] == "mcp_unavailable"


def test_api_401_403_404(mcp_settings, api, manager, reviewer, ml_staff, operator, outsider, draft):
    assert api().get("/api/mcp-servers/").status_code == 401
    assert api().post(_api_url(draft), {"server": "orders"}, format="json").status_code == 401
    for user in (reviewer, ml_staff, operator, outsider):
        assert api(user).get("/api/mcp-servers/").status_code == 403
        assert api(user).post(_api_url(draft), {"server": "orders", "dry_run": True},
                              format="json").status_code == 403
    client = api(manager)
    assert client.post(_api_url(draft, slug="ghost"), {"server": "orders"}, format="json").status_code == 404
    assert client.post(_api_url(draft, number=99), {"server": "orders"}, format="json").status_code == 404
    assert client.get(_api_url(draft)).status_code == 405
