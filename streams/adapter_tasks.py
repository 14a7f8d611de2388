"""Celery tasks of LoRA adapters (imported by streams.serving_tasks): sent to queue ``serve.<host>`` of the server's
host, because vLLM reads the adapter directory from that host's disk. Take ids, call one service.

At most once (acks_late off): a load redelivered after vLLM said yes would fail with "already loaded" and record a
false failure."""

from __future__ import annotations

from celery import shared_task

__all__ = ["adapter_load", "adapter_unload"]


@shared_task(name="streams.adapter_load", acks_late=False, time_limit=180)
def adapter_load(instance_id: str, adapter_id: str, name: str, user_id=None) -> dict:
    from streams.services.adapters import adapter_load_run

    return adapter_load_run(instance_id=instance_id, adapter_id=adapter_id, name=name, user_id=user_id)


@shared_task(name="streams.adapter_unload", acks_late=False, time_limit=180)
def adapter_unload(instance_id: str, name: str, user_id=None) -> dict:
    from streams.services.adapters import adapter_unload_run

    return adapter_unload_run(instance_id=instance_id, name=name, user_id=user_id)
