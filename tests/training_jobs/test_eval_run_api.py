"""The evaluation-run API: every role on every endpoint (401 anonymous, 403 without the role, 404 unknown), start
(names resolved, located 400s, nothing saved; a served registered model), read, cancel / resume (owner or ML lead;
409 when finished), the results (paginated, filtered), a case with its samples' turn events, and compare (the same
numbers the page shows: scores and deltas, flipped cases, robustness, lineage)."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    bad_run, good_run, lineage_models, queued_run, scripted_endpoint, scripted_model, t1_set, t3_run_with, t3_set,
    t4_run, t4_set, v1)
from training_jobs import tasks
from training_jobs.eval_run_models import EvalRun

pytestmark = pytest.mark.django_db


def api(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(tasks.eval_run, "apply_async", lambda **kw: calls.append(kw))
    return calls


def _reads(run, other) -> list[str]:
    return ["/api/eval-runs/", f"/api/eval-runs/{run.pk}/", f"/api/eval-runs/{run.pk}/results/",
            f"/api/eval-runs/{run.pk}/cases/t1-000/", f"/api/eval-runs/compare/?runs={run.pk},{other.pk}"]


@pytest.mark.parametrize("role, status", [("ml_staff", 200), ("ml_lead", 200), ("manager", 200), ("reviewer", 200),
                                          ("operator", 200), ("outsider", 403)])
def test_reads_by_role(request, role, status, good_run, bad_run):
    client = api(request.getfixturevalue(role))
    for url in _reads(good_run, bad_run):
        assert client.get(url).status_code == status, url


def test_anonymous_gets_401_and_unknown_ids_404(reviewer, good_run, bad_run):
    for url in _reads(good_run, bad_run):
        response = api().get(url)
        assert response.status_code == 401 and response.json()["code"] == "not_authenticated", url
    assert api().post("/api/eval-runs/", {}, format="json").status_code == 401
    client = api(reviewer)
    missing = uuid.uuid4()
    for url in (f"/api/eval-runs/{missing}/", f"/api/eval-runs/{missing}/results/",
                f"/api/eval-runs/{missing}/cases/t1-000/", f"/api/eval-runs/{good_run.pk}/cases/nope/",
                f"/api/eval-runs/compare/?runs={good_run.pk},{missing}", "/api/eval-runs/not-a-uuid/"):
        response = client.get(url)
        assert response.status_code == 404 and response.json()["code"] == "not_found", url


@pytest.mark.parametrize("role", ["manager", "reviewer", "operator", "outsider"])
def test_only_ml_roles_start_cancel_resume(request, role, t1_set, v1, scripted_model, queued_run, sent):
    client = api(request.getfixturevalue(role))
    body = {"eval_set": "t1-mini", "harness_version": "glow-gadget@production", "endpoint": "scripted"}
    assert client.post("/api/eval-runs/", body, format="json").status_code == 403
    assert client.post(f"/api/eval-runs/{queued_run.pk}/cancel/").status_code == 403
    assert client.post(f"/api/eval-runs/{queued_run.pk}/resume/").status_code == 403
    assert EvalRun.objects.count() == 1 and not sent


def test_start_resolves_names_and_queues(ml_staff, t1_set, v1, scripted_model, sent,
                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api(ml_staff).post("/api/eval-runs/", {
            "eval_set": "t1-mini", "harness_version": "glow-gadget@production", "endpoint": "scripted", "k": 2,
            "seed": 3, "max_cases": 2, "sampling": {"temperature": 0.2}, "deadline_s": 20, "name": "api run",
            "judges": ["scripted"]},
            format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["eval_set"], data["set_version"], data["harness"], data["harness_version"]) == ("t1-mini", 1,
                                                                                               "glow-gadget", 1)
    assert (data["k"], data["seed"], data["progress_total"], data["status"]) == (2, 3, 4, "queued")
    assert data["sampling"] == {"temperature": 0.2} and data["summary"] == {} and data["judges"] == ["scripted"]
    assert sent and sent[0]["queue"] == "gpu" and EvalRun.objects.get().name == "api run"


@pytest.mark.parametrize("body, paths", [
    ({"eval_set": "nope", "endpoint": "scripted"}, {"eval_set"}),
    ({"eval_set": "t1-mini", "set_version": 7, "endpoint": "scripted"}, {"set_version"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget", "endpoint": "scripted"}, {"harness_version"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@99", "endpoint": "scripted"}, {"harness_version"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1"}, {"endpoint"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "endpoint": "nope"}, {"endpoint"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "model": str(uuid.UUID(int=7))}, {"model"}),
    ({"eval_set": "t1-mini", "endpoint": "scripted", "k": 99, "max_cases": 0, "sampling": {"top_p": 3, "x": 1},
      "deadline_s": -1}, {"harness_version", "k", "max_cases", "sampling.top_p", "sampling.x", "deadline_s"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "endpoint": "scripted", "sampling": [1]},
     {"sampling"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "endpoint": "scripted", "k": "many"}, {"k"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "endpoint": "scripted", "set_version": 2 ** 40},
     {"set_version"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "endpoint": "scripted",
      "judges": ["scripted", "nope", "scripted"]}, {"judges[1]", "judges[2]"}),
    ({"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "endpoint": "scripted", "judges": "scripted"},
     {"judges"}),
])
def test_start_errors_are_located_and_nothing_is_saved(ml_staff, t1_set, v1, scripted_model, sent, body, paths):
    response = api(ml_staff).post("/api/eval-runs/", body, format="json")
    assert response.status_code == 400, response.json()
    assert {e["path"] for e in response.json()["errors"]} == paths
    assert not EvalRun.objects.exists() and not sent


def test_start_with_a_served_registered_model(ml_staff, t1_set, v1, scripted_model, sent, lineage_models):
    rl = lineage_models["rl"]
    body = {"eval_set": "t1-mini", "harness_version": "glow-gadget@1", "model": str(rl.pk)}
    response = api(ml_staff).post("/api/eval-runs/", body, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "model"
    rl.endpoint = scripted_model
    rl.save()
    response = api(ml_staff).post("/api/eval-runs/", body, format="json")
    assert response.status_code == 201 and response.json()["model"] == str(rl.pk)
    assert response.json()["endpoint"] == "scripted"


def test_list_filters(reviewer, good_run, bad_run, t4_run):
    client = api(reviewer)
    assert client.get("/api/eval-runs/").json()["count"] == 3
    assert [r["name"] for r in client.get("/api/eval-runs/?kind=t4").json()["results"]] == ["ifeval mini"]
    assert client.get("/api/eval-runs/?eval_set=t1-mini&harness=glow-gadget&endpoint=scripted").json()["count"] == 2
    assert client.get("/api/eval-runs/?status=running").json()["count"] == 0
    for bad in ("?status=nope", "?model=xyz", "?kind=t9"):
        response = client.get("/api/eval-runs/" + bad)
        assert response.status_code == 400 and response.json()["code"] == "invalid", bad


def test_detail_cancel_and_resume(ml_staff, ml_staff2, ml_lead, queued_run, good_run, sent):
    data = api(ml_staff).get(f"/api/eval-runs/{good_run.pk}/").json()
    assert data["status"] == "succeeded" and data["summary"]["cases"] == 3
    assert data["summary"]["accuracy"]["ci_low"] is not None and data["summary"]["latency"]["p50_s"] > 0
    response = api(ml_staff2).post(f"/api/eval-runs/{queued_run.pk}/cancel/")
    assert response.status_code == 403 and response.json()["code"] == "not_allowed"
    response = api(ml_lead).post(f"/api/eval-runs/{queued_run.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert response.json()["can_resume"]
    assert api(ml_staff).post(f"/api/eval-runs/{queued_run.pk}/cancel/").status_code == 409
    response = api(ml_staff).post(f"/api/eval-runs/{queued_run.pk}/resume/")
    assert response.status_code == 200 and response.json()["status"] == "queued" and response.json()["resumes"] == 1
    assert api(ml_staff).post(f"/api/eval-runs/{good_run.pk}/resume/").status_code == 409


def test_results_are_paginated_and_filtered(reviewer, bad_run):
    client = api(reviewer)
    data = client.get(f"/api/eval-runs/{bad_run.pk}/results/").json()
    assert data["count"] == 3 and [r["case_id"] for r in data["results"]] == ["t1-000", "t1-001", "t1-002"]
    assert "events" not in data["results"][0]
    page = client.get(f"/api/eval-runs/{bad_run.pk}/results/?limit=1&offset=1").json()
    assert [r["case_id"] for r in page["results"]] == ["t1-001"] and page["next"] and page["previous"]
    failed = client.get(f"/api/eval-runs/{bad_run.pk}/results/?solved=false").json()
    assert [r["case_id"] for r in failed["results"]] == ["t1-001"] and failed["results"][0]["problems"]
    rule = failed["results"][0]["problems"][0]["rule"]
    assert [r["case_id"] for r in client.get(f"/api/eval-runs/{bad_run.pk}/results/?rule={rule}")
            .json()["results"]] == ["t1-001"]
    assert client.get(f"/api/eval-runs/{bad_run.pk}/results/?case_id=t1-002&sample=0").json()["count"] == 1
    assert client.get(f"/api/eval-runs/{bad_run.pk}/results/?sample=-1").status_code == 400
    assert client.get(f"/api/eval-runs/{bad_run.pk}/results/?solved=maybe").status_code == 400


def test_a_case_with_its_samples_and_turn_events(reviewer, bad_run, t4_run):
    data = api(reviewer).get(f"/api/eval-runs/{bad_run.pk}/cases/t1-001/").json()
    assert data["case_id"] == "t1-001" and data["position"] == 1 and data["case"]["comments"]
    (sample,) = data["samples"]
    assert not sample["solved"] and sample["problems"]
    types = [e["type"] for e in sample["events"]]
    assert "tool_call" in types and "reply" in types and types[-1] == "timings"
    data = api(reviewer).get(f"/api/eval-runs/{t4_run.pk}/cases/ifeval-2/").json()
    assert data["samples"][0]["detail"]["failed_strict"] == ["change_case:english_lowercase"]


def test_compare_gives_the_page_numbers(reviewer, good_run, bad_run):
    data = api(reviewer).get(f"/api/eval-runs/compare/?runs={good_run.pk},{bad_run.pk}").json()
    assert data["baseline"] == str(good_run.pk) and [r["id"] for r in data["runs"]] == [str(good_run.pk),
                                                                                        str(bad_run.pk)]
    metrics = {m["key"]: m for m in data["metrics"]}
    base, other = metrics["pass_k"]["cells"]
    assert base["delta"] is None and other["mean"] == bad_run.summary["pass_k"]["mean"]
    assert other["delta"] == pytest.approx(100 * (bad_run.summary["pass_k"]["mean"] - 1.0))
    assert metrics["p50_s"]["kind"] == "latency"
    (flip,) = data["flipped"]
    assert [c["case_id"] for c in flip["regressions"]] == ["t1-001"] and flip["fixes"] == []
    assert flip["regressions"][0] == {"case_id": "t1-001", "baseline_solved": 1.0, "run_solved": 0.0}
    assert data["robustness"]["columns"] == ["all"] and len(data["robustness"]["rows"]) == 2
    assert data["lineage"] == []


def test_compare_robustness_and_lineage_as_json(reviewer, ml_staff, t3_set, v1, scripted_model, lineage_models):
    m = lineage_models
    a = t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: 1, name="a", model=m["sft"])
    b = t3_run_with(ml_staff, t3_set, scripted_model, v1, lambda level, faults: level != "union", name="b",
                    model=m["rl"])
    data = api(reviewer).get(f"/api/eval-runs/compare/?runs={a.pk},{b.pk}&metric=solved").json()
    rob = data["robustness"]
    assert rob["metric"] == "solved" and rob["columns"][:6] == ["all", "clean", "slight", "medium", "heavy", "union"]
    union = {row["run"]: {c["column"]: c["value"] for c in row["cells"]} for row in rob["rows"]}
    assert union[str(a.pk)]["union"] == 1.0 and union[str(b.pk)]["union"] == 0.0
    (group,) = data["lineage"]
    assert [s["kind"] for s in group["steps"]] == ["base", "sft", "distill", "rl"]
    assert [s["run"] for s in group["steps"]] == [None, str(a.pk), None, str(b.pk)]
    assert [s["name"] for s in group["baselines"]] == ["tiny-fixed"] and group["baselines"][0]["run"] is None


@pytest.mark.parametrize("query", ["", "?runs=", "?runs=a,b", "?runs={one}", "?runs={one},{one}",
                                   "?runs={one},{two}&metric=nope"])
def test_compare_bad_queries_are_400(reviewer, good_run, bad_run, query):
    response = api(reviewer).get("/api/eval-runs/compare/" + query.format(one=good_run.pk, two=bad_run.pk))
    assert response.status_code == 400 and response.json()["code"] == "invalid"


def test_cancel_of_a_finished_run_is_409_and_a_missing_one_404(ml_staff, good_run):
    assert api(ml_staff).post(f"/api/eval-runs/{good_run.pk}/cancel/").status_code == 409
    assert api(ml_staff).post(f"/api/eval-runs/{uuid.uuid4()}/cancel/").status_code == 404
