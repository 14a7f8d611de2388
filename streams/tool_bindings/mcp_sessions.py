"""Stdio MCP servers kept running between tool calls: one process per server (and resolved environment) per
console process, stopped after :data:`STDIO_IDLE_S` unused, on a timeout or a lost connection, and at exit.

Why: a stdio server is a process to start (a Python or Node interpreter, its imports, the handshake): a second or
more per call, several on a loaded host, paid by every tool call of a turn if each call spawned its own. MCP
clients keep a stdio server running for the session; so does this, per process. (HTTP servers are called with a
connection per call: a handshake there costs a round trip, and no server-side session can go stale.)

How: one event loop on a daemon thread per process owns the sessions; a call from any thread is submitted to it and
waits (bounded). Each session's client is entered and left by a task of its own (the SDK's task groups must be
left by the task that entered them); calls from other tasks share the connection. A fork (Celery's prefork pool)
starts a fresh pool in the child: the parent's sessions belong to the parent.

A call that times out stops its server (it may be stuck; the next call starts a fresh one), and so does any error
but an MCP error about the request itself, and a line on its stdout that is not MCP (:class:`ProtocolWatch`: the
call fails at once, saying so). A server that died while idle is noticed by the next call, which gets a
fault (``mcp_error``; the call after it starts a fresh server): a call is never retried, tools may not be
idempotent.

Plain Python, no Django.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

from streams.tool_bindings.mcp import (
    McpFault,
    McpServer,
    ProtocolWatch,
    _fault_from,
    _StderrTail,
    connection_lost,
)

logger = logging.getLogger(__name__)

STDIO_IDLE_S = 120.0  # a stdio server unused this long is stopped
REAP_EVERY_S = 1.0
# The SDK's stdio shutdown: writer flush (0.5 s), the server's grace after stdin closes (2 s), SIGTERM then SIGKILL
# (2 s), reap (2 s); with margin.
CLOSE_WAIT_S = 10.0


class _Session:
    """One running server: its client (entered by :meth:`own`), stderr file, and use."""

    def __init__(self, client: Any, stderr: _StderrTail, watch: ProtocolWatch) -> None:
        self.client = client
        self.stderr = stderr
        self.watch = watch
        self.calls: set[asyncio.Task[Any]] = set()
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.done = asyncio.Event()
        self.entered = False
        self.error: BaseException | None = None
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.task: asyncio.Task[None] | None = None

    async def own(self) -> None:
        try:
            async with self.client:
                self.entered = True
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:  # noqa: BLE001 - kept for the caller that waits on ready; the task ends here
            self.error = exc
        finally:
            self.ready.set()
            self.done.set()


def _end(session: _Session) -> None:
    """A line on the server's stdout that is not MCP: its calls fail now (with the watch's fault), and a server
    still starting is stopped."""
    if not session.entered and session.task is not None:
        session.task.cancel()
    for task in list(session.calls):
        task.cancel()


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[Hashable, _Session] = {}
        self.opening: dict[Hashable, asyncio.Lock] = {}
        self.thread = threading.Thread(target=self._run, name="mcp-stdio-sessions", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.create_task(self._reap())
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any], wait_s: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(wait_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpFault("timeout", f"no answer within {wait_s:g} s") from None

    async def _stop(self, session: _Session) -> None:
        session.stop.set()
        if not session.entered and session.task is not None:
            session.task.cancel()  # still starting: the SDK's shutdown (shielded) stops the process
        try:
            await asyncio.wait_for(session.done.wait(), CLOSE_WAIT_S)
        except TimeoutError:
            logger.warning("an MCP stdio server did not stop within %s s", CLOSE_WAIT_S)
        session.stderr.__exit__(None, None, None)

    async def drop(self, key: Hashable, session: _Session) -> None:
        if self.sessions.get(key) is session:
            del self.sessions[key]
        await self._stop(session)

    async def session(self, key: Hashable, server: McpServer, make_client: Callable[[Any, ProtocolWatch], Any],
                      timeout_s: float) -> _Session:
        lock = self.opening.setdefault(key, asyncio.Lock())
        async with lock:
            current = self.sessions.get(key)
            if current is not None and not current.done.is_set():
                return current
            if current is not None:
                await self.drop(key, current)
            stderr = _StderrTail().__enter__()
            watch = ProtocolWatch()
            session = _Session(make_client(stderr.file, watch), stderr, watch)
            session.task = asyncio.create_task(session.own())
            watch.on_bad = lambda: _end(session)
            try:
                await asyncio.wait_for(session.ready.wait(), timeout_s)
            except TimeoutError:
                await self._stop(session)
                # one message whether it was starting or answering: the caller's budget covers both
                raise McpFault("timeout", f"MCP server {server.name!r} did not answer within {timeout_s:g} s"
                               ) from None
            if not session.entered:
                tail = stderr.tail()
                await self._stop(session)
                if watch.line is not None:
                    raise watch.fault(server)
                fault = _fault_from(session.error or RuntimeError("did not start"), server, tail, connected=False)
                if fault is None:
                    raise session.error or RuntimeError("did not start")
                raise fault
            self.sessions[key] = session
            return session

    async def call(self, key: Hashable, server: McpServer, make_client: Callable[[Any, ProtocolWatch], Any],
                   use: Callable[[Any], Coroutine[Any, Any, Any]], limit_s: float) -> Any:
        deadline = time.monotonic() + limit_s
        session = await self.session(key, server, make_client, limit_s)
        session.in_flight += 1
        task = asyncio.current_task()
        if task is not None:
            session.calls.add(task)
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                return await use(session.client)
        except BaseException as exc:  # noqa: BLE001 - sorted into faults; KeyboardInterrupt etc. re-raised
            if session.watch.line is not None and not isinstance(exc, KeyboardInterrupt | SystemExit):
                if isinstance(exc, asyncio.CancelledError) and task is not None:
                    task.uncancel()  # our own cancellation (_end), answered with the fault
                await self.drop(key, session)
                raise session.watch.fault(server) from None
            if isinstance(exc, TimeoutError):
                await self.drop(key, session)
                raise McpFault("timeout", f"MCP server {server.name!r} did not answer within {limit_s:g} s"
                               ) from None
            if isinstance(exc, McpFault):
                raise
            fault = _fault_from(exc, server, session.stderr.tail())
            if fault is None:
                raise
            if connection_lost(exc):
                await self.drop(key, session)
            raise fault from None
        finally:
            if task is not None:
                session.calls.discard(task)
            session.in_flight -= 1
            session.last_used = time.monotonic()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            now = time.monotonic()
            for key, session in list(self.sessions.items()):
                if session.done.is_set() or (session.in_flight == 0 and now - session.last_used > STDIO_IDLE_S):
                    try:
                        await self.drop(key, session)
                    except Exception:  # noqa: BLE001 - the reaper must keep running
                        logger.exception("stopping an idle MCP stdio server failed")

    async def close_all(self) -> None:
        await asyncio.gather(*(self.drop(k, s) for k, s in list(self.sessions.items())), return_exceptions=True)


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = _Pool()
        return _POOL


def call_stdio(server: McpServer, env: dict[str, str], use: Callable[[Any], Coroutine[Any, Any, Any]],
               limit_s: float) -> Any:
    """Run ``use(client)`` on the server's running session (started first if need be), within ``limit_s``.
    Raises :class:`McpFault`."""
    from streams.tool_bindings.mcp import _stdio_client

    key = (server.name, server.command, tuple(sorted(env.items())))
    pool = _pool()
    return pool.submit(pool.call(key, server, lambda errlog, watch: _stdio_client(server, env, limit_s, errlog, watch),
                                 use, limit_s), limit_s + 2 * CLOSE_WAIT_S)


def running_stdio_servers() -> int:
    """How many stdio servers this process keeps running."""
    pool = _POOL
    return len(pool.sessions) if pool is not None and pool.pid == os.getpid() else 0


def close_mcp_sessions(timeout_s: float = 30.0) -> None:
    """Stop every stdio server this process keeps running (at exit; tests)."""
    with _POOL_LOCK:
        pool = _POOL if _POOL is not None and _POOL.pid == os.getpid() else None
    if pool is not None and pool.thread.is_alive():
        try:
            pool.submit(pool.close_all(), timeout_s)
        except McpFault:
            logger.warning("MCP stdio servers did not all stop within %s s", timeout_s)


atexit.register(close_mcp_sessions)
