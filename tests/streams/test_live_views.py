"""Live session pages through the Django test client, per role: the list and the start form (secrets shown once),
the operator's page (controls for operators, none for watchers, 403 for outsiders, 404 for an unknown session,
read-only once ended), every control posted from the page calling the control services (plain form and htmx),
the panels htmx redraws, the recorded transcript, and the overlay page's token check."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse
from django.utils.html import escape

from streams.models import LiveComment, LiveEvent, LiveSession, LiveToken
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)
from tests.streams.live_page_helpers import GOOD, comment_add, live_session_for, overlay_secret, play_turn

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def operator2(db, django_user_model):
    """A second operator: may steer and end frank's session too."""
    from django.contrib.auth.models import Group

    from console import roles

    user = django_user_model.objects.create_user(username="op_oscar", password="x-pass-123")
    user.groups.add(Group.objects.get(name=roles.OPERATOR))
    return user


@pytest.fixture
def session(deployed, operator):
    return live_session_for(deployed["deployment"], operator)


def _types(session) -> list[str]:
    return list(LiveEvent.objects.filter(session=session).order_by("seq").values_list("type", flat=True))


def test_list_by_role(client, as_user, session, operator, reviewer, ml_staff, outsider):
    comment_add(session, viewer="ann", text="price of #101?", priority=2)
    play_turn(session)
    url = reverse("live:list")
    assert client.get(url).status_code == 302  # anonymous → login
    page = as_user(operator).get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="start-form"' in html and session.title in html
    row = html[html.index(f'data-session="{session.pk}"'):]
    assert 'data-testid="turn-count">1<' in row and 'data-testid="comment-count">1<' in row
    for watcher in (reviewer, ml_staff):  # everyone watches; only operators start sessions
        html = as_user(watcher).get(url).content.decode()
        assert session.title in html and 'data-testid="start-form"' not in html and "watch-only" in html
        assert as_user(watcher).post(url, {"title": "x"}).status_code == 403
    assert as_user(outsider).get(url).status_code == 403
    assert as_user(outsider).post(url, {"title": "x"}).status_code == 403


def test_start_shows_the_secrets_once(as_user, deployed, operator, monkeypatch, django_capture_on_commit_callbacks):
    from streams.services import live_sessions

    handed = []
    monkeypatch.setattr(live_sessions, "_runner_ensure", handed.append)  # no runner in this test: record the hand-off
    from streams import services as stream_services

    room = stream_services.catalog_seed_demo()
    c = as_user(operator)
    with django_capture_on_commit_callbacks(execute=True):
        response = c.post(reverse("live:list"), {"room": room.pk, "deployment": deployed["deployment"].pk,
                                                 "title": "Friday flash sale", "feed": "webhook", "speed": "1"})
    assert response.status_code == 201, response.content.decode()[:2000]
    session = LiveSession.objects.get(title="Friday flash sale")
    assert handed == [session.pk] and session.feed == "webhook" and session.status == "live"
    html = response.content.decode()
    ingest = html.split('data-testid="ingest-token">')[1].split("<")[0]
    overlay_url = html.split('data-testid="overlay-url">')[1].split("<")[0]
    secret = html.split('data-testid="webhook-secret">')[1].split("<")[0]
    assert secret == session.webhook_secret
    by_scope = {t.scope: t for t in LiveToken.objects.filter(session=session)}
    assert by_scope["ingest"].digest == LiveToken.digest_of(ingest)
    overlay = escape(overlay_url).split("token=")[1]
    assert by_scope["overlay"].digest == LiveToken.digest_of(overlay)
    assert f"/live/{session.pk}/overlay/?token=" in overlay_url
    # shown once: the session's page and the list do not carry them
    for page in (reverse("live:session", args=[session.pk]), reverse("live:list")):
        html = c.get(page).content.decode()
        assert ingest not in html and overlay not in html and secret not in html
    assert c.get(overlay_url.split("testserver")[1]).status_code == 200  # the overlay link works


def test_start_a_replay_of_a_scenario(as_user, deployed, operator, demo_scenarios, monkeypatch):
    from streams import services as stream_services
    from streams.services import live_sessions

    monkeypatch.setattr(live_sessions, "_runner_ensure", lambda session_id: None)
    room = stream_services.catalog_seed_demo()
    scenario = next(iter(demo_scenarios.values()))
    r = as_user(operator).post(reverse("live:list"), {
        "room": room.pk, "deployment": deployed["deployment"].pk, "title": "Replayed", "feed": "replay",
        "scenario": scenario.pk, "speed": "60"})
    assert r.status_code == 201
    session = LiveSession.objects.get(title="Replayed")
    assert session.feed == "replay" and session.feed_config == {"scenario": scenario.slug, "speed": 60.0}
    assert 'data-testid="webhook-secret"' not in r.content.decode()


def test_start_refuses_bad_input_with_the_field_and_stores_nothing(as_user, deployed, operator, deploy_world):
    from streams import services as stream_services
    from streams.models import Deployment

    room = stream_services.catalog_seed_demo()
    unapproved = Deployment.objects.create(name="not-yet", harness=deploy_world["harness"],
                                           created_by=operator)
    c = as_user(operator)
    base = {"room": room.pk, "deployment": deployed["deployment"].pk, "title": "Show", "feed": "replay",
            "speed": "1"}
    r = c.post(reverse("live:list"), base)  # a replay of nothing
    assert r.status_code == 400 and "pick one" in r.content.decode()
    r = c.post(reverse("live:list"), {**base, "feed": "api", "deployment": unapproved.pk})
    assert r.status_code == 400 and "deployment" in r.content.decode()
    r = c.post(reverse("live:list"), {**base, "feed": "api", "title": ""})
    assert r.status_code == 400
    r = c.post(reverse("live:list"), {**base, "feed": "api", "speed": "1000"})
    assert r.status_code == 400
    assert not LiveSession.objects.exists() and not LiveToken.objects.exists()


def test_session_page_by_role(client, as_user, session, operator, reviewer, outsider):
    comment_add(session, viewer="ann", text="is #101 in stock?", priority=3)
    comment_add(session, viewer="bob", text="hello!", priority=0)
    url = reverse("live:session", args=[session.pk])
    assert client.get(url).status_code == 302
    html = as_user(operator).get(url).content.decode()
    assert 'data-testid="controls"' in html and f'data-ws-path="/ws/live/{session.pk}/"' in html
    assert "streams/live.js" in html and "streams/turns.js" in html
    assert 'data-testid="mute-toggle"' in html and 'data-testid="skip"' in html
    assert 'data-testid="deployment-version">tiny-room v1<' in html
    # the queue: highest priority first, with its status
    queue = html[html.index('id="queue"'):]
    assert queue.index("is #101 in stock?") < queue.index("hello!")
    assert 'data-testid="priority">3<' in queue
    html = as_user(reviewer).get(url).content.decode()
    assert 'data-testid="read-only"' in html and 'data-testid="controls"' not in html
    assert 'data-testid="skip"' not in html and 'data-testid="mute-toggle"' not in html
    assert "is #101 in stock?" in html and f'data-ws-path="/ws/live/{session.pk}/"' in html
    transcript = reverse("live:transcript", args=[session.pk])
    assert as_user(reviewer).get(transcript).status_code == 200
    for page in (url, transcript, url + "?panel=queue"):
        assert as_user(outsider).get(page).status_code == 403
    for name in ("live:session", "live:transcript"):
        assert as_user(operator).get(reverse(name, args=[uuid.uuid4()])).status_code == 404
        assert as_user(outsider).get(reverse(name, args=[uuid.uuid4()])).status_code == 403
    assert as_user(operator).post(reverse("live:mute", args=[uuid.uuid4()]), {"on": "1"}).status_code == 404


def test_ended_session_is_the_read_only_recording(as_user, session, operator, reviewer):
    from streams.services.live_events import live_event_append
    from streams.services.live_sessions import live_session_end

    first = play_turn(session)
    live_event_append(session_id=session.pk, type="version_changed", payload={
        "from": {"slug": "tiny-room", "number": 1}, "to": {"slug": "tiny-room", "number": 2}, "label": "production"})
    live_event_append(session_id=session.pk, type="fault", payload={"kind": "endpoint_down", "endpoint": "ep-a",
                                                                     "message": "connection refused"})
    live_event_append(session_id=session.pk, type="failover", payload={"from": "ep-a", "to": "ep-b"})
    second = play_turn(session, version={"slug": "tiny-room", "number": 2, "id": 0}, text="Welcome back everyone!")
    live_event_append(session_id=session.pk, turn_id="human-1", events=[
        ("reply_spoken", {"text": "Hi from Frank.", "by": "human", "operator": operator.username})])
    live_session_end(user=operator, session=session)
    url = reverse("live:session", args=[session.pk])
    for user in (operator, reviewer):
        html = as_user(user).get(url).content.decode()
        assert 'data-testid="controls"' not in html and "data-ws-path" not in html and "live.js" not in html
        assert "recording is read-only" in html
        assert html.count('data-testid="transcript-turn"') == 3
        assert GOOD in html and "Welcome back everyone!" in html and "Hi from Frank." in html
        assert 'data-testid="human-turn"' in html
        assert html.index(first[:8]) < html.index('data-testid="marker-version_changed"') < html.index(second[:8])
        assert 'data-testid="marker-fault"' in html and "endpoint_down" in html and "ep-a → ep-b" in html
    # every control is refused on an ended session (409), nothing stored
    before = _types(session)
    c = as_user(operator)
    for name, data in (("mute", {"on": "1"}), ("takeover", {"text": "hello"}), ("end", {"confirm": "on"}),
                       ("pin", {"link_id": ""}), ("overlay_token_create", {})):
        r = c.post(reverse(f"live:{name}", args=[session.pk]), data, **HTMX)
        assert r.status_code == 409, name
        assert "has ended" in r.content.decode()
    assert _types(session) == before
    # the transcript page, for everyone who watches
    r = as_user(reviewer).get(reverse("live:transcript", args=[session.pk]))
    assert r.status_code == 200 and r.content.decode().count('data-testid="transcript-turn"') == 3


def test_mute_approval_and_pin_call_the_services(as_user, session, operator):
    c = as_user(operator)
    r = c.post(reverse("live:mute", args=[session.pk]), {"on": "1"})
    assert r.status_code == 302
    session.refresh_from_db()
    assert session.muted
    r = c.post(reverse("live:mute", args=[session.pk]), {"on": "0"}, **HTMX)
    assert r.status_code == 200 and "unmuted" in r.content.decode()
    r = c.post(reverse("live:approval", args=[session.pk]), {"on": "1"}, **HTMX)
    assert r.status_code == 200
    link = session.room_state["products"][0]["link_id"]
    r = c.post(reverse("live:pin", args=[session.pk]), {"link_id": link}, **HTMX)
    assert r.status_code == 200 and f"#{link} pinned" in r.content.decode()
    r = c.post(reverse("live:pin", args=[session.pk]), {"link_id": 987654}, **HTMX)
    assert r.status_code == 400 and "link_id" in r.content.decode()
    r = c.post(reverse("live:mute", args=[session.pk]), {"on": "maybe"}, **HTMX)
    assert r.status_code == 400 and "<code>on</code>" in r.content.decode()
    session.refresh_from_db()
    assert not session.muted and session.approve_before_speak and session.room_state["pinned"]["link_id"] == link
    assert _types(session)[1:] == ["muted", "muted", "approval_mode", "product_pinned"]
    # the state panel (htmx) says so
    html = c.get(reverse("live:session", args=[session.pk]) + "?panel=state", **HTMX).content.decode()
    assert html.lstrip().startswith('<div id="state"') and "approve-before-speak on" in html
    assert f"pinned #{link}" in html


def test_pending_reply_approve_edit_and_reject(as_user, session, operator):
    from streams.services.live_controls import live_approval_mode

    live_approval_mode(user=operator, session=session, on=True)
    a = play_turn(session, approval=True)
    b = play_turn(session, approval=True, text="Second reply.")
    c = as_user(operator)
    html = c.get(reverse("live:session", args=[session.pk]) + "?panel=pending", **HTMX).content.decode()
    assert html.count('data-testid="pending-reply"') == 2 and GOOD in html
    r = c.post(reverse("live:approve", args=[session.pk]), {"turn_id": a, "text": GOOD}, **HTMX)
    assert r.status_code == 200 and "approved" in r.content.decode()
    spoken = LiveEvent.objects.get(session=session, turn_id=a, type="reply_spoken").payload
    assert spoken["by"] == "avatar" and spoken["text"] == GOOD
    r = c.post(reverse("live:approve", args=[session.pk]), {"turn_id": a, "text": GOOD}, **HTMX)
    assert r.status_code == 409  # already decided
    r = c.post(reverse("live:reject", args=[session.pk]), {"turn_id": b}, **HTMX)
    assert r.status_code == 200
    assert LiveEvent.objects.filter(session=session, turn_id=b, type="reply_rejected").exists()
    r = c.post(reverse("live:reject", args=[session.pk]), {"turn_id": "no-such-turn"}, **HTMX)
    assert r.status_code == 404
    r = c.post(reverse("live:approve", args=[session.pk]), {"turn_id": ""}, **HTMX)
    assert r.status_code == 400 and "turn_id" in r.content.decode()
    html = c.get(reverse("live:session", args=[session.pk]) + "?panel=pending", **HTMX).content.decode()
    assert 'data-testid="pending-reply"' not in html


def test_takeover_says_the_text_or_shows_the_hook_verdicts(as_user, session, operator):
    c = as_user(operator)
    r = c.post(reverse("live:takeover", args=[session.pk]), {"text": "Welcome everyone, ask me anything."}, **HTMX)
    assert r.status_code == 200, r.content.decode()
    assert "marked human" in r.content.decode() and 'data-testid="result-hooks"' in r.content.decode()
    spoken = LiveEvent.objects.get(session=session, type="reply_spoken")
    assert spoken.payload == {"text": "Welcome everyone, ask me anything.", "by": "human",
                              "operator": operator.username}
    before = _types(session)
    r = c.post(reverse("live:takeover", args=[session.pk]), {"text": "**Buy now** for just $1, only 3 left!"},
               **HTMX)
    html = r.content.decode()
    assert r.status_code == 400 and "refused" in html and 'data-testid="result-errors"' in html
    assert "speakable-reply" in html or "factual-risk" in html
    assert _types(session) == before  # nothing spoken
    r = c.post(reverse("live:takeover", args=[session.pk]), {"text": "   "}, **HTMX)
    assert r.status_code == 400 and "<code>text</code>" in r.content.decode()
    # without htmx: the page again, with the error and its status
    r = c.post(reverse("live:takeover", args=[session.pk]), {"text": "**Buy now** for just $1!"})
    assert r.status_code == 400 and 'data-testid="controls"' in r.content.decode()


def test_skip_a_comment(as_user, session, operator):
    queued = comment_add(session, viewer="ann", text="hello?", priority=1)
    answered = comment_add(session, viewer="bob", text="done", status="answered")
    c = as_user(operator)
    r = c.post(reverse("live:skip", args=[session.pk]), {"comment_id": queued.pk}, **HTMX)
    assert r.status_code == 200
    queued.refresh_from_db()
    assert queued.status == LiveComment.Status.SKIPPED
    assert c.post(reverse("live:skip", args=[session.pk]), {"comment_id": answered.pk}, **HTMX).status_code == 409
    assert c.post(reverse("live:skip", args=[session.pk]), {"comment_id": 10**12}, **HTMX).status_code == 404
    assert c.post(reverse("live:skip", args=[session.pk]), {"comment_id": "x"}, **HTMX).status_code == 400
    html = c.get(reverse("live:session", args=[session.pk]) + "?panel=queue", **HTMX).content.decode()
    assert 'data-status="skipped"' in html and 'data-testid="skip"' not in html


def test_end_needs_confirmation(as_user, session, operator, operator2):
    c = as_user(operator2)  # another operator may end it too
    r = c.post(reverse("live:end", args=[session.pk]), {}, **HTMX)
    assert r.status_code == 400 and "confirm" in r.content.decode()
    session.refresh_from_db()
    assert session.status == "live"
    r = c.post(reverse("live:end", args=[session.pk]), {"confirm": "on"}, **HTMX)
    assert r.status_code == 200 and r["HX-Refresh"] == "true"
    session.refresh_from_db()
    assert session.status == "ended" and session.ended_by == operator2


def test_watchers_and_outsiders_cannot_post_controls(as_user, session, reviewer, ml_staff, outsider):
    before = _types(session)
    for user in (reviewer, ml_staff, outsider):
        c = as_user(user)
        for name, data in (("mute", {"on": "1"}), ("approval", {"on": "1"}), ("takeover", {"text": "hi"}),
                           ("approve", {"turn_id": "x"}), ("reject", {"turn_id": "x"}), ("skip", {"comment_id": 1}),
                           ("pin", {"link_id": ""}), ("end", {"confirm": "on"}), ("overlay_token_create", {}),
                           ("overlay_token_revoke", {"token_id": str(uuid.uuid4())})):
            assert c.post(reverse(f"live:{name}", args=[session.pk]), data).status_code == 403, (user, name)
        assert c.get(reverse("live:session", args=[session.pk]) + "?panel=tokens", **HTMX).status_code == 403
    assert _types(session) == before
    session.refresh_from_db()
    assert session.status == "live" and not session.muted


def test_overlay_page_token(client, as_user, session, operator, deployed):
    from streams.services.live_sessions import live_token_create, live_token_revoke

    secret = overlay_secret(session, operator)
    url = reverse("live:overlay", args=[session.pk])
    r = client.get(url, {"token": secret})  # no login needed
    assert r.status_code == 200
    html = r.content.decode()
    assert f'data-ws-path="/ws/live/{session.pk}/overlay/"' in html and "streams/overlay.js" in html
    assert "site-header" not in html  # a bare page for streaming software
    assert "script-src 'self'" in r["Content-Security-Policy"]
    _ingest, ingest_secret = live_token_create(user=operator, session=session, scope="ingest")
    other = live_session_for(deployed["deployment"], operator, title="Other")
    other_secret = overlay_secret(other, operator)
    for bad in ("", "hat_nope", ingest_secret, other_secret, "x" * 5000):
        r = client.get(url, {"token": bad})
        assert r.status_code == 403 and "not valid" in r.content.decode(), bad[:10]
    assert client.get(reverse("live:overlay", args=[uuid.uuid4()]), {"token": secret}).status_code == 404
    token = LiveToken.objects.get(digest=LiveToken.digest_of(secret))
    live_token_revoke(user=operator, token=token)
    assert client.get(url, {"token": secret}).status_code == 403


def test_overlay_links_from_the_page(as_user, session, operator):
    c = as_user(operator)
    r = c.post(reverse("live:overlay_token_create", args=[session.pk]), {}, **HTMX)
    assert r.status_code == 200
    link = r.content.decode().split('data-testid="new-overlay-url">')[1].split("<")[0]
    secret = link.split("token=")[1]
    assert c.get(link.split("testserver")[1]).status_code == 200
    token = LiveToken.objects.get(session=session, scope="overlay")
    html = c.get(reverse("live:session", args=[session.pk]) + "?panel=tokens", **HTMX).content.decode()
    assert token.prefix in html and secret not in html
    r = c.post(reverse("live:overlay_token_revoke", args=[session.pk]), {"token_id": str(token.pk)}, **HTMX)
    assert r.status_code == 200
    assert c.get(link.split("testserver")[1]).status_code == 403
    r = c.post(reverse("live:overlay_token_revoke", args=[session.pk]), {"token_id": str(token.pk)}, **HTMX)
    assert r.status_code == 409  # already revoked
    r = c.post(reverse("live:overlay_token_revoke", args=[session.pk]), {"token_id": str(uuid.uuid4())}, **HTMX)
    assert r.status_code == 400
