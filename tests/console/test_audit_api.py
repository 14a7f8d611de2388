"""The audit timeline through the API: every transition and label move appears, in order, from -> to."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from console.models import AuditEvent

pytestmark = pytest.mark.django_db




@pytest.fixture
def clients(manager, reviewer, ml_staff):
    out = {}
    for name, user in (("manager", manager), ("reviewer", reviewer), ("ml", ml_staff)):
        out[name] = APIClient()
        out[name].force_login(user)
    return out


def _ok(response, status=200):
    assert response.status_code == status, response.content[:500]
    return response.json()


def test_every_transition_and_label_move_is_audited_in_order(clients, demo_yaml):
    m, r = clients["manager"], clients["reviewer"]
    base = "/api/harnesses/audited"
    _ok(m.post("/api/harnesses/", {"slug": "audited", "name": "Audited", "manifest_yaml": demo_yaml(),
                                   "change_note": "first"}, format="json"), 201)
    _ok(m.post(f"{base}/versions/1/submit", {"comment": "please review"}, format="json"))
    _ok(r.post(f"{base}/versions/1/approve", {"comment": "ok"}, format="json"))
    _ok(r.put(f"{base}/labels/production/", {"version": 1, "comment": "go live"}, format="json"))
    _ok(m.post(f"{base}/versions/", {"parent": 1, "manifest_yaml": demo_yaml("skincare_v2")}, format="json"), 201)
    _ok(m.patch(f"{base}/versions/2/", {"lock_version": 1, "change_note": "coupon wording"}, format="json"))
    _ok(m.post(f"{base}/versions/2/submit", {}, format="json"))
    _ok(r.post(f"{base}/versions/2/reject", {"comment": "claims too strong"}, format="json"))
    _ok(m.post(f"{base}/versions/", {"parent": 2, "manifest_yaml": demo_yaml("skincare_v3")}, format="json"), 201)
    _ok(m.post(f"{base}/versions/3/submit", {}, format="json"))
    _ok(r.post(f"{base}/versions/3/approve", {}, format="json"))
    _ok(m.put(f"{base}/labels/production/", {"version": 3}, format="json"))
    _ok(r.post(f"{base}/labels/production/rollback", {"comment": "replies got worse"}, format="json"))
    _ok(m.post(f"{base}/versions/", {"parent": 3, "manifest_yaml": demo_yaml("skincare_v3")}, format="json"), 201)
    assert m.delete(f"{base}/versions/4/").status_code == 204
    # refused and failed requests leave no trace
    assert r.post(f"{base}/versions/3/approve", {}, format="json").status_code == 409
    assert r.put(f"{base}/labels/production/", {"version": 2}, format="json").status_code == 400
    assert clients["ml"].post(f"{base}/versions/3/approve", {}, format="json").status_code == 403

    body = _ok(clients["ml"].get("/api/audit/?scope=harness:audited"))
    rows = body["results"]
    assert body["count"] == len(rows) == 15
    assert [row["id"] for row in rows] == sorted((row["id"] for row in rows), reverse=True)  # newest first
    timeline = [(row["actor"], row["action"], row["target"], row["from_state"], row["to_state"], row["comment"])
                for row in reversed(rows)]
    assert timeline == [
        ("cm_alice", "harness.created", "harness:audited", "", "created", ""),
        ("cm_alice", "version.created", "version:1", "", "draft", "first"),
        ("cm_alice", "version.submitted", "version:1", "draft", "submitted", "please review"),
        ("cr_carol", "version.approved", "version:1", "submitted", "approved", "ok"),
        ("cr_carol", "label.moved", "label:production", "", "v1", "go live"),
        ("cm_alice", "version.created", "version:2", "", "draft", ""),
        ("cm_alice", "version.submitted", "version:2", "draft", "submitted", ""),
        ("cr_carol", "version.rejected", "version:2", "submitted", "rejected", "claims too strong"),
        ("cm_alice", "version.created", "version:3", "", "draft", ""),
        ("cm_alice", "version.submitted", "version:3", "draft", "submitted", ""),
        ("cr_carol", "version.approved", "version:3", "submitted", "approved", ""),
        ("cm_alice", "label.moved", "label:production", "v1", "v3", ""),
        ("cr_carol", "label.moved", "label:production", "v3", "v1", "replies got worse"),
        ("cm_alice", "version.created", "version:4", "", "draft", ""),
        ("cm_alice", "version.discarded", "version:4", "draft", "discarded", ""),
    ]
    assert all(row["scope"] == "harness:audited" and row["at"] for row in rows)
    rollback, forward = rows[2], rows[3]
    assert rollback["data"]["rollback"] is True and forward["data"]["rollback"] is False
    assert rollback["data"]["to_version_id"] == forward["data"]["from_version_id"]
    created_v3 = next(row for row in rows if row["action"] == "version.created" and row["target"] == "version:3")
    assert created_v3["data"]["parent"] == 2 and len(created_v3["data"]["content_hash"]) == 64


def test_audit_scope_filter_and_pagination(clients, harness_with_history, demo_yaml):
    m = clients["manager"]
    _ok(m.post("/api/harnesses/", {"slug": "other", "name": "Other", "manifest_yaml": demo_yaml()}, format="json"),
        201)
    everything = _ok(m.get("/api/audit/"))
    glow = _ok(m.get("/api/audit/?scope=harness:glow-gadget"))
    other = _ok(m.get("/api/audit/?scope=harness:other"))
    assert everything["count"] == glow["count"] + other["count"] == AuditEvent.objects.count()
    assert {row["scope"] for row in other["results"]} == {"harness:other"}
    assert [row["action"] for row in other["results"]] == ["version.created", "harness.created"]
    page = _ok(m.get("/api/audit/?scope=harness:glow-gadget&limit=2&offset=1"))
    assert [row["id"] for row in page["results"]] == [row["id"] for row in glow["results"][1:3]]
    assert page["count"] == glow["count"] and page["next"] and page["previous"]
    assert _ok(m.get("/api/audit/?scope=harness:nothing-here"))["count"] == 0


def test_label_history_matches_the_audit_timeline(clients, harness_with_history):
    r = clients["reviewer"]
    history = _ok(r.get("/api/harnesses/glow-gadget/labels/production/history"))["results"]
    audit = [row for row in _ok(r.get("/api/audit/?scope=harness:glow-gadget"))["results"]
             if row["target"] == "label:production"]
    assert [(h["from_state"], h["to_state"], h["actor"]) for h in history] == [
        (a["from_state"], a["to_state"], a["actor"]) for a in audit] == [("", "v1", "cr_carol")]
