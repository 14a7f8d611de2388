"""Training-job and model-registry REST API: the role matrix (401/403 for every role without the permission), 404s,
create with located 400s that save nothing, cancel and resume (409 when the status does not allow it), a job with
its progress points, models with their lineage, and the OpenAPI schema."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from training_jobs.models import TrainedModel, TrainingJob
# the fixtures of the page tests: ready datasets, the demo base model, jobs in several states, Celery sends captured
from tests.training_jobs.test_training_views import (  # noqa: F401
    CONFIG, base, failed, finished, fixed, hsa, queued_jobs, running)

pytestmark = pytest.mark.django_db


def _client(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


R, D, A = 200, 403, 401
# the jobs are ml_staff's (erin's): another ML staff member watches them but may not cancel or resume them
#                       ml_staff ml_staff2 ml_lead manager reviewer operator outsider anonymous
MATRIX = {
    "list":            (R,   R,   R,   D, D, D, D, A),
    "detail":          (R,   R,   R,   D, D, D, D, A),
    "create":          (201, 201, 201, D, D, D, D, A),
    "cancel":          (R,   D,   R,   D, D, D, D, A),
    "resume":          (R,   D,   R,   D, D, D, D, A),
    "models":          (R,   R,   R,   R, R, D, D, A),
    "model":           (R,   R,   R,   R, R, D, D, A),
}
ROLES = ["ml_staff", "ml_staff2", "ml_lead", "manager", "reviewer", "operator", "outsider", "anonymous"]


def _act(client, action: str, jobs: dict):
    running = jobs["running"]
    create = {"kind": "sft", "dataset": str(running.dataset_id), "base_model": str(running.base_model_id),
              "config": CONFIG}
    return {
        "list": lambda: client.get("/api/training-jobs/"),
        "detail": lambda: client.get(f"/api/training-jobs/{running.pk}/"),
        "create": lambda: client.post("/api/training-jobs/", create, format="json"),
        "cancel": lambda: client.post(f"/api/training-jobs/{running.pk}/cancel/"),
        "resume": lambda: client.post(f"/api/training-jobs/{jobs['failed'].pk}/resume/"),
        "models": lambda: client.get("/api/models/"),
        "model": lambda: client.get(f"/api/models/{running.base_model_id}/"),
    }[action]()


@pytest.mark.parametrize("action", list(MATRIX))
@pytest.mark.parametrize("role", ROLES)
def test_role_matrix(request, action, role, running, failed, queued_jobs):
    expected = MATRIX[action][ROLES.index(role)]
    before = TrainingJob.objects.count()
    response = _act(_client(request, role), action, {"running": running, "failed": failed})
    assert response.status_code == expected, response.content
    if expected >= 400:
        assert set(response.json()) >= {"detail", "code", "errors"}
        assert TrainingJob.objects.count() == before and queued_jobs == []
        assert {j.status for j in TrainingJob.objects.all()} == {"running", "failed"}


@pytest.mark.parametrize("url, method", [("/api/training-jobs/{id}/", "get"),
                                         ("/api/training-jobs/{id}/cancel/", "post"),
                                         ("/api/training-jobs/{id}/resume/", "post"), ("/api/models/{id}/", "get")])
def test_unknown_ids_are_404(request, url, method):
    response = getattr(_client(request, "ml_staff"), method)(url.format(id=uuid.uuid4()))
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_create_and_read(request, hsa, base, queued_jobs, django_capture_on_commit_callbacks):
    api = _client(request, "ml_staff")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/training-jobs/", {"name": "api", "dataset": str(hsa.pk), "base_model": str(base.pk),
                                                    "config": {**CONFIG, "lora": {"r": 4}}}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["status"], body["kind"], body["name"], body["model"]) == ("queued", "sft", "api", None)
    assert body["config"]["max_steps"] == 6 and body["config"]["lora"]["r"] == 4 and body["metrics"] == []
    assert body["dataset"] == str(hsa.pk) and body["base_model"] == str(base.pk) and body["progress_total"] == 6
    assert queued_jobs == [((body["id"],), "gpu")]
    listing = api.get("/api/training-jobs/?status=queued").json()
    assert listing["count"] == 1 and listing["results"][0]["id"] == body["id"]
    assert "metrics" not in listing["results"][0]  # the list stays small: the latest point only
    assert api.get("/api/training-jobs/?kind=baseline_sft").json()["count"] == 0
    assert api.get(f"/api/training-jobs/{body['id']}/").json()["id"] == body["id"]


@pytest.mark.parametrize("payload, paths", [
    ({"config": {**CONFIG, "max_steps": 0}}, ["config.max_steps"]),
    ({"config": {**CONFIG, "lora": {"dropout": 2}}}, ["config.lora.dropout"]),
    ({"config": {**CONFIG, "bogus": 1}}, ["config.bogus"]),
    ({"config": [1, 2]}, ["config"]),
    ({"dataset": "fixed"}, ["dataset"]),  # HSA-SFT trains on an HSA dataset
    ({"dataset": str(uuid.UUID(int=7)), "base_model": str(uuid.UUID(int=8))}, ["dataset", "base_model"]),
    ({"dataset": "not-an-id"}, ["dataset"]),
    ({"kind": "dance"}, ["kind"]),
    ({"dataset": None}, ["dataset"]),
])
def test_create_errors_are_located_and_save_nothing(request, hsa, fixed, base, payload, paths, queued_jobs):
    body = {"kind": "sft", "dataset": str(hsa.pk), "base_model": str(base.pk), "config": CONFIG, **payload}
    if body["dataset"] == "fixed":
        body["dataset"] = str(fixed.pk)
    response = _client(request, "ml_staff").post("/api/training-jobs/", body, format="json")
    assert response.status_code == 400, response.json()
    assert [e["path"] for e in response.json()["errors"]] == paths, response.json()
    assert not TrainingJob.objects.exists() and queued_jobs == []


def test_cancel_and_resume(request, running, failed, finished, queued_jobs, django_capture_on_commit_callbacks):
    api = _client(request, "ml_staff")
    response = api.post(f"/api/training-jobs/{running.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelling"
    assert response.json()["cancel_requested"] is True
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/training-jobs/{failed.pk}/resume/")
    assert response.status_code == 200 and (response.json()["status"], response.json()["resumes"]) == ("queued", 1)
    assert queued_jobs == [((str(failed.pk),), "gpu")]
    for action in ("cancel", "resume"):
        response = api.post(f"/api/training-jobs/{finished.pk}/{action}/")
        assert response.status_code == 409 and response.json()["code"] == "invalid_transition"
    assert api.get(f"/api/training-jobs/{running.pk}/cancel/").status_code == 405


def test_a_finished_job_with_its_points_and_model(request, finished):
    body = _client(request, "ml_staff").get(f"/api/training-jobs/{finished.pk}/").json()
    model = TrainedModel.objects.get(job=finished)
    assert body["status"] == "succeeded" and body["percent"] == 100 and body["model"] == str(model.pk)
    assert [p["step"] for p in body["metrics"] if "loss" in p] == [1, 2, 3, 4, 5, 6]
    assert body["latest"]["train_loss"] == 1.1 and "training from step 0 to 6" in body["log_tail"]
    assert body["worker_host"] == "gpu-host-1" and body["result"]["steps"] == 6 and body["can_resume"] is False


def test_models_with_lineage(request, finished, base):
    sft = TrainedModel.objects.get(job=finished)
    api = _client(request, "reviewer")
    listing = api.get("/api/models/").json()
    assert {m["id"]: m["parent"] for m in listing["results"]} == {str(sft.pk): str(base.pk), str(base.pk): None}
    assert api.get("/api/models/?kind=base").json()["count"] == 1
    body = api.get(f"/api/models/{sft.pk}/").json()
    assert [(m["id"], m["kind"]) for m in body["lineage"]] == [(str(base.pk), "base"), (str(sft.pk), "sft")]
    assert body["job"] == str(finished.pk) and body["dataset"] == str(finished.dataset_id)
    assert body["config"]["max_steps"] == 6 and body["metrics"] == {"train_loss": 1.1}
    assert body["path"] == "/tmp/runs/x/sft/final" and body["created_by"] == "ml_erin"
    assert body["vllm_command"].startswith("HF_HUB_OFFLINE=1 ")
    assert (".venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model /tmp/runs/x/sft/final"
            in body["vllm_command"])
    assert body["endpoint"] is None  # not served


def test_openapi_schema_documents_the_training_api(tmp_path):
    from django.core.management import call_command

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for op in ("training_job_list", "training_job_create", "training_job_retrieve", "training_job_cancel",
               "training_job_resume", "model_list", "model_retrieve"):
        assert f"operationId: {op}" in text
    for component in ("TrainingJobKind:", "TrainingJobStatus:", "TrainedModelKind:", "TrainingJobDetail:"):
        assert component in text
