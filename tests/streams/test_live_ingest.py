"""Live sessions' services on PostgreSQL and Redis: start and end, tokens, the webhook signature, comment ingest
(stored before acknowledged; dedupe, per-viewer rate limit, the viewer-input hook's abuse filter, priority,
comment_in events, nothing stored for bad input, 409 once ended), the runner's wake list, and the replay feed."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest
from django.utils import timezone

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.models import AuditEvent
from streams import live_selectors
from streams.live import handling
from streams.live.feeds import ApiFeed, ReplayFeed, WebhookFeed, feed_for, recorded_items, scenario_items
from streams.models import LiveComment, LiveEvent, LiveSession, LiveToken
from streams.services import live_sessions as svc
from tests.streams.live_helpers import comment, ingest_secret, live_session, live_world, operator2  # noqa: F401

pytestmark = pytest.mark.django_db


def _events(session, type_=None):
    qs = LiveEvent.objects.filter(session=session).order_by("seq")
    if type_:
        qs = qs.filter(type=type_)
    return list(qs)


# --- start -----------------------------------------------------------------------------------------------------------


def test_start_stores_the_deployment_in_force_and_hands_the_session_to_a_runner_on_commit(
        live_world, operator, monkeypatch, django_capture_on_commit_callbacks):
    ensured = []
    fake = types.ModuleType("streams.services.live_controls")
    fake.live_runner_ensure = ensured.append
    monkeypatch.setitem(sys.modules, "streams.services.live_controls", fake)
    with django_capture_on_commit_callbacks(execute=True):
        session = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                         title="  Evening show ", handling={"max_age_s": 90})
    assert ensured == [session.pk]
    session.refresh_from_db()
    assert (session.title, session.status, session.feed, session.webhook_secret) == ("Evening show", "live", "api", "")
    assert session.version_in_force == live_world["v1"] and session.revision_in_force == live_world["revision"]
    assert session.handling == {"batch_window_s": 1.5, "max_comments_per_turn": 3, "per_viewer_per_minute": 6,
                                "per_token_per_minute": 120, "per_session_per_minute": 240, "max_age_s": 90.0,
                                "max_chars": 500}
    assert session.room_state["room_id"] == "glow-gadget-demo" and session.room_state["products"]
    (started,) = _events(session)
    assert (started.seq, started.type) == (1, "session_started")
    assert started.payload["deployment"] == "glow-live" and started.payload["revision"] == 1
    assert started.payload["version"]["number"] == 1 and started.payload["feed"] == "api"
    audit = AuditEvent.objects.get(action="live_session.started")
    assert audit.scope == "deployment:glow-live" and audit.target == f"live_session:{session.pk}"


def test_start_tolerates_a_build_without_the_session_runner(live_world, operator, monkeypatch,
                                                             django_capture_on_commit_callbacks):
    monkeypatch.setitem(sys.modules, "streams.services.live_controls", None)  # import fails
    with django_capture_on_commit_callbacks(execute=True):
        session = svc.live_session_start(user=operator, room=live_world["room"],
                                         deployment=live_world["deployment"], title="No runner yet")
    assert LiveSession.objects.filter(pk=session.pk, status="live").exists()


def test_only_operators_start_sessions(live_world, manager, reviewer, ml_staff, outsider):
    for user in (manager, reviewer, ml_staff, outsider):
        with pytest.raises(NotAllowed):
            svc.live_session_start(user=user, room=live_world["room"], deployment=live_world["deployment"],
                                   title="x")
    assert not LiveSession.objects.exists()


def test_start_names_every_bad_field_and_stores_nothing(live_world, operator):
    with pytest.raises(ValidationFailed) as exc:
        svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                               title=" ", feed="replay", feed_config={"scenario": "no-such", "speed": 5},
                               handling={"batch_window_s": -1, "max_chars": 0})
    assert {e["path"] for e in exc.value.errors} == {"title", "feed_config.scenario", "handling.batch_window_s",
                                                     "handling.max_chars"}
    with pytest.raises(ValidationFailed) as exc:
        svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                               title="x" * 121, feed="tiktok")
    assert {e["path"] for e in exc.value.errors} == {"title", "feed"}
    with pytest.raises(ValidationFailed) as exc:
        svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                               title="x", feed="replay", feed_config={"speed": 2})
    assert [e["path"] for e in exc.value.errors] == ["feed_config"]
    assert not LiveSession.objects.exists() and not LiveEvent.objects.exists()


def test_start_needs_a_deployment_in_force_with_an_endpoint(live_world, operator):
    dep = live_world["deployment"]
    dep.revisions.update(endpoints=[])
    with pytest.raises(InvalidTransition, match="no endpoint"):
        svc.live_session_start(user=operator, room=live_world["room"], deployment=dep, title="x")
    dep.current_revision = None
    dep.save()
    with pytest.raises(InvalidTransition, match="no approved revision"):
        svc.live_session_start(user=operator, room=live_world["room"], deployment=dep, title="x")
    assert not LiveSession.objects.exists()


def test_the_webhook_feed_gets_its_own_key(live_world, operator):
    a = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                               title="a", feed="webhook")
    b = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                               title="b", feed="webhook")
    assert len(a.webhook_secret) >= 40 and a.webhook_secret != b.webhook_secret


# --- end -----------------------------------------------------------------------------------------------------------


def test_end_expires_the_queue_and_refuses_comments_after(live_session, operator, manager):
    svc.live_comments_ingest(session=live_session, comments=[comment(1), comment(2, viewer="v2")], source="api")
    with pytest.raises(NotAllowed):
        svc.live_session_end(user=manager, session=live_session)
    svc.live_session_end(user=operator, session=live_session, reason="show over")
    live_session.refresh_from_db()
    assert live_session.status == "ended" and live_session.ended_by == operator and live_session.ended_at
    assert set(LiveComment.objects.values_list("status", flat=True)) == {"expired"}
    types_ = [e.type for e in _events(live_session)]
    assert types_[-3:] == ["comment_status", "comment_status", "session_ended"]
    assert _events(live_session, "session_ended")[0].payload == {"by": "op_frank", "reason": "show over"}
    with pytest.raises(InvalidTransition):
        svc.live_session_end(user=operator, session=live_session)
    before = LiveComment.objects.count()
    with pytest.raises(InvalidTransition, match="no more comments"):
        svc.live_comments_ingest(session=live_session, comments=[comment(3)], source="api")
    assert LiveComment.objects.count() == before
    with pytest.raises(InvalidTransition):
        svc.live_token_create(user=operator, session=live_session, scope="ingest")


# --- tokens --------------------------------------------------------------------------------------------------------


def test_tokens_are_stored_as_hashes_checked_per_scope_and_session_and_revocable(live_session, live_world, operator,
                                                                                  manager):
    token, secret = svc.live_token_create(user=operator, session=live_session, scope="ingest")
    assert secret.startswith("hat_") and token.digest == LiveToken.digest_of(secret) and secret not in token.digest
    assert token.prefix == secret[:12]
    assert live_selectors.live_token_by_secret(secret) == token
    assert live_selectors.live_token_by_secret(secret + "x") is None and live_selectors.live_token_by_secret("") is None
    svc.live_token_check(token, session_id=live_session.pk, scope="ingest")
    with pytest.raises(svc.TokenRefused, match="scope"):
        svc.live_token_check(token, session_id=live_session.pk, scope="overlay")
    other = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                   title="other")
    with pytest.raises(svc.TokenRefused, match="another live session"):
        svc.live_token_check(token, session_id=other.pk, scope="ingest")
    with pytest.raises(ValidationFailed):
        svc.live_token_create(user=operator, session=live_session, scope="admin")
    with pytest.raises(NotAllowed):
        svc.live_token_create(user=manager, session=live_session, scope="ingest")
    with pytest.raises(NotAllowed):
        svc.live_token_revoke(user=manager, token=token)
    svc.live_token_revoke(user=operator, token=token)
    token.refresh_from_db()
    with pytest.raises(svc.TokenRefused, match="revoked"):
        svc.live_token_check(token, session_id=live_session.pk, scope="ingest")
    with pytest.raises(InvalidTransition):
        svc.live_token_revoke(user=operator, token=token)
    assert [a.action for a in AuditEvent.objects.filter(action__startswith="live_token").order_by("id")] == [
        "live_token.created", "live_token.revoked"]


# --- the webhook's signature ---------------------------------------------------------------------------------------


def test_webhook_signature_good_bad_old_and_missing():
    body = b'{"viewer_id": "v", "text": "hi"}'
    now = 1_800_000_000
    ts = str(now)
    good = svc.webhook_signature("k3y", ts, body)
    assert good.startswith("sha256=") and len(good) == 7 + 64
    svc.webhook_signature_check(secret="k3y", timestamp=ts, signature=good, body=body, now=now + 299)
    cases = [
        dict(secret="k3y", timestamp=ts, signature=good, body=body + b" ", now=now),  # body changed
        dict(secret="other", timestamp=ts, signature=good, body=body, now=now),  # another key
        dict(secret="k3y", timestamp=str(now + 1), signature=good, body=body, now=now),  # timestamp changed
        dict(secret="k3y", timestamp=ts, signature=good, body=body, now=now + 301),  # too old
        dict(secret="k3y", timestamp=ts, signature=good, body=body, now=now - 301),  # from the future
        dict(secret="k3y", timestamp=None, signature=good, body=body, now=now),
        dict(secret="k3y", timestamp=ts, signature=None, body=body, now=now),
        dict(secret="k3y", timestamp="soon", signature=good, body=body, now=now),
        dict(secret="k3y", timestamp=ts, signature="sha256=" + "0" * 64, body=body, now=now),
        dict(secret="k3y", timestamp=ts, signature="sha256=é", body=body, now=now),
        dict(secret="", timestamp=ts, signature=good, body=body, now=now),
    ]
    for case in cases:
        with pytest.raises(svc.WebhookRejected):
            svc.webhook_signature_check(**case)


# --- comments in ---------------------------------------------------------------------------------------------------


def test_comments_are_stored_with_priority_and_a_comment_in_event_each(live_session):
    results = svc.live_comments_ingest(session=live_session, source="api", comments=[
        comment(1, "hi everyone, just joined!", viewer="ann"),
        comment(2, "how many serums are left??", viewer="bob"),  # the serum is on flash sale: on screen
        comment(3, "is the hair dryer in stock?", viewer="cat"),
    ])
    assert [r["status"] for r in results] == ["queued"] * 3
    assert [r["priority"] for r in results] == [handling.CHAT, handling.ON_SCREEN, handling.PRODUCT]
    rows = list(LiveComment.objects.filter(session=live_session).order_by("id"))
    assert [(c.external_id, c.viewer_id, c.viewer, c.source, c.status) for c in rows] == [
        ("c1", "ann", "ANN", "api", "queued"), ("c2", "bob", "BOB", "api", "queued"),
        ("c3", "cat", "CAT", "api", "queued")]
    assert [r["comment_id"] for r in results] == [c.pk for c in rows]
    events = _events(live_session, "comment_in")
    assert [e.payload["comment_id"] for e in events] == [c.pk for c in rows]
    assert events[1].payload.items() >= {"external_id": "c2", "viewer": "BOB", "viewer_id": "bob",
                                         "text": "how many serums are left??", "priority": handling.ON_SCREEN,
                                         "status": "queued", "source": "api"}.items()
    # the reply queue: on screen first, then the other product, then chat
    batch = handling.next_batch(live_selectors.live_comment_queue(session_id=live_session.pk), time.time() + 5,
                                handling.CommentHandling())
    assert [q.id for q in batch.take] == [rows[1].pk, rows[2].pk, rows[0].pk]


def test_a_comment_sent_again_is_a_duplicate_and_stored_once(live_session):
    first = svc.live_comments_ingest(session=live_session, source="api",
                                     comments=[comment(1), comment(1), comment(2, viewer="v2")])
    assert [r["status"] for r in first] == ["queued", "duplicate", "queued"]
    assert first[1]["comment_id"] == first[0]["comment_id"]
    again = svc.live_comments_ingest(session=live_session, source="ws", comments=[comment(1, "edited text")])
    assert again[0].items() >= {"status": "duplicate", "comment_id": first[0]["comment_id"],
                                "external_id": "c1"}.items()
    assert LiveComment.objects.filter(session=live_session).count() == 2
    assert len(_events(live_session, "comment_in")) == 2


def test_without_an_id_the_same_viewer_text_and_timestamp_is_one_comment(live_session):
    no_id = {"viewer_id": "v9", "text": "How much is the serum?"}
    r1 = svc.live_comments_ingest(session=live_session, source="webhook", comments=[no_id])
    r2 = svc.live_comments_ingest(session=live_session, source="webhook", comments=[{**no_id, "text": "how much is "
                                                                                                     "the  serum?"}])
    assert r1[0]["status"] == "queued" and r2[0]["status"] == "duplicate" and r1[0]["external_id"].startswith("tx:")
    stamped = {**no_id, "ts": 1_800_000_000}
    r3 = svc.live_comments_ingest(session=live_session, source="webhook", comments=[stamped, stamped])
    assert [r["status"] for r in r3] == ["queued", "duplicate"] and r3[0]["external_id"].startswith("ts:")
    r4 = svc.live_comments_ingest(session=live_session, source="webhook", comments=[{**stamped, "ts": 1_800_000_009}])
    assert r4[0]["status"] == "queued"
    assert LiveComment.objects.filter(session=live_session).count() == 3


def test_a_viewer_over_the_rate_limit_is_stored_as_rate_limited(live_world, operator):
    session = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                     title="x", handling={"per_viewer_per_minute": 2})
    results = svc.live_comments_ingest(session=session, source="api", comments=[
        comment(1, "hi", viewer="spam"), comment(2, "hi again", viewer="spam"), comment(3, "hello?", viewer="spam"),
        comment(4, "how much?", viewer="calm")])
    assert [r["status"] for r in results] == ["queued", "queued", "rate_limited", "queued"]
    assert "more than 2 comments a minute" in results[2]["reason"]
    later = svc.live_comments_ingest(session=session, source="api", comments=[comment(5, "still here", viewer="spam")])
    assert later[0]["status"] == "rate_limited"
    row = LiveComment.objects.get(session=session, external_id="c3")
    assert (row.status, row.text) == ("rate_limited", "hello?")
    assert [e.payload["status"] for e in _events(session, "comment_in")] == [
        "queued", "queued", "rate_limited", "queued", "rate_limited"]
    # a minute later the viewer is heard again
    LiveComment.objects.filter(session=session).update(received_at=timezone.now() - timezone.timedelta(seconds=61))
    assert svc.live_comments_ingest(session=session, source="api",
                                    comments=[comment(6, "back", viewer="spam")])[0]["status"] == "queued"


def test_the_viewer_input_hook_of_the_version_in_force_filters_abuse(live_world, operator):
    session = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                     title="x", handling={"max_chars": 1000})
    results = svc.live_comments_ingest(session=session, source="api", comments=[
        comment(1, "DM me on telegram for a cheaper deal", viewer="a"),
        comment(2, "so " * 120, viewer="b"),  # 360 characters: over the hook's 300
        comment(3, "is the serum good for dry skin?", viewer="c"),
    ])
    assert [r["status"] for r in results] == ["filtered", "filtered", "queued"]
    assert results[0]["reason"].startswith("viewer-input-guard: matches blocked pattern")
    assert results[1]["reason"].startswith("viewer-input-guard: has 359 characters (max 300)")
    assert LiveComment.objects.get(session=session, external_id="c1").reason == results[0]["reason"]
    tight = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                   title="y", handling={"max_chars": 20})
    r = svc.live_comments_ingest(session=tight, source="api", comments=[comment(1, "a comment of 26 characters")])
    assert (r[0]["status"], r[0]["reason"]) == ("filtered", "longer than 20 characters")


def test_bad_comments_are_refused_as_a_whole_with_their_paths(live_session):
    with pytest.raises(ValidationFailed) as exc:
        svc.live_comments_ingest(session=live_session, source="api", comments=[
            comment(1), {"viewer_id": "v", "text": ""}, {"viewer_id": "v", "text": "x", "colour": "red"}])
    assert {e["path"] for e in exc.value.errors} == {"comments[1].text", "comments[2].colour"}
    with pytest.raises(ValidationFailed):
        svc.live_comments_ingest(session=live_session, source="api", comments=[])
    assert not LiveComment.objects.exists()
    assert [e.type for e in _events(live_session)] == ["session_started"]


# --- waking the runner ---------------------------------------------------------------------------------------------


def test_a_stored_comment_wakes_the_runner_through_redis(live_session, django_capture_on_commit_callbacks):
    from django.conf import settings

    assert settings.ENV.redis_url, "these tests run against Redis (REDIS_URL)"
    svc.live_runner_wait(live_session.pk, 0)  # nothing pending
    with django_capture_on_commit_callbacks(execute=True):
        svc.live_comments_ingest(session=live_session, source="api", comments=[comment(1)])
    svc._local(live_session.pk).clear()  # as a runner in another process would see it: only Redis carries it
    assert svc.live_runner_wait(live_session.pk, 5) is True
    assert svc.live_runner_wait(live_session.pk, 0.2) is False  # one nudge wakes once
    # a duplicate wakes nobody (nothing new queued)
    with django_capture_on_commit_callbacks(execute=True):
        svc.live_comments_ingest(session=live_session, source="api", comments=[comment(1)])
    assert svc.live_runner_wait(live_session.pk, 0.2) is False
    # a runner already waiting is woken
    timer = threading.Timer(0.3, svc.live_runner_wake, args=(live_session.pk,))
    timer.start()
    try:
        assert svc.live_runner_wait(live_session.pk, 10) is True
    finally:
        timer.join()


def test_without_redis_the_wait_is_a_timeout_and_wakes_in_process(live_session, monkeypatch):
    monkeypatch.setattr(svc, "_redis", lambda kind: None)
    assert svc.live_runner_wait(live_session.pk, 0.1) is False
    svc.live_runner_wake(live_session.pk)
    assert svc.live_runner_wait(live_session.pk, 5) is True


# --- feeds ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def scenarios(db):
    from streams.services import scenarios_seed_demo

    return {s.slug: s for s in scenarios_seed_demo()}


def _replay_session(live_world, operator, config, **handling_):
    return svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                  title="replay", feed="replay", feed_config=config,
                                  handling={"per_viewer_per_minute": 120, **handling_})


def test_the_replay_feed_plays_a_scenario_at_a_high_speed_once(live_world, operator, scenarios):
    session = _replay_session(live_world, operator, {"scenario": "evening-flash-sale", "speed": 1000})
    feed = feed_for(session)
    assert isinstance(feed, ReplayFeed) and feed.speed == 1000
    items = scenario_items(scenarios["evening-flash-sale"].parsed(), slug="evening-flash-sale")
    assert len(items) > 10 and items == feed.items
    assert "what's the price on the serum today?" in [i.text for i in items]  # a scripted comment
    feed.started_at = time.time()  # the test's own start (a 30-minute scenario: 1.8 s at 1000x)
    feed.run(lambda: False)
    rows = list(LiveComment.objects.filter(session=session).order_by("id"))
    assert [c.external_id for c in rows] == [i.external_id for i in items]
    assert {c.source for c in rows} == {"replay"} and feed.sent == len(items)
    assert [c.text for c in rows] == [i.text for i in items]
    assert rows[0].external_id == "replay:evening-flash-sale:7:0"  # the scenario's seed
    # a runner that takes the session over plays the rest: nothing is stored twice
    again = feed_for(session)
    assert again.pending() == []
    again.run(lambda: False)
    assert LiveComment.objects.filter(session=session).count() == len(items) and again.sent == 0


def test_the_replay_feed_keeps_the_scenarios_pace_and_stops_when_asked(live_world, operator, scenarios):
    session = _replay_session(live_world, operator, {"scenario": "evening-flash-sale", "speed": 60})
    clock = {"now": 1000.0}
    sent_at: dict[str, float] = {}
    real_ingest = svc.live_comments_ingest

    def ingest(**kwargs):
        for c in kwargs["comments"]:
            sent_at[c["external_id"]] = clock["now"]
        return real_ingest(**kwargs)

    def sleep(s):
        clock["now"] += s

    feed = ReplayFeed.for_session(session, started_at=1000.0, clock=lambda: clock["now"], sleep=sleep)
    import streams.services.live_sessions as module

    original, module.live_comments_ingest = module.live_comments_ingest, ingest
    try:
        half = 1000.0 + 15 * 60 / 60  # stop at scenario minute 15 (15 s at 60x)
        feed.run(lambda: clock["now"] >= half)
    finally:
        module.live_comments_ingest = original
    played = [i for i in feed.items if i.external_id in sent_at]
    assert played and len(played) < len(feed.items)
    for item in played:  # each one when it fell due (at 60x: a scenario minute a second), never before
        assert feed.due_at(item) <= sent_at[item.external_id] <= feed.due_at(item) + 0.25 + 1e-9
    assert all(i.offset_s / 60 <= 15 * 60 / 60 + 0.25 for i in played)


def test_the_replay_feed_plays_a_recorded_session_and_passive_feeds_wait(live_world, operator, live_session):
    svc.live_comments_ingest(session=live_session, source="api",
                             comments=[comment(1, viewer="a"), comment(2, "hi", viewer="b")])
    LiveComment.objects.filter(external_id="c2").update(
        received_at=LiveComment.objects.get(external_id="c1").received_at + timezone.timedelta(seconds=3))
    items = recorded_items(live_session.pk)
    assert [(i.offset_s, i.text) for i in items] == [(0.0, "how much is the serum?"), (3.0, "hi")]
    replay = _replay_session(live_world, operator, {"session": str(live_session.pk), "speed": 100})
    feed = feed_for(replay)
    feed.started_at = time.time() - 10  # both are due
    feed.run(lambda: False)
    rows = list(LiveComment.objects.filter(session=replay).order_by("id"))
    assert [(c.viewer_id, c.text, c.source) for c in rows] == [("a", "how much is the serum?", "replay"),
                                                              ("b", "hi", "replay")]
    assert rows[0].external_id == f"replay:{live_session.pk}:{LiveComment.objects.get(external_id='c1').pk}"
    # a replay whose session ended stops
    svc.live_session_end(user=operator, session=replay)
    LiveComment.objects.filter(session=replay).delete()
    stopped = feed_for(LiveSession.objects.get(pk=replay.pk))
    stopped.started_at = time.time() - 10
    stopped.run(lambda: False)
    assert not LiveComment.objects.filter(session=replay).exists()
    # passive feeds only wait to be stopped
    naps = []
    for feed_cls in (WebhookFeed, ApiFeed):
        calls = iter([False, False, True])
        feed_cls(sleep=naps.append).run(lambda: next(calls))
    assert len(naps) == 4
    webhook = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                     title="w", feed="webhook")
    assert isinstance(feed_for(webhook), WebhookFeed) and isinstance(feed_for(live_session), ApiFeed)
