"""The registered models as the runtime sees them (streams.model_artefacts) and training's provider of them
(training_jobs.model_artefacts, named by settings.HAT_MODEL_ARTEFACTS): what serving, adapters and deployments read
of a model without importing training, and what they tell it back."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from console.errors import ValidationFailed
from streams import model_artefacts as artefacts
from streams.models import ModelEndpoint
from streams.services import serving
from streams.services.session_eval_sets import EvalSetsUnavailable, live_session_save_as_eval_set
from training_jobs.models import TrainedModel


@pytest.fixture
def lineage(db):
    base = TrainedModel.objects.create(name="b-base", kind="base", path="/models/base")
    sft = TrainedModel.objects.create(name="a-sft", kind="sft", path="/models/sft", parent=base)
    lora = TrainedModel.objects.create(name="c-lora", kind="sft", path="/models/lora", parent=sft, is_adapter=True,
                                       config={"lora": {"r": 8}})
    other = TrainedModel.objects.create(name="d-other-lora", kind="sft", path="/models/other", parent=base,
                                        is_adapter=True)
    return SimpleNamespace(base=base, sft=sft, lora=lora, other=other)


def test_a_model_reads_as_an_artefact_with_its_base_and_lineage(lineage):
    got = artefacts.model_get(lineage.lora.pk)
    assert got == artefacts.model_get(str(lineage.lora.pk)) == artefacts.model_get(lineage.lora)  # id, text, row
    assert (got.id, got.pk, got.name, got.path, got.is_adapter, got.lora_rank, got.kind_label) == (
        lineage.lora.pk, lineage.lora.pk, "c-lora", "/models/lora", True, 8, "HSA-SFT")
    assert got.base.id == lineage.sft.pk and got.base.path == "/models/sft" and got.base.base is None
    assert got.lineage == (lineage.base.pk, lineage.sft.pk, lineage.lora.pk)
    assert got.descends_from(lineage.base.pk) and got.descends_from(str(lineage.sft.pk))
    assert not got.descends_from(lineage.lora.pk) and not got.descends_from(lineage.other.pk)
    full = artefacts.model_get(lineage.sft.pk)
    assert full.base is None and not full.is_adapter and full.lora_rank is None  # a full model names no base
    assert artefacts.model_get(got) is got


@pytest.mark.parametrize("missing", [None, "", "not-a-uuid", str(uuid.uuid4()), 42])
def test_what_names_no_model_is_not_found(lineage, missing):
    assert artefacts.model_get(missing) is None


def test_lists_filter_by_kind_base_and_order(lineage):
    full = artefacts.model_list(adapters=False)
    assert [m.name for m in full] == ["a-sft", "b-base"]  # newest first
    assert [m.name for m in artefacts.model_list(adapters=False, order="name", limit=1)] == ["a-sft"]
    assert [m.name for m in artefacts.model_list(adapters=True, order="name")] == ["c-lora", "d-other-lora"]
    assert [m.name for m in artefacts.model_list(adapters=True, base_id=lineage.sft.pk)] == ["c-lora"]
    assert [m.name for m in artefacts.model_list(adapters=True, base_path="/models/base")] == ["d-other-lora"]
    assert artefacts.model_list(adapters=True, base_id="not-a-uuid") == []
    listed = {m.name: m for m in artefacts.model_list(adapters=True)}
    assert listed["c-lora"].lineage == artefacts.model_get(lineage.lora.pk).lineage  # lists carry lineages too
    by_id = artefacts.models_by_id([str(lineage.base.pk), lineage.lora.pk, "None", "", None, str(uuid.uuid4())])
    assert set(by_id) == {str(lineage.base.pk), str(lineage.lora.pk)} and by_id[str(lineage.base.pk)].name == "b-base"


def test_the_registry_hears_where_a_model_is_served(lineage):
    one = ModelEndpoint.objects.create(name="srv-one", base_url="http://127.0.0.1:9/v1", model="m")
    two = ModelEndpoint.objects.create(name="srv-two", base_url="http://127.0.0.1:10/v1", model="m")
    artefacts.model_served(lineage.base.pk, endpoint_id=one.pk, pid=4242, host="box")
    lineage.base.refresh_from_db()
    assert (lineage.base.endpoint_id, lineage.base.serve_pid, lineage.base.serve_host) == (one.pk, 4242, "box")
    artefacts.model_unserved(lineage.base.pk, endpoint_id=two.pk)  # another server of it stopped: still served
    lineage.base.refresh_from_db()
    assert lineage.base.endpoint_id == one.pk
    artefacts.model_unserved(lineage.base.pk, endpoint_id=one.pk)
    lineage.base.refresh_from_db()
    assert (lineage.base.endpoint_id, lineage.base.serve_pid, lineage.base.serve_host) == (None, None, "")


def test_without_a_registry_there_are_no_models(lineage, settings, ml_staff):
    settings.HAT_MODEL_ARTEFACTS = ""
    assert artefacts.model_get(lineage.base.pk) is None and artefacts.model_list() == []
    assert artefacts.models_by_id([lineage.base.pk]) == {}
    artefacts.model_served(lineage.base.pk, endpoint_id=1, pid=1, host="x")  # nobody to tell: nothing happens
    with pytest.raises(ValidationFailed) as refused:
        serving.server_launch(user=ml_staff, profile=None, model=lineage.base)
    assert refused.value.status_code == 400 and refused.value.errors[0]["path"] == "model"


def test_a_registry_named_but_missing_is_a_configuration_error(settings):
    settings.HAT_MODEL_ARTEFACTS = "training_jobs.model_artefacts.NO_SUCH_PROVIDER"
    with pytest.raises(ImportError):
        artefacts.model_get(str(uuid.uuid4()))


def test_saving_a_session_as_an_eval_set_needs_a_store(settings, ml_staff):
    settings.HAT_SAVE_SESSION_AS_EVAL_SET = ""
    with pytest.raises(EvalSetsUnavailable) as refused:
        live_session_save_as_eval_set(user=ml_staff, session=SimpleNamespace(pk=uuid.uuid4()))
    assert refused.value.status_code == 409


def test_what_a_committed_model_did_in_the_demo_room_reads_as_words(tmp_path):
    """A committed model's metrics.json ``demo_room`` (the room's questions it answered, its limits) is what pages
    say of it before anyone tries it; a model with none, or a broken file, says nothing."""
    import json

    from training_jobs.model_artefacts import committed_measured

    assert committed_measured(tmp_path) == []  # no metrics.json
    (tmp_path / "metrics.json").write_text("{not json", encoding="utf-8")
    assert committed_measured(tmp_path) == []
    (tmp_path / "metrics.json").write_text(json.dumps({"demo_room": {"answered": [], "of": 0}}), encoding="utf-8")
    assert committed_measured(tmp_path) == []  # nothing measured
    (tmp_path / "metrics.json").write_text(json.dumps({"demo_room": {
        "answered": ["how much is #102?", "what's on sale?"], "of": 9,
        "limits": "stock questions are taken for product questions (another skill); the rest fall back"}}),
        encoding="utf-8")
    assert committed_measured(tmp_path) == [
        "In the demo room it answered 2 of 9 typical viewer questions (how much is #102?; what's on sale?); "
        "the others fell back.",
        "Known limits: stock questions are taken for product questions (another skill).",
    ]
