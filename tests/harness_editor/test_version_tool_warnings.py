"""A version page says which of the harness's tools answer with a fault on this host (issue 26 §6): an approved
harness bound to an MCP server that is not on the allow-list carried the warning only on Try; the version page
shows the same check (streams.services.tool_runtime.tool_bindings_available, reached through
``HAT_TOOL_AVAILABILITY``: the registry imports nothing from the runtime)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from harness_editor import services
from harness_editor.schemas import parse_manifest
from streams.services.tool_runtime import tool_bindings_available
from streams.tool_bindings.mcp import McpServer
from training_jobs.hsa.samples import load_demo_manifest

MESSAGE = ("the MCP server 'crm' is not on this host's allow-list (HAT_MCP_SERVERS): a call gets the fault "
           "'binding_unavailable'")


@pytest.fixture
def approved(manager, reviewer):
    data = load_demo_manifest("order_desk").model_dump(mode="json")
    data["tools"][0]["binding"] = {"kind": "mcp", "server": "crm", "tool": "orders.lookup"}
    v1 = services.harness_create(user=manager, slug="desk-mcp", name="Desk over MCP", manifest=parse_manifest(data),
                                 change_note="bound to the CRM's MCP server")
    services.version_submit(user=manager, version=v1)
    return services.version_approve(user=reviewer, version=v1, comment="ok")


def _page(client, user, version):
    client.force_login(user)
    return client.get(reverse("harness_editor:version", args=[version.harness.slug, version.number]))


@pytest.mark.django_db
def test_the_version_page_warns_of_a_server_not_on_the_allow_list(settings, client, reviewer, approved):
    settings.HAT_MCP_SERVERS = {}
    page = _page(client, reviewer, approved)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="tool-warnings"' in html and "Tools that answer with a fault here" in html
    assert "<code>tools[0].binding.server</code>" in html
    assert MESSAGE.replace("'", "&#x27;") in html
    # the same list Try shows, one implementation
    assert [w.message for w in tool_bindings_available(approved.manifest)] == [MESSAGE]


@pytest.mark.django_db
def test_no_warning_once_the_server_is_allow_listed(settings, client, reviewer, approved):
    settings.HAT_MCP_SERVERS = {"crm": McpServer("crm", "http", url="http://127.0.0.1:9/mcp")}
    # listed, but on a port HAT_OUTBOUND_HOSTS does not allow (a bare host allows 80/443 for MCP servers)
    html = _page(client, reviewer, approved).content.decode()
    assert 'data-testid="tool-warnings"' in html and "HAT_OUTBOUND_HOSTS" in html
    settings.HAT_OUTBOUND_HOSTS = [*settings.HAT_OUTBOUND_HOSTS, "127.0.0.1:9"]
    html = _page(client, reviewer, approved).content.decode()
    assert 'data-testid="tool-warnings"' not in html


@pytest.mark.django_db
def test_no_provider_no_warning_and_roles_still_apply(settings, client, reviewer, outsider, approved):
    settings.HAT_MCP_SERVERS = {}
    settings.HAT_TOOL_AVAILABILITY = ""
    assert 'data-testid="tool-warnings"' not in _page(client, reviewer, approved).content.decode()
    assert _page(client, outsider, approved).status_code == 403
