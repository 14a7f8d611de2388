"""Dataset sources: gold turns written for a harness the reference policy does not know (the order desk), checked
against the harness before a build is queued, every error located, and built into samples through the tools' own
bindings (fixtures here)."""

from __future__ import annotations

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
