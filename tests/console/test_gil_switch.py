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


def test_the_web_process_switches_sooner(default_interval, unfrozen) -> None:
    import importlib

    import console.asgi

    importlib.reload(console.asgi)
    assert sys.getswitchinterval() == pytest.approx(load_settings().gil_switch_s)


# --- the start-up heap frozen out of full collections (console.config gc_freeze) --------------------------------


@pytest.fixture
def unfrozen():
    import gc

    gc.unfreeze()
    celery_module._latency_worker[0] = False
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # Python's defaults (an earlier test may have loaded console.asgi)
    yield gc
    gc.unfreeze()  # the test process keeps collecting everything, as often as before
    gc.set_threshold(*thresholds)
    celery_module._latency_worker[0] = False


import console.celery as celery_module  # noqa: E402


@pytest.mark.parametrize(("pool", "frozen"), [("threads", True), ("prefork", False)])
def test_a_thread_worker_freezes_its_startup_heap_when_ready(default_interval, unfrozen, pool: str,
                                                             frozen: bool) -> None:
    env = load_settings().model_copy(update={"gc_freeze": True})
    with override_settings(ENV=env):
        celery_module._prefer_latency_in_thread_workers(sender=SimpleNamespace(pool_cls=pool))
        celery_module._freeze_thread_worker_heap(sender=None)
    assert (unfrozen.get_freeze_count() > 10_000) is frozen
    assert (unfrozen.get_threshold()[2] == env.gc_full_every) is frozen  # full collections spaced out likewise


def test_gc_freeze_off_leaves_the_collector_alone(default_interval, unfrozen) -> None:
    env = load_settings().model_copy(update={"gc_freeze": False})
    with override_settings(ENV=env):
        celery_module._prefer_latency_in_thread_workers(sender=SimpleNamespace(pool_cls="threads"))
        celery_module._freeze_thread_worker_heap(sender=None)
    assert unfrozen.get_freeze_count() == 0


def test_the_web_process_freezes_its_startup_heap(default_interval, unfrozen) -> None:
    import importlib

    import console.asgi

    importlib.reload(console.asgi)
    assert unfrozen.get_freeze_count() > 10_000
    assert unfrozen.get_threshold()[2] == load_settings().gc_full_every


def test_freezing_keeps_later_garbage_collectable(unfrozen) -> None:
    from console.latency_tuning import freeze_startup_heap

    freeze_startup_heap()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle made after the freeze
    del a, b
    assert unfrozen.collect() >= 2


def test_benchmarks_can_log_gc_pauses(tmp_path) -> None:
    import gc
    import os

    from console.latency_tuning import log_gc_pauses

    before = list(gc.callbacks)
    log_gc_pauses(str(tmp_path), min_ms=0)
    try:
        gc.collect()
    finally:
        gc.callbacks[:] = before
    rows = [line.split() for line in (tmp_path / f"{os.getpid()}.gc").read_text().splitlines()]
    assert ["2"] == [gen for _, gen, _ in rows[-1:]]  # the full collection asked for, with its duration
    assert float(rows[-1][2]) >= 0


def test_full_collections_come_after_the_set_number_of_middle_ones(unfrozen) -> None:
    from console.latency_tuning import space_full_collections

    unfrozen.set_threshold(700, 10, 10)
    space_full_collections(250)
    assert unfrozen.get_threshold() == (700, 10, 250)  # the younger generations keep their thresholds


def test_the_full_collection_spacing_is_bounded(monkeypatch) -> None:
    monkeypatch.setenv("HAT_GC_FULL_EVERY", "1")
    with pytest.raises(SystemExit, match="gc_full_every"):
        load_settings()
