"""MCP import findings of issue 26 §6, against real stdio servers (the SDK-built test server and a hand-written one,
tests/streams/mcp_raw_server.py, for what the SDK will not send): re-importing identical tools with ``replace`` says
so (not "on_conflict: skip"); ``on_conflict: error`` refuses any name clash naming the tools; a server that writes
lines to stdout that are not MCP is a clear error at once, without SDK tracebacks in the log; ``required: []`` and
non-ASCII names are reported as changes."""

from __future__ import annotations

import logging
import sys
import time
import uuid
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from harness_editor.models import HarnessVersion
from streams.services import mcp_import as services
from streams.tool_bindings.mcp import McpFault, McpServer, call_mcp_tool, list_mcp_tools
from tests.streams import mcp_test_server as srv

RAW = str(Path(__file__).with_name("mcp_raw_server.py"))


def _raw(mode: str, tag: str, timeout_s: float = 8.0) -> McpServer:
    return McpServer(f"raw-{mode}", "stdio", command=(sys.executable, RAW, mode, "--tag", tag), timeout_s=timeout_s)


@pytest.fixture
def tag():
    return uuid.uuid4().hex


@pytest.fixture
def servers(settings, tag):
    settings.HAT_MCP_SERVERS = {"orders": McpServer("orders", "stdio", command=srv.stdio_command(tag)),
                                "odd": _raw("tools", tag), "noisy": _raw("garbage", tag)}
    settings.HAT_TOOL_SECRETS = {}
    yield settings
    from streams.tool_bindings.mcp_sessions import close_mcp_sessions

    close_mcp_sessions()
    assert srv.tagged_pids(tag) == [], "a server was left running"


@pytest.fixture
def draft(harness_with_history):
    return harness_with_history["v3"]


def _api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _url(version):
    return f"/api/harnesses/{version.harness.slug}/versions/{version.number}/mcp-import"


# --- on_conflict ---------------------------------------------------------------------------------------------------


def test_reimporting_identical_tools_with_replace_says_nothing_would_change(servers, manager, draft):
    first, _ = services.mcp_import_save(user=manager, version=draft, server="orders", select=["orders.lookup"])
    plan = services.mcp_import_preview(user=manager, version=first, server="orders", select=["orders.lookup"],
                                       on_conflict="replace")
    assert plan.tools == []
    assert [(c.kind, c.message) for c in plan.changes if c.kind in ("conflict", "unchanged")] == [
        ("unchanged", "'orders_lookup' is already in the harness as the server lists it (tools[6]): nothing to "
                      "replace")]
    count = HarnessVersion.objects.count()
    answer = _api(manager).post(_url(first), {"server": "orders", "tools": ["orders.lookup"],
                                              "on_conflict": "replace"}, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["errors"] == [{"path": "tools", "message": "every chosen tool is already in the harness "
                                        "as the server lists it: nothing to replace (on_conflict: replace)"}]
    assert HarnessVersion.objects.count() == count


def test_on_conflict_error_refuses_a_clash_naming_the_tools(servers, manager, draft):
    first, _ = services.mcp_import_save(user=manager, version=draft, server="orders",
                                        select=["orders.lookup", "orders/track"])
    count = HarnessVersion.objects.count()
    answer = _api(manager).post(_url(first), {"server": "orders", "on_conflict": "error",
                                              "tools": ["orders.lookup", "orders.cancel", "orders/track"]},
                                format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["errors"] == [
        {"path": "tools[0].name", "message": "the manifest already has a tool 'orders_lookup' (tools[6])"},
        {"path": "tools[2].name", "message": "the manifest already has a tool 'orders_track' (tools[7])"}]
    assert HarnessVersion.objects.count() == count
    made = _api(manager).post(_url(first), {"server": "orders", "on_conflict": "error", "tools": ["orders.cancel"]},
                              format="json")
    assert made.status_code == 201, made.json()


# --- what the importer changes -------------------------------------------------------------------------------------


def test_empty_required_and_non_ascii_names_are_reported(servers, manager, draft):
    plan = services.mcp_import_preview(user=manager, version=draft, server="odd")
    assert [t["binding"]["tool"] for t in plan.tools] == ["commande.état", "注文照会"]
    changes = {(c["remote"], c["path"], c["kind"]) for c in plan.change_dicts()}
    assert ("注文照会", "tools[1].inputSchema.required", "dropped_key") in changes
    renamed = {c["remote"]: c["message"] for c in plan.change_dicts() if c["kind"] == "renamed"}
    assert renamed["commande.état"].startswith("'commande.état' -> 'commande_tat' (the non-ASCII characters 'é' "
                                               "replaced;")
    assert renamed["注文照会"].startswith("'注文照会' -> '_' (the non-ASCII characters '注文照会' replaced;")
    # every difference between what the server lists and what the draft gains is in the report
    for remote, tool in zip(plan.remote, plan.tools):
        reported = {c["path"].split(".", 1)[1] for c in plan.change_dicts() if c["remote"] == remote["name"]}
        if tool["name"] != remote["name"]:
            assert "name" in reported
        if tool["parameters"] != remote["inputSchema"]:
            assert any(p.startswith("inputSchema") for p in reported), (remote["name"], reported)


# --- a server that writes what is not MCP to stdout ----------------------------------------------------------------


def test_non_protocol_stdout_is_a_clear_error_at_once_without_tracebacks(servers, manager, draft, tag, caplog):
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(McpFault) as caught:
        list_mcp_tools(_raw("garbage", tag, timeout_s=20))
    assert time.monotonic() - started < 15  # not the 20 s timeout: said when the line arrives
    assert caught.value.code == "mcp_error"
    assert "wrote output to stdout that is not an MCP message ('raw MCP server 1.0 starting up...')" in \
        caught.value.message
    answer = _api(manager).post(_url(draft), {"server": "noisy", "dry_run": True}, format="json")
    assert answer.status_code == 502 and "not an MCP message" in answer.json()["detail"]
    # a call: at start, and on a running server that logs to stdout when called
    for mode in ("garbage", "late_garbage"):
        started = time.monotonic()
        result = call_mcp_tool(_raw(mode, tag, timeout_s=20), "anything", {}, timeout_s=20)
        assert result["code"] == "mcp_error" and "not an MCP message" in result["error"], result
        assert time.monotonic() - started < 15
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()], \
        [r.getMessage() for r in caplog.records if r.exc_info]
