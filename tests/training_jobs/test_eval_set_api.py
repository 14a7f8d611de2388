"""Eval-set API: import (JSON body and file upload; 201 new, 200 the same cases again), errors with line and field,
sets, versions, cases with filters and pages, a case, the download, the pin, save-from-turn, and every role's
answer on every endpoint."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from console.models import AuditEvent
from training_jobs import eval_services as services
from training_jobs.eval_models import EvalSet, EvalSetVersion
from tests.training_jobs.eval_helpers import (  # noqa: F401
    canonical_jsonl, loose_jsonl, preview_turn, scripted_endpoint, scripted_model, t1_case, t4_case)

pytestmark = pytest.mark.django_db

ROLES = ["manager", "reviewer", "ml_staff", "ml_lead", "operator", "outsider", "anonymous"]


@pytest.fixture
def world(ml_staff):
    cases = [t1_case(i, tags=["price", "typo"] if i % 2 else ["stock"]) for i in range(30)]
    v1, _ = services.eval_set_import(user=ml_staff, name="t1-demo", kind="t1", jsonl_text=canonical_jsonl(cases[:3]),
                                     note="first")
    v2, _ = services.eval_set_import(user=ml_staff, name="t1-demo", kind="t1", jsonl_text=canonical_jsonl(cases),
                                     note="thirty")
    return {"v1": v1, "v2": v2}


def _client(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_authenticate(request.getfixturevalue(role))
    return client


def _import(client, name="t1-new", kind="t1", cases=None, **extra):
    body = {"name": name, "kind": kind, "jsonl": canonical_jsonl(cases or [t1_case(1)]), **extra}
    return client.post("/api/eval-sets/", body, format="json")


# --- the role matrix -----------------------------------------------------------------------------------------------

READS = ["/api/eval-sets/", "/api/eval-sets/t1-demo/", "/api/eval-sets/t1-demo/versions/2/",
         "/api/eval-sets/t1-demo/versions/2/cases/", "/api/eval-sets/t1-demo/versions/2/cases/t1-004/",
         "/api/eval-sets/t1-demo/versions/1/export"]


@pytest.mark.parametrize("role", ROLES)
def test_every_role_on_every_endpoint(request, world, preview_turn, role):
    room, turn_id = preview_turn  # the manager's room
    client = _client(request, role)
    for path in READS:
        expected = {"anonymous": 401, "outsider": 403}.get(role, 200)
        assert client.get(path).status_code == expected, (role, path)
    expected_import = {"anonymous": 401, "ml_staff": 201, "ml_lead": 201}.get(role, 403)
    assert _import(client).status_code == expected_import
    expected_pin = {"anonymous": 401, "ml_lead": 200}.get(role, 403)
    assert client.post("/api/eval-sets/t1-demo/pin", {"number": 1}, format="json").status_code == expected_pin
    # the room is the manager's: anyone else who may save cases is told it does not exist
    expected_save = {"anonymous": 401, "manager": 201, "ml_staff": 404, "ml_lead": 404}.get(role, 403)
    response = client.post("/api/eval-cases/from-turn", {"room": str(room.pk), "turn_id": turn_id,
                                                         "gold_reply": "It is $24.9."}, format="json")
    assert response.status_code == expected_save, response.content
    if expected_save != 201:
        assert not EvalSet.objects.filter(name=services.TURN_SET_DEFAULT).exists()


def test_denied_requests_change_nothing(request, world, manager):
    client = _client(request, "manager")
    before = AuditEvent.objects.count()
    assert _import(client).status_code == 403
    assert client.post("/api/eval-sets/t1-demo/pin", {"number": 1}, format="json").status_code == 403
    assert AuditEvent.objects.count() == before and EvalSet.objects.get(name="t1-demo").pinned is None


# --- import ----------------------------------------------------------------------------------------------------


def test_import_json_then_the_same_cases_again(request):
    client = _client(request, "ml_staff")
    cases = [t1_case(1), t1_case(2)]
    response = _import(client, cases=cases, note="first cut", description="two price questions")
    body = response.json()
    assert response.status_code == 201 and body["created"] is True
    assert (body["eval_set"], body["kind"], body["number"], body["case_count"]) == ("t1-new", "t1", 1, 2)
    assert body["author"] == "ml_erin" and body["change_note"] == "first cut" and body["parent"] is None
    assert body["facet_counts"]["tag"] == {"price": 2}
    again = client.post("/api/eval-sets/", {"name": "t1-new", "kind": "t1", "jsonl": loose_jsonl(cases)},
                        format="json")
    assert again.status_code == 200 and again.json()["created"] is False and again.json()["number"] == 1
    assert EvalSetVersion.objects.count() == 1


def test_import_by_upload(request):
    client = _client(request, "ml_lead")
    upload = SimpleUploadedFile("t4.jsonl", canonical_jsonl([t4_case(1), t4_case(2)]).encode())
    response = client.post("/api/eval-sets/", {"name": "t4-up", "kind": "t4", "file": upload}, format="multipart")
    assert response.status_code == 201 and response.json()["case_count"] == 2


def test_import_errors_are_located(request):
    client = _client(request, "ml_staff")
    bad = t1_case(2)
    bad["gold_facts"][0]["binding"] = "catalog.nope"
    text = canonical_jsonl([t1_case(1)]) + json.dumps(bad) + "\nnot json\n"
    response = client.post("/api/eval-sets/", {"name": "t1-bad", "kind": "t1", "jsonl": text}, format="json")
    body = response.json()
    assert response.status_code == 400 and body["code"] == "validation_failed"
    assert {e["path"] for e in body["errors"]} == {"line 2.gold_facts[0].binding", "line 3"}
    for payload, path in [({"name": "t1 bad", "kind": "t1", "jsonl": "{}"}, "name"),
                          ({"name": "ok", "kind": "t7", "jsonl": "{}"}, "kind"),
                          ({"name": "ok", "kind": "t1"}, "jsonl"),
                          ({"name": "ok", "kind": "t1", "jsonl": canonical_jsonl([t4_case(1)])}, "line 1.kind")]:
        response = client.post("/api/eval-sets/", payload, format="json")
        assert response.status_code == 400 and path in [e["path"] for e in response.json()["errors"]], payload
    assert not EvalSet.objects.exists() and not AuditEvent.objects.exists()


def test_import_size_limit(request, monkeypatch):
    monkeypatch.setattr(services, "MAX_IMPORT_BYTES", 500)
    client = _client(request, "ml_staff")
    response = _import(client)
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "jsonl"
    upload = SimpleUploadedFile("big.jsonl", canonical_jsonl([t1_case(1)]).encode())
    response = client.post("/api/eval-sets/", {"name": "big", "kind": "t1", "file": upload}, format="multipart")
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "file"


# --- reads -------------------------------------------------------------------------------------------------------


def test_sets_versions_and_cases(request, world):
    client = _client(request, "operator")
    listed = client.get("/api/eval-sets/").json()
    assert listed["count"] == 1 and listed["results"][0]["latest"]["number"] == 2
    assert client.get("/api/eval-sets/?kind=t4").json()["count"] == 0
    assert client.get("/api/eval-sets/?kind=zz").status_code == 400
    detail = client.get("/api/eval-sets/t1-demo/").json()
    assert [v["number"] for v in detail["versions"]] == [2, 1] and detail["versions"][0]["parent"] == 1
    version = client.get("/api/eval-sets/t1-demo/versions/2/").json()
    assert version["content_hash"] == world["v2"].content_hash and version["case_count"] == 30
    page = client.get("/api/eval-sets/t1-demo/versions/2/cases/").json()
    assert page["count"] == 30 and len(page["results"]) == 25 and page["results"][0]["case_id"] == "t1-000"
    page = client.get("/api/eval-sets/t1-demo/versions/2/cases/?tag=typo&limit=5&offset=5").json()
    assert page["count"] == 15 and [r["case_id"] for r in page["results"]] == [f"t1-{i:03d}" for i in (11, 13, 15, 17, 19)]
    assert client.get("/api/eval-sets/t1-demo/versions/2/cases/?q=(17)").json()["count"] == 1
    assert client.get("/api/eval-sets/t1-demo/versions/2/cases/?tool=catalog.stock").json()["count"] == 0
    assert client.get("/api/eval-sets/t1-demo/versions/2/cases/?q=" + "x" * 201).status_code == 400
    case = client.get("/api/eval-sets/t1-demo/versions/2/cases/t1-007/").json()
    assert case["case"]["comments"][0]["text"] == "how much is the serum?? (7)" and case["position"] == 7


def test_export_gives_the_bytes(request, world):
    client = _client(request, "reviewer")
    response = client.get("/api/eval-sets/t1-demo/versions/2/export")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")
    assert response.content == services.eval_set_export(version=world["v2"]).encode()
    import hashlib

    assert hashlib.sha256(response.content).hexdigest() == world["v2"].content_hash


def test_not_found(request, world):
    client = _client(request, "ml_staff")
    for path in ["/api/eval-sets/nope/", "/api/eval-sets/t1-demo/versions/9/", "/api/eval-sets/t1-demo/versions/9/cases/",
                 "/api/eval-sets/t1-demo/versions/2/cases/nope/", "/api/eval-sets/t1-demo/versions/9/export",
                 "/api/eval-sets/Not A Slug/"]:
        response = client.get(path)
        assert response.status_code == 404 and response.json()["code"] == "not_found", path


def test_pin(request, world):
    client = _client(request, "ml_lead")
    response = client.post("/api/eval-sets/t1-demo/pin", {"number": 2}, format="json")
    assert response.status_code == 200 and response.json()["pinned"] == 2
    assert client.get("/api/eval-sets/t1-demo/versions/2/").json()["pinned"] is True
    assert client.post("/api/eval-sets/t1-demo/pin", {"number": 5}, format="json").status_code == 400
    assert client.post("/api/eval-sets/t1-demo/pin", {"number": "two"}, format="json").status_code == 400
    response = client.post("/api/eval-sets/t1-demo/pin", {"number": None}, format="json")
    assert response.status_code == 200 and response.json()["pinned"] is None


# --- save from a turn ------------------------------------------------------------------------------------------------


def test_save_from_turn(request, preview_turn):
    room, turn_id = preview_turn
    client = _client(request, "manager")
    response = client.post("/api/eval-cases/from-turn", {
        "room": str(room.pk), "turn_id": turn_id, "eval_set": "regressions", "tags": ["price"],
        "gold_reply": "HydraGlow serum: $24.9 now, 180 in stock.",
        "forbidden_claims": [{"kind": "efficacy", "text": "heals scars", "pattern": "heal(s|ing)?"}]}, format="json")
    body = response.json()
    assert response.status_code == 201, body
    assert body["case_id"] == f"turn-{turn_id}" and body["version"]["eval_set"] == "regressions"
    assert body["case"]["expected_tools"] == [{"binding": "catalog.product_info", "arguments": {"link_id": 101}}]
    assert {f["say"] for f in body["case"]["gold_facts"]} >= {"24.9", "180"}
    assert body["case"]["forbidden_claims"][0]["pattern"] == "heal(s|ing)?"
    # the same turn again, a broken claim, an unknown turn, an unknown room
    again = client.post("/api/eval-cases/from-turn", {"room": str(room.pk), "turn_id": turn_id, "eval_set": "regressions",
                                                      "gold_reply": "x"}, format="json")
    assert again.status_code == 400 and again.json()["errors"][0]["path"] == "turn_id"
    bad = client.post("/api/eval-cases/from-turn", {"room": str(room.pk), "turn_id": turn_id, "eval_set": "other",
                                                    "gold_reply": "x",
                                                    "forbidden_claims": [{"kind": "efficacy", "pattern": "(("}]},
                      format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"].startswith("forbidden_claims[0]")
    missing = client.post("/api/eval-cases/from-turn", {"room": str(room.pk), "turn_id": "nope", "gold_reply": "x"},
                          format="json")
    assert missing.status_code == 404
    import uuid

    nowhere = client.post("/api/eval-cases/from-turn", {"room": str(uuid.uuid4()), "turn_id": turn_id,
                                                        "gold_reply": "x"}, format="json")
    assert nowhere.status_code == 404
    assert EvalSetVersion.objects.count() == 1
