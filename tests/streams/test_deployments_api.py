"""Deployment API per role: list, detail, create, propose, revision detail, approve / reject / withdraw, rollback; every
401/403/404/405/409, bad input 400 with paths, and refused requests change nothing."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from console.models import AuditEvent
from harness_editor.models import Label
from streams.models import Deployment, DeploymentRevision
from streams.services import deployments
from tests.streams.deployment_helpers import deploy_world, deployed, live_session_on  # noqa: F401

pytestmark = pytest.mark.django_db

API = "/api/deployments/"
ONE = API + "tiny-live/"


def _client(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_authenticate(request.getfixturevalue(role))
    return client


def _paths(response) -> dict[str, str]:
    return {e["path"]: e["message"] for e in response.json()["errors"]}


def _create_body(w, **over) -> dict:
    body = {"name": "tiny-live", "title": "Tiny", "harness": "tiny-room", "label": "production",
            "serve_profile": "vllm-cpu", "endpoints": ["ep-a", "ep-b"], "model": str(w["base"].pk)}
    body.update(over)
    return body


@pytest.mark.parametrize("role, expected", [("manager", 200), ("reviewer", 200), ("ml_staff", 200),
                                            ("operator", 200), ("outsider", 403), ("anonymous", 401)])
def test_reads_per_role(request, deployed, role, expected, operator):
    session = live_session_on(deployed["deployment"], operator)
    client = _client(request, role)
    for url in (API, ONE, ONE + "revisions/1/"):
        assert client.get(url).status_code == expected, url
    if expected != 200:
        return
    listed = client.get(API).json()
    assert listed[0]["name"] == "tiny-live"
    assert listed[0]["in_force"] == {"revision": 1, "label": "production", "version": 1, "recorded_version": 1,
                                     "model": "demo-tiny", "adapter": None, "serve_profile": "vllm-cpu",
                                     "endpoints": ["ep-a", "ep-b"]}
    assert listed[0]["live_sessions"] == [{"id": str(session.pk), "title": "Evening show"}]
    detail = client.get(ONE).json()
    assert detail["revisions"][0]["status"] == "approved" and detail["rollback_to"] is None
    assert detail["pending"] is None and detail["pending_diff"] is None
    revision = client.get(ONE + "revisions/1/").json()
    assert revision["endpoints"] == ["ep-a", "ep-b"] and not any(row["changed"] for row in revision["diff"])
    assert client.get(API + "ghost/").status_code == 404
    assert client.get(ONE + "revisions/7/").status_code == 404
    assert client.get(API + "Not A Slug/").status_code == 404


def test_create_per_role_and_bad_input(request, deploy_world, reviewer, operator, ml_staff, outsider):
    w = deploy_world
    for role, expected in (("anonymous", 401), ("outsider", 403), ("reviewer", 403), ("operator", 403)):
        assert _client(request, role).post(API, _create_body(w), format="json").status_code == expected
    client = _client(request, "ml_staff")
    shape = client.post(API, {"name": "Bad Name", "endpoints": "ep-a", "model": "nope"}, format="json")
    assert shape.status_code == 400
    assert {"name", "endpoints", "model", "harness", "label", "serve_profile"} <= set(_paths(shape))
    rules = client.post(API, _create_body(w, endpoints=["ep-a", "ghost", "far"], label="missing",
                                          adapter=str(w["adapter"].pk), model=str(w["other"].pk)), format="json")
    assert rules.status_code == 400
    paths = _paths(rules)
    assert set(paths) == {"endpoints[1]", "endpoints[2]", "label", "adapter"}
    assert "no label 'missing'" in paths["label"] and "not an adapter of" in paths["adapter"]
    assert client.post(API, _create_body(w, harness="ghost"), format="json").status_code == 400
    assert Deployment.objects.count() == 0 and not AuditEvent.objects.filter(action__startswith="deployment.").exists()
    created = client.post(API, _create_body(w), format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["pending"] == 1 and body["in_force"] is None
    assert {row["field"] for row in body["pending_diff"] if row["changed"]} == {
        "label", "harness version", "model", "serve profile", "endpoints"}
    taken = client.post(API, _create_body(w), format="json")
    assert taken.status_code == 400 and "already taken" in _paths(taken)["name"]


def test_propose_approve_reject_withdraw(request, deployed, ml_staff, ml_lead, reviewer, manager):
    w = deployed
    assert _client(request, "operator").post(ONE + "propose/", {"label": "staging"}, format="json").status_code == 403
    staff = _client(request, "ml_staff")
    assert staff.post(API + "ghost/propose/", {"label": "staging"}, format="json").status_code == 404
    same = staff.post(ONE + "propose/", {"endpoints": ["ep-a", "ep-b"]}, format="json")
    assert same.status_code == 400 and "nothing changes" in same.json()["errors"][0]["message"]
    bad = staff.post(ONE + "propose/", {"endpoints": ["ep-b", "ep-b"], "model": None}, format="json")
    assert bad.status_code == 400 and "listed twice" in _paths(bad)["endpoints[1]"]
    proposed = staff.post(ONE + "propose/", {"model": str(w["tuned"].pk), "note": "sft"}, format="json")
    assert proposed.status_code == 201
    diff = {row["field"]: row for row in proposed.json()["diff"]}
    assert diff["model"] == {"field": "model", "before": "demo-tiny", "after": "demo-sft", "changed": True}
    second = _client(request, "ml_lead").post(ONE + "propose/", {"label": "staging"}, format="json")
    assert second.status_code == 409
    # four eyes and roles on review
    assert staff.post(ONE + "revisions/2/approve/", {}, format="json").status_code == 403
    assert _client(request, "manager").post(ONE + "revisions/2/approve/", {}, format="json").status_code == 403
    assert _client(request, "ml_lead").post(ONE + "revisions/2/withdraw/", {}, format="json").status_code == 403
    review = _client(request, "reviewer")
    assert review.get(ONE + "revisions/2/approve/").status_code == 405
    assert review.post(ONE + "revisions/9/approve/", {}, format="json").status_code == 404
    no_comment = review.post(ONE + "revisions/2/reject/", {"comment": ""}, format="json")
    assert no_comment.status_code == 400 and "comment" in _paths(no_comment)
    long = review.post(ONE + "revisions/2/approve/", {"comment": "x" * 4001}, format="json")
    assert long.status_code == 400 and "comment" in _paths(long)
    assert DeploymentRevision.objects.get(deployment=w["deployment"], number=2).status == "proposed"
    approved = review.post(ONE + "revisions/2/approve/", {"comment": "ok"}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert review.post(ONE + "revisions/2/approve/", {}, format="json").status_code == 409
    assert _client(request, "ml_staff").get(ONE).json()["rollback_to"] == 1
    # reject and withdraw
    r3 = staff.post(ONE + "propose/", {"label": "staging"}, format="json").json()
    rejected = review.post(ONE + f"revisions/{r3['number']}/reject/", {"comment": "not yet"}, format="json")
    assert rejected.status_code == 200 and rejected.json()["decision_comment"] == "not yet"
    r4 = staff.post(ONE + "propose/", {"label": "staging"}, format="json").json()
    withdrawn = staff.post(ONE + f"revisions/{r4['number']}/withdraw/", {}, format="json")
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "withdrawn"


def test_rollback_api(request, deployed, ml_staff, reviewer, operator):
    w = deployed
    op = _client(request, "operator")
    first = op.post(ONE + "rollback/", {"comment": "nothing before"}, format="json")
    assert first.status_code == 409
    r2 = deployments.deployment_propose(user=ml_staff, deployment=w["deployment"], label="staging",
                                        serve_profile="vllm-plain")
    deployments.deployment_approve(user=reviewer, revision=r2)
    before = AuditEvent.objects.count()
    assert _client(request, "anonymous").post(ONE + "rollback/", {"comment": "x"}, format="json").status_code == 401
    assert _client(request, "ml_staff").post(ONE + "rollback/", {"comment": "x"}, format="json").status_code == 403
    assert _client(request, "manager").post(ONE + "rollback/", {"comment": "x"}, format="json").status_code == 403
    assert op.post(API + "ghost/rollback/", {"comment": "x"}, format="json").status_code == 404
    missing = op.post(ONE + "rollback/", {}, format="json")
    assert missing.status_code == 400 and "comment" in _paths(missing)
    blank = op.post(ONE + "rollback/", {"comment": "  "}, format="json")
    assert blank.status_code == 400 and "comment" in _paths(blank)
    assert op.post(ONE + "rollback/", ["not", "an", "object"], format="json").status_code == 400
    assert AuditEvent.objects.count() == before
    done = op.post(ONE + "rollback/", {"comment": "staging misbehaves"}, format="json")
    assert done.status_code == 200
    body = done.json()
    assert body["in_force"]["revision"] == 1 and body["in_force"]["label"] == "production"
    assert body["in_force"]["serve_profile"] == "vllm-cpu" and body["rollback_to"] is None
    # r1's label never moved since: no label move was needed
    assert Label.objects.get(harness=w["harness"], name="production").version == w["v1"]
    event = AuditEvent.objects.filter(action="deployment.rollback").get()
    assert event.actor == operator and event.comment == "staging misbehaves"
