"""Recorded preview turns as a dataset source, through the console: turns stored by preview rooms (scripted
endpoint and the REAL tiny local model) are read back with the room they started from, replayed, judged, and
built into a dataset whose statistics say what became of every turn."""

from __future__ import annotations

import uuid

import pytest

from console.errors import ValidationFailed
from streams import services as preview
from training_jobs import services
from training_jobs.models import Dataset
from training_jobs.schemas import Sources
from tests.streams.preview_helpers import price_script, scripted_model  # noqa: F401  (fixture)
from tests.streams.scripted_endpoint import reply, scripted_endpoint  # noqa: F401  (fixture)

# the room has a flash sale on #101 and the price skill says to lead with it: what the reference policy says too
FLASH = "The HydraGlow serum is on flash sale at $19.9 right now, down from $34, until minute 55."
from tests.training_jobs.test_hsa_jobs import cleanup_artifacts  # noqa: F401  (fixture)
from tests.training_jobs.test_hsa_views import queued_tasks  # noqa: F401  (fixture)

NO_SCENARIOS = {"scenarios": [], "tiny_gold": 0}


def _turn(room, user, text, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # the test runs the turn, no worker
        turn_id = preview.preview_comment_post(user=user, room=room, text=text)
    return preview.preview_turn_run(room_id=room.pk, turn_id=turn_id)


@pytest.fixture
def recorded_rooms(manager, ml_staff, harness_with_history, scripted_model, scripted_endpoint,  # noqa: F811
                   django_capture_on_commit_callbacks):
    """An approved-version room with a right answer and a chatty one, and a draft-version room: cm_alice's, who
    invited ml_erin into both (a private room is a dataset source only for the people in it)."""
    approved = preview.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    price_script(scripted_endpoint, FLASH)
    assert _turn(approved, manager, "how much is #101?", django_capture_on_commit_callbacks).reply == FLASH
    scripted_endpoint.add(reply("Welcome in, lovely to see you here tonight!"))
    _turn(approved, manager, "hello everyone", django_capture_on_commit_callbacks)
    draft = preview.preview_open(user=manager, version=harness_with_history["v3"], endpoint=scripted_model)
    scripted_endpoint.add(reply("Welcome in, lovely to see you here tonight!"))
    _turn(draft, manager, "hi there", django_capture_on_commit_callbacks)
    for room in (approved, draft):
        preview.preview_member_add(user=manager, room=room, username=ml_staff.username)
    return approved, draft


@pytest.mark.django_db
def test_recorded_turns_become_samples_only_when_right(recorded_rooms):
    approved, draft = recorded_rooms
    samples, report = services.collect_samples(Sources(**NO_SCENARIOS,
                                                       preview_rooms=[str(approved.pk), str(draft.pk)]))
    assert report["considered"] == 3 and report["kept"] == 1
    assert report["rejected"] == {"no_reference": 1, "unapproved_version": 1}
    (sample,) = samples
    assert sample.source == f"preview:{approved.pk}" and sample.reply == FLASH
    assert [getattr(s, "name", None) for s in sample.target][1] == "lookup_product"
    assert sample.target[1].arguments == {"link_id": 101}
    assert sample.room["products"] and sample.comments[0]["text"] == "how much is #101?"


@pytest.mark.django_db
def test_a_dataset_from_recorded_turns_reports_them(ml_staff, recorded_rooms, cleanup_artifacts):  # noqa: F811
    approved, draft = recorded_rooms
    d = services.dataset_build_start(user=ml_staff, recipe={"name": "recorded", "variants_per_sample": 3,
                                                            "harness_pool_size": 3},
                                     sources={**NO_SCENARIOS, "preview_rooms": [str(approved.pk), str(draft.pk)]})
    d = services.dataset_build_run(dataset_id=d.pk)
    assert d.status == Dataset.Status.SUCCEEDED, d.error
    assert d.sample_count == 1 and 1 <= d.stats["rows"] <= 3
    assert d.stats["recorded_turns"]["kept"] == 1 and d.stats["recorded_turns"]["considered"] == 3


@pytest.mark.django_db
def test_room_ids_are_checked_with_their_path(ml_staff, recorded_rooms):
    approved, _ = recorded_rooms
    missing = str(uuid.uuid4())
    with pytest.raises(ValidationFailed) as exc:
        services.dataset_build_start(user=ml_staff, sources={**NO_SCENARIOS,
                                                             "preview_rooms": [str(approved.pk), missing]})
    assert [e["path"] for e in exc.value.errors] == ["sources.preview_rooms[1]"]
    with pytest.raises(ValidationFailed) as exc:
        services.dataset_build_start(user=ml_staff, sources={**NO_SCENARIOS, "preview_rooms": ["room 7"]})
    assert [e["path"] for e in exc.value.errors] == ["sources.preview_rooms"]
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_turns_of_the_real_tiny_model_replay_exactly(request, manager, reviewer, demo_manifest,
                                                     django_capture_on_commit_callbacks):
    """The local model's recorded turns replay to the same tool results (nothing 'replay_*'), and each is either
    kept with the product the comment named or left out with a judge's reason."""
    from harness_editor import services as editor
    from tests.streams.test_preview_local_model import local_model_endpoint, tiny_version

    endpoint = local_model_endpoint(request)
    version = tiny_version(manager, demo_manifest)
    editor.version_submit(user=manager, version=version)
    version = editor.version_approve(user=reviewer, version=version, comment="demo")
    room = preview.preview_open(user=manager, version=version, endpoint=endpoint)
    questions = {"how much is #101?": 101, "how many #202 are left?": 202, "price of #104?": 104}
    for text in questions:
        assert _turn(room, manager, text, django_capture_on_commit_callbacks).reply
    samples, report = services.collect_samples(Sources(**NO_SCENARIOS, preview_rooms=[str(room.pk)]))
    assert report["considered"] == 3 and report["kept"] == len(samples)
    assert not {r for r in report["rejected"] if r.startswith("replay") or r == "no_reference"}, report
    assert sum(report["rejected"].values()) + report["kept"] == 3
    for s in samples:
        assert s.tool_calls()[0].arguments.get("link_id") == questions[s.comments[0]["text"]]



@pytest.mark.django_db
def test_the_compose_form_offers_recorded_rooms(client, ml_staff, recorded_rooms, queued_tasks):
    from tests.training_jobs.test_hsa_views import _form

    approved, draft = recorded_rooms
    client.force_login(ml_staff)
    page = client.get("/datasets/new/").content.decode()
    assert f'value="{approved.pk}"' in page and "glow-gadget v1 · 2 turns" in page
    assert client.post("/datasets/new/", _form(preview_rooms=[str(approved.pk)], scenarios=[])).status_code == 302
    d = Dataset.objects.get(kind="hsa")
    assert d.sources["preview_rooms"] == [str(approved.pk)] and d.sources["scenarios"] == []


@pytest.mark.django_db
def test_a_private_room_is_a_source_only_for_the_people_in_it(client, ml_staff2, recorded_rooms, queued_tasks):
    """ml_judy was not invited into cm_alice's rooms: the composer does not offer them and a request naming one
    is refused as if it did not exist (issue 10, point 8)."""
    approved, draft = recorded_rooms
    client.force_login(ml_staff2)
    page = client.get("/datasets/new/").content.decode()
    assert str(approved.pk) not in page and str(draft.pk) not in page
    with pytest.raises(ValidationFailed) as exc:
        services.dataset_build_start(user=ml_staff2, sources={**NO_SCENARIOS, "preview_rooms": [str(approved.pk)]})
    assert exc.value.errors == [{"path": "sources.preview_rooms[0]",
                                 "message": f"no preview room or scenario run {approved.pk}"}]
    assert not Dataset.objects.exists() and queued_tasks == []
