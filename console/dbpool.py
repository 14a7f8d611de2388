"""Django's psycopg connection pool across ``fork()``.

Every process has its own pool (settings: ``HAT_DB_POOL_MIN`` / ``HAT_DB_POOL_MAX``). A child forked from a
process whose pool was open (Celery's prefork pool, multiprocessing) inherits the pool object with the
parent's sockets in it but none of its worker threads: borrowing from it would talk to PostgreSQL over a socket
the parent is using, and closing it would end the parent's sessions. So the child forgets what it inherited,
without closing it (the objects are kept alive here so that garbage collection never closes them either), and
opens its own pool on first use.
"""

from __future__ import annotations

import os

_inherited: list = []  # the parent's pools and connections: never closed, never collected in the child


def forget_inherited_pools() -> None:
    from django.db import connections
    from django.db.backends.postgresql.base import DatabaseWrapper

    if DatabaseWrapper._connection_pools:
        _inherited.extend(DatabaseWrapper._connection_pools.values())
        DatabaseWrapper._connection_pools.clear()
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:
            _inherited.append(conn.connection)
            conn.connection = None


def install() -> None:
    os.register_at_fork(after_in_child=forget_inherited_pools)
