"""Scratch PostgreSQL databases for the benchmarks: a new database with a name nobody uses, dropped at the end only
when this process created it.

The benches share a PostgreSQL server with developers and with test runs (``test_<name>`` databases of
pytest-django), so a bench must never drop a database it did not make: ``DATABASE_URL`` only says which server
(and credentials) to use; its database is never created, migrated or dropped. :class:`ScratchDatabase` picks
``<prefix>_<pid>_<random>`` (or a name given with ``--scratch-db``, refused when that database exists), creates it
with ``CREATE DATABASE`` (which itself fails when the name is taken: nothing is dropped first), stamps it with a
comment naming this process, and on leaving drops it only if the name is the one it created *and* the stamp is
still its own. It leaves on success, on an exception, on Ctrl-C and on SIGTERM/SIGHUP (turned into SystemExit).

Plain Python (psycopg), no Django, so the benches can use it before ``django.setup()`` and the tests without a
bench run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

WATCHDOG_S = 120.0  # a stopped bench that is still running after this long is ended (see _install_signals)
REDELIVER_S = 0.1  # a stop that arrives inside the import machinery is delivered again after this long
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")  # PostgreSQL keeps 63 bytes; no quoting surprises


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), from ``/proc/<pid>/task/<tid>/children``; [] where there
    is none or it is gone."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    children = [int(c) for c in fh.read().split()]
            except OSError:
                continue
            out += children
            todo += children
    return out


def kill_descendants(pid: int | None = None) -> list[int]:
    """SIGKILL every process below ``pid`` (this one by default); returns the pids signalled."""
    killed = []
    for child in descendants(os.getpid() if pid is None else pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # ended meanwhile
            os.kill(child, signal.SIGKILL)
            killed.append(child)
    return killed


class ScratchRefused(RuntimeError):
    """The bench will not use this database (it exists, or the name is not a plain scratch name)."""


def server_url(db_url: str, name: str) -> str:
    """``db_url`` with its database swapped for ``name`` (scheme, credentials, host, port and options kept)."""
    parts = urlsplit(db_url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ScratchRefused("DATABASE_URL must be a postgres:// or postgresql:// URL (the bench makes its own "
                             "database on that server)")
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


def _admin(db_url: str):
    import psycopg

    return psycopg.connect(server_url(db_url, "postgres"), autocommit=True)


def database_exists(conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def scratch_name(prefix: str, exists: Callable[[str], bool], *, token: Callable[[], str] = lambda: secrets.token_hex(4),
                 tries: int = 20) -> str:
    """``<prefix>_<pid>_<token>``, never the name of a database that ``exists``. Raises ScratchRefused when every
    try is taken (a broken token source, not bad luck: 4 random bytes)."""
    for _ in range(tries):
        name = f"{prefix}_{os.getpid()}_{token()}".lower()
        if not NAME_RE.match(name):
            raise ScratchRefused(f"{name!r} is not a usable scratch database name (lowercase letters, digits, _)")
        if not exists(name):
            return name
    raise ScratchRefused(f"no free scratch database name with prefix {prefix!r} after {tries} tries")


class ScratchDatabase:
    """``with ScratchDatabase(db_url, "hat_bench") as db:`` -- ``db.name`` and ``db.url`` name a new, empty database
    on ``db_url``'s server; gone afterwards. ``name``: a chosen name instead of a generated one; refused
    (ScratchRefused) when a database of that name exists."""

    def __init__(self, db_url: str, prefix: str, *, name: str | None = None, log: Callable[[str], None] | None = None):
        server_url(db_url, "postgres")  # refuses a non-PostgreSQL URL before anything happens
        if name is not None and not NAME_RE.match(name):
            raise ScratchRefused(f"--scratch-db {name!r}: use lowercase letters, digits and _ (at most 63)")
        self.db_url, self.prefix, self.chosen = db_url, prefix, name
        self.name: str | None = None
        self.created = False
        self.stamp = f"scratch database of a hat-console benchmark, pid {os.getpid()}, {secrets.token_hex(8)}"
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._old_handlers: dict[int, object] = {}
        self._watchdog: threading.Timer | None = None
        self._holding = False  # between CREATE DATABASE and its stamp (see create)
        self._pending: int | None = None  # a stop that came meanwhile

    @property
    def url(self) -> str:
        assert self.name is not None, "not created"
        return server_url(self.db_url, self.name)

    def create(self) -> str:
        import psycopg
        from psycopg import sql

        with _admin(self.db_url) as conn:
            if self.chosen is not None:
                name = self.chosen
                if database_exists(conn, name):
                    raise ScratchRefused(f"database {name!r} already exists on this server: the bench only uses a "
                                         f"database it creates itself, and never drops one it did not create; "
                                         f"pick a new name or leave --scratch-db out")
            else:
                name = scratch_name(self.prefix, lambda n: database_exists(conn, n))
            # a stop between CREATE and the stamp would leave a database nobody may drop: it waits till both are
            # done (then __enter__ drops it, stamped, if the stop comes before the bench's with block). A flag, not a
            # signal mask: a process-directed signal goes to any thread that does not block it
            self._holding = True
            try:
                try:  # fails (DuplicateDatabase) if someone took the name since the check: nothing is dropped first
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                except psycopg.errors.DuplicateDatabase as exc:
                    raise ScratchRefused(f"database {name!r} appeared meanwhile; not touching it") from exc
                self.name, self.created = name, True
                conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name),
                                                                            sql.Literal(self.stamp)))
            finally:
                self._holding = False
        if self._pending is not None:
            raise SystemExit(128 + self._pending)
        return name

    def drop(self) -> bool:
        """Drop the database if this object created it and it still carries this object's stamp. True if dropped."""
        if not self.created or self.name is None:
            return False
        from psycopg import sql

        with _admin(self.db_url) as conn:
            row = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                               (self.name,)).fetchone()
            if row is None:
                self.created = False
                return False
            if row[0] != self.stamp:  # not the database this process made (dropped and re-made by someone else)
                self.log(f"not dropping database {self.name!r}: it is no longer the one this bench created")
                self.created = False
                return False
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(self.name)))
        self.created = False
        return True

    # SIGTERM / SIGHUP end the bench through its finally blocks (the default action would skip them)
    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def stop(signum, frame):
            # The SystemExit runs the bench's finally blocks (its subprocesses, then this database). Raised while the
            # interpreter runs a callback (a weakref's, an import lock's) it is printed and dropped instead, and the
            # bench would go on: a watchdog thread then drops the database itself and ends the process.
            if self._watchdog is None:
                self._watchdog = threading.Timer(WATCHDOG_S, self._last_resort, args=(signum,))
                self._watchdog.daemon = True
                self._watchdog.start()
            if self._holding:  # making the database: the stop is raised once it is made and stamped
                self._pending = signum
                return
            if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
                # inside the import machinery (an import lock's callback: 1 stop in 5 of preview_ttft, which imports
                # while it migrates): raised here it would be dropped, so the signal comes again a moment later
                redeliver = threading.Timer(REDELIVER_S, os.kill, args=(os.getpid(), signum))
                redeliver.daemon = True
                redeliver.start()
                return
            raise SystemExit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, stop)

    def _last_resort(self, signum: int) -> None:
        self.log(f"still running {WATCHDOG_S:.0f} s after signal {signum}: dropping the scratch database, ending "
                 f"this bench's subprocesses and exiting")
        try:
            self.drop()
        finally:
            # os._exit skips the finally blocks that stop the model server, worker and web process: without this
            # they outlive the bench (a CI run found a model server left behind by an interrupted preview_ttft)
            kill_descendants()
            os._exit(128 + signum)

    def _restore_signals(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    def __enter__(self) -> ScratchDatabase:
        self._install_signals()
        try:
            self.create()
        except BaseException:
            try:
                if self.created:  # stopped after making it, before the bench's with block: __exit__ will not run
                    self.drop()
            finally:
                self._restore_signals()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.drop()
        finally:
            self._restore_signals()


def use_in_django(name: str) -> Callable[[], None]:
    """Point Django's default connection at the (already created, empty) scratch database ``name`` and migrate it,
    through Django's own test-database path with ``keepdb`` (so Django neither drops nor re-creates anything).
    Returns the function that points Django back (it drops nothing either: the ScratchDatabase does)."""
    from django.conf import settings
    from django.db import connection

    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = name
    connection.settings_dict.setdefault("TEST", {})["NAME"] = name
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=False, serialize=False, keepdb=True)

    def restore() -> None:
        connection.creation.destroy_test_db(old_name, verbosity=0, keepdb=True)
        connection.close()

    return restore
