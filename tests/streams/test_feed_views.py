"""Watching turns, server side (issue 14): the transcript's filters (all, fallbacks only, hook failures only) with a
clear 400 for an unknown one; the scenario runs list's links (the transcript from the first column, fallbacks and
hook failures to the filtered transcript) inside a scroll box; endpoint names, never a model's absolute path, where
an endpoint is shown or picked; the harness version picker preselecting what ``production`` points at."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from streams import services
from streams.models import ModelEndpoint

MODEL_PATH = "/srv/hat/models/demo-checkpoint-0042"


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def path_endpoint(db, scripted_endpoint):
    """An endpoint whose model is a local directory, as the project's own served checkpoints are."""
    return ModelEndpoint.objects.create(name="cpu-demo", base_url=scripted_endpoint.base_url, model=MODEL_PATH,
                                        kind="vllm", timeout_s=5.0, connect_timeout_s=1.0)


def _turn(room, text: str, *, fallback: bool = False, hook_failed: bool = False, endpoint=None) -> str:
    turn_id = uuid.uuid4().hex
    ep = endpoint or room.endpoint
    events = [("viewer_comment", {"viewer": "ann", "text": text, "source": "user"}),
              ("turn_started", {"version": {"harness": "glow-gadget", "number": 1},
                                "endpoint": {"name": ep.name, "model": ep.model}, "comments": 1,
                                "history_messages": 0}),
              ("tool_call", {"call_id": "c1", "name": "lookup_product", "arguments_raw": '{"link_id": 101}' + " " * 300
                             + '"tail-of-long-arguments"', "valid": True, "source": "native"}),
              ("tool_result", {"call_id": "c1", "result": {"price": 24.9}, "duration_ms": 3})]
    if hook_failed:
        events += [("hook_result", {"hook_id": "no_banned_phrases", "passed": False, "kind": "banned_phrases",
                                    "point": "reply", "on_fail": "retry", "detail": "said 'guaranteed'"}),
                   ("retry", {"attempt": 2, "hook_id": "no_banned_phrases", "message": "do not promise"})]
    events += [("hook_result", {"hook_id": "reply_format", "passed": True, "kind": "reply_format", "point": "reply"}),
               ("reply", {"text": f"reply to {text}", "fallback": fallback, "reason": "model_error" if fallback else ""}),
               ("timings", {"ttft_ms": 10, "model_ms": 20, "tool_ms": 3, "total_ms": 40, "engine_ms": 5,
                            "model_calls": 1, "retries": int(hook_failed), "rounds": 1})]
    services.preview_event_append(room_id=room.pk, turn_id=turn_id, events=events)
    return turn_id


def _shown(body: str) -> list[str]:
    return re.findall(r'data-testid="transcript-reply">reply to ([a-z-]+)', body)


@pytest.fixture
def room_with_turns(manager, harness_with_history, scripted_model):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    _turn(room, "plain")
    _turn(room, "fell-back", fallback=True)
    _turn(room, "hook-failed", hook_failed=True)
    _turn(room, "both", fallback=True, hook_failed=True)
    return room


def test_transcript_filters(as_user, manager, room_with_turns):
    url = reverse("streams:preview_transcript", args=[room_with_turns.pk])
    c = as_user(manager)
    body = c.get(url).content.decode()
    assert _shown(body) == ["plain", "fell-back", "hook-failed", "both"]
    assert "All turns (4)" in body and "Fallbacks only (2)" in body and "Hook failures only (2)" in body
    assert 'aria-current="page" data-testid="show-all"' in body
    body = c.get(url, {"show": "fallbacks"}).content.decode()
    assert _shown(body) == ["fell-back", "both"]
    assert 'aria-current="page" data-testid="show-fallbacks"' in body
    body = c.get(url, {"show": "hook-failures"}).content.decode()
    assert _shown(body) == ["hook-failed", "both"]
    # tool arguments show on one line, cut; in full only under Details
    assert body.count("tail-of-long-arguments") == 2  # the two shown turns' Details, not their one-line calls
    assert "<summary>Details</summary>" in body


def test_transcript_filter_that_matches_nothing_and_a_bad_one(as_user, manager, harness_with_history, scripted_model):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    _turn(room, "plain")
    url = reverse("streams:preview_transcript", args=[room.pk])
    c = as_user(manager)
    body = c.get(url, {"show": "fallbacks"}).content.decode()
    assert _shown(body) == [] and "No turn fell back." in body
    bad = c.get(url, {"show": "everything"})
    assert bad.status_code == 400
    body = bad.content.decode()
    assert "unknown filter" in body and _shown(body) == ["plain"]  # said, and every turn still shown


def test_transcript_filters_keep_the_rooms_access(client, as_user, room_with_turns, reviewer, operator):
    url = reverse("streams:preview_transcript", args=[room_with_turns.pk])
    assert client.get(url, {"show": "fallbacks"}).status_code == 302  # anonymous: to the login page
    assert as_user(operator).get(url, {"show": "fallbacks"}).status_code == 403  # no preview role
    assert as_user(reviewer).get(url, {"show": "fallbacks"}).status_code == 404  # not invited: no such room


def test_transcript_pages_keep_the_filter(as_user, manager, harness_with_history, scripted_model, monkeypatch):
    from streams import views

    monkeypatch.setattr(views, "TURNS_PER_PAGE", 2)
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    for i in range(5):
        _turn(room, f"fb-{'abcde'[i]}", fallback=True)
    _turn(room, "plain")
    url = reverse("streams:preview_transcript", args=[room.pk])
    body = as_user(manager).get(url, {"show": "fallbacks", "page": 2}).content.decode()
    assert _shown(body) == ["fb-c", "fb-d"]
    assert '?show=fallbacks&amp;page=1"' in body and '?show=fallbacks&amp;page=3"' in body


def test_runs_list_links_and_scroll_box(as_user, manager, harness_with_history, scripted_model, demo_scenarios):
    run = services.scenario_run_start(user=manager, version=harness_with_history["v1"],
                                      scenario=demo_scenarios["compliance-traps"], endpoint=scripted_model, play=False)
    run.job.summary = {"turns": 5, "fallbacks": 2, "hook_failures": {"no_banned_phrases": 3},
                       "turn_ms_p50": 1200, "turn_ms_p95": 3400}
    run.job.save(update_fields=["summary"])
    body = as_user(manager).get(reverse("streams:run_list")).content.decode()
    transcript = reverse("streams:preview_transcript", args=[run.pk])
    table = body[body.index('<div class="table-wrap">'):]
    assert table.index('data-testid="runs"') < table.index("</div>")  # the table is inside its scroll box
    row = body[body.index('data-testid="run-row"'):]
    first_cell = row[:row.index("</td>")]
    assert f'href="{transcript}"' in first_cell  # the transcript from the first column too
    assert f'href="{transcript}?show=fallbacks" data-testid="run-fallbacks">2<' in row
    assert f'href="{transcript}?show=hook-failures"' in row and "no_banned_phrases 3" in row
    assert "1200 / 3400" in row


def test_endpoint_names_not_model_paths(as_user, manager, harness_with_history, path_endpoint, demo_scenarios):
    c = as_user(manager)
    for url in (reverse("streams:preview_list"), reverse("streams:run_list")):
        body = c.get(url).content.decode()
        assert '<option value="%s">cpu-demo</option>' % path_endpoint.pk in body, url
        assert MODEL_PATH not in body, url
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=path_endpoint)
    _turn(room, "plain")
    for url in (reverse("streams:preview_room", args=[room.pk]), reverse("streams:preview_transcript", args=[room.pk]),
                reverse("streams:preview_list")):
        body = c.get(url).content.decode()
        assert "cpu-demo" in body and MODEL_PATH not in body, url


def test_version_picker_preselects_production(as_user, manager, reviewer, harness_with_history, scripted_model):
    from harness_editor import services as harness_services

    h = harness_with_history  # production → v1
    c = as_user(manager)

    def selected(body: str) -> list[str]:
        form = body[body.index('data-testid="run-form"'):] if 'data-testid="run-form"' in body else body
        select = form[form.index('name="version"'):]
        select = select[:select.index("</select>")]
        return re.findall(r'<option value="(\d+)" selected>', select)

    for url in (reverse("streams:preview_list"), reverse("streams:run_list")):
        body = c.get(url).content.decode()
        assert selected(body) == [str(h["v1"].pk)], url
        assert "production is glow-gadget v1 (approved)" in body
    # a version page's link (?version=) still wins
    body = c.get(reverse("streams:preview_list"), {"version": h["v3"].pk}).content.decode()
    assert selected(body) == [str(h["v3"].pk)]
    # production moves: the picker follows
    v2 = harness_services.version_approve(user=reviewer, version=h["v2"], comment="ok")
    harness_services.label_move(user=reviewer, harness=h["harness"], name="production", version=v2)
    assert selected(c.get(reverse("streams:preview_list")).content.decode()) == [str(v2.pk)]
