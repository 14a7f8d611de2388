"""Health of the parts the console stands on: database, channel layer, job queue + worker.

`GET /health/` answers 200 when all are up and 503 otherwise. Anonymous callers (load balancers) get
only the overall status; signed-in staff with a role also get each check's detail and timing.
"""

from __future__ import annotations

import time
import uuid

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from console import roles

WORKER_TIMEOUT_S = 3.0


def _check_database() -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchone()
    return f"ok ({connection.vendor})"


def _check_channel_layer() -> str:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    token = uuid.uuid4().hex
    async_to_sync(layer.send)(channel, {"type": "health.ping", "token": token})
    message = async_to_sync(layer.receive)(channel)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned another message")
    return f"ok ({type(layer).__name__})"


def _check_worker() -> str:
    from console.tasks import ping

    result = ping.apply_async(expires=WORKER_TIMEOUT_S * 2)
    try:
        reply = result.get(timeout=WORKER_TIMEOUT_S)
    finally:
        result.forget()
    if reply != "pong":
        raise RuntimeError(f"unexpected reply {reply!r}")
    return "ok"


CHECKS = {"database": _check_database, "channel_layer": _check_channel_layer, "worker": _check_worker}


def run_checks() -> dict[str, dict]:
    report = {}
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            detail, ok = check(), True
        except Exception as exc:  # a health check reports failures, it never raises them
            detail, ok = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, False
        report[name] = {"ok": ok, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}
    return report


@require_GET
def health(request):
    report = run_checks()
    healthy = all(c["ok"] for c in report.values())
    body: dict = {"status": "ok" if healthy else "degraded"}
    if request.user.is_authenticated and roles.user_roles(request.user):
        body["checks"] = report
    return JsonResponse(body, status=200 if healthy else 503)
