"""Liveness and readiness against the real parts: PostgreSQL, the Redis channel layer and broker, real Celery
workers; a Redis outage through a TCP proxy."""

import socket
import time
import uuid

import pytest
from django.conf import settings

from console import health
from console.celery import WORKER_OPTIONS, WORKER_POOL
from tests.conftest import dataset_build_on, start_worker, stop_worker
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.django_db
needs_redis = pytest.mark.skipif(not settings.ENV.redis_url, reason="a Redis outage needs Redis")
needs_shared_db = pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                     reason="a second process needs the PostgreSQL test database")


def test_all_parts_ready_with_details_for_staff(client, operator, celery_worker_process):
    client.force_login(operator)
    for path in ("/health/ready", "/health/"):  # /health/ is readiness, as before
        response = client.get(path)
        body = response.json()
        assert response.status_code == 200, body
        assert body["status"] == "ok"
        assert set(body["checks"]) == {"database", "channel_layer", "broker", "workers"}
        assert all(check["ok"] for check in body["checks"].values())
        assert all(check["ms"] < 3000 for check in body["checks"].values())
        workers = body["checks"]["workers"]
        assert all(workers["queues"][q] for q in health.required_queues())  # default, interactive, gpu


def test_anonymous_gets_status_only(client, celery_worker_process):
    response = client.get("/health/ready")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_liveness_touches_nothing(client, monkeypatch, django_assert_num_queries):
    def broken():
        raise ConnectionError("connection refused")

    for name in health.CHECKS:
        monkeypatch.setitem(health.CHECKS, name, broken)
    with django_assert_num_queries(0):
        response = client.get("/health/live")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert client.get("/health/ready").status_code == 503


def test_a_failing_part_gives_503_with_its_cause(client, operator, monkeypatch):
    def broken():
        raise ConnectionError("connection refused")

    monkeypatch.setitem(health.CHECKS, "database", broken)
    client.force_login(operator)
    response = client.get("/health/ready")
    assert response.status_code == 503
    check = response.json()["checks"]["database"]
    assert (check["ok"], check["detail"]) == (False, "ConnectionError: connection refused")


def test_a_hung_check_is_cut_at_its_deadline(client, operator, monkeypatch):
    monkeypatch.setitem(health.CHECKS, "database", lambda: time.sleep(10))
    client.force_login(operator)
    started = time.monotonic()
    response = client.get("/health/ready")
    took = time.monotonic() - started
    assert response.status_code == 503 and took < health.WORKERS_TIMEOUT_S + 0.5, took
    assert response.json()["checks"]["database"]["detail"] == f"timed out after {health.CHECK_TIMEOUT_S:g} s"


def test_outsider_without_role_gets_no_details(client, outsider):
    client.force_login(outsider)
    assert "checks" not in client.get("/health/ready").json()


def test_post_is_not_allowed(client):
    for path in ("/health/", "/health/live", "/health/ready"):
        assert client.post(path).status_code == 405


@needs_shared_db
@pytest.mark.django_db(transaction=True)
def test_a_busy_worker_is_reported_busy_and_ready(client, operator, ml_staff):
    """The one worker of both queues runs a long job: readiness stays 200 and says what it runs (before, a ping
    task queued behind the job timed out: 503 for the whole job)."""
    own = f"busy-{uuid.uuid4().hex[:6]}"
    proc, log = start_worker(f"{own},celery,gpu,{settings.INTERACTIVE_QUEUE}", log_name=f"{own}.log", pool=WORKER_POOL, options=WORKER_OPTIONS)
    name = f"{own}@{socket.gethostname()}"  # as start_worker names it
    try:
        dataset_build_on(own, user=ml_staff, recipe={"variants_per_sample": 8},
                         sources={"scenarios": [], "tiny_gold": 20000})
        client.force_login(operator)
        deadline = time.monotonic() + 60
        while True:
            started = time.monotonic()
            response = client.get("/health/ready")
            took = time.monotonic() - started
            me = response.json()["checks"]["workers"].get("workers", {}).get(name, {})
            if me.get("state") == "busy":
                break
            assert time.monotonic() < deadline, response.json()
            time.sleep(0.3)
        assert response.status_code == 200, response.json()
        assert took < 2.5, took
        assert [r["task"] for r in me["running"]] == ["training_jobs.dataset_build"]
        assert {"celery", "gpu"} <= set(me["queues"])
        assert f"{name} (busy: training_jobs.dataset_build)" in response.json()["checks"]["workers"]["detail"]
    finally:
        stop_worker(proc, log)


@needs_redis
def test_redis_cut_readiness_answers_fast_and_fails_liveness_stays(client, operator, settings):
    proxy = TcpProxy.for_url(settings.ENV.redis_url).start()
    try:
        url = proxy.url(settings.ENV.redis_url)
        settings.CELERY_BROKER_URL = url
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                               "CONFIG": {"hosts": [url]}}}
        client.force_login(operator)
        checks = client.get("/health/ready").json()["checks"]
        assert checks["broker"]["ok"] and checks["channel_layer"]["ok"], checks  # through the proxy
        for outage in (proxy.cut, proxy.hang):  # Redis down (refused), Redis unreachable (silence)
            outage()
            started = time.monotonic()
            response = client.get("/health/ready")
            took = time.monotonic() - started
            checks = response.json()["checks"]
            print(f"{outage.__name__}: readiness answered {response.status_code} in {took:.2f} s: "
                  + ", ".join(f"{k}={'ok' if v['ok'] else v['detail']}" for k, v in checks.items()))
            assert response.status_code == 503 and took < 2.0, (took, checks)
            assert not checks["broker"]["ok"] and not checks["channel_layer"]["ok"]
            assert checks["database"]["ok"]
            assert client.get("/health/live").status_code == 200
            proxy.restore()
    finally:
        proxy.stop()
