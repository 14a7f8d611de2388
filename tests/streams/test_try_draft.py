"""Try this draft (/harnesses/<slug>/v<n>/try/): one comment sent to a version and to what ``production`` points at,
side by side, on one room state and one model, through the preview rooms' own turn path; and the notice that says,
before anyone sends, that the model was not trained on the harness (streams.model_fit)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.urls import reverse

from streams import services
from streams.model_fit import model_fit
from streams.models import ModelEndpoint, PreviewEvent, PreviewRoom
from streams.serve_profiles import DEMO_MODEL_DIR
from streams.services.try_draft import try_draft_endpoint
from tests.streams.preview_helpers import event_types

pytestmark = pytest.mark.django_db
QUESTION = "how much is #101?"


def try_url(slug: str, number: int) -> str:
    return reverse("try_draft", args=[slug, number])


def rooms_of(response) -> dict[str, PreviewRoom]:
    assert response.status_code == 302, response.content[:2000]
    query = parse_qs(urlsplit(response["Location"]).query)
    return {side: PreviewRoom.objects.get(pk=ids[0]) for side, ids in query.items()}


@pytest.fixture
def send(client, django_capture_on_commit_callbacks):
    """POST the Try form with what runs on commit run (the turns' enqueueing: recorded by ``enqueued``)."""
    def post(slug: str, number: int, text: str = QUESTION):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(try_url(slug, number), {"text": text})

    return post


def comment_of(room) -> dict:
    return PreviewEvent.objects.get(room=room, type="viewer_comment").payload


@pytest.fixture
def order_desk(manager, reviewer, demo_manifest):
    """A harness the demo model never saw (a customer-service agent): v1 approved and in production, v2 a draft."""
    from harness_editor import services as editor

    v1 = editor.harness_create(user=manager, slug="order-desk", name="Order desk", manifest=demo_manifest("order_desk"))
    editor.version_submit(user=manager, version=v1)
    v1 = editor.version_approve(user=reviewer, version=v1)
    editor.label_move(user=reviewer, harness=v1.harness, name="production", version=v1)
    manifest = demo_manifest("order_desk").model_copy(update={"description": "a reworded draft"})
    v2 = editor.version_create_draft(user=manager, harness=v1.harness, manifest=manifest, parent=v1)
    return {"v1": v1, "v2": v2}


def glow_expected_level(number: int) -> str | None:
    """What the notice says on glow-gadget v<number> (harness_editor/demo/skincare_v<number>.yaml) for the committed
    demo model: nothing when its lineage trained on that version, "info" when on another version, else "warning"."""
    from training_jobs.model_artefacts import demo_checkpoint_manifests

    trained = demo_checkpoint_manifests()
    if f"skincare_v{number}" in trained:
        return None
    return "info" if any(name.startswith("skincare_v") for name in trained) else "warning"


@pytest.fixture
def tiny_room(manager, demo_manifest):
    """The lean harness the committed demo model was trained on (a draft: no production label)."""
    from harness_editor import services as editor

    return editor.harness_create(user=manager, slug="tiny-room", name="Tiny demo room",
                                 manifest=demo_manifest("tiny_room"))


# --- who -------------------------------------------------------------------------------------------------------


def test_roles(client, manager, reviewer, operator, outsider, harness_with_history, enqueued):
    url = try_url("glow-gadget", 3)
    assert client.get(url).status_code == 302  # anonymous → login
    for user in (outsider, operator):  # no role; a role without the preview room
        client.force_login(user)
        assert client.get(url).status_code == 403
        assert client.post(url, {"text": QUESTION}).status_code == 403
    assert not PreviewRoom.objects.exists() and not enqueued
    for user in (manager, reviewer):
        client.force_login(user)
        assert client.get(url).status_code == 200


def test_unknown_harness_or_version_is_404(client, manager, harness_with_history, send):
    client.force_login(manager)
    assert client.get(try_url("no-such-harness", 1)).status_code == 404
    assert client.get(try_url("glow-gadget", 99)).status_code == 404
    assert send("glow-gadget", 99).status_code == 404


def test_links_from_the_version_page_and_the_editor(client, manager, harness_with_history):
    client.force_login(manager)
    for page in (reverse("harness_editor:version", args=["glow-gadget", 3]),
                 reverse("harness_editor:edit", args=["glow-gadget", 3])):
        body = client.get(page).content.decode()
        assert f'href="{try_url("glow-gadget", 3)}"' in body and "Try this draft" in body, page


# --- the page before sending ---------------------------------------------------------------------------------------


def test_page_says_what_runs_and_that_the_model_never_saw_the_harness(client, manager, order_desk):
    client.force_login(manager)
    body = client.get(try_url("order-desk", 2)).content.decode()
    assert "beside production (v1)" in body and "Send to both" in body
    endpoint = try_draft_endpoint()
    assert endpoint.model == settings.HAT_LOCAL_MODEL_NAME  # the default preview endpoint: the demo model
    assert 'data-testid="model-fit"' in body and 'data-level="warning"' in body
    assert "was not trained on order-desk" in body and "tiny_room" in body
    assert "Expect its turns to fall back" in body  # nothing recorded yet: what to expect, before sending
    assert 'data-testid="try-columns"' not in body  # nothing sent yet


@pytest.mark.parametrize("number", [1, 2, 3])
def test_the_glow_gadget_notice_follows_what_the_demo_model_was_trained_on(client, manager, harness_with_history,
                                                                          number):
    """The notice follows the manifests the committed checkpoint's lineage trained on (its metrics.json,
    ``trained_manifests``; the tiny room only before the glow-gadget stage): no notice on a version it trained on,
    "info" on another version of a harness it knows (v3 renames the tools), "warning" on a harness it never saw."""
    expected = glow_expected_level(number)
    fit = model_fit(endpoint=try_draft_endpoint(), version=harness_with_history[f"v{number}"])
    client.force_login(manager)
    body = client.get(try_url("glow-gadget", number)).content.decode()
    if expected is None:
        assert fit is None and 'data-testid="model-fit"' not in body
    else:
        assert fit.level == expected and f'data-level="{expected}"' in body
        assert (f"not on v{number}" if expected == "info" else "was not trained on glow-gadget") in fit.headline


def test_no_notice_on_the_harness_the_model_was_trained_on(client, manager, tiny_room, enqueued, send):
    client.force_login(manager)
    body = client.get(try_url("tiny-room", 1)).content.decode()
    assert 'data-testid="model-fit"' not in body
    assert 'data-testid="no-production"' in body and "only v1 runs" in body
    rooms = rooms_of(send("tiny-room", 1))
    assert list(rooms) == ["draft"] and rooms["draft"].harness_version == tiny_room
    assert len(enqueued) == 1


def test_another_version_of_the_trained_harness_is_an_info_notice(manager, tiny_room, demo_manifest):
    from harness_editor import services as editor

    manifest = demo_manifest("tiny_room").model_copy(update={"description": "reworded"})
    v2 = editor.version_create_draft(user=manager, harness=tiny_room.harness, manifest=manifest, parent=tiny_room)
    fit = model_fit(endpoint=try_draft_endpoint(), version=v2)
    assert fit.level == "info" and "trained on v1 of tiny-room, not on v2" in fit.headline


# --- sending -----------------------------------------------------------------------------------------------------


def test_send_opens_two_rooms_on_one_room_state_and_queues_interactive_turns(client, manager, harness_with_history,
                                                                             enqueued, send):
    client.force_login(manager)
    response = send("glow-gadget", 3)
    rooms = rooms_of(response)
    draft, production = rooms["draft"], rooms["production"]
    assert draft.harness_version == harness_with_history["v3"]
    assert production.harness_version == harness_with_history["v1"]
    assert draft.endpoint_id == production.endpoint_id == try_draft_endpoint().pk
    assert draft.room_state == production.room_state and draft.room_state.get("products")
    assert draft.created_by == production.created_by == manager and draft.scenario is None
    for room in (draft, production):
        assert comment_of(room)["text"] == QUESTION and comment_of(room)["sent_by"] == manager.username
        queued = PreviewEvent.objects.get(room=room, type="turn_queued")
        assert queued.payload["queue"] == settings.INTERACTIVE_QUEUE  # never behind batch jobs
        assert queued.turn_id == PreviewEvent.objects.get(room=room, type="viewer_comment").turn_id
    assert sorted(str(a[0]) for a in enqueued) == sorted([str(draft.pk), str(production.pk)])

    body = client.get(response["Location"]).content.decode()
    for room in (draft, production):
        assert f'data-ws-path="/ws/preview/{room.pk}/"' in body
    assert 'data-testid="try-draft"' in body and 'data-testid="try-production"' in body


def test_the_production_version_itself_runs_once(client, manager, harness_with_history, enqueued, send):
    client.force_login(manager)
    assert 'data-testid="is-production"' in client.get(try_url("glow-gadget", 1)).content.decode()
    rooms = rooms_of(send("glow-gadget", 1))
    assert list(rooms) == ["draft"] and len(enqueued) == 1


@pytest.mark.parametrize("text", ["", "   ", "x" * 501])
def test_a_refused_comment_opens_nothing(client, manager, harness_with_history, enqueued, text, send):
    client.force_login(manager)
    response = send("glow-gadget", 3, text)
    assert response.status_code == 400
    assert 'data-testid="try-error"' in response.content.decode()
    assert not PreviewRoom.objects.exists() and not PreviewEvent.objects.exists() and not enqueued


def test_a_draft_that_does_not_validate_says_why_and_runs_nothing(client, manager, harness_with_history, enqueued,
                                                                 send):
    from harness_editor.models import HarnessVersion

    v3 = harness_with_history["v3"]
    data = json.loads(v3.manifest_json)
    tool = data["tools"][0]
    name = next(iter(tool["parameters"]["properties"]))
    tool["parameters"]["properties"][name]["typ"] = "string"  # a typo today's rules refuse (stored under older ones)
    HarnessVersion.objects.filter(pk=v3.pk).update(manifest_json=json.dumps(data))
    client.force_login(manager)
    body = client.get(try_url("glow-gadget", 3)).content.decode()
    assert 'data-testid="try-problems"' in body and "typ" in body
    response = send("glow-gadget", 3)
    assert response.status_code == 400 and "does not validate" in response.content.decode()
    assert not PreviewRoom.objects.exists() and not enqueued


def test_rooms_in_the_address_must_be_the_users_own(client, manager, manager2, harness_with_history, tiny_room,
                                                    enqueued, send):
    client.force_login(manager)
    location = send("glow-gadget", 3)["Location"]
    client.force_login(manager2)
    assert client.get(location).status_code == 404  # another's room: as if it did not exist
    client.force_login(manager)
    room = PreviewRoom.objects.filter(harness_version=harness_with_history["v3"]).get()
    assert client.get(f"{try_url('tiny-room', 1)}?draft={room.pk}").status_code == 404  # another harness's room
    assert client.get(f"{try_url('glow-gadget', 3)}?draft=not-a-uuid").status_code == 404


# --- the notice on the preview room page; what the registry says ---------------------------------------------------


def test_preview_room_page_says_it_too(client, manager, order_desk, tiny_room):
    client.force_login(manager)
    desk = services.preview_open(user=manager, version=order_desk["v1"])
    body = client.get(reverse("streams:preview_room", args=[desk.pk])).content.decode()
    assert 'data-testid="model-fit"' in body and "was not trained on order-desk" in body
    assert "(here: " in body and "tiny-room v1)" in body  # the manifest it saw, as a harness of this console
    tiny = services.preview_open(user=manager, version=tiny_room)
    assert 'data-testid="model-fit"' not in client.get(reverse("streams:preview_room", args=[tiny.pk])).content.decode()


def test_a_registered_model_carries_what_its_lineage_and_datasets_saw(manager, harness_with_history, tiny_room):
    from training_jobs.models import Dataset, TrainedModel
    from training_jobs.services.training import demo_base_model

    base = demo_base_model()
    dataset = Dataset.objects.create(name="glow v1", created_by=manager,
                                     sources={"scenarios": [], "versions": ["glow-gadget@1"]})
    sft = TrainedModel.objects.create(name="glow-sft", kind=TrainedModel.Kind.SFT, path="/tmp/hat/no-such-model",
                                      parent=base, dataset=dataset)
    endpoint = ModelEndpoint.objects.create(name="sft", base_url="http://127.0.0.1:9/v1", model=f"hat-{sft.pk}")
    assert model_fit(endpoint=endpoint, version=harness_with_history["v1"]) is None  # trained on it
    assert model_fit(endpoint=endpoint, version=tiny_room) is None  # its base was
    fit = model_fit(endpoint=endpoint, version=harness_with_history["v3"])
    assert fit.level == "info" and fit.model == "glow-sft" and "v1 of glow-gadget" in fit.headline
    unknown = ModelEndpoint.objects.create(name="other", base_url="http://127.0.0.1:9/v1", model="someone-elses")
    assert model_fit(endpoint=unknown, version=harness_with_history["v3"]) is None  # unknown model: nothing to say


# --- real turns through the local model ------------------------------------------------------------------------


def test_real_turns_side_by_side_on_the_local_model(request, client, manager, harness_with_history, enqueued, send):
    """Both sides answered by the tiny local model through the service the interactive runner runs; afterwards the
    notice says what those turns did."""
    from tests.streams.test_preview_local_model import local_model_endpoint

    endpoint = local_model_endpoint(request)
    ModelEndpoint.objects.exclude(pk=endpoint.pk).update(is_default=False)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)
    assert Path(endpoint.model).resolve() == DEMO_MODEL_DIR.resolve()
    client.force_login(manager)
    rooms = rooms_of(send("glow-gadget", 3))
    assert len(enqueued) == 2
    outcomes = {}
    for side, room in rooms.items():
        turn_id = PreviewEvent.objects.get(room=room, type="viewer_comment").turn_id
        result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
        assert result is not None and result.reply
        types = event_types(room.pk, turn_id)
        assert types[:3] == ["viewer_comment", "turn_queued", "turn_started"], types
        assert types[-2:] == ["reply", "timings"] and "model_request" in types, types
        timings = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="timings").payload
        started = PreviewEvent.objects.get(room=room, type="turn_started").payload
        outcomes[side] = (started["version"]["number"], started["room"], result.fallback, timings["total_ms"])
    assert outcomes["draft"][0] == 3 and outcomes["production"][0] == 1
    assert outcomes["draft"][1] == outcomes["production"][1]  # the same room state, as the turns started
    fit = model_fit(endpoint=ModelEndpoint.objects.get(pk=endpoint.pk), version=harness_with_history["v3"])
    assert fit.level == glow_expected_level(3) and fit.evidence["turns"] == 2
    assert fit.evidence["fallbacks"] == sum(1 for o in outcomes.values() if o[2])
    assert "recorded turns of glow-gadget on this model" in fit.expectation
    body = client.get(try_url("glow-gadget", 3)).content.decode()
    assert "recorded turns of glow-gadget on this model" in body
