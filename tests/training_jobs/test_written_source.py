"""Dataset sources: gold turns written for a harness the reference policy does not know (the order desk), checked
against the harness before a build is queued, every error located, and built into samples through the tools' own
bindings (fixtures here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.errors import ValidationFailed
from training_jobs.hsa.written import load_turns
from training_jobs.schemas import parse_sources
from training_jobs.services.datasets import collect_samples, validate_build

TURNS = load_turns(Path(__file__).parent / "data" / "order_desk_turns.yaml")
pytestmark = pytest.mark.django_db


@pytest.fixture
def order_desk(manager, reviewer, demo_manifest):
    from harness_editor import services

    v1 = services.harness_create(user=manager, slug="order-desk", name="Order desk",
                                 manifest=demo_manifest("order_desk"))
    services.version_submit(user=manager, version=v1)
    v1 = services.version_approve(user=reviewer, version=v1, comment="policy checked")
    v2 = services.version_create_draft(user=manager, harness=v1.harness, manifest=demo_manifest("order_desk"),
                                       parent=v1, change_note="not approved yet")
    return {"v1": v1, "v2": v2}


def _sources(version: str, turns) -> dict:
    return {"scenarios": [], "demo_manifests": [], "written": [{"version": version, "turns": turns}]}


def test_written_turns_become_samples_answered_by_the_fixtures(order_desk) -> None:
    _, sources = validate_build(kind="hsa", recipe=None, sources=_sources("order-desk@1", TURNS))
    samples, report = collect_samples(sources)
    assert report is None
    assert len(samples) == len(TURNS)
    assert {s.source for s in samples} == {"written:order-desk-v1"}
    status = next(s for s in samples if s.id == "status-a1002")
    lookup = next(step for step in status.target if getattr(step, "name", "") == "lookup_order")
    assert lookup.result["order_id"] == "A1002" and "error" not in lookup.result  # the fixture's answer


def test_every_refused_turn_is_located_before_the_build_is_queued(order_desk) -> None:
    bad = [dict(TURNS[0]), {**TURNS[1], "calls": [{"tool": "refund_everything", "arguments": {}}]},
           {**TURNS[2], "reply": ""}, {**TURNS[3], "skill": "no_such_skill"}]
    with pytest.raises(ValidationFailed) as info:
        validate_build(kind="hsa", recipe=None, sources=_sources("order-desk@1", bad))
    paths = [e["path"] for e in info.value.errors]
    assert paths == ["sources.written[0].turns[1].calls[0].tool", "sources.written[0].turns[2].reply",
                     "sources.written[0].turns[3].skills[0]"]
    assert "refund_everything" in info.value.errors[0]["message"]


@pytest.mark.parametrize(("version", "message"), [("order-desk@2", "only approved versions"),
                                                  ("order-desk@9", "no harness version")])
def test_only_approved_versions_take_written_turns(order_desk, version: str, message: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_build(kind="hsa", recipe=None, sources=_sources(version, TURNS[:1]))
    assert info.value.errors[0]["path"] == "sources.written[0].version"
    assert message in info.value.errors[0]["message"]


def test_the_source_shape_is_checked() -> None:
    with pytest.raises(Exception) as info:
        parse_sources({"scenarios": [], "written": [{"version": "order desk", "turns": []}]})
    text = str(info.value)
    assert "slug@number" in text and "turns" in text


# --- the dataset form -------------------------------------------------------------------------------------------


@pytest.fixture
def queued_tasks(monkeypatch):
    sent = []
    from training_jobs import tasks

    monkeypatch.setattr(tasks.dataset_build, "apply_async", lambda args, queue, task_id: sent.append(args[0]))
    return sent


def _form(**over) -> dict:
    data = {"name": "desk", "build": "hsa", "seed": 0, "variants_per_sample": 2, "names": "train",
            "harness_pool_size": 8, "scenarios": [], "demo_manifests": [], "tiny_gold": 0, "tiny_gold_seed": 0,
            "op_rename_tools": "on", "p_rename_tools": "0.7"}
    data.update(over)
    return data


def test_the_form_builds_from_written_turns(client, ml_staff, order_desk, queued_tasks) -> None:
    import yaml

    from training_jobs.models import Dataset

    client.force_login(ml_staff)
    page = client.get("/datasets/new/").content.decode()
    assert 'name="written_turns"' in page and "order-desk v1" in page
    text = yaml.safe_dump(TURNS[:3], sort_keys=False)
    response = client.post("/datasets/new/", _form(written_version="order-desk@1", written_turns=text))
    d = Dataset.objects.get()
    assert response.status_code == 302 and d.sources["written"][0]["version"] == "order-desk@1"
    assert len(d.sources["written"][0]["turns"]) == 3


def test_form_errors_of_written_turns_land_on_their_fields(client, ml_staff, order_desk, queued_tasks) -> None:
    import yaml

    from training_jobs.models import Dataset

    client.force_login(ml_staff)
    bad = yaml.safe_dump([{**TURNS[0], "calls": [{"tool": "refund_everything", "arguments": {}}]}])
    response = client.post("/datasets/new/", _form(written_version="order-desk@1", written_turns=bad))
    body = response.content.decode()
    assert response.status_code == 400 and "turns[0].calls[0].tool" in body and "refund_everything" in body
    no_version = client.post("/datasets/new/", _form(written_turns=bad))
    assert no_version.status_code == 400 and "pick the approved harness version" in no_version.content.decode()
    not_yaml = client.post("/datasets/new/", _form(written_version="order-desk@1", written_turns="- [unclosed"))
    assert not_yaml.status_code == 400 and "not YAML or JSON" in not_yaml.content.decode()
    assert not Dataset.objects.exists()


# --- checking a turn never acts (issue 26 point 4) ------------------------------------------------------------------



@pytest.fixture
def http_desk(manager, reviewer, demo_manifest, upstream, settings):
    """The order desk with its order lookup on an HTTP GET and its cancellation on an HTTP POST (a tool that acts),
    the endpoint allow-listed on this host."""
    from harness_editor import services
    from harness_editor.schemas import manifest_from_json, manifest_to_json

    port = upstream.base_url.split(":")[2].split("/")[0]
    settings.HAT_OUTBOUND_HOSTS = ["127.0.0.1", f"127.0.0.1:{port}"]
    settings.HAT_TOOL_ENDPOINTS = {"orders": {"base_url": upstream.base_url, "methods": ["GET", "POST"]}}
    data = json.loads(manifest_to_json(demo_manifest("order_desk")))
    tools = {t["name"]: t for t in data["tools"]}
    tools["lookup_order"]["binding"] = {"kind": "http", "endpoint": "orders", "path": "/orders/{order_id}",
                                        "result": "data.order"}
    tools["cancel_order"]["binding"] = {"kind": "http", "endpoint": "orders", "method": "POST", "path": "/orders",
                                        "body": "arguments", "result": "created"}
    v1 = services.harness_create(user=manager, slug="http-desk", name="HTTP desk",
                                 manifest=manifest_from_json(json.dumps(data)))
    services.version_submit(user=manager, version=v1)
    return services.version_approve(user=reviewer, version=v1, comment="policy checked")


SHIPPED = {"id": "comment", "comment": "Hi, where is my order A1002?", "skill": "order_status",
           "calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1002"}}],
           "reply": "Order A1002 has shipped."}
CANCEL = {"id": "cancel", "comment": "Please cancel order A1003, I ordered it by mistake.", "skill": "cancellations",
          "calls": [{"tool": "cancel_order", "arguments": {"order_id": "A1003", "reason": "ordered_by_mistake"}}],
          "reply": "Order A1003 is cancelled."}


def test_a_tool_that_may_act_is_never_called_to_check_a_turn(http_desk, upstream) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate_build(kind="hsa", recipe=None, sources=_sources("http-desk@1", [CANCEL]))
    (error,) = info.value.errors
    assert error["path"] == "sources.written[0].turns[0].calls[0]"
    assert "may act" in error["message"] and "'result'" in error["message"]
    assert upstream.requests == []  # before: the POST ran at request time (and again in the build)


def test_a_recorded_result_answers_a_tool_that_may_act_in_the_request_and_in_the_job(http_desk, upstream) -> None:
    recorded = {**CANCEL, "calls": [{**CANCEL["calls"][0], "result": {"cancelled": True, "order_id": "A1003"}}]}
    _, sources = validate_build(kind="hsa", recipe=None, sources=_sources("http-desk@1", [recorded]))
    (sample,), _ = collect_samples(sources)  # what the build job does
    cancel = next(step for step in sample.target if getattr(step, "name", "") == "cancel_order")
    assert cancel.result == {"cancelled": True, "order_id": "A1003"}
    assert upstream.requests == []
    bad = {**CANCEL, "calls": [{**CANCEL["calls"][0], "result": ["not", "an", "object"]}]}
    with pytest.raises(ValidationFailed) as info:
        validate_build(kind="hsa", recipe=None, sources=_sources("http-desk@1", [bad]))
    assert info.value.errors[0]["path"] == "sources.written[0].turns[0].calls[0].result"


def test_a_read_only_remote_tool_is_called_once_in_the_job_and_never_in_the_request(http_desk, upstream) -> None:
    _, sources = validate_build(kind="hsa", recipe=None, sources=_sources("http-desk@1", [SHIPPED]))
    assert upstream.requests == []  # the request never waits on an upstream
    (sample,), _ = collect_samples(sources)
    assert [(r["method"], r["path"]) for r in upstream.requests] == [("GET", "/api/orders/A1002")]
    lookup = next(step for step in sample.target if getattr(step, "name", "") == "lookup_order")
    assert lookup.result["status"] == "shipped"


@pytest.mark.parametrize("schema", [{"$ref": "#/$defs/nowhere"}, {"type": "string", "pattern": "[A-Z"},
                                    {"$ref": "REMOTE/order_id.json"}],
                         ids=["dangling-ref", "invalid-pattern", "remote-ref"])
def test_a_stored_schema_the_validator_cannot_run_is_a_located_400_not_a_500(
        manager, reviewer, ml_staff, demo_manifest, schema, queued_tasks, upstream) -> None:
    """Issue 26 points 1 and 3: a version stored before the save-time check whose tool schema cannot run answered
    POST /api/datasets/ with Django's HTML 500 (or fetched its remote reference from the web process); now a
    located 400 that saves nothing and sends no request."""
    from rest_framework.test import APIClient

    schema = json.loads(json.dumps(schema).replace("REMOTE", upstream.base_url))

    from harness_editor import services
    from harness_editor.schemas import manifest_to_json, parse_manifest
    from harness_editor.schemas.tool_schema import without_schema_lint
    from training_jobs.models import Dataset

    data = json.loads(manifest_to_json(demo_manifest("order_desk")))
    lookup = next(t for t in data["tools"] if t["name"] == "lookup_order")
    lookup["parameters"]["properties"]["order_id"] = schema
    with without_schema_lint():  # stored under the rules of its day
        v1 = services.harness_create(user=manager, slug="order-desk", name="Order desk", manifest=parse_manifest(data))
        services.version_submit(user=manager, version=v1)
        services.version_approve(user=reviewer, version=v1, comment="policy checked")
    api = APIClient()
    api.force_login(ml_staff)
    body = {"name": "desk", "kind": "hsa", "sources": _sources("order-desk@1", TURNS[:1])}
    response = api.post("/api/datasets/", body, format="json")
    assert response.status_code == 400 and response["Content-Type"].startswith("application/json")
    (error,) = response.json()["errors"]
    assert error["path"] == "sources.written[0].turns[0].calls[0].tool" and "schema is at fault" in error["message"]
    assert not Dataset.objects.exists() and queued_tasks == []
    # the same schema is refused when a manifest is validated, at its path
    check = api.post("/api/validate", {"manifest": data}, format="json")
    assert check.status_code == 400
    i = next(i for i, t in enumerate(data["tools"]) if t["name"] == "lookup_order")
    assert any(e["path"].startswith(f"tools[{i}].parameters.properties.order_id") for e in check.json()["errors"])
    assert upstream.requests == []
