"""The GIL switch interval (console.config gil_switch_s): shortened in the web process and in thread-pool workers
(where a token passes from a runner thread to the publisher thread), left at Python's default in prefork workers."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from django.test import override_settings

from console.celery import _prefer_latency_in_thread_workers
from console.config import load_settings


@pytest.fixture
def default_interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize(("pool", "expected"), [("threads", 0.0005), ("prefork", 0.005), ("solo", 0.005)])
def test_thread_workers_switch_sooner(default_interval, pool: str, expected: float) -> None:
    env = load_settings().model_copy(update={"gil_switch_s": 0.0005})
    with override_settings(ENV=env):
        _prefer_latency_in_thread_workers(sender=SimpleNamespace(pool_cls=pool))
    assert sys.getswitchinterval() == pytest.approx(expected)


def test_zero_keeps_pythons_default(default_interval) -> None:
    env = load_settings().model_copy(update={"gil_switch_s": 0})
    with override_settings(ENV=env):
        _prefer_latency_in_thread_workers(sender=SimpleNamespace(pool_cls="threads"))
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_the_setting_is_bounded(monkeypatch) -> None:
    monkeypatch.setenv("HAT_GIL_SWITCH_S", "1")
    with pytest.raises(SystemExit, match="gil_switch_s"):
        load_settings()


def test_the_web_process_switches_sooner(default_interval) -> None:
    import importlib

    import console.asgi

    importlib.reload(console.asgi)
    assert sys.getswitchinterval() == pytest.approx(load_settings().gil_switch_s)
