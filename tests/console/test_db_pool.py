"""PostgreSQL connections are bounded: Django's pool in every process, never a connection per request thread,
and a forked child (Celery's prefork pool) never borrows its parent's pooled connections."""

from __future__ import annotations

import os
import threading

import pytest
from django.conf import settings
from django.db import connection, connections

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the pool is PostgreSQL's")


def test_the_database_is_pooled_and_connections_do_not_outlive_requests():
    db = settings.DATABASES["default"]
    assert db["CONN_MAX_AGE"] == 0
    pool = db["OPTIONS"]["pool"]
    assert pool["max_size"] == settings.ENV.db_pool_max >= 1 and pool["timeout"] == settings.ENV.db_pool_timeout_s


def _own_client_ports() -> set[int]:
    """Local TCP ports of this process's sockets (Linux: its socket fds matched to the kernel's TCP table)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = open(table, encoding="ascii").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _backend_pids() -> int:
    """Backends serving this process: other processes' sessions (a server an earlier test started, a backend still
    exiting after its client closed) are not this process's connections."""
    ports = _own_client_ports()
    with connection.cursor() as cur:
        cur.execute("SELECT client_port FROM pg_stat_activity WHERE datname = current_database()")
        return sum(1 for (port,) in cur.fetchall() if port in ports)


@pytest.mark.django_db(transaction=True)
def test_many_request_threads_share_a_bounded_number_of_connections():
    """What an ASGI server does: every request runs in a thread of its own. With conn_max_age=60 each thread kept
    its connection; with the pool the count stays at the pool's size whatever the number of threads."""
    max_size = settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    barrier = threading.Barrier(24)
    errors: list[BaseException] = []

    def request() -> None:
        try:
            barrier.wait(30)
            with connection.cursor() as cur:
                cur.execute("SELECT pg_sleep(0.05)")
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)
        finally:
            connections.close_all()  # what Django does at the end of every request

    threads = [threading.Thread(target=request) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    # this test's own connection + the pool (which may keep up to max_size open)
    assert _backend_pids() <= max_size + 1


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents_alone():
    with connection.cursor() as cur:  # the parent's pool is open and holds a connection
        cur.execute("SELECT pg_backend_pid()")
        parent_pid = cur.fetchone()[0]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: query, report its backend, exit without running pytest's teardown
        code = 1
        try:
            os.close(read)
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                os.write(write, str(cur.fetchone()[0]).encode())
            connections.close_all()
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_backend = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_backend and int(child_backend) != parent_pid  # its own session, not the parent's socket
    with connection.cursor() as cur:  # the parent's session still works
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] == parent_pid
