"""Celery tasks of serving: take ids, call one service (imported by streams.tasks, which Celery discovers)."""

from __future__ import annotations

from celery import shared_task  # noqa: F401


# LoRA adapters (helper "lora"): their own module, sent to serve.<host>
from streams.adapter_tasks import adapter_load, adapter_unload  # noqa: E402,F401
