"""Health of the console: liveness and readiness.

- ``GET /health/live``: the web process answers. Touches nothing (no database, no Redis), so a load balancer or
  an orchestrator restarts the web process only when the web process itself is stuck.
- ``GET /health/ready`` (and ``/health/``, kept for existing probes): the parts the console stands on, checked
  concurrently, each bounded to about a second: the database, the channel layer, the Celery broker, and the
  workers per queue (``celery``, ``interactive``, ``gpu``). Workers are asked with a broadcast control command, which a prefork
  worker's main process answers while a task runs: a busy worker is reported busy, with what it runs, not dead.
  200 when every check passes, 503 otherwise.

Anonymous callers (load balancers) get only the overall status; signed-in staff with a role also get each
check's detail and timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from console import roles

CHECK_TIMEOUT_S = 1.0  # each check; they run at the same time, so readiness answers within WORKERS_TIMEOUT_S
WORKER_REPLY_S = 0.5  # how long the broadcast to the workers collects replies...
WORKERS_TIMEOUT_S = WORKER_REPLY_S + CHECK_TIMEOUT_S  # ...after connecting (up to CHECK_TIMEOUT_S)


def required_queues() -> list[str]:
    """The queues some worker must consume: every task's default queue, the interactive queue (preview turns,
    live session runners) and the GPU queue of batch jobs (datasets, training, evaluations)."""
    return [settings.CELERY_TASK_DEFAULT_QUEUE, settings.INTERACTIVE_QUEUE, "gpu"]


def _check_database() -> str:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    finally:
        connection.close()  # this check's own thread: give its connection back
    return f"ok ({connection.vendor})"


async def _check_channel_layer() -> str:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    token = uuid.uuid4().hex
    await layer.send(channel, {"type": "health.ping", "token": token})
    message = await layer.receive(channel)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned another message")
    return f"ok ({type(layer).__name__})"


def _broker_connection():
    """A fresh broker connection whose every socket operation gives up within CHECK_TIMEOUT_S."""
    from console.celery import app

    options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS}
    if settings.CELERY_BROKER_URL.startswith(("redis", "rediss")):
        options.update(socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S,
                       retry_on_timeout=False)
    return app.connection_for_write(settings.CELERY_BROKER_URL, connect_timeout=CHECK_TIMEOUT_S,
                                    transport_options=options)


def _check_broker() -> str:
    with _broker_connection() as conn:
        conn.connect()  # opens a channel: the Redis transport pings the server
        channel = conn.default_channel
        client = getattr(channel, "client", None)
        if client is not None and hasattr(client, "ping"):
            client.ping()
        return f"ok ({conn.transport_cls})"


def _broadcast(command: str) -> dict[str, Any]:
    from console.celery import app

    with _broker_connection() as conn:
        replies = app.control.broadcast(command, reply=True, timeout=WORKER_REPLY_S, connection=conn)
    return {name: answer for reply in replies or [] for name, answer in reply.items()}


def _check_workers() -> tuple[str, dict]:
    """Which worker consumes which queue, and what each runs now (two broadcasts at once)."""
    with ThreadPoolExecutor(2) as pool:
        queues_f, active_f = pool.submit(_broadcast, "active_queues"), pool.submit(_broadcast, "active")
        queues, active = queues_f.result(), active_f.result()
    workers = {}
    for name, consumed in queues.items():
        running = active.get(name) or []
        workers[name] = {"queues": sorted(q["name"] for q in consumed),
                         "state": "busy" if running else "idle",
                         "running": [{"task": t.get("name"), "id": t.get("id")} for t in running]}
    by_queue = {q: sorted(n for n, w in workers.items() if q in w["queues"]) for q in required_queues()}
    missing = [q for q, names in by_queue.items() if not names]
    parts = []
    for q, names in by_queue.items():
        described = [f"{n} ({workers[n]['state']}" + (f": {', '.join(r['task'] for r in workers[n]['running'])})"
                                                     if workers[n]["running"] else ")") for n in names]
        parts.append(f"{q}: {', '.join(described) or 'no worker'}")
    detail = "; ".join(parts)
    if missing:
        raise RuntimeError(f"no worker answered for queue {', '.join(missing)} ({detail})")
    return f"ok ({detail})", {"workers": workers, "queues": by_queue}


CHECKS = {"database": _check_database, "channel_layer": _check_channel_layer, "broker": _check_broker,
          "workers": _check_workers}


def _in_thread(fn) -> asyncio.Future:
    """Run ``fn`` on a daemon thread of its own: a check stuck past the deadline is abandoned, never waited for
    (its sockets have timeouts, so it ends soon after)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, error):
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def target():
        try:
            result, error = fn(), None
        except BaseException as exc:  # reported as the check's failure
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the request ended (its loop closed) before this abandoned check did
            pass

    threading.Thread(target=target, name="health-check", daemon=True).start()
    return future


async def _run_check(name: str, check) -> dict:
    started = time.perf_counter()
    report: dict[str, Any] = {}
    timeout = WORKERS_TIMEOUT_S if name == "workers" else CHECK_TIMEOUT_S
    try:
        call = check() if asyncio.iscoroutinefunction(check) else _in_thread(check)
        out = await asyncio.wait_for(call, timeout=timeout)
        detail, extra = out if isinstance(out, tuple) else (out, {})
        report.update(ok=True, detail=detail, **extra)
    except TimeoutError:
        report.update(ok=False, detail=f"timed out after {timeout:g} s")
    except Exception as exc:  # a health check reports failures, it never raises them
        report.update(ok=False, detail=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    report["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return report


async def run_checks() -> dict[str, dict]:
    reports = await asyncio.gather(*(_run_check(name, check) for name, check in CHECKS.items()))
    return dict(zip(CHECKS, reports))


@sync_to_async
def _shows_details(request) -> bool:
    return bool(request.user.is_authenticated and roles.user_roles(request.user))


@require_GET
async def ready(request):
    report = await run_checks()
    healthy = all(c["ok"] for c in report.values())
    body: dict = {"status": "ok" if healthy else "degraded"}
    if await _shows_details(request):
        body["checks"] = report
    return JsonResponse(body, status=200 if healthy else 503)


@require_GET
async def live(request):
    return JsonResponse({"status": "ok"})


health = ready  # /health/: readiness, as before the split
