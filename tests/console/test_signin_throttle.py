"""Signing in is protected against password guessing: failures are counted per username and address (and per
address), further attempts wait with 429 before the password is checked, and a Redis cache works across
processes."""

from __future__ import annotations

import uuid

import pytest
from django.core.cache import cache

from tests.conftest import PASSWORD


@pytest.fixture
def limits(settings):
    settings.HAT_SIGNIN_MAX_FAILURES = 3
    settings.HAT_SIGNIN_WINDOW_S = 600


def _login(client, username, password, addr="10.0.0.1"):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=addr)


def test_after_too_many_failures_even_the_right_password_waits(client, manager, limits):
    for _ in range(3):
        assert _login(client, manager.username, "wrong").status_code == 200
    blocked = _login(client, manager.username, PASSWORD)
    assert blocked.status_code == 429
    assert 1 <= int(blocked["Retry-After"]) <= 600
    assert "Too many failed sign-ins" in blocked.content.decode()
    assert "_auth_user_id" not in client.session


def test_another_address_or_user_is_not_locked_out(client, manager, manager2, limits):
    for _ in range(3):
        _login(client, manager.username, "wrong", addr="10.0.0.9")
    assert _login(client, manager.username, "wrong", addr="10.0.0.9").status_code == 429
    assert _login(client, manager2.username, PASSWORD, addr="10.0.0.9").status_code == 302  # other user
    client.logout()
    assert _login(client, manager.username, PASSWORD, addr="10.0.0.10").status_code == 302  # other address


def test_a_success_clears_the_count(client, manager, limits):
    for _ in range(2):
        _login(client, manager.username, "wrong")
    assert _login(client, manager.username, PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        assert _login(client, manager.username, "wrong").status_code == 200
    assert _login(client, manager.username, PASSWORD).status_code == 302


def test_one_address_guessing_many_usernames_is_stopped(client, db, limits):
    for i in range(30):  # 10 x the per-pair limit, spread over usernames
        _login(client, f"user{i}", "wrong", addr="10.0.0.7")
    assert _login(client, "someone-else", "wrong", addr="10.0.0.7").status_code == 429


def test_the_count_lives_in_redis_when_there_is_one(client, manager, limits, settings):
    """The web processes share one count: a second cache client (another process) sees the lock."""
    if not settings.ENV.redis_url:
        pytest.skip("no REDIS_URL")
    prefix = f"hat-test-{uuid.uuid4().hex}"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": settings.ENV.redis_url, "KEY_PREFIX": prefix}}
    try:
        for _ in range(3):
            _login(client, manager.username, "wrong")
        assert _login(client, manager.username, PASSWORD).status_code == 429
        assert any(prefix in k.decode() for k in cache._cache.get_client().keys(f"{prefix}:*"))
    finally:
        cache.delete_many([k.decode().split(":", 2)[2] for k in cache._cache.get_client().keys(f"{prefix}:*")])


def test_a_cache_outage_does_not_lock_everyone_out(client, manager, limits, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
                                   "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}}
    assert _login(client, manager.username, "wrong").status_code == 200
    assert _login(client, manager.username, PASSWORD).status_code == 302


def test_the_token_endpoint_counts_the_same_failures(client, manager, limits):
    """Guessing through the API is no way around the login page's limit (and vice versa)."""
    for _ in range(2):
        r = client.post("/api/auth/token/", {"username": manager.username, "password": "wrong"},
                        REMOTE_ADDR="10.0.0.1")
        assert r.status_code == 400
    _login(client, manager.username, "wrong")  # the third failure, on the page
    r = client.post("/api/auth/token/", {"username": manager.username, "password": PASSWORD}, REMOTE_ADDR="10.0.0.1")
    assert r.status_code == 429 and int(r["Retry-After"]) >= 1
    assert r.json()["code"] == "throttled" and "Too many failed sign-ins" in r.json()["detail"]
    ok = client.post("/api/auth/token/", {"username": manager.username, "password": PASSWORD}, REMOTE_ADDR="10.0.0.2")
    assert ok.status_code == 200 and ok.json()["token"]
