"""The live-session REST API: sessions and tokens for people (roles per method), the bearer-token ingest and the
HMAC-signed webhook for platforms; every 401/403/404/409 and bad input (400 with paths, nothing stored)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from streams.models import LiveComment, LiveEvent, LiveSession, LiveToken
from streams.services import live_sessions as svc
from tests.streams.live_helpers import comment, ingest_secret, live_session, live_world, operator2  # noqa: F401

pytestmark = pytest.mark.django_db

SESSIONS = "/api/live/sessions/"


def as_user(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _paths(response) -> set[str]:
    return {e["path"] for e in response.json()["errors"]}


# --- sessions --------------------------------------------------------------------------------------------------------


def test_everyone_with_a_role_reads_sessions_only_operators_start_and_end_them(live_world, operator, manager,
                                                                                reviewer, outsider):
    body = {"room": "glow-gadget-demo", "deployment": "glow-live", "title": "Evening show"}
    assert as_user().get(SESSIONS).status_code == 401
    assert as_user().get(SESSIONS).headers["WWW-Authenticate"].startswith("Token")
    assert as_user(outsider).get(SESSIONS).status_code == 403
    for user in (manager, reviewer, outsider):
        assert as_user(user).post(SESSIONS, body, format="json").status_code == 403
    assert as_user().post(SESSIONS, body, format="json").status_code == 401
    assert not LiveSession.objects.exists()

    started = as_user(operator).post(SESSIONS, body, format="json")
    assert started.status_code == 201, started.json()
    data = started.json()
    assert data["status"] == "live" and data["deployment"] == "glow-live" and data["room"] == "glow-gadget-demo"
    assert data["version_in_force"] == "glow-gadget@1" and data["revision_in_force"] == 1
    assert data["handling"]["max_comments_per_turn"] == 3 and "webhook_secret" not in data
    assert data["comments"]["queued"] == 0 and data["last_seq"] == 1

    listed = as_user(manager).get(SESSIONS)
    assert listed.status_code == 200 and [s["id"] for s in listed.json()["results"]] == [data["id"]]
    assert as_user(manager).get(SESSIONS + "?status=ended").json()["results"] == []
    bad = as_user(manager).get(SESSIONS + "?status=paused")
    assert bad.status_code == 400 and _paths(bad) == {"status"}
    detail = as_user(reviewer).get(f"{SESSIONS}{data['id']}/")
    assert detail.status_code == 200 and detail.json()["title"] == "Evening show"
    assert as_user(outsider).get(f"{SESSIONS}{data['id']}/").status_code == 403
    assert as_user(reviewer).get(f"{SESSIONS}{uuid.uuid4()}/").status_code == 404
    assert as_user(reviewer).get(f"{SESSIONS}not-a-uuid/").status_code == 404

    end = f"{SESSIONS}{data['id']}/end"
    assert as_user(manager).post(end, {}, format="json").status_code == 403
    assert as_user().post(end, {}, format="json").status_code == 401
    assert as_user(operator).post(f"{SESSIONS}{uuid.uuid4()}/end", {}, format="json").status_code == 404
    ended = as_user(operator).post(end, {"reason": "show over"}, format="json")
    assert ended.status_code == 200 and ended.json()["status"] == "ended" and ended.json()["ended_by"] == "op_frank"
    again = as_user(operator).post(end, {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"


def test_start_with_bad_input_is_a_400_naming_each_field_and_stores_nothing(live_world, operator):
    client = as_user(operator)
    r = client.post(SESSIONS, {"room": "nowhere", "deployment": "nothing", "title": "x"}, format="json")
    assert r.status_code == 400 and _paths(r) == {"room", "deployment"}
    r = client.post(SESSIONS, {"room": "glow-gadget-demo", "deployment": "glow-live", "title": "x", "feed": "replay",
                               "feed_config": {"scenario": "evening-flash-sale", "speed": 0},
                               "handling": {"max_age_s": 0, "batch": 1}}, format="json")
    assert r.status_code == 400 and _paths(r) == {"feed_config.speed", "handling.max_age_s", "handling.batch"}
    r = client.post(SESSIONS, {"room": "glow-gadget-demo", "title": "", "feed": "radio"}, format="json")
    assert r.status_code == 400 and _paths(r) == {"deployment", "title", "feed"}
    r = client.post(SESSIONS, "{not json", content_type="application/json")
    assert r.status_code == 400
    assert not LiveSession.objects.exists() and not LiveEvent.objects.exists()


def test_starting_on_a_deployment_with_nothing_approved_is_a_409(live_world, operator):
    dep = live_world["deployment"]
    dep.current_revision = None
    dep.save()
    r = as_user(operator).post(SESSIONS, {"room": "glow-gadget-demo", "deployment": "glow-live", "title": "x"},
                               format="json")
    assert r.status_code == 409 and "no approved revision" in r.json()["detail"]


def test_the_webhook_key_is_shown_once(live_world, operator):
    r = as_user(operator).post(SESSIONS, {"room": "glow-gadget-demo", "deployment": "glow-live", "title": "x",
                                          "feed": "webhook"}, format="json")
    assert r.status_code == 201 and len(r.json()["webhook_secret"]) >= 40
    assert r.json()["webhook_secret"] == LiveSession.objects.get().webhook_secret
    assert "webhook_secret" not in as_user(operator).get(f"{SESSIONS}{r.json()['id']}/").json()


# --- tokens ----------------------------------------------------------------------------------------------------------


def test_tokens_are_created_listed_and_revoked_by_operators(live_session, live_world, operator, operator2, manager):
    tokens = f"{SESSIONS}{live_session.pk}/tokens/"
    assert as_user().post(tokens, {"scope": "ingest"}, format="json").status_code == 401
    assert as_user(manager).post(tokens, {"scope": "ingest"}, format="json").status_code == 403
    assert as_user(manager).get(tokens).status_code == 403
    assert as_user(operator).post(f"{SESSIONS}{uuid.uuid4()}/tokens/", {"scope": "ingest"},
                                  format="json").status_code == 404
    bad = as_user(operator).post(tokens, {"scope": "admin"}, format="json")
    assert bad.status_code == 400 and _paths(bad) == {"scope"}
    created = as_user(operator).post(tokens, {"scope": "ingest"}, format="json")
    assert created.status_code == 201
    secret = created.json()["token"]
    assert LiveToken.objects.get().digest == LiveToken.digest_of(secret)
    listed = as_user(operator2).get(tokens).json()
    assert [t["prefix"] for t in listed] == [secret[:12]] and "token" not in listed[0]
    revoke = f"{tokens}{created.json()['id']}/revoke"
    assert as_user(manager).post(revoke).status_code == 403
    other = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                   title="other")
    assert as_user(operator).post(f"{SESSIONS}{other.pk}/tokens/{created.json()['id']}/revoke").status_code == 404
    assert as_user(operator).post(f"{tokens}{uuid.uuid4()}/revoke").status_code == 404
    revoked = as_user(operator2).post(revoke)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert as_user(operator2).post(revoke).status_code == 409


# --- the ingest API --------------------------------------------------------------------------------------------------


def test_comments_in_with_an_ingest_token(live_session, ingest_secret):
    url = f"{SESSIONS}{live_session.pk}/comments"
    one = bearer(ingest_secret).post(url, comment(1, "how much is the serum?"), format="json")
    assert one.status_code == 202, one.json()
    (result,) = one.json()["results"]
    assert result["status"] == "queued" and result["external_id"] == "c1" and result["priority"] == 30
    assert LiveComment.objects.get(pk=result["comment_id"]).source == "api"
    batch = bearer(ingest_secret).post(url, {"comments": [comment(1), comment(2, "DM me on telegram", viewer="x"),
                                                          comment(3, "hi!", viewer="y")]}, format="json")
    assert batch.status_code == 202
    assert [r["status"] for r in batch.json()["results"]] == ["duplicate", "filtered", "queued"]
    assert LiveComment.objects.filter(session=live_session).count() == 3


def test_the_ingest_refuses_callers_without_the_right_token(live_session, live_world, operator, ingest_secret):
    url = f"{SESSIONS}{live_session.pk}/comments"
    body = comment(1)
    anonymous = APIClient().post(url, body, format="json")
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == 'Bearer realm="live"'
    assert bearer("hat_unknown").post(url, body, format="json").status_code == 401
    assert as_user(operator).post(url, body, format="json").status_code == 401  # a console user is no platform
    malformed = APIClient()
    malformed.credentials(HTTP_AUTHORIZATION="Bearer two words")
    assert malformed.post(url, body, format="json").status_code == 401

    _overlay, overlay = svc.live_token_create(user=operator, session=live_session, scope="overlay")
    r = bearer(overlay).post(url, body, format="json")
    assert r.status_code == 403 and "scope" in r.json()["detail"]
    other = svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                   title="other")
    r = bearer(ingest_secret).post(f"{SESSIONS}{other.pk}/comments", body, format="json")
    assert r.status_code == 403 and "another live session" in r.json()["detail"]
    assert bearer(ingest_secret).post(f"{SESSIONS}{uuid.uuid4()}/comments", body, format="json").status_code == 404
    token = LiveToken.objects.get(digest=LiveToken.digest_of(ingest_secret))
    svc.live_token_revoke(user=operator, token=token)
    r = bearer(ingest_secret).post(url, body, format="json")
    assert r.status_code == 403 and "revoked" in r.json()["detail"]
    assert not LiveComment.objects.exists()


def test_the_ingest_refuses_bad_input_with_paths_and_an_ended_session(live_session, operator, ingest_secret):
    url = f"{SESSIONS}{live_session.pk}/comments"
    client = bearer(ingest_secret)
    r = client.post(url, {"comments": [comment(1), {"viewer_id": "v", "text": ""}, {"text": "x", "mood": "happy"}]},
                    format="json")
    assert r.status_code == 400 and _paths(r) == {"comments[1].text", "comments[2].viewer_id", "comments[2].mood"}
    assert client.post(url, [comment(1)], format="json").status_code == 400
    assert client.post(url, "{nope", content_type="application/json").status_code == 400
    r = client.post(url, {"viewer_id": "v", "text": "x\u0000y"}, format="json")
    assert r.status_code == 400
    assert not LiveComment.objects.exists()
    assert [e.type for e in LiveEvent.objects.filter(session=live_session)] == ["session_started"]
    svc.live_session_end(user=operator, session=live_session)
    r = client.post(url, comment(1), format="json")
    assert r.status_code == 409 and not LiveComment.objects.exists()


# --- the webhook -----------------------------------------------------------------------------------------------------


@pytest.fixture
def webhook_session(live_world, operator):
    return svc.live_session_start(user=operator, room=live_world["room"], deployment=live_world["deployment"],
                                  title="pushed", feed="webhook")


def signed_post(session, body: bytes, *, secret: str | None = None, ts: int | None = None, signature=None):
    ts_text = str(int(time.time()) if ts is None else ts)
    sig = signature if signature is not None else svc.webhook_signature(secret or session.webhook_secret, ts_text,
                                                                        body)
    return APIClient().post(f"{SESSIONS}{session.pk}/webhook", body, content_type="application/json",
                            HTTP_X_HAT_TIMESTAMP=ts_text, HTTP_X_HAT_SIGNATURE=sig)


def test_a_signed_webhook_is_taken(webhook_session):
    body = json.dumps({"comments": [comment(1), comment(2, "any coupon?", viewer="v2")]}).encode()
    r = signed_post(webhook_session, body)
    assert r.status_code == 202, r.json()
    assert [x["status"] for x in r.json()["results"]] == ["queued", "queued"]
    assert set(LiveComment.objects.values_list("source", flat=True)) == {"webhook"}
    redelivered = signed_post(webhook_session, body, ts=int(time.time()) + 1)  # the platform retries: nothing twice
    assert [x["status"] for x in redelivered.json()["results"]] == ["duplicate", "duplicate"]
    assert signed_post(webhook_session, body, ts=int(time.time()) + 1).status_code == 409  # the same bytes: a replay
    assert LiveComment.objects.count() == 2


def test_a_webhook_with_a_bad_old_or_missing_signature_is_a_401(webhook_session, live_session):
    body = json.dumps(comment(1)).encode()
    assert signed_post(webhook_session, body, secret="not-the-key").status_code == 401
    assert signed_post(webhook_session, body, ts=int(time.time()) - 301).status_code == 401
    assert signed_post(webhook_session, body, ts=int(time.time()) + 400).status_code == 401
    assert signed_post(webhook_session, body, signature="sha256=deadbeef").status_code == 401
    tampered = svc.webhook_signature(webhook_session.webhook_secret, str(int(time.time())), body)
    assert signed_post(webhook_session, body.replace(b"serum", b"dryer"), signature=tampered).status_code == 401
    unsigned = APIClient().post(f"{SESSIONS}{webhook_session.pk}/webhook", body, content_type="application/json")
    assert unsigned.status_code == 401 and unsigned.json()["code"] == "bad_signature"
    # sessions without a webhook feed, and no session at all
    assert signed_post(live_session, body, secret="x").status_code == 404
    missing = APIClient().post(f"{SESSIONS}{uuid.uuid4()}/webhook", body, content_type="application/json")
    assert missing.status_code == 404
    assert not LiveComment.objects.exists()


def test_a_signed_webhook_with_bad_input_is_a_400_and_an_ended_session_a_409(webhook_session, operator):
    bad = json.dumps({"comments": [comment(1), {"viewer_id": "v"}]}).encode()
    r = signed_post(webhook_session, bad)
    assert r.status_code == 400 and _paths(r) == {"comments[1].text"}
    r = signed_post(webhook_session, b"{not json")
    assert r.status_code == 400
    r = signed_post(webhook_session, b'{"viewer_id": "v", "text": "a\\u0000b"}')
    assert r.status_code == 400
    assert not LiveComment.objects.exists()
    svc.live_session_end(user=operator, session=webhook_session)
    assert signed_post(webhook_session, json.dumps(comment(1)).encode()).status_code == 409
