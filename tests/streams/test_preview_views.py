"""Preview-room pages through the Django test client: who may see them, opening a room from the form, the
room page, the transcript, and the links from the nav and the version page."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse

from streams import services
from streams.models import ModelEndpoint, PreviewRoom
from tests.streams.preview_helpers import GOOD, price_script


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def test_pages_by_role(client, as_user, manager, reviewer, ml_staff, operator, outsider, harness_with_history,
                       scripted_model):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    pages = [reverse("streams:preview_list"), reverse("streams:preview_room", args=[room.pk]),
             reverse("streams:preview_transcript", args=[room.pk])]
    for page in pages:
        assert client.get(page).status_code == 302  # anonymous → login
    for user, status in ((manager, 200), (reviewer, 200), (ml_staff, 200), (operator, 403), (outsider, 403)):
        c = as_user(user)
        for page in pages:
            assert c.get(page).status_code == status, (user, page)
    assert as_user(manager).get(reverse("streams:preview_room", args=[uuid.uuid4()])).status_code == 404


def test_open_from_the_form(as_user, manager, harness_with_history, scripted_model, demo_scenarios):
    c = as_user(manager)
    page = c.get(reverse("streams:preview_list"))
    body = page.content.decode()
    assert "glow-gadget v3 (draft)" in body and "After-sales and tool faults" in body
    v3 = harness_with_history["v3"]
    r = c.post(reverse("streams:preview_list"), {"version": v3.pk, "scenario": demo_scenarios["after-sales-faults"].pk,
                                                 "endpoint": scripted_model.pk, "seed": "7"})
    room = PreviewRoom.objects.get()
    assert r.status_code == 302 and r["Location"] == reverse("streams:preview_room", args=[room.pk])
    assert (room.harness_version, room.endpoint, room.seed, room.created_by) == (v3, scripted_model, 7, manager)
    page = c.get(r["Location"]).content.decode()
    assert f'data-ws-path="/ws/preview/{room.pk}/"' in page and "streams/preview.js" in page
    assert 'id="step"' in page and "v3 (draft)" in page
    listing = c.get(reverse("streams:preview_list")).content.decode()
    assert reverse("streams:preview_room", args=[room.pk]) in listing
    bad = c.post(reverse("streams:preview_list"), {"version": "", "seed": "-1"})
    assert bad.status_code == 400 and PreviewRoom.objects.count() == 1


def test_list_seeds_the_default_endpoint(as_user, manager, settings):
    settings.HAT_LOCAL_MODEL_URL, settings.HAT_LOCAL_MODEL_NAME = "http://127.0.0.1:8123/v1", "demo-tiny"
    body = as_user(manager).get(reverse("streams:preview_list")).content.decode()
    ep = ModelEndpoint.objects.get()  # the picker is never empty
    assert (ep.name, ep.is_default, ep.base_url) == ("local", True, "http://127.0.0.1:8123/v1")
    assert "local (demo-tiny)" in body


def test_transcript_shows_stored_turns(as_user, manager, harness_with_history, scripted_model, scripted_endpoint,
                                       django_capture_on_commit_callbacks):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    price_script(scripted_endpoint)
    services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    page = as_user(manager).get(reverse("streams:preview_transcript", args=[room.pk])).content.decode()
    assert GOOD in page and "how much is #101?" in page
    assert "lookup_product({&quot;link_id&quot;: 101})" in page and "skill price_stock_qa" in page
    assert "TTFT" in page and "room_opened" in page


def test_nav_and_version_page_link(as_user, manager, operator, harness_with_history):
    v3 = harness_with_history["v3"]
    version_url = reverse("harness_editor:version", args=["glow-gadget", v3.number])
    page = as_user(manager).get(version_url).content.decode()
    assert f'{reverse("streams:preview_list")}?version={v3.pk}' in page
    assert f'href="{reverse("streams:preview_list")}">Preview</a>' in page
    page = as_user(operator).get(version_url).content.decode()
    assert "Preview this version" not in page and ">Preview</a>" not in page
    form = as_user(manager).get(f'{reverse("streams:preview_list")}?version={v3.pk}').content.decode()
    assert f'<option value="{v3.pk}" selected>' in form
