"""The reproduction runs' API: every role's answer (401 / 403 / 404), start (201, queued on the gpu queue on
commit), malformed input a 400 naming its field (a base that is not built naming its folder), never a 500, a run
with its table and claims from its folder (or the plain fact that the folder is gone), cancel, the committed
result."""

from __future__ import annotations

import shutil
import uuid

import pytest
from rest_framework.test import APIClient

from tests.training_jobs import reproduction_fixtures as fx
from tests.training_jobs.reproduction_fixtures import WEIGHTS_SHA
from training_jobs import reproduce_services as S
from training_jobs.reproduce.table import COLUMNS, ROWS
from training_jobs.reproduce_models import ReproductionRun

pytestmark = pytest.mark.django_db

# the shared fixtures (tests/training_jobs/reproduction_fixtures.py)
bases, committed, done_run, no_committed = fx.bases, fx.committed, fx.done_run, fx.no_committed
runs_root, sent, smol_not_built = fx.runs_root, fx.sent, fx.smol_not_built

ROLES = ["manager", "reviewer", "ml_staff", "ml_lead", "operator", "outsider", "anonymous"]


def _api(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_authenticate(request.getfixturevalue(role))
    return client


@pytest.mark.parametrize("role", ROLES)
def test_every_role_on_the_api(request, done_run, committed, sent, role):
    client = _api(request, role)
    code = {"anonymous": 401, "ml_staff": 200, "ml_lead": 200}.get(role, 403)
    assert client.get("/api/reproductions/").status_code == code
    assert client.get(f"/api/reproductions/{done_run.pk}/").status_code == code
    assert client.get("/api/reproductions/committed/").status_code == code
    r = client.post("/api/reproductions/", {"base": "tiny", "budget": "smoke"}, format="json")
    assert r.status_code == {200: 201}.get(code, code), r.content
    assert client.post(f"/api/reproductions/{done_run.pk}/cancel/").status_code == {200: 409}.get(code, code)
    if code == 200:
        assert client.get(f"/api/reproductions/{uuid.uuid4()}/").status_code == 404
        assert client.post(f"/api/reproductions/{uuid.uuid4()}/cancel/").status_code == 404


def test_start_queues_on_the_gpu_queue(request, ml_staff, bases, runs_root, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        r = _api(request, "ml_staff").post("/api/reproductions/", {"base": "smol", "budget": "gpu", "seed": 5},
                                           format="json")
    assert r.status_code == 201, r.content
    data = r.json()
    assert (data["base"], data["budget"], data["seed"], data["status"]) == ("smol", "gpu", 5, "queued")
    assert data["created_by"] == "ml_erin" and data["out_dir"] == str(runs_root / data["id"])
    assert len(sent) == 1 and sent[0]["queue"] == "gpu" and sent[0]["args"] == (data["id"],)


@pytest.mark.parametrize(("body", "path"), [
    ({"base": "smol", "budget": "smoke"}, "base"),  # not built
    ({"base": "huge", "budget": "smoke"}, "base"),
    ({"base": ["tiny"], "budget": "smoke"}, "base"),
    ({"budget": "smoke"}, "base"),
    ({"base": "tiny", "budget": "fast"}, "budget"),
    ({"base": "tiny", "budget": None}, "budget"),
    ({"base": "tiny", "budget": "smoke", "seed": -1}, "seed"),
    ({"base": "tiny", "budget": "smoke", "seed": 2**40}, "seed"),
    ({"base": "tiny", "budget": "smoke", "seed": "many"}, "seed"),
    ({"base": "tiny", "budget": "smoke", "seed": 1.5}, "seed"),
])
def test_malformed_input_is_a_located_400(request, smol_not_built, runs_root, sent, body, path):
    r = _api(request, "ml_staff").post("/api/reproductions/", body, format="json")
    assert r.status_code == 400, r.content
    assert path in {e["path"] for e in r.json()["errors"]}, r.json()
    assert not ReproductionRun.objects.exists() and not sent


def test_a_base_that_is_not_built_names_its_folder(request, smol_not_built, runs_root, sent):
    r = _api(request, "ml_lead").post("/api/reproductions/", {"base": "smol", "budget": "cpu"}, format="json")
    assert r.status_code == 400
    assert r.json()["errors"] == [{"path": "base", "message": "the base 'smol' (models/not-built-for-tests) is not "
                                                              "built (no config.json): run make install"}]
    client = _api(request, "ml_lead")
    assert client.post("/api/reproductions/", "{not json", content_type="application/json").status_code == 400
    assert client.post("/api/reproductions/", [1, 2], format="json").status_code == 400


def test_a_run_with_its_table_and_claims(request, done_run):
    data = _api(request, "ml_lead").get(f"/api/reproductions/{done_run.pk}/").json()
    assert data["status"] == "succeeded" and data["git_commit"] == "1867fa9deadbeef" and len(data["claims"]) == 3
    report = data["report"]
    assert report["present"] and [r["key"] for r in report["table"]["rows"]] == [row for row, _ in ROWS]
    assert all(len(r["cells"]) == len(COLUMNS) and not any(c["missing"] for c in r["cells"])
               for r in report["table"]["rows"])
    hsa = next(r for r in report["table"]["rows"] if r["key"] == "hsa_sft")
    assert hsa["cells"][0] == {"key": "t1_accuracy", "text": "60.0", "interval": "[55.0, 65.0]", "n": 8,
                               "missing": False}
    assert [p["name"] for p in report["plots"]] == ["accuracy.svg", "gap.svg", "ifeval.svg", "robustness.svg"]
    assert report["run"]["base"]["weights_sha256"] == WEIGHTS_SHA
    shutil.rmtree(done_run.path)
    data = _api(request, "ml_lead").get(f"/api/reproductions/{done_run.pk}/").json()
    assert data["report"]["present"] is False and data["report"]["table"] is None and len(data["claims"]) == 3
    listed = _api(request, "ml_staff").get("/api/reproductions/").json()
    assert listed["count"] == 1 and listed["results"][0]["id"] == str(done_run.pk)


def test_cancel(request, ml_staff, bases, runs_root):
    run = S.reproduction_start(user=ml_staff, base="tiny", budget="smoke", enqueue=False)
    url = f"/api/reproductions/{run.pk}/cancel/"
    assert _api(request, "ml_staff2").post(url).status_code == 403
    assert _api(request, "reviewer").post(url).status_code == 403
    r = _api(request, "ml_staff").post(url)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert _api(request, "ml_lead").post(url).status_code == 409
    assert _api(request, "ml_staff").get(f"/api/reproductions/{run.pk}/").json()["report"]["present"] is False


def test_the_committed_result(request, committed):
    data = _api(request, "ml_staff").get("/api/reproductions/committed/").json()
    assert data["folder"] == "results/hat-miniature" and len(data["claims"]) == 3
    assert len(data["table"]["rows"]) == len(ROWS) and len(data["table"]["reference_rows"]) == 5


def test_no_committed_result_is_a_404(request, no_committed):
    assert _api(request, "ml_staff").get("/api/reproductions/committed/").status_code == 404
