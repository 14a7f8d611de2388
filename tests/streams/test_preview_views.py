"""Preview-room pages through the Django test client: who may see them, opening a room from the form, the
room page, the transcript, and the links from the nav and the version page."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse
from django.utils.html import escape

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
    for user, status in ((manager, 200), (operator, 403), (outsider, 403)):
        c = as_user(user)
        for page in pages:
            assert c.get(page).status_code == status, (user, page)
    for user in (reviewer, ml_staff):  # the preview role, but not in manager's room: as if it did not exist
        c = as_user(user)
        assert c.get(pages[0]).status_code == 200
        for page in pages[1:]:
            assert c.get(page).status_code == 404, (user, page)
        own = services.preview_open(user=user, version=harness_with_history["v1"], endpoint=scripted_model)
        for page in (reverse("streams:preview_room", args=[own.pk]), reverse("streams:preview_transcript",
                                                                             args=[own.pk])):
            assert c.get(page).status_code == 200, (user, page)
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
    assert ">local</option>" in body  # picked by its name (the model may be a directory's path)


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


# --- play mode and scenario runs ----------------------------------------------------------------------------


@pytest.fixture
def ticks(monkeypatch):
    """Clock ticks and turns queued on commit, recorded instead of sent."""
    from streams import tasks

    calls = []
    monkeypatch.setattr(tasks.preview_clock_tick, "apply_async", lambda args, countdown=0: calls.append(args))
    monkeypatch.setattr(tasks.preview_turn, "delay", lambda *args: None)
    return calls


def _finished_run(user, version, scenario, model, endpoint, django_capture_on_commit_callbacks):
    from tests.streams.test_scenario_runs import _script_quick_run

    _script_quick_run(endpoint)
    run = services.scenario_run_start(user=user, version=version, scenario=scenario, endpoint=model, play=False)
    return services.scenario_run_execute(room_id=run.pk)


def test_play_and_run_pages_by_role(client, as_user, manager, reviewer, ml_staff, operator, outsider,
                                    harness_with_history, scripted_model, demo_scenarios, ticks):
    scenario = demo_scenarios["after-sales-faults"]
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model,
                                 scenario=scenario)
    run = services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=scenario,
                                      endpoint=scripted_model, play=False)
    gets = [reverse("streams:run_list"), reverse("streams:preview_transcript", args=[run.pk])]
    posts = [reverse(f"streams:preview_{name}", args=[room.pk]) for name in ("play", "pause", "resume", "close")]
    for page in gets + posts + [reverse("streams:run_list")]:
        assert client.get(page).status_code == 302  # anonymous → login
    for user, ok in ((operator, False), (outsider, False), (manager, True), (reviewer, True), (ml_staff, True)):
        c = as_user(user)
        for page in gets:  # a run is shared evidence: every preview user reads it
            assert c.get(page).status_code == (200 if ok else 403), (user, page)
        if ok:  # the last post closed it: a new room of this user's for the next one
            room = services.preview_open(user=user, version=harness_with_history["v1"],
                                         endpoint=scripted_model, scenario=scenario)
        for page in [reverse(f"streams:preview_{name}", args=[room.pk]) for name in ("play", "pause", "resume", "close")]:
            assert c.post(page, {"speed": "10"}).status_code == (302 if ok else 403), (user, page)
        assert c.post(reverse("streams:run_list"), {}).status_code == (400 if ok else 403)
    unknown = uuid.uuid4()
    c = as_user(manager)
    assert c.get(reverse("streams:preview_transcript", args=[unknown])).status_code == 404
    for name in ("play", "pause", "resume", "close"):
        assert c.post(reverse(f"streams:preview_{name}", args=[unknown]), {"speed": "10"}).status_code == 404
        assert c.get(reverse(f"streams:preview_{name}", args=[room.pk])).status_code == 405  # POST only


def test_play_form_works_without_script(as_user, manager, harness_with_history, scripted_model, demo_scenarios,
                                        ticks, django_capture_on_commit_callbacks):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model,
                                 scenario=demo_scenarios["after-sales-faults"])
    c = as_user(manager)
    page = c.get(reverse("streams:preview_room", args=[room.pk])).content.decode()
    assert f'action="{reverse("streams:preview_play", args=[room.pk])}"' in page
    assert '<option value="60">×60 (a minute a second)</option>' in page and "as fast as turns finish" in page
    with django_capture_on_commit_callbacks(execute=True):
        r = c.post(reverse("streams:preview_play", args=[room.pk]), {"speed": "60"})
    assert r.status_code == 302 and r["Location"] == reverse("streams:preview_room", args=[room.pk])
    room.refresh_from_db()
    assert room.playing and room.play_speed == 60 and ticks == [(str(room.pk), room.tick_token)]
    page = c.get(r["Location"]).content.decode()
    assert "playing ×60" in page and '<option value="60" selected>' in page and "Set speed" in page
    assert c.post(reverse("streams:preview_pause", args=[room.pk])).status_code == 302
    room.refresh_from_db()
    assert room.paused and room.tick_token == ""
    with django_capture_on_commit_callbacks(execute=True):
        assert c.post(reverse("streams:preview_resume", args=[room.pk])).status_code == 302
    room.refresh_from_db()
    assert not room.paused and ticks[-1] == (str(room.pk), room.tick_token)
    bad = c.post(reverse("streams:preview_play", args=[room.pk]), {"speed": "7"})
    assert bad.status_code == 400 and "pick a speed" in bad.content.decode()
    assert c.post(reverse("streams:preview_close", args=[room.pk])).status_code == 302
    closed = c.post(reverse("streams:preview_play", args=[room.pk]), {"speed": "10"})
    assert closed.status_code == 409 and "closed" in closed.content.decode()  # the service's InvalidTransition
    plain = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    assert 'data-testid="play-form"' not in c.get(reverse("streams:preview_room", args=[plain.pk])).content.decode()


def test_start_a_run_from_the_runs_page(as_user, manager, harness_with_history, scripted_model, demo_scenarios,
                                        ticks, django_capture_on_commit_callbacks):
    c = as_user(manager)
    page = c.get(reverse("streams:run_list")).content.decode()
    assert "Run to the end" in page and "No runs yet." in page
    assert reverse("streams:run_list") in c.get(reverse("streams:preview_list")).content.decode()
    scenario, v2 = demo_scenarios["compliance-traps"], harness_with_history["v2"]
    with django_capture_on_commit_callbacks(execute=True):
        r = c.post(reverse("streams:run_list"), {"version": v2.pk, "scenario": scenario.pk,
                                                 "endpoint": scripted_model.pk, "seed": "3"})
    run = PreviewRoom.objects.get(kind="run")
    assert r.status_code == 302 and r["Location"] == reverse("streams:preview_transcript", args=[run.pk])
    assert (run.harness_version, run.scenario, run.seed, run.job.status) == (v2, scenario, 3, "queued")
    assert ticks == [(str(run.pk), run.tick_token)]
    page = c.get(r["Location"]).content.decode()
    assert 'http-equiv="refresh"' in page and 'data-testid="run-status">queued' in page
    missing = c.post(reverse("streams:run_list"), {"version": v2.pk, "endpoint": scripted_model.pk})
    assert missing.status_code == 400 and PreviewRoom.objects.filter(kind="run").count() == 1


def test_runs_list_filters_and_finished_transcript(as_user, manager, harness_with_history, scripted_model,
                                                   scripted_endpoint, demo_scenarios,
                                                   django_capture_on_commit_callbacks):
    from tests.streams.test_scenario_runs import STOCK_REPLY, quick_yaml

    quick = services.scenario_import(yaml_text=quick_yaml(), user=manager)
    h = harness_with_history
    done = _finished_run(manager, h["v1"], quick, scripted_model, scripted_endpoint,
                         django_capture_on_commit_callbacks)
    other = services.scenario_run_start(user=manager, version=h["v2"], scenario=demo_scenarios["compliance-traps"],
                                        endpoint=scripted_model, play=False)
    c = as_user(manager)
    url = reverse("streams:run_list")

    def listed(query):
        body = c.get(url, query).content.decode()
        return {str(r.pk) for r in (done, other) if reverse("streams:preview_transcript", args=[r.pk]) in body}

    assert listed({}) == {str(done.pk), str(other.pk)}
    assert listed({"scenario": quick.pk}) == {str(done.pk)}
    assert listed({"version": h["v2"].pk}) == {str(other.pk)}
    assert listed({"scenario": quick.pk, "version": h["v2"].pk}) == set()

    page = c.get(reverse("streams:preview_transcript", args=[done.pk])).content.decode()
    assert 'data-testid="run-status">succeeded' in page and 'http-equiv="refresh"' not in page
    assert 'data-testid="summary-turns">3<' in page and "permission_denied 1" in page
    assert GOOD in page and escape(STOCK_REPLY) in page and "fallback: model_error" in page
    assert page.count('data-testid="turn-details"') == 3 and "<summary>Details</summary>" in page
    assert "[fault permission_denied]" in page and "faults in force: <code>catalog.stock</code>" in page
    assert "scenario_finished" in page


def test_cancel_a_running_run_from_its_page(as_user, manager, reviewer, harness_with_history, scripted_model,
                                            demo_scenarios, ticks, django_capture_on_commit_callbacks):
    """The run's page shows its status and, to its owner while it is active, a Cancel button: the one cancel of every
    job (running → cancelling; the clock's next tick ends it cancelled and closes the room)."""
    from django.utils import timezone

    with django_capture_on_commit_callbacks(execute=True):
        run = services.scenario_run_start(user=manager, version=harness_with_history["v1"],
                                          scenario=demo_scenarios["after-sales-faults"], endpoint=scripted_model)
    run.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        assert services.preview_clock_tick(room_id=run.pk, token=run.tick_token)["ran"]  # claimed: running
    run.refresh_from_db()
    assert run.job.status == "running"
    page_url = reverse("streams:preview_transcript", args=[run.pk])
    cancel_url = reverse("streams:run_cancel", args=[run.pk])
    assert 'data-testid="run-cancel"' not in as_user(reviewer).get(page_url).content.decode()  # a reader
    refused = as_user(reviewer).post(cancel_url)
    assert refused.status_code == 403 and "only cm_alice" in refused.content.decode()
    c = as_user(manager)
    assert 'data-testid="run-cancel"' in c.get(page_url).content.decode()
    ticks.clear()
    with django_capture_on_commit_callbacks(execute=True):
        r = c.post(cancel_url)
    assert r.status_code == 302 and r["Location"] == page_url
    run.refresh_from_db()
    assert (run.job.status, run.status, run.job.cancel_requested) == ("cancelling", "open", True)
    assert ticks == [(str(run.pk), run.tick_token)]  # the next tick, sent now
    assert "Cancelling…" in c.get(page_url).content.decode()
    out = services.preview_clock_tick(room_id=run.pk, token=run.tick_token, now=timezone.now())
    assert out == {"ran": False, "reason": "cancelled"}
    run.refresh_from_db()
    assert (run.job.status, run.status, run.playing, run.tick_token) == ("cancelled", "closed", False, "")
    page = c.get(page_url).content.decode()
    assert 'data-testid="run-status">cancelled' in page and 'data-testid="run-cancel"' not in page
    again = c.post(cancel_url)
    assert again.status_code == 409 and "only a queued or running run can be cancelled" in again.content.decode()
