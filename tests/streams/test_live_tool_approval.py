"""Operator approval of destructive tools in a live session (issue 26 §4): a harness whose MCP tools were imported
from the real MCP test server (``orders.cancel`` says it is destructive and writes a journal line when it runs,
``orders.lookup`` says it is read-only) with ``constraints.destructive_tools_need_approval`` on. Live turns run by
the runner's own steps on a scripted model: the destructive call waits for the operator, is refused (never runs),
approved (runs), or times out before the turn's deadline (never runs; a late decision is 409); read-only tools and
fixture tables run without asking; the operator page lists the waiting call and its buttons decide it."""

from __future__ import annotations

import json
import threading

import pytest

from console.errors import InvalidTransition
from harness_editor import services as harness_services
from harness_editor.schemas import parse_manifest
from streams.engine.client import ModelError
from streams.engine.turn import ScriptedBackend
from streams.models import LiveEvent
from streams.services import live_controls as C
from streams.services import live_turns as T
from streams.services import mcp_import
from streams.services.live_events import live_event_append
from streams.services.live_tool_approval import APPROVAL_REPLY_RESERVE_S, LiveToolGate
from streams.tool_bindings.mcp import McpServer
from streams.tool_bindings.mcp_sessions import close_mcp_sessions
from tests.streams import mcp_test_server as srv
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)
from tests.streams.live_page_helpers import comment_add, live_session_for
from tests.streams.preview_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE_S = 9.0  # the operator's window: DEADLINE_S - APPROVAL_REPLY_RESERVE_S = 5 s


def _call(name: str, args: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture
def journal(settings, tmp_path):
    """The MCP test server over stdio, writing what it cancels to a journal (the side effect to watch)."""
    import uuid

    tag, path = uuid.uuid4().hex, tmp_path / "journal.txt"
    settings.HAT_MCP_SERVERS = {"orders": McpServer("orders", "stdio", command=srv.stdio_command(tag),
                                                    env={"ORDERS_JOURNAL": str(path)})}
    yield path
    close_mcp_sessions()
    assert srv.tagged_pids(tag) == []


def _read(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def session(deployed, manager, reviewer, operator, journal):
    """production moved to a version with the server's tools imported (hints carried), a fixture tool that says it
    is destructive, the approval setting on and a 9 s turn deadline; a live session on it."""
    v1 = deployed["v1"]
    imported, _ = mcp_import.mcp_import_save(user=manager, version=v1, server="orders",
                                             select=["orders.lookup", "orders.cancel"])
    data = imported.manifest.model_dump(mode="json")
    data["constraints"].update(destructive_tools_need_approval=True, turn_deadline_s=DEADLINE_S)
    data["tools"].append({"name": "void_voucher", "description": "Void a voucher (a fixture table here).",
                          "parameters": {"type": "object", "properties": {}},
                          "binding": {"kind": "fixture", "default": {"voided": True}},
                          "annotations": {"destructive": True}})
    gated = harness_services.version_create_draft(user=manager, harness=v1.harness, manifest=parse_manifest(data),
                                                  parent=imported, change_note="operator approves destructive tools")
    harness_services.version_submit(user=manager, version=gated)
    gated = harness_services.version_approve(user=reviewer, version=gated)
    harness_services.label_move(user=reviewer, harness=v1.harness, name="production", version=gated)
    return live_session_for(deployed["deployment"], operator, handling={
        "batch_window_s": 0.0, "max_comments_per_turn": 2, "per_viewer_per_minute": 60})


class _Turn:
    """One live turn in a thread (it blocks while it waits for the operator), on a scripted model."""

    def __init__(self, session, monkeypatch, *outputs):
        # the scripted model cycles: a ModelError last, so a reply the hooks refuse ends the turn, not a second call
        monkeypatch.setattr(T.Backends, "for_in_force",
                            lambda self, in_force: ScriptedBackend([*outputs, ModelError("http", "script over")]))
        self.runner = session.__dict__.setdefault("test_runner", T.runner_name())  # one runner holds the lease
        assert T.live_runner_claim(session_id=session.pk, runner=self.runner) is not None
        comment_add(session, viewer="ann", text="please cancel my order")
        self.turn_id, _ = T.live_batch_claim(session_id=session.pk, runner=self.runner)
        assert self.turn_id
        self.session = session
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from django.db import connection

        try:
            T.live_turn_run(session_id=self.session.pk, runner=self.runner, turn_id=self.turn_id,
                            backends=T.Backends())
        finally:
            connection.close()

    def events(self, type_):
        return list(LiveEvent.objects.filter(session_id=self.session.pk, turn_id=self.turn_id, type=type_)
                    .order_by("seq"))

    def pending(self):
        return wait_for(lambda: self.events("tool_approval_pending"), timeout=10)[0]

    def join(self):
        self.thread.join(DEADLINE_S + 10)
        assert not self.thread.is_alive()

    def result_of(self, name):
        return next(e.payload for e in self.events("tool_result") if e.payload["name"] == name)


def test_refused_approved_and_timed_out(session, operator, journal, monkeypatch):
    # 1. refused: the read-only lookup ran at once, the cancellation waited and never ran
    turn = _Turn(session, monkeypatch,
                 _call("orders_lookup", {"order_id": "A101"}) + _call("orders_cancel", {"order_id": "A101"}),
                 "Your order A101 was not cancelled.")
    pending = turn.pending()
    assert pending.payload["tool"] == "orders_cancel" and pending.payload["effect"] == "destructive"
    assert pending.payload["arguments"] == {"order_id": "A101"} and pending.payload["wait_s"] <= DEADLINE_S - 4
    assert turn.result_of("orders_lookup")["result"]["status"] == "paid"  # read-only: never asked
    assert _read(journal) == []
    C.live_tool_decide(user=operator, session=session, turn_id=turn.turn_id, call_id=pending.payload["call_id"],
                       approve=False)
    turn.join()
    refused = turn.result_of("orders_cancel")["result"]
    assert refused["code"] == "approval_refused" and "NOT run" in refused["error"]
    assert _read(journal) == []
    assert [e.payload["name"] for e in turn.events("tool_call")] == ["orders_lookup", "orders_cancel"]
    with pytest.raises(InvalidTransition, match="already decided"):
        C.live_tool_decide(user=operator, session=session, turn_id=turn.turn_id,
                           call_id=pending.payload["call_id"], approve=True)

    # 2. approved: it runs, after the decision; a fixture table that says it is destructive runs without asking
    turn = _Turn(session, monkeypatch,
                 _call("void_voucher", {}) + _call("orders_cancel", {"order_id": "A101"}), "Order A101 is cancelled.")
    pending = turn.pending()
    assert [e.payload["tool"] for e in turn.events("tool_approval_pending")] == ["orders_cancel"]
    assert turn.result_of("void_voucher")["result"] == {"voided": True}
    C.live_tool_decide(user=operator, session=session, turn_id=turn.turn_id, call_id=pending.payload["call_id"],
                       approve=True)
    turn.join()
    assert turn.result_of("orders_cancel")["result"]["cancelled"] is True
    assert _read(journal) == ["cancel A101"]
    seqs = [e.seq for e in (*turn.events("tool_approval_pending"), *turn.events("tool_approval_decided"))]
    assert seqs[0] < seqs[1] < next(e.seq for e in turn.events("tool_result")
                                    if e.payload["name"] == "orders_cancel")

    # 3. nobody decides: refused before the turn's deadline leaves the model time to answer; late decisions are 409
    turn = _Turn(session, monkeypatch, _call("orders_cancel", {"order_id": "A100"}), "A person will follow up.")
    pending = turn.pending()
    turn.join()
    timed_out = turn.result_of("orders_cancel")["result"]
    assert timed_out["code"] == "approval_timeout"
    decided = turn.events("tool_approval_decided")[0].payload
    assert (decided["approved"], decided["by"]) == (False, "timeout")
    assert turn.events("deadline_exceeded") == []  # the wait ended before the deadline
    assert _read(journal) == ["cancel A101"]  # A100 was never cancelled
    with pytest.raises(InvalidTransition, match="already decided"):
        C.live_tool_decide(user=operator, session=session, turn_id=turn.turn_id,
                           call_id=pending.payload["call_id"], approve=True)
    from console.models import AuditEvent

    assert list(AuditEvent.objects.filter(action__in=("live_session.tool_approved", "live_session.tool_refused"))
                .order_by("id").values_list("action", flat=True)) == [
        "live_session.tool_refused", "live_session.tool_approved"]


def test_no_time_left_to_ask_is_refused_at_once(session):
    tool = session.version_in_force.manifest.tool("orders_cancel")
    gate = LiveToolGate(session.pk, "turn-x", lambda kind, payload: live_event_append(
        session_id=session.pk, turn_id="turn-x", type=kind, payload=payload))
    fault = gate(tool, "call_0", {"order_id": "A101"}, lambda: APPROVAL_REPLY_RESERVE_S + 1.0)
    assert fault["code"] == "approval_unavailable" and "NOT run" in fault["error"]
    decided = LiveEvent.objects.get(session_id=session.pk, turn_id="turn-x", type="tool_approval_decided")
    assert decided.payload["by"] == "deadline"
    assert not LiveEvent.objects.filter(session_id=session.pk, type="tool_approval_pending").exists()
    assert gate(session.version_in_force.manifest.tool("orders_lookup"), "call_1", {}, lambda: 0.0) is None


def test_the_operator_page_lists_the_call_and_decides_it(session, client, operator, reviewer):
    live_event_append(session_id=session.pk, turn_id="t1", type="tool_approval_pending", payload={
        "call_id": "call_0", "tool": "orders_cancel", "binding": "mcp:orders/orders.cancel",
        "arguments": {"order_id": "A101"}, "effect": "destructive", "effect_label": "destructive",
        "why": "its annotations say it is destructive", "wait_s": 5.0})
    client.force_login(operator)
    url = f"/live/{session.pk}/"
    panel = client.get(url, {"panel": "tool_calls"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-call="call_0"' in panel and 'data-testid="tool-approve"' in panel and "A101" in panel
    client.force_login(reviewer)  # may watch, may not steer
    assert client.post(f"{url}tool-decide/", {"turn_id": "t1", "call_id": "call_0"}).status_code == 403
    client.force_login(operator)
    assert client.post(f"{url}tool-decide/", {"turn_id": "t1", "call_id": "nope"},
                       HTTP_HX_REQUEST="true").status_code == 404
    answer = client.post(f"{url}tool-decide/", {"turn_id": "t1", "call_id": "call_0"}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and "refused" in answer.content.decode()
    decided = LiveEvent.objects.get(session_id=session.pk, turn_id="t1", type="tool_approval_decided")
    assert (decided.payload["approved"], decided.payload["by"]) == (False, operator.get_username())
    panel = client.get(url, {"panel": "tool_calls"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-call="call_0"' not in panel
