"""Celery tasks of serving: take ids, call one service (imported by streams.tasks, which Celery discovers)."""

from __future__ import annotations

from celery import shared_task  # noqa: F401
