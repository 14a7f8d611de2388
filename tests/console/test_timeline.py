"""The audit timeline as a product: every row links to what it is about, filters by object, user, action and days,
the filtered rows export as streamed CSV (role-checked, bad filters refused), and the home page names objects the
way people do ("glow-gadget v2")."""

from __future__ import annotations

import csv
import datetime as dt
import io
import uuid

import pytest
from asgiref.sync import async_to_sync
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from django.urls import reverse
from django.utils import timezone

from console import selectors
from console.models import AuditEvent
from console.services import audit_record
from harness_editor import services as registry


def _event(action: str, scope: str, target: str) -> AuditEvent:
    return AuditEvent(action=action, scope=scope, target=target)


# --- what a row is about, and its link -------------------------------------------------------------------------

RUN = uuid.uuid4()


@pytest.mark.parametrize("action,scope,target,label,url", [
    ("version.approved", "harness:glow-gadget", "version:4", "glow-gadget v4", "/harnesses/glow-gadget/v4/"),
    ("version.discarded", "harness:glow-gadget", "version:5", "glow-gadget v5", "/harnesses/glow-gadget/"),
    ("label.moved", "harness:glow-gadget", "label:production", "glow-gadget production", "/harnesses/glow-gadget/"),
    ("harness.created", "harness:glow-gadget", "harness:glow-gadget", "glow-gadget", "/harnesses/glow-gadget/"),
    ("deployment.approve", "deployment:tiny-live", "revision:2", "deployment tiny-live r2",
     "/deployments/tiny-live/revisions/2/"),
    ("live_session.started", "deployment:tiny-live", f"live_session:{RUN}", "live session on tiny-live",
     f"/live/{RUN}/"),
    ("training.queued", f"training:{RUN}", "training:stage-1", "training:stage-1", f"/training/{RUN}/"),
    ("eval.queued", f"eval:{RUN}", "eval:t1", "eval:t1", f"/evals/runs/{RUN}/"),
    ("dataset.queued", f"dataset:{RUN}", "dataset:hsa", "dataset:hsa", f"/datasets/{RUN}/"),
    ("eval_set.created", "eval_set:t1-live", "eval_set:t1-live", "eval_set:t1-live", "/eval-sets/t1-live/"),
    ("live_session.saved_as_eval_set", f"live_session:{RUN}", "eval_set:from-room@3", "eval set from-room v3",
     "/eval-sets/from-room/v3/"),
    ("scenario.created", "scenario:flash", "scenario:flash", "scenario:flash", None),  # no page: no link
    ("gate.changed", "gate", "gate_policy:1", "gate_policy:1", None),
    ("training.queued", "training:not-a-uuid", "training:x", "training:x", None),  # a bad id: no link, no crash
])
def test_each_kind_of_row_names_its_object_and_links_to_its_page(action, scope, target, label, url):
    obj = selectors.audit_object(_event(action, scope, target))
    assert (obj.label, obj.url) == (label, url)


def test_every_timeline_row_links_to_its_object(client, harness_with_history, operator):
    client.force_login(operator)
    body = client.get(reverse("timeline")).content.decode()
    assert 'href="/harnesses/glow-gadget/v2/" data-testid="object-link" title="glow-gadget v2">version:2</a>' in body
    assert 'href="/harnesses/glow-gadget/" data-testid="object-link" title="glow-gadget production">label:production' \
        in body


def test_home_recent_activity_names_harness_and_version(client, harness_with_history, operator):
    client.force_login(operator)
    body = client.get(reverse("home")).content.decode()
    assert '<a href="/harnesses/glow-gadget/v2/" data-testid="object-link">glow-gadget v2</a>' in body
    assert "version:2" not in body


# --- filters ---------------------------------------------------------------------------------------------------

@pytest.fixture
def history(harness_with_history, manager, reviewer):
    """The demo history plus an event by nobody (the system) and one in another harness."""
    audit_record(actor=None, action="eval_set.pinned", scope="eval_set:t1", target="eval_set:t1", comment="old pin")
    audit_record(actor=manager, action="version.created", scope="harness:other-room", target="version:1",
                 comment="elsewhere")
    return harness_with_history


def _rows(client, **params) -> str:
    response = client.get(reverse("timeline"), params)
    assert response.status_code == 200
    return response.content.decode().split('id="events"')[1]


def test_filter_by_user_action_and_object(client, history, manager):
    client.force_login(manager)
    by_carol = _rows(client, user="cr_carol")
    assert "version.approved" in by_carol and "label.moved" in by_carol and "version.created" not in by_carol
    approvals = _rows(client, action="version.approved")
    assert "checked claims" in approvals and "label.moved" not in approvals
    both = _rows(client, user="cm_alice", scope="harness:other-room")
    assert "elsewhere" in both and "glow-gadget" not in both
    by_system = _rows(client, user="system")
    assert "old pin" in by_system and "cr_carol" not in by_system
    assert "No events yet." in _rows(client, user="nobody-at-all")


def test_filter_by_days(client, history, manager):
    today = timezone.localdate()
    client.force_login(manager)
    everything = _rows(client, since=str(today), until=str(today))
    assert "checked claims" in everything and "elsewhere" in everything
    assert "No events yet." in _rows(client, until=str(today - dt.timedelta(days=1)))
    assert "No events yet." in _rows(client, since=str(today + dt.timedelta(days=1)))
    # the filter names the choices it offers
    page = client.get(reverse("timeline"), {"action": "label.moved"}).content.decode()
    assert '<option value="label.moved" selected>' in page and '<option value="cr_carol">' in page
    # the action choices are those of the chosen object
    scoped = client.get(reverse("timeline"), {"scope": "harness:other-room"}).content.decode()
    assert '<option value="version.created">' in scoped and 'value="label.moved"' not in scoped


@pytest.mark.parametrize("params,message", [
    ({"since": "yesterday"}, "since: Enter a valid date."),
    ({"until": "2026-02-30"}, "until: Enter a valid date."),
    ({"since": "2026-05-02", "until": "2026-05-01"}, "until: the range ends before it starts"),
    ({"action": "x" * 65}, "action: Ensure this value has at most 64 characters"),
])
def test_bad_filters_are_a_400_that_says_why(client, history, manager, params, message):
    client.force_login(manager)
    response = client.get(reverse("timeline"), params)
    assert response.status_code == 400 and message in response.content.decode()
    export = client.get(reverse("timeline_export"), params)
    assert export.status_code == 400 and message in export.content.decode()


def test_pagination_keeps_the_filter(client, manager):
    for i in range(60):
        audit_record(actor=manager, action="test.event", scope="harness:x", target=f"thing:{i}")
    client.force_login(manager)
    body = client.get(reverse("timeline"), {"action": "test.event"}).content.decode()
    assert "Page 1 of 2" in body and "?action=test.event&amp;page=2" in body


# --- CSV export ------------------------------------------------------------------------------------------------

def _csv(response) -> list[dict]:
    assert isinstance(response, StreamingHttpResponse)
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_export_streams_the_filtered_rows_as_csv(client, history, operator):
    client.force_login(operator)
    response = client.get(reverse("timeline_export"), {"scope": "harness:glow-gadget", "action": "version.submitted"})
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="timeline-')
    rows = _csv(response)
    assert [(r["user"], r["action"], r["target"], r["object"], r["link"]) for r in rows] == [
        ("cm_alice", "version.submitted", "version:2", "glow-gadget v2", "/harnesses/glow-gadget/v2/"),
        ("cm_alice", "version.submitted", "version:1", "glow-gadget v1", "/harnesses/glow-gadget/v1/"),
    ]
    everything = _csv(client.get(reverse("timeline_export")))
    assert len(everything) == AuditEvent.objects.count()
    assert [int(r["id"]) for r in everything] == sorted((int(r["id"]) for r in everything), reverse=True)


def test_export_writes_formula_like_cells_as_text(client, manager):
    audit_record(actor=manager, action="test.event", scope="harness:x", target="thing:1", comment="=HYPERLINK(1)")
    client.force_login(manager)
    (row,) = _csv(client.get(reverse("timeline_export")))
    assert row["comment"] == "'=HYPERLINK(1)"


def test_export_is_role_checked(client, db, outsider):
    url = reverse("timeline_export")
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    assert client.post(url).status_code == 403


def test_export_is_get_only(client, manager):
    client.force_login(manager)
    assert client.post(reverse("timeline_export")).status_code == 405


def test_export_reads_in_batches_by_id(manager):
    for i in range(7):
        audit_record(actor=manager, action="test.event", scope="harness:x", target=f"thing:{i}")
    batches = list(selectors.audit_rows_batched(selectors.audit_list(), batch=3))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert [e.target for b in batches for e in b] == [f"thing:{i}" for i in reversed(range(7))]


def test_export_streams_under_asgi_too(manager):
    """Under ASGI (the console's web process) the rows come through an async iterator, a batch at a time."""
    audit_record(actor=manager, action="test.event", scope="harness:x", target="thing:asgi")

    async def fetch():
        client = AsyncClient()
        await client.aforce_login(manager)
        response = await client.get(reverse("timeline_export"))
        assert response.is_async
        return response.status_code, b"".join([chunk async for chunk in response.streaming_content])

    status, body = async_to_sync(fetch)()
    assert status == 200 and b"thing:asgi" in body and body.startswith(b"id,at,user,action")


def test_the_version_flow_is_on_the_timeline_with_links(client, manager, reviewer, demo_manifest):
    v1 = registry.harness_create(user=manager, slug="flow", name="Flow", manifest=demo_manifest("skincare_v1"))
    registry.version_submit(user=manager, version=v1)
    client.force_login(reviewer)
    body = _rows(client, scope="harness:flow")
    assert body.count('href="/harnesses/flow/v1/"') == 2  # created, submitted
