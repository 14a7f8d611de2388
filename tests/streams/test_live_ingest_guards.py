"""What the comment ingest refuses before storing (streams.services.live_ingest_guards), through the real API on
PostgreSQL: a webhook body that is not JSON is a clean 415 (a multipart one was a 500); a signed webhook request is
taken once inside its whole 300 s window (a replay 135 s later was stored again); per-token and per-session limits
of new comments a minute refuse a flood whole with 429 + Retry-After (REST) and a 'refused' frame (WebSocket),
nothing stored, counted on the session and shown on the operator's page with the comments that expired."""

from __future__ import annotations

import json
import logging
import time
import types

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from streams.models import LiveComment, LiveSession, LiveWebhookReceipt
from streams.services import live_sessions as svc
from tests.streams.live_helpers import comment, ingest_secret, live_session, live_world  # noqa: F401

pytestmark = pytest.mark.django_db

SESSIONS = "/api/live/sessions/"


@pytest.fixture
def clock(monkeypatch):
    """The ingest's clock (signature window, dedupe slots, the limits' minute), moved by hand."""
    now = [time.time()]
    monkeypatch.setattr(svc, "time", types.SimpleNamespace(time=lambda: now[0]))
    return now


@pytest.fixture
def webhook_session(live_world, operator):
    return svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                  title="pushed", feed="webhook")


def signed_post(session, body: bytes, ts: int):
    sig = svc.webhook_signature(session.webhook_secret, str(ts), body)
    return APIClient().post(f"{SESSIONS}{session.pk}/webhook", body, content_type="application/json",
                            HTTP_X_HAT_TIMESTAMP=str(ts), HTTP_X_HAT_SIGNATURE=sig)


# --- the webhook -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["multipart", "form"])
def test_a_webhook_body_that_is_not_json_is_a_clean_415_without_a_traceback(webhook_session, caplog, fmt):
    client = APIClient()
    url = f"{SESSIONS}{webhook_session.pk}/webhook"
    with caplog.at_level(logging.WARNING):
        if fmt == "multipart":
            r = client.post(url, {"viewer_id": "v", "text": "hi"}, format="multipart")
        else:
            r = client.post(url, "viewer_id=v&text=hi", content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415 and r["Content-Type"] == "application/json"
    assert r.json()["code"] == "unsupported_media_type" and "application/json" in r.json()["detail"]
    assert not [rec for rec in caplog.records if rec.exc_info or rec.levelno >= logging.ERROR]
    assert not LiveComment.objects.exists()


def test_a_signed_webhook_replayed_inside_the_window_is_refused_and_stored_once(webhook_session, clock):
    body = json.dumps({"comments": [{"viewer_id": "v1", "text": "how much is the serum?"},
                                    {"viewer_id": "v2", "text": "any coupon?"}]}).encode()  # no ids, no ts
    sent = int(clock[0])
    first = signed_post(webhook_session, body, sent)
    assert first.status_code == 202 and [x["status"] for x in first.json()["results"]] == ["queued", "queued"]
    # a platform retrying signs again (a new timestamp): its comments are duplicates, nothing stored twice
    clock[0] += 2
    retry = signed_post(webhook_session, body, int(clock[0]))
    assert retry.status_code == 202 and [x["status"] for x in retry.json()["results"]] == ["duplicate"] * 2

    clock[0] = sent + 135  # the same bytes again 135 s later: past the dedupe slots, inside the 300 s window
    replay = signed_post(webhook_session, body, sent)
    assert replay.status_code == 409, replay.json()
    assert replay.json()["code"] == "replayed" and "results" not in replay.json()
    clock[0] = sent + 299  # and at the window's end
    assert signed_post(webhook_session, body, sent).status_code == 409
    assert LiveComment.objects.count() == 2

    # past the window the signature itself is stale (401); receipts past it are let go at the next request
    clock[0] = sent + 301
    assert signed_post(webhook_session, body, sent).status_code == 401
    assert LiveWebhookReceipt.objects.count() == 2
    clock[0] = sent + 303
    other = json.dumps({"viewer_id": "v3", "text": "hello"}).encode()
    assert signed_post(webhook_session, other, int(clock[0])).status_code == 202
    assert LiveWebhookReceipt.objects.count() == 1  # the first's and the retry's are past: only the new one stays


def test_a_replay_of_a_refused_request_is_not_held_against_it(webhook_session, clock):
    """A receipt exists only when the comments were stored: a request the limits refused may come again."""
    LiveSession.objects.filter(pk=webhook_session.pk).update(
        handling={**webhook_session.handling, "per_session_per_minute": 100})
    flood = {"comments": [comment(n, f"question {n}?", viewer=f"v{n}") for n in range(100)]}
    assert signed_post(webhook_session, json.dumps(flood).encode(), int(clock[0])).status_code == 202
    body = json.dumps(comment(500, "one more?", viewer="late")).encode()
    sent = int(clock[0])
    refused = signed_post(webhook_session, body, sent)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert LiveWebhookReceipt.objects.count() == 1  # the flood's only
    clock[0] += 70
    again = signed_post(webhook_session, body, sent)
    assert again.status_code == 202 and again.json()["results"][0]["status"] == "queued"
    assert LiveComment.objects.count() == 101


# --- floods: per-token and per-session limits ---------------------------------------------------------------------


def _limits(session, *, per_token: int, per_session: int) -> None:
    LiveSession.objects.filter(pk=session.pk).update(
        handling={**session.handling, "per_token_per_minute": per_token, "per_session_per_minute": per_session})


def _batch(first: int, n: int) -> dict:
    return {"comments": [comment(i, f"is item {i} in stock?", viewer=f"viewer-{i}") for i in range(first, first + n)]}


def test_the_defaults_bound_a_flood_of_unique_comments_from_many_viewers(live_session, ingest_secret, clock):
    """The report: 2,030 unique comments from 400 viewer ids in a minute were all taken. Now the token's default
    limit (120 a minute) refuses the rest, whole requests at a time, and says when to come back."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ingest_secret}")
    url = f"{SESSIONS}{live_session.pk}/comments"
    statuses = []
    for start in range(0, 2030, 70):  # 29 requests of up to 70 comments, 400 viewers
        batch = {"comments": [comment(i, f"question {i}?", viewer=f"viewer-{i % 400}")
                              for i in range(start, min(start + 70, 2030))]}
        statuses.append(client.post(url, batch, format="json").status_code)
        clock[0] += 2
    stored = LiveComment.objects.filter(session=live_session).count()
    assert statuses[0] == 202 and statuses.count(429) >= 25, statuses
    assert stored <= 120 * 2  # at most the token's limit per minute (the run spans under a minute per window)
    live_session.refresh_from_db()
    assert live_session.comments_refused == 2030 - stored


def test_past_the_token_limit_a_request_is_a_429_with_retry_after_and_nothing_stored(live_session, live_world,
                                                                                     operator, ingest_secret, clock):
    _limits(live_session, per_token=100, per_session=150)
    _t, other = svc.live_token_create(user=operator, session=live_session, scope="ingest")
    a, b = APIClient(), APIClient()
    a.credentials(HTTP_AUTHORIZATION=f"Bearer {ingest_secret}")
    b.credentials(HTTP_AUTHORIZATION=f"Bearer {other}")
    url = f"{SESSIONS}{live_session.pk}/comments"

    assert a.post(url, _batch(0, 100), format="json").status_code == 202
    clock[0] += 20
    over = a.post(url, _batch(100, 1), format="json")
    assert over.status_code == 429, over.json()
    body = over.json()
    assert body["code"] == "rate_limited" and body["limit"] == "token" and "100 new comments a minute" in body["detail"]
    assert 39 <= body["retry_after_s"] <= 45 and over["Retry-After"] == str(int(-(-body["retry_after_s"] // 1)))
    # redelivered comments are free: the platform's retries are answered, not refused
    redelivered = a.post(url, _batch(0, 3), format="json")
    assert redelivered.status_code == 202 and {x["status"] for x in redelivered.json()["results"]} == {"duplicate"}

    # the session's limit counts every token: 50 more fit, the 51st does not
    assert b.post(url, _batch(200, 50), format="json").status_code == 202
    full = b.post(url, _batch(250, 1), format="json")
    assert full.status_code == 429 and full.json()["limit"] == "session"
    assert LiveComment.objects.filter(session=live_session).count() == 150
    live_session.refresh_from_db()
    assert live_session.comments_refused == 2

    clock[0] += 50  # the first hundred left the minute
    assert a.post(url, _batch(100, 1), format="json").status_code == 202
    detail = as_operator(operator).get(f"{SESSIONS}{live_session.pk}/").json()
    assert detail["comments_refused"] == 2


def as_operator(user) -> APIClient:
    from rest_framework.authtoken.models import Token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def test_the_limits_are_set_per_session_and_bounded(live_world, operator):
    r = as_operator(operator).post(SESSIONS, {"room": "glow-gadget-demo", "deployment": "glow-live", "title": "x",
                                              "handling": {"per_token_per_minute": 5,
                                                           "per_session_per_minute": 10**6}}, format="json")
    assert r.status_code == 400
    assert {e["path"] for e in r.json()["errors"]} == {"handling.per_token_per_minute",
                                                        "handling.per_session_per_minute"}
    ok = as_operator(operator).post(SESSIONS, {"room": "glow-gadget-demo", "deployment": "glow-live", "title": "x",
                                               "handling": {"per_token_per_minute": 300}}, format="json")
    assert ok.status_code == 201 and ok.json()["handling"]["per_token_per_minute"] == 300
    assert ok.json()["handling"]["per_session_per_minute"] == 240


def test_the_operator_page_says_how_many_comments_expired_and_were_refused(live_session, ingest_secret, operator,
                                                                           client, clock):
    _limits(live_session, per_token=100, per_session=100)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {ingest_secret}")
    url = f"{SESSIONS}{live_session.pk}/comments"
    assert api.post(url, _batch(0, 100), format="json").status_code == 202
    assert api.post(url, _batch(100, 7), format="json").status_code == 429
    svc.live_session_end(user=operator, session=live_session)  # the queued hundred expire unanswered
    client.force_login(operator)
    page = client.get(reverse("live:session", args=[live_session.pk])).content.decode()
    assert '<span data-testid="expired-count"' in page and "100 expired unanswered" in page
    assert "7 refused by the ingest limits" in page
