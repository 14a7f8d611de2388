"""/health/ against the real parts: PostgreSQL, the Redis channel layer and a real Celery worker."""

import pytest

from console import health

pytestmark = pytest.mark.django_db


def test_all_parts_healthy_with_details_for_staff(client, operator, celery_worker_process):
    client.force_login(operator)
    response = client.get("/health/")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "channel_layer", "worker"}
    assert all(check["ok"] for check in body["checks"].values())


def test_anonymous_gets_status_only(client, celery_worker_process):
    response = client.get("/health/")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_a_failing_part_gives_503_with_its_cause(client, operator, monkeypatch, celery_worker_process):
    def broken():
        raise ConnectionError("connection refused")

    monkeypatch.setitem(health.CHECKS, "database", broken)
    client.force_login(operator)
    response = client.get("/health/")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {"ok": False, "detail": "ConnectionError: connection refused",
                                                     "ms": response.json()["checks"]["database"]["ms"]}


def test_outsider_without_role_gets_no_details(client, outsider, celery_worker_process):
    client.force_login(outsider)
    assert "checks" not in client.get("/health/").json()


def test_post_is_not_allowed(client):
    assert client.post("/health/").status_code == 405
