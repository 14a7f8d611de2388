"""Endpoint names instead of absolute file paths (issue 14).

A model endpoint served from a directory has that directory's absolute path as its model. Every page and form that
shows or offers an endpoint shows its name (with the model's last path component where it helps), never the path;
the serving page's server detail keeps the paths for those who launch servers, folded in a <details>.
"""

from __future__ import annotations

import json
import re

import pytest

from streams.labels import endpoint_label, model_short_name
from streams.models import ModelEndpoint, ServerInstance
from streams.services import serving
from tests.training_jobs.eval_helpers import t1_case
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    good_run,
    scripted_endpoint,
    scripted_model,
    t1_set,
    v1,
)
from training_jobs import latency_services as latency
from training_jobs.eval_run_services import eval_run_start
from training_jobs.eval_services import eval_set_import
from training_jobs.models import Dataset

MODEL_DIR = "/work/main/models/demo-tiny"
ADAPTER_DIR = "/srv/hat/adapters/hat-lora-7"


# --- the label itself ------------------------------------------------------------------------------------------------


def test_model_short_name_is_the_last_path_component():
    assert model_short_name(MODEL_DIR) == "demo-tiny"
    assert model_short_name(MODEL_DIR + "/") == "demo-tiny"
    assert model_short_name("C:\\models\\demo-tiny") == "demo-tiny"
    assert model_short_name("gpt-4o-mini") == "gpt-4o-mini"
    assert model_short_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen2.5-0.5B-Instruct"
    assert model_short_name("") == "" and model_short_name(None) == ""


def test_endpoint_label_is_the_name_with_the_short_model_where_asked():
    e = ModelEndpoint(name="local-tiny", model=MODEL_DIR, is_default=True)
    assert endpoint_label(e) == "local-tiny"
    assert endpoint_label(e, with_model=True) == "local-tiny · demo-tiny"
    assert endpoint_label(e, with_model=True, default=True) == "local-tiny · demo-tiny · default"
    same = ModelEndpoint(name="demo-tiny", model=MODEL_DIR)
    assert endpoint_label(same, with_model=True) == "demo-tiny"  # no "demo-tiny · demo-tiny"


def test_str_keeps_the_name_and_the_short_model_for_the_admin():
    e = ModelEndpoint(name="local-tiny", model=MODEL_DIR)
    assert str(e) == "local-tiny (demo-tiny)" and MODEL_DIR not in str(e)


# --- the pages -------------------------------------------------------------------------------------------------------


@pytest.fixture
def endpoint(db):
    return ModelEndpoint.objects.create(name="local-tiny", base_url="http://127.0.0.1:9/v1", model=MODEL_DIR,
                                        kind="vllm", is_default=True, timeout_s=5.0, connect_timeout_s=1.0)


@pytest.fixture
def judge(db):
    return ModelEndpoint.objects.create(name="judge-ep", base_url="http://127.0.0.1:9/v1",
                                        model="/opt/weights/judge-7b/", kind="vllm", timeout_s=5.0,
                                        connect_timeout_s=1.0)


@pytest.fixture
def t1_version(ml_staff):
    version, _ = eval_set_import(user=ml_staff, name="t1-labels", kind="t1",
                                 jsonl_text="\n".join(json.dumps(t1_case(i)) for i in range(2)))
    return version


def _page(client, user, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def _no_paths(html: str, *paths: str) -> None:
    for path in paths or (MODEL_DIR, "/opt/weights/judge-7b", ADAPTER_DIR, "/work/main/models"):
        assert path not in html, path


def _option(html: str, value: str) -> str:
    match = re.search(rf'<option value="{re.escape(value)}"[^>]*>([^<]*)</option>', html)
    assert match, f"no option {value!r}"
    return match.group(1)


@pytest.mark.django_db
def test_eval_run_form_offers_endpoints_and_judges_by_name(client, ml_staff, endpoint, judge, t1_version):
    html = _page(client, ml_staff, "/evals/runs/new/")
    _no_paths(html)
    assert _option(html, "local-tiny") == "local-tiny · demo-tiny · default"
    assert _option(html, "judge-ep") == "judge-ep · judge-7b"
    assert 'value="judge-ep"' in html and "judge-ep · judge-7b" in html  # the judges' checkboxes too


@pytest.mark.django_db
def test_eval_run_detail_names_the_endpoint(client, ml_staff, reviewer, endpoint, t1_version,
                                            harness_with_history):
    run = eval_run_start(user=ml_staff, eval_set_version=t1_version, endpoint=endpoint,
                         harness_version=harness_with_history["v1"], enqueue=False)
    for user in (ml_staff, reviewer):
        html = _page(client, user, f"/evals/runs/{run.pk}/")
        _no_paths(html)
        assert 'data-testid="endpoint">local-tiny</code> (demo-tiny)' in html
    _no_paths(_page(client, reviewer, "/evals/runs/"))


@pytest.mark.django_db
def test_latency_form_and_replay_page_name_the_endpoint(client, ml_staff, reviewer, endpoint, t1_version,
                                                        harness_with_history):
    html = _page(client, ml_staff, "/evals/latency/new/")
    _no_paths(html)
    assert _option(html, "local-tiny") == "local-tiny · demo-tiny · default"
    replay = latency.latency_replay_start(user=ml_staff, eval_set_version=t1_version,
                                          harness_version=harness_with_history["v1"], endpoint=endpoint,
                                          concurrency=[1], turns_per_level=2, enqueue=False)
    for user in (ml_staff, reviewer):
        html = _page(client, user, f"/evals/latency/{replay.pk}/")
        _no_paths(html)
        assert "<code>local-tiny</code>" in html and "demo-tiny" in html
    _no_paths(_page(client, reviewer, "/evals/latency/"))


@pytest.mark.django_db
def test_dataset_form_and_page_name_teacher_and_judge(client, ml_staff, endpoint, judge):
    html = _page(client, ml_staff, "/datasets/new/")
    _no_paths(html)
    assert _option(html, "local-tiny") == "local-tiny · demo-tiny"
    assert _option(html, "judge-ep") == "judge-ep · judge-7b"
    d = Dataset.objects.create(name="regen", kind="hsa", status="succeeded", created_by=ml_staff, sources={},
                               recipe={"label_mode": "regenerate", "teacher": "local-tiny", "judge": "judge-ep"})
    html = _page(client, ml_staff, f"/datasets/{d.pk}/")
    _no_paths(html)
    assert 'data-testid="endpoint-teacher">local-tiny</code>' in html and "(demo-tiny)" in html
    assert 'data-testid="endpoint-judge">judge-ep</code>' in html and "(judge-7b)" in html


@pytest.mark.django_db
def test_preview_and_run_forms_offer_endpoint_names(client, manager, endpoint):
    for url in ("/preview/", "/preview/runs/"):
        html = _page(client, manager, url)
        _no_paths(html)
        assert _option(html, str(endpoint.pk)) == "local-tiny"


@pytest.fixture
def server(db, ml_staff, endpoint, tmp_path):
    profile = serving.serve_profile_create(user=ml_staff, name="light", spec={"kind": "local"})
    log = tmp_path / "server.log"
    log.write_text("INFO ready\n")
    return ServerInstance.objects.create(
        profile=profile, model_path=MODEL_DIR, endpoint=endpoint, status="ready", host="gpu-7", port=8123,
        argv=["python", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL_DIR], log_path=str(log),
        adapters=[{"name": "hat-lora-7", "path": ADAPTER_DIR, "model_id": "x", "loaded_at": "now"}],
        started_by=ml_staff, managed=False)


@pytest.mark.django_db
def test_serving_pages_show_names_and_keep_paths_for_those_who_launch_servers(client, operator, ml_staff, server):
    listing = _page(client, operator, "/serving/")
    _no_paths(listing)
    assert 'data-testid="server-endpoint">local-tiny</code>' in listing and "demo-tiny" in listing
    detail = _page(client, operator, f"/serving/servers/{server.pk}/")
    _no_paths(detail)  # the operator watches servers; where files lie is not theirs to see
    assert 'data-testid="server-endpoint">local-tiny</code>' in detail and "demo-tiny" in detail
    assert "hat-lora-7" in detail and 'data-testid="server-paths"' not in detail
    adapters = _page(client, operator, f"/serving/servers/{server.pk}/adapters/")
    _no_paths(adapters)
    assert "hat-lora-7" in adapters

    # who launches and stops servers sees the paths, folded away in the server detail's <details> only
    detail = _page(client, ml_staff, f"/serving/servers/{server.pk}/")
    paths = re.search(r'<details[^>]*data-testid="server-paths".*?</details>', detail, re.S)
    assert paths and MODEL_DIR in paths.group(0) and ADAPTER_DIR in paths.group(0)
    assert "vllm.entrypoints.openai.api_server" in paths.group(0)
    outside = detail.replace(paths.group(0), "")
    _no_paths(re.sub(r'title="[^"]*"', "", outside))  # elsewhere at most a title attribute
    listing = _page(client, ml_staff, "/serving/")
    _no_paths(re.sub(r'title="[^"]*"', "", listing))
    metrics = _page(client, ml_staff, f"/serving/servers/{server.pk}/metrics/")
    _no_paths(metrics)
    assert "local-tiny" in metrics and "demo-tiny" in metrics


@pytest.mark.django_db
def test_gate_policy_line_names_the_production_endpoint(endpoint, harness_with_history):
    from training_jobs.gate import _policy_lines
    from training_jobs.gate_models import GatePolicy

    policy = GatePolicy.objects.create(harness=harness_with_history["harness"], endpoint=endpoint)
    lines = _policy_lines(policy, {})
    assert "Production model: endpoint local-tiny · demo-tiny" in lines and not any(MODEL_DIR in x for x in lines)


@pytest.mark.django_db
def test_an_eval_case_turn_names_the_endpoint(client, reviewer, good_run):  # noqa: F811  (the fixture)
    ModelEndpoint.objects.filter(pk=good_run.endpoint_id).update(model=MODEL_DIR)
    html = _page(client, reviewer, f"/evals/runs/{good_run.pk}/cases/t1-001/")
    _no_paths(html)
    assert 'data-testid="transcript-turn"' in html and "endpoint scripted ·" in html
