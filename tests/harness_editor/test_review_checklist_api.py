"""The review checklist through the REST API: POST .../approve takes the ticked item ids (``checklist``) and goes
through the same service as the page's approve button, so the compliance lead's checklist cannot be bypassed by
the API; GET /api/review-checklist reads the list. Refusals save nothing (no approval, no ticks, no audit row)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from console import roles
from console.models import AuditEvent
from harness_editor import review_services
from harness_editor.models import ApprovalChecklist, HarnessVersion
from tests.harness_editor import gate_helpers

pytestmark = pytest.mark.django_db
BASE = "/api/harnesses/glow-gadget"
APPROVE_V2 = f"{BASE}/versions/2/approve"
CHECKLIST = "/api/review-checklist"
compliance_lead = gate_helpers.compliance_lead  # the fixture, used here


@pytest.fixture
def checklist(compliance_lead):
    return review_services.review_checklist_set(user=compliance_lead, texts=[
        "Every price claim is backed by a tool result", "No efficacy promise", "Banned phrases list is current"])


def _client(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


def _nothing_approved(v2: HarnessVersion) -> None:
    assert HarnessVersion.objects.get(pk=v2.pk).status == "submitted"
    assert not ApprovalChecklist.objects.exists()
    assert not AuditEvent.objects.filter(action="version.approved", target="version:2").exists()


# --- reading the checklist ------------------------------------------------------------------------------------

@pytest.mark.parametrize("who", ["manager", "reviewer", "ml_staff", "ml_lead", "operator", "compliance_lead"])
def test_every_role_that_views_harnesses_reads_the_checklist(request, checklist, who):
    response = _client(request.getfixturevalue(who)).get(CHECKLIST)
    assert response.status_code == 200
    assert response.json() == [{"id": item.pk, "text": item.text, "position": n} for n, item in enumerate(checklist)]


def test_reading_the_checklist_needs_a_role(outsider, checklist):
    assert _client(outsider).get(CHECKLIST).status_code == 403
    assert _client().get(CHECKLIST).status_code in (401, 403)


def test_no_checklist_reads_as_an_empty_list(reviewer):
    assert _client(reviewer).get(CHECKLIST).json() == []


# --- approving with the checklist -----------------------------------------------------------------------------

def test_missing_ticks_are_400_naming_them_and_nothing_is_saved(harness_with_history, reviewer, checklist):
    client = _client(reviewer)
    response = client.post(APPROVE_V2, {"comment": "ok", "checklist": [checklist[0].pk]}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "validation_failed"
    assert body["errors"] == [{"path": "checklist", "message": "not ticked: No efficacy promise"},
                              {"path": "checklist", "message": "not ticked: Banned phrases list is current"}]
    _nothing_approved(harness_with_history["v2"])


def test_leaving_the_checklist_out_does_not_bypass_it(harness_with_history, reviewer, checklist):
    response = _client(reviewer).post(APPROVE_V2, {"comment": "ok"}, format="json")
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == ["checklist"] * 3
    _nothing_approved(harness_with_history["v2"])


def test_every_tick_approves_and_keeps_the_ticks_like_the_page(harness_with_history, reviewer, checklist):
    ids = [item.pk for item in checklist]
    response = _client(reviewer).post(APPROVE_V2, {"comment": "ok", "checklist": list(reversed(ids))}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "approved" and response.json()["decided_by"] == reviewer.username
    v2 = HarnessVersion.objects.get(pk=harness_with_history["v2"].pk)
    kept = ApprovalChecklist.objects.get(version=v2)
    # list order, whatever order the ticks came in (as the page stores them)
    assert kept.items == [{"id": i.pk, "text": i.text, "ticked": True} for i in checklist]
    assert kept.ticked_by == reviewer
    event = AuditEvent.objects.get(action="version.approved", target="version:2")
    assert event.data["review"] == {"checklist": kept.items, "unresolved_comments": 0}


@pytest.mark.parametrize("sent,path", [
    ("extra", "checklist[3]"),          # an id that is on no current list
    ("retired", "checklist[0]"),        # an item of an earlier list
])
def test_an_id_not_on_the_current_checklist_is_400(harness_with_history, reviewer, compliance_lead, checklist, sent,
                                                   path):
    ids = [item.pk for item in checklist]
    if sent == "extra":
        ticks = [*ids, max(ids) + 1000]
    else:
        old = ids[0]
        fresh = review_services.review_checklist_set(user=compliance_lead, texts=["Only this"])
        ticks = [old, fresh[0].pk]
    response = _client(reviewer).post(APPROVE_V2, {"checklist": ticks}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert {"path": path, "message": f"{ticks[int(path[10:-1])]} is not an item of the current review checklist"} \
        in errors
    _nothing_approved(harness_with_history["v2"])


@pytest.mark.parametrize("value,path", [
    (["x"], "checklist.0"), ([0], "checklist.0"), ([1, 2**31], "checklist.1"), ("1", "checklist"),
    ({"1": True}, "checklist"), (list(range(1, 40)), "checklist"),
])
def test_a_malformed_checklist_is_a_path_precise_400(harness_with_history, reviewer, checklist, value, path):
    response = _client(reviewer).post(APPROVE_V2, {"checklist": value}, format="json")
    assert response.status_code == 400
    assert path in [e["path"] for e in response.json()["errors"]]
    _nothing_approved(harness_with_history["v2"])


def test_four_eyes_and_status_come_before_the_checklist(harness_with_history, manager, reviewer, checklist):
    manager.groups.add(Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    response = _client(manager).post(APPROVE_V2, {}, format="json")  # the author of v2, no ticks
    assert response.status_code == 403 and "four eyes" in response.json()["detail"]
    _nothing_approved(harness_with_history["v2"])
    response = _client(reviewer).post(f"{BASE}/versions/1/approve", {}, format="json")  # v1 is approved already
    assert response.status_code == 409


@pytest.mark.parametrize("who", ["manager", "ml_staff", "ml_lead", "operator", "outsider"])
def test_roles_without_review_permission_get_403(request, harness_with_history, checklist, who):
    user = request.getfixturevalue(who)
    assert not user.has_perm(roles.REVIEW_VERSION)
    response = _client(user).post(APPROVE_V2, {"checklist": [i.pk for i in checklist]}, format="json")
    assert response.status_code == 403
    _nothing_approved(harness_with_history["v2"])


def test_anonymous_is_refused(harness_with_history, checklist):
    assert _client().post(APPROVE_V2, {"checklist": [i.pk for i in checklist]}, format="json").status_code in (401,
                                                                                                              403)
    _nothing_approved(harness_with_history["v2"])


@pytest.mark.parametrize("url", [f"{BASE}/versions/99/approve", "/api/harnesses/nope/versions/2/approve"])
def test_unknown_version_or_harness_is_404(harness_with_history, reviewer, checklist, url):
    response = _client(reviewer).post(url, {"checklist": [i.pk for i in checklist]}, format="json")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not ApprovalChecklist.objects.exists()


# --- without a checklist --------------------------------------------------------------------------------------

def test_without_a_checklist_approve_works_as_before(harness_with_history, reviewer):
    response = _client(reviewer).post(APPROVE_V2, {"comment": "fine"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "approved"
    assert not ApprovalChecklist.objects.exists()
    event = AuditEvent.objects.get(action="version.approved", target="version:2")
    assert event.comment == "fine" and event.data["review"]["checklist"] == []


def test_without_a_checklist_a_sent_id_is_400(harness_with_history, reviewer):
    response = _client(reviewer).post(APPROVE_V2, {"checklist": [5]}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "checklist[0]"
    _nothing_approved(harness_with_history["v2"])


# --- the OpenAPI document -------------------------------------------------------------------------------------

def test_the_schema_documents_the_checklist():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    field = schema["components"]["schemas"]["ApproveInput"]["properties"]["checklist"]
    assert field["type"] == "array" and field["items"]["type"] == "integer"
    assert "every current item must be ticked" in field["description"]
    operation = schema["paths"]["/api/review-checklist"]["get"]
    assert operation["operationId"] == "review_checklist"
    assert set(schema["components"]["schemas"]["ReviewChecklistItem"]["properties"]) == {"id", "text", "position"}
