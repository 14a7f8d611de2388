"""A busy database (the web pool exhausted, a lock waited on too long) is a 503 with Retry-After, JSON on the API and
the ingest, a page elsewhere, never Django's HTML 500; web requests carry PostgreSQL lock and statement timeouts
(workers do not); no ingested comment is lost: the platform is told to send it again. Against real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from psycopg_pool import PoolTimeout
from django.db import connection, connections
from rest_framework.test import APIClient

from console.db_busy import database_busy
from streams.models import LiveComment
from tests.streams.live_helpers import comment, ingest_secret, live_session, live_world  # noqa: F401

pytestmark = [pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's pool and timeouts"),
              pytest.mark.django_db(transaction=True)]


def _raw() -> psycopg.Connection:
    """A connection outside Django's pool (holding a lock, watching pg_stat_activity)."""
    s = connection.settings_dict
    return psycopg.connect(dbname=s["NAME"], user=s["USER"], password=s["PASSWORD"] or None,
                           host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, autocommit=True)


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _ingest(secret: str, session_id, comments: list[dict]):
    client = APIClient(raise_request_exception=False)  # a 500 is what a platform would see
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.post(f"/api/live/sessions/{session_id}/comments", {"comments": comments}, format="json")


def _blocked_by(watch: psycopg.Connection, holder: psycopg.Connection) -> int:
    """How many sessions wait, directly or in the queue behind another waiter (a row lock's later waiters wait on
    the first one's tuple lock), on the lock ``holder`` holds; not on anyone else's: the full suite has other
    tests' sessions."""
    rows = watch.execute("SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity "
                         "WHERE datname = current_database() AND wait_event_type = 'Lock'").fetchall()
    behind = {holder.info.backend_pid}
    grew = True
    while grew:
        grew = False
        for pid, blockers in rows:
            if pid not in behind and behind.intersection(blockers):
                behind.add(pid)
                grew = True
    return len(behind) - 1


def _pool_held(pool, max_size: int, watch: psycopg.Connection, holder: psycopg.Connection) -> bool:
    """Every connection of this process's pool is out, and the ingests wait on the lock ``holder`` holds: all of
    them, or (in the full suite, where an earlier test's thread may still hold a pooled connection) the ones that
    got a connection while the rest queue for one."""
    stats = pool.get_stats()
    blocked = _blocked_by(watch, holder)
    return stats.get("pool_size") == max_size and stats.get("pool_available", 0) == 0 and blocked >= 1 and \
        (blocked >= max_size or stats.get("requests_waiting", 0) >= max_size - blocked)


def test_an_exhausted_pool_is_a_503_with_retry_after_and_no_comment_is_lost(live_session, ingest_secret, operator,
                                                                            monkeypatch):
    """The finding: eight ingests queued on the session's row lock held every connection of the web pool; every
    other request waited for the pool and got an HTML 500, and ingests were lost."""
    page = APIClient(raise_request_exception=False)
    page.force_login(operator)
    api = APIClient(raise_request_exception=False)
    api.force_login(operator)
    max_size = connection.settings_dict["OPTIONS"]["pool"]["max_size"]
    pool = connection.pool
    connections.close_all()  # this thread holds none: its requests borrow from the pool like any other
    holder, watch = _raw(), _raw()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM streams_livesession WHERE id = %s FOR UPDATE", [live_session.pk])
    queued: list[int] = []

    def queued_ingest(n: int) -> None:
        try:
            queued.append(_ingest(ingest_secret, live_session.pk, [comment(100 + n, viewer=f"q{n}")]).status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=queued_ingest, args=(n,)) for n in range(max_size)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while not _pool_held(pool, max_size, watch, holder) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pool_held(pool, max_size, watch, holder), pool.get_stats()  # every pooled connection waits on the lock
        monkeypatch.setattr(pool, "timeout", 0.3)  # HAT_DB_POOL_TIMEOUT_S, short for the test

        sent = [comment(n, viewer=f"v{n}") for n in range(12)]
        for c in sent:
            r = _ingest(ingest_secret, live_session.pk, [c])
            assert r.status_code == 503 and r["Content-Type"] == "application/json", r.content[:300]
            assert int(r["Retry-After"]) >= 1
            assert r.json()["code"] == "database_busy" and "try again" in r.json()["detail"]
        r = api.get("/api/live/sessions/")
        assert r.status_code == 503 and r.json()["code"] == "database_busy" and r["Retry-After"]
        r = page.get("/")
        assert r.status_code == 503 and r["Content-Type"].startswith("text/html") and r["Retry-After"]
        assert b"busy" in r.content and b"Traceback" not in r.content
    finally:
        holder.execute("ROLLBACK")
        for t in threads:
            t.join(30)
        holder.close()
        watch.close()
    assert queued == [202] * max_size
    # told to try again, the platform sends the twelve again: every one is stored, once
    monkeypatch.setattr(pool, "timeout", 10.0)
    for c in sent:
        assert _ingest(ingest_secret, live_session.pk, [c]).status_code == 202
    stored = list(LiveComment.objects.filter(session=live_session).values_list("external_id", flat=True))
    assert sorted(stored) == sorted([f"c{n}" for n in range(12)] + [f"c{100 + n}" for n in range(max_size)])


_PROBE = """
import json, sys
import {entry}
from django.db import connection
from django.test import Client
with connection.cursor() as cur:
    cur.execute("SHOW lock_timeout")
    lock = cur.fetchone()[0]
    cur.execute("SHOW statement_timeout")
    statement = cur.fetchone()[0]
session_id, secret = sys.argv[1:3]
started = __import__("time").monotonic()
r = Client(raise_request_exception=False).post(f"/api/live/sessions/{{session_id}}/comments",
                                              json.dumps({{"comments": [{{"id": "late", "viewer_id": "v", "text": "hi"}}]}}),
                                              content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {{secret}}")
print(json.dumps({{"lock": lock, "statement": statement, "status": r.status_code,
                   "retry_after": r.get("Retry-After"), "code": r.json().get("code") if r.status_code != 202 else None,
                   "waited_s": __import__("time").monotonic() - started}}))
"""


def _probe(entry: str, session_id, secret: str, **env: str) -> dict:
    """A process started as ``entry`` (the web process: console.asgi; a worker or command: django.setup) reports
    its session's timeouts and posts one comment while the test holds the session's row lock."""
    full_env = {**os.environ, "DATABASE_URL": _database_url(), "DJANGO_SETTINGS_MODULE": "console.settings", **env}
    full_env.pop("HAT_WEB_PROCESS", None)
    code = _PROBE.format(entry=entry)
    out = subprocess.run([sys.executable, "-c", code, str(session_id), secret], env=full_env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_web_requests_give_up_on_a_held_lock_with_a_503_and_workers_wait(live_session, ingest_secret):
    holder = _raw()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM streams_livesession WHERE id = %s FOR UPDATE", [live_session.pk])
    try:
        web = _probe("console.asgi", live_session.pk, ingest_secret, HAT_DB_LOCK_TIMEOUT_S="0.5",
                     HAT_DB_STATEMENT_TIMEOUT_S="20")
    finally:
        holder.execute("ROLLBACK")
    assert (web["lock"], web["statement"]) == ("500ms", "20s")
    assert web["status"] == 503 and web["code"] == "database_busy" and int(web["retry_after"]) >= 1
    assert 0.4 < web["waited_s"] < 5
    assert not LiveComment.objects.filter(external_id="late").exists()  # rolled back: the platform sends it again
    # the defaults, and a worker (or a command) that has no timeouts: it waits for the lock and stores the comment
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM streams_livesession WHERE id = %s FOR UPDATE", [live_session.pk])
    watch = _raw()

    app = f"hat-probe-{uuid.uuid4().hex[:8]}"  # the probe's own session (libpq reads PGAPPNAME), no other

    def release_when_waited_on() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                [app]).fetchone()[0]:
            time.sleep(0.05)
        time.sleep(1.0)  # waited on for a second, longer than the web process's lock timeout above
        holder.execute("ROLLBACK")

    release = threading.Thread(target=release_when_waited_on)
    release.start()
    try:
        worker = _probe("django; django.setup()", live_session.pk, ingest_secret, PGAPPNAME=app)
    finally:
        release.join()
        holder.close()
        watch.close()
    assert (worker["lock"], worker["statement"]) == ("0", "0")
    assert worker["status"] == 202 and worker["waited_s"] > 1.0
    assert LiveComment.objects.filter(external_id="late").count() == 1


def test_busy_is_told_apart_from_broken():
    from django.db import OperationalError

    try:
        try:
            raise PoolTimeout("couldn't get a connection after 10.00 sec")
        except PoolTimeout as exc:
            raise OperationalError(str(exc)) from exc  # what Django's wrap_database_errors raises
    except OperationalError as wrapped:
        assert database_busy(wrapped)
    assert database_busy(psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"))
    assert not database_busy(OperationalError("connection refused"))
    assert not database_busy(ValueError("x"))


def test_the_ingest_socket_refuses_a_frame_the_busy_database_cannot_take_and_stores_it_when_sent_again(
        live_session, ingest_secret, monkeypatch):
    """A frame that met an exhausted pool was an unacknowledged exception (the token was read outside the guard):
    now a ``refused`` frame with ``database_busy`` and ``retry_after_s``; sent again, it is stored once."""
    import asyncio

    from channels.layers import channel_layers
    from channels.testing import WebsocketCommunicator

    from console.asgi import application
    from streams.services import live_sessions as svc

    monkeypatch.setattr(svc, "_runner_ensure", lambda session_id: None)  # no runner borrowing connections
    channel_layers.backends.clear()
    pool = connection.pool

    async def go():
        comm = WebsocketCommunicator(application, f"/ws/live/{live_session.pk}/ingest/",
                                     headers=[(b"host", b"localhost"),
                                              (b"authorization", f"Bearer {ingest_secret}".encode())])
        assert (await comm.connect(timeout=10))[0]
        from channels.db import database_sync_to_async

        await database_sync_to_async(connections.close_all)()  # the consumer's thread gives its connection back
        taken = []  # every free connection of the pool, taken straight from it (whoever holds the others)
        while True:
            try:
                taken.append(pool.getconn(timeout=1))
            except PoolTimeout:
                break
        monkeypatch.setattr(pool, "timeout", 0.3)
        await comm.send_json_to(comment(1, viewer="bob"))
        refused = await comm.receive_json_from(timeout=10)
        for conn in taken:
            pool.putconn(conn)
        monkeypatch.setattr(pool, "timeout", 10.0)
        await comm.send_json_to(comment(1, viewer="bob"))
        ack = await comm.receive_json_from(timeout=10)
        await comm.disconnect()
        return refused, ack

    connections.close_all()  # this thread holds none
    try:
        refused, ack = asyncio.run(go())
    finally:
        channel_layers.backends.clear()
    assert refused["type"] == "refused" and refused["code"] == "database_busy" and refused["retry_after_s"] >= 1
    assert ack["type"] == "ack" and ack["status"] == "queued"
    assert list(LiveComment.objects.filter(session=live_session).values_list("external_id", flat=True)) == ["c1"]
