"""Latency-replay pages and API: every role's answer (200 / 403 / 404, anonymous to the login page or 401), the
launch form with the service's located errors on their boxes, a replay's page with its table, reference row and
one SVG histogram per level (no inline style or script: the CSP), cancel and resume, and the API's 4xx for
malformed input."""

from __future__ import annotations

import json
import uuid

import pytest
from rest_framework.test import APIClient

from console.jobs import Job
from tests.streams.preview_helpers import scripted_model  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import scripted_endpoint  # noqa: F401  (fixture)
from tests.training_jobs.eval_helpers import t1_case
from training_jobs import latency_services as S
from training_jobs.eval_services import eval_set_import
from training_jobs.evals.replay import replay_summary
from training_jobs.latency_models import LatencyReplay

pytestmark = pytest.mark.django_db

ROLES = ["manager", "reviewer", "ml_staff", "ml_lead", "operator", "outsider", "anonymous"]


@pytest.fixture
def sent(monkeypatch):
    """The replay tasks sent (on commit), instead of sending them."""
    out = []
    monkeypatch.setattr("training_jobs.tasks.latency_replay.apply_async", lambda **kw: out.append(kw))
    return out


@pytest.fixture
def world(ml_staff, harness_with_history, scripted_model):
    version, _ = eval_set_import(user=ml_staff, name="t1-lat", kind="t1",
                                 jsonl_text="\n".join(json.dumps(t1_case(i)) for i in range(3)))
    replay = S.latency_replay_start(user=ml_staff, eval_set_version=version, harness_version=harness_with_history["v1"],
                                    endpoint=scripted_model, concurrency=[1, 4], turns_per_level=3, enqueue=False)
    levels = [{"concurrency": 1, "turns": 3, "complete": True, "p50_s": 0.9, "p95_s": 1.4, "under_15s": 1.0,
               "ttft_p50_s": 0.12, "ttft_p95_s": 0.2, "decode_tps_p50": 88.0, "turns_per_s": 1.1, "in_flight_max": 1,
               "fallbacks": 0, "errors": 0, "turn_s": [0.8, 0.9, 1.4]},
              {"concurrency": 4, "turns": 3, "complete": True, "p50_s": 2.5, "p95_s": 4.1, "under_15s": 1.0,
               "ttft_p50_s": 0.5, "ttft_p95_s": 0.9, "decode_tps_p50": 40.0, "turns_per_s": 1.5, "in_flight_max": 3,
               "fallbacks": 1, "errors": 0, "turn_s": [2.0, 2.5, 4.3]}]
    LatencyReplay.objects.filter(pk=replay.pk).update(status=Job.Status.SUCCEEDED, summary=replay_summary(levels),
                                                      progress_done=6)
    return {"version": version, "replay": LatencyReplay.objects.get(pk=replay.pk), "v1": harness_with_history["v1"]}


def _login(client, request, role: str):
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


# --- pages ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_on_every_page(request, client, world, role):
    _login(client, request, role)
    replay = world["replay"]
    for path in ("/evals/latency/", f"/evals/latency/{replay.pk}/"):
        r = client.get(path)
        if role == "anonymous":
            assert r.status_code == 302 and "/accounts/login/" in r["Location"], path
        else:
            assert r.status_code == (403 if role == "outsider" else 200), (role, path)
    r = client.get("/evals/latency/new/")
    expected = {"anonymous": 302, "ml_staff": 200, "ml_lead": 200}.get(role, 403)
    assert r.status_code == expected, role
    if role not in ("anonymous", "outsider"):
        assert client.get(f"/evals/latency/{uuid.uuid4()}/").status_code == 404


def test_replay_page_shows_the_table_the_reference_and_a_histogram_per_level(client, reviewer, world):
    client.force_login(reviewer)
    r = client.get(f"/evals/latency/{world['replay'].pk}/")
    html = r.content.decode()
    assert r.status_code == 200
    assert html.count('data-testid="level-row"') == 2 and 'data-testid="reference-row"' in html
    assert "3.407" in html and "8.114" in html and "one H20 GPU" in html
    assert 'data-testid="histogram-1"' in html and 'data-testid="histogram-4"' in html
    assert html.count('<rect class="bin"') == 2 * len(world["replay"].summary["histogram_edges"][1:])
    # the 4-level's P95 (4.1 s) and the reference P50 (3.407 s) are on the axis; the reference P95 (8.114 s) beyond
    assert 'data-testid="marker-ref"' in html and 'data-testid="marker-p95"' in html
    assert "beyond this axis: the 15 s budget · reference P95 8.114 s" in html
    content = html.split('<div id="replay"', 1)[1]
    assert " style=" not in content and "<script" not in content
    assert 'data-testid="cancel"' not in html  # a reviewer manages nothing


def test_the_list_links_each_replay(client, operator, world):
    client.force_login(operator)
    html = client.get("/evals/latency/").content.decode()
    assert f'/evals/latency/{world["replay"].pk}/' in html and "1 / 4" in html


def test_launch_form_starts_a_replay_and_puts_errors_on_their_boxes(client, ml_staff, world, sent,
                                                                    django_capture_on_commit_callbacks):
    client.force_login(ml_staff)
    form = {"eval_set_version": "t1-lat@1", "harness_version": "glow-gadget@1", "endpoint": "scripted",
            "concurrency": "1,x,4", "turns_per_level": "0", "seed": "0"}
    r = client.post("/evals/latency/new/", form)
    assert r.status_code == 400
    html = r.content.decode()
    assert 'data-testid="error-concurrency"' in html and "concurrency[1]" in html
    assert 'data-testid="error-turns_per_level"' in html
    assert LatencyReplay.objects.count() == 1 and not sent
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post("/evals/latency/new/", {**form, "concurrency": "2, 8", "turns_per_level": "5"})
    replay = LatencyReplay.objects.exclude(pk=world["replay"].pk).get()
    assert r.status_code == 302 and r["Location"] == f"/evals/latency/{replay.pk}/"
    assert replay.concurrency == [2, 8] and replay.turns_per_level == 5 and sent[0]["queue"] == "gpu"
    # an unknown row in the form: the form's own error, nothing started
    r = client.post("/evals/latency/new/", {**form, "concurrency": "1", "turns_per_level": "5", "endpoint": "nope"})
    assert r.status_code == 400 and 'data-testid="error-endpoint"' in r.content.decode()


def test_cancel_and_resume_by_owner_lead_and_others(client, ml_staff, ml_staff2, ml_lead, reviewer, world, sent,
                                                    django_capture_on_commit_callbacks):
    replay = S.latency_replay_start(user=ml_staff, eval_set_version=world["version"], harness_version=world["v1"],
                                    endpoint=world["replay"].endpoint, turns_per_level=2, enqueue=False)
    url = f"/evals/latency/{replay.pk}/"
    client.force_login(reviewer)
    assert client.post(url + "cancel/").status_code == 403
    client.force_login(ml_staff2)
    r = client.post(url + "cancel/")
    assert r.status_code == 403 and "who started it" in r.content.decode()
    client.force_login(ml_staff)
    html = client.get(url).content.decode()
    assert 'data-testid="cancel"' in html
    r = client.post(url + "cancel/")
    assert r.status_code == 302 and LatencyReplay.objects.get(pk=replay.pk).status == Job.Status.CANCELLED
    r = client.post(url + "cancel/")  # already finished: the page says why
    assert r.status_code == 409
    client.force_login(ml_lead)
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(url + "resume/")
    assert r.status_code == 302 and LatencyReplay.objects.get(pk=replay.pk).status == Job.Status.QUEUED and sent
    assert client.get(url + "cancel/").status_code == 405


# --- API -----------------------------------------------------------------------------------------------------------


def _api(request, role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_authenticate(request.getfixturevalue(role))
    return client


BODY = {"eval_set": "t1-lat", "harness": "glow-gadget", "harness_version": 1, "endpoint": "scripted",
        "concurrency": [1, 2], "turns_per_level": 4}


@pytest.mark.parametrize("role", ROLES)
def test_every_role_on_the_api(request, world, sent, role):
    client = _api(request, role)
    read = {"anonymous": 401, "outsider": 403}.get(role, 200)
    assert client.get("/api/latency-replays/").status_code == read
    r = client.get(f"/api/latency-replays/{world['replay'].pk}/")
    assert r.status_code == read
    if read == 200:
        assert r.json()["summary"]["levels"][1]["p95_s"] == 4.1 and r.json()["concurrency"] == [1, 4]
        assert client.get(f"/api/latency-replays/{uuid.uuid4()}/").status_code == 404
    start = {"anonymous": 401, "ml_staff": 201, "ml_lead": 201}.get(role, 403)
    r = client.post("/api/latency-replays/", BODY, format="json")
    assert r.status_code == start, r.content
    if start == 201:
        assert r.json()["status"] == "queued" and r.json()["turns_per_level"] == 4


def test_api_start_defaults_and_label(request, ml_staff, world, sent, django_capture_on_commit_callbacks):
    client = _api(request, "ml_staff")
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post("/api/latency-replays/", {"eval_set": "t1-lat", "harness": "glow-gadget",
                                                  "endpoint": "scripted"}, format="json")
    assert r.status_code == 201, r.content
    data = r.json()
    assert data["concurrency"] == [1, 4, 8, 16] and data["harness_version"] == 1  # production → v1
    assert data["eval_set_version"] == 1 and sent[0]["task_id"]


@pytest.mark.parametrize(("body", "path"), [
    ({**BODY, "concurrency": [0]}, "concurrency.0"),
    ({**BODY, "concurrency": [1, 1]}, "concurrency[1]"),
    ({**BODY, "concurrency": "1,4"}, "concurrency"),
    ({**BODY, "concurrency": list(range(1, 10))}, "concurrency"),
    ({**BODY, "turns_per_level": 0}, "turns_per_level"),
    ({**BODY, "turns_per_level": "many"}, "turns_per_level"),
    ({**BODY, "sampling": {"temperature": "hot"}}, "sampling.temperature"),
    ({**BODY, "sampling": [1]}, "sampling"),
    ({**BODY, "deadline_s": "NaN"}, "deadline_s"),
    ({**BODY, "deadline_s": 10_000}, "deadline_s"),
    ({**BODY, "eval_set": "nope"}, "eval_set"),
    ({**BODY, "eval_set_version": 9}, "eval_set_version"),
    ({**BODY, "harness": "nope"}, "harness"),
    ({**BODY, "harness_version": 99}, "harness_version"),
    ({**BODY, "label": "production"}, "label"),
    ({k: v for k, v in BODY.items() if k != "harness_version"} | {"label": "staging"}, "label"),
    ({**BODY, "endpoint": "nope"}, "endpoint"),
    ({**BODY, "seed": -1}, "seed"),
    ({**BODY, "name": "x" * 500}, "name"),
    ({}, "eval_set"),
])
def test_api_start_refuses_malformed_input_with_a_located_400(request, world, sent, body, path):
    r = _api(request, "ml_staff").post("/api/latency-replays/", body, format="json")
    assert r.status_code == 400, r.content
    assert path in {e["path"] for e in r.json()["errors"]}, r.json()
    assert LatencyReplay.objects.count() == 1 and not sent


def test_api_start_of_a_t4_set_and_a_broken_body(request, ml_staff, world, sent):
    from tests.training_jobs.eval_helpers import t4_case

    eval_set_import(user=ml_staff, name="t4-lat", kind="t4", jsonl_text=json.dumps(t4_case(1)))
    client = _api(request, "ml_staff")
    r = client.post("/api/latency-replays/", {**BODY, "eval_set": "t4-lat"}, format="json")
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "eval_set_version"
    r = client.post("/api/latency-replays/", "{not json", content_type="application/json")
    assert r.status_code == 400


def test_api_cancel_and_resume(request, ml_staff, world, sent, django_capture_on_commit_callbacks):
    replay = S.latency_replay_start(user=ml_staff, eval_set_version=world["version"], harness_version=world["v1"],
                                    endpoint=world["replay"].endpoint, turns_per_level=2, enqueue=False)
    url = f"/api/latency-replays/{replay.pk}/"
    assert _api(request, "ml_staff2").post(url + "cancel/").status_code == 403
    assert _api(request, "reviewer").post(url + "cancel/").status_code == 403
    client = _api(request, "ml_staff")
    r = client.post(url + "cancel/")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert client.post(url + "cancel/").status_code == 409
    with django_capture_on_commit_callbacks(execute=True):
        r = _api(request, "ml_lead").post(url + "resume/")
    assert r.status_code == 200 and r.json()["status"] == "queued" and r.json()["resumes"] == 1
    assert client.post(f"/api/latency-replays/{uuid.uuid4()}/cancel/").status_code == 404


def test_the_evaluations_area_links_the_replays(client, reviewer, world):
    client.force_login(reviewer)
    for path in ("/eval-sets/", "/evals/runs/"):
        html = client.get(path).content.decode()
        assert 'data-testid="latency-link"' in html and 'href="/evals/latency/"' in html, path
