"""MCP tool annotations and output schemas through the importer, against the real MCP test server
(tests/streams/mcp_test_server.py: ``orders.lookup`` read-only with a title and a structured result,
``orders.cancel`` destructive, ``orders.create`` writes, the rest say nothing): carried into the draft, listed in
the report, the API's dry run and the page, and shown on the editor's Tools tab and the version page."""

from __future__ import annotations

from django.urls import reverse

from harness_editor.schemas.tool_effects import tool_effect
from streams.services import mcp_import as services
from tests.streams.test_tool_bindings_mcp_import import api, draft, mcp_settings, tag  # noqa: F401 (fixtures)


def _by_name(items, key="name"):
    return {t[key]: t for t in items}


def test_preview_carries_and_reports_annotations(mcp_settings, manager, draft):
    plan = services.mcp_import_preview(user=manager, version=draft, server="orders")
    tools = _by_name(plan.tools)
    assert tools["orders_lookup"]["annotations"] == {"title": "Look up an order", "read_only": True,
                                                     "open_world": False}
    assert tools["orders_lookup"]["output_schema"]["properties"]["status"] == {"title": "Status", "type": "string"}
    assert tools["orders_cancel"]["annotations"] == {"read_only": False, "destructive": True, "idempotent": True}
    assert tools["orders_create"]["annotations"] == {"read_only": False, "destructive": False}
    assert "annotations" not in tools["orders_track"] and "output_schema" not in tools["orders_track"]
    report = plan.as_dict()
    effects = {r["name"]: r["effect"] for r in report["remote"]}
    assert effects == {"orders.lookup": "read_only", "orders.cancel": "destructive", "orders.create": "writes",
                       "orders.refund_status": "unknown", "orders/track": "unknown", "orders.fail": "unknown",
                       "orders.slow": "unknown", "debug.echo": "unknown"}
    remote = _by_name(report["remote"])
    assert remote["orders.lookup"]["output_schema"] is True and remote["orders/track"]["output_schema"] is False
    assert remote["orders/track"]["effect_label"] == "unknown: may be destructive"
    carried = [c for c in plan.change_dicts() if c["kind"] == "annotated"]
    assert {(c["remote"], c["path"]) for c in carried} >= {
        ("orders.lookup", "tools[0].annotations"), ("orders.lookup", "tools[0].outputSchema"),
        ("orders.cancel", "tools[1].annotations")}


def test_saved_draft_keeps_them_and_reads_them(mcp_settings, manager, draft):
    new, _ = services.mcp_import_save(user=manager, version=draft, server="orders",
                                      select=["orders.lookup", "orders.cancel", "orders/track"])
    tools = {t.name: t for t in new.manifest.tools}
    assert tools["orders_lookup"].annotations.read_only is True
    assert tools["orders_lookup"].output_schema["type"] == "object"
    assert [tool_effect(tools[n]).effect for n in ("orders_lookup", "orders_cancel", "orders_track")] == [
        "read_only", "destructive", "unknown"]


def test_api_dry_run_and_page_show_effects(mcp_settings, client, api, manager, draft):
    url = f"/api/harnesses/{draft.harness.slug}/versions/{draft.number}/mcp-import"
    answer = api(manager).post(url, {"server": "orders", "dry_run": True}, format="json")
    assert answer.status_code == 200, answer.content
    remote = _by_name(answer.json()["remote"])
    assert remote["orders.cancel"]["effect"] == "destructive"
    assert remote["orders.cancel"]["annotations"] == {"read_only": False, "destructive": True, "idempotent": True}
    client.force_login(manager)
    page = client.get(reverse("mcp_import", args=[draft.harness.slug, draft.number]), {"server": "orders"})
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-effect="destructive"' in html and 'data-effect="read_only"' in html
    assert html.count('data-effect="unknown"') == 5


def test_editor_keeps_them_and_the_version_page_shows_destructive_tools(mcp_settings, client, manager, draft):
    from harness_editor.forms.display import editor_view
    from harness_editor.forms.state import manifest_data_from_state, state_from_manifest

    new, _ = services.mcp_import_save(user=manager, version=draft, server="orders",
                                      select=["orders.lookup", "orders.cancel", "orders/track"])
    data = new.manifest.model_dump(mode="json")
    # the Tools tab shows the hints and the output schema in their boxes and saves them back unchanged
    state = state_from_manifest("tools", data)
    back, errors = manifest_data_from_state("tools", state, data)
    from harness_editor.schemas import parse_manifest

    assert errors == [] and parse_manifest(back).tools == new.manifest.tools
    rows = {r["v"]["name"]: r for r in editor_view("tools", state, [], data)["rows"]}
    assert [rows[n]["effect"].effect for n in ("orders_lookup", "orders_cancel", "orders_track")] == [
        "read_only", "destructive", "unknown"]
    client.force_login(manager)
    editor = client.get(reverse("harness_editor:edit", args=[new.harness.slug, new.number]), {"tab": "tools"})
    assert editor.status_code == 200 and 'data-effect="destructive"' in editor.content.decode()
    page = client.get(reverse("harness_editor:version", args=[new.harness.slug, new.number])).content.decode()
    section = page[page.index('data-testid="tool-effects"'):]
    assert section.index("orders_cancel") < section.index("orders_track") < section.index("orders_lookup")
    assert 'data-effect="destructive"' in section and 'data-effect="unknown"' in section
    assert "every tool runs without an operator" in section
