"""Celery tasks of serving: take ids, call one service (imported by streams.tasks, which Celery discovers).

Launches go to the ``serve`` queue (any host with a serve worker); a stop and the per-host check go to
``serve.<host>``, which only that host's serve worker consumes. At most once (acks_late off): a launch redelivered
after a crash would start a second server (server_run skips a record that already has a process anyway)."""

from __future__ import annotations

from celery import shared_task

# vLLM takes ~90 s to be ready on a loaded 2-core machine (a profile may allow up to an hour)
LAUNCH_TIME_LIMIT_S = 3700


@shared_task(name="streams.server_run", acks_late=False, time_limit=LAUNCH_TIME_LIMIT_S)
def server_run(instance_id: str) -> dict:
    from streams.services.serving import server_run as run

    instance = run(instance_id)
    return {"instance": instance_id, "status": instance.status, "host": instance.host, "port": instance.port}


@shared_task(name="streams.server_stop", acks_late=False, time_limit=120)
def server_stop(instance_id: str) -> dict:
    from streams.services.serving import server_stop_run

    instance = server_stop_run(instance_id)
    return {"instance": instance_id, "status": instance.status}


@shared_task(name="streams.servers_check", ignore_result=True, time_limit=60)
def servers_check() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): each host with live servers checks its own."""
    from streams.services.serving import servers_check as check

    return check()


@shared_task(name="streams.servers_check_host", ignore_result=True, time_limit=60)
def servers_check_host(host: str) -> list[str]:
    from streams.services.serving import servers_check_here

    return servers_check_here()


# LoRA adapters (helper "lora"): their own module, sent to serve.<host>
from streams.adapter_tasks import adapter_load, adapter_unload  # noqa: E402,F401
