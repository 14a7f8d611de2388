"""Dataset REST API: the role matrix (401/403 for every role without the permission), 404s, create with located
400s that save nothing, cancel (409 once finished), the rows of a finished dataset, and the OpenAPI schema."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from training_jobs.models import Dataset
# the fixtures of the page tests: a small built dataset (done), a running one, Celery sends captured
from tests.training_jobs.test_hsa_views import artifact, done, queued_tasks, running  # noqa: F401

pytestmark = pytest.mark.django_db


def _client(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


CREATE = {"name": "api", "recipe": {"variants_per_sample": 1, "harness_pool_size": 2}, "sources": {"tiny_gold": 3}}

R, D, A = 200, 403, 401
# the build is ml_staff's (erin's): another ML staff member reads it but may not cancel it; an ML lead may
#                       ml_staff ml_staff2 ml_lead manager reviewer operator outsider anonymous
MATRIX = {
    "list":            (R,   R,   R,   R, D, D, D, A),
    "detail":          (R,   R,   R,   R, D, D, D, A),
    "samples":         (R,   R,   R,   R, D, D, D, A),
    "create":          (201, 201, 201, D, D, D, D, A),
    "cancel":          (R,   D,   R,   D, D, D, D, A),
}
ROLES = ["ml_staff", "ml_staff2", "ml_lead", "manager", "reviewer", "operator", "outsider", "anonymous"]


def _act(client, action: str, d: Dataset):
    return {
        "list": lambda: client.get("/api/datasets/"),
        "detail": lambda: client.get(f"/api/datasets/{d.pk}/"),
        "samples": lambda: client.get(f"/api/datasets/{d.pk}/samples/"),
        "create": lambda: client.post("/api/datasets/", CREATE, format="json"),
        "cancel": lambda: client.post(f"/api/datasets/{d.pk}/cancel"),
    }[action]()


@pytest.mark.parametrize("action", list(MATRIX))
@pytest.mark.parametrize("role", ROLES)
def test_role_matrix(request, action, role, running, queued_tasks):
    expected = MATRIX[action][ROLES.index(role)]
    before = Dataset.objects.count()
    response = _act(_client(request, role), action, running)
    assert response.status_code == expected, response.content
    if expected >= 400:
        assert set(response.json()) >= {"detail", "code", "errors"}
        assert Dataset.objects.count() == before
        running.refresh_from_db()
        assert not running.cancel_requested


@pytest.mark.parametrize("action", ["detail", "samples", "cancel"])
def test_unknown_dataset_is_404(request, action):
    response = _act(_client(request, "ml_staff"), action, Dataset(pk=uuid.uuid4()))
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_create_and_read(request, ml_staff, django_capture_on_commit_callbacks, queued_tasks):
    api = _client(request, "ml_staff")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/datasets/", {**CREATE, "with_baseline": True}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["kind"] == "hsa" and body["ready"] is False
    assert body["recipe"]["variants_per_sample"] == 1 and body["sources"]["tiny_gold"] == 3
    assert len(queued_tasks) == 2
    listing = api.get("/api/datasets/?kind=fixed_harness").json()
    assert listing["count"] == 1 and listing["results"][0]["baseline_of"] == body["id"]
    assert api.get(f"/api/datasets/{body['id']}/").json()["id"] == body["id"]
    assert api.get("/api/datasets/?status=succeeded").json()["count"] == 0


@pytest.mark.parametrize("payload, path", [
    ({"recipe": {"operators": [{"name": "rename_tools", "probability": 2}]}, "sources": {"tiny_gold": 1}},
     "recipe.operators[0].probability"),
    ({"recipe": {"seed": "x"}, "sources": {"tiny_gold": 1}}, "recipe.seed"),
    ({"recipe": {}, "sources": {"scenarios": ["nope"]}}, "sources.scenarios"),
    ({"recipe": {}, "sources": {"versions": ["glow-gadget@7"]}}, "sources.versions[0]"),
    ({"kind": "magic"}, "kind"),
    ({"recipe": [1, 2]}, "recipe"),
])
def test_create_errors_are_located_and_save_nothing(request, payload, path, queued_tasks):
    response = _client(request, "ml_staff").post("/api/datasets/", payload, format="json")
    assert response.status_code == 400, response.json()
    assert path in [e["path"] for e in response.json()["errors"]], response.json()
    assert not Dataset.objects.exists() and queued_tasks == []


def test_cancel(request, running, done):
    api = _client(request, "ml_staff")
    response = api.post(f"/api/datasets/{running.pk}/cancel")
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    response = api.post(f"/api/datasets/{done.pk}/cancel")
    assert response.status_code == 409 and response.json()["code"] == "invalid_transition"


def test_samples_of_a_finished_dataset(request, done):
    api = _client(request, "manager")
    body = api.get(f"/api/datasets/{done.pk}/samples/?limit=3&offset=1").json()
    assert body["count"] == done.rows and [r["index"] for r in body["results"]] == [1, 2, 3]
    row = body["results"][0]
    assert isinstance(row["tools"], list) and row["tools"][-1]["function"]["name"] == "load_skill"
    assert row["messages"][0]["role"] == "system"
    detail = api.get(f"/api/datasets/{done.pk}/").json()
    assert detail["ready"] is True and detail["row_counts"] == {"train": done.rows}
    assert "rename_tools" in detail["stats"]["operators"]


def test_samples_of_an_unfinished_dataset_are_empty(request, running):
    body = _client(request, "ml_staff").get(f"/api/datasets/{running.pk}/samples/").json()
    assert body["count"] == 0 and body["results"] == []


def test_openapi_schema_documents_the_dataset_api(tmp_path):
    from django.core.management import call_command

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for op in ("dataset_list", "dataset_create", "dataset_retrieve", "dataset_cancel", "dataset_sample_list"):
        assert f"operationId: {op}" in text
