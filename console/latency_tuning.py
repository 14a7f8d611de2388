"""Interpreter settings for the processes a viewer waits on: the web process and the interactive worker.

Both pass every token of every session through Python threads and an event loop, so two interpreter defaults land
on the path a viewer waits on: the GIL switch interval (a token handed between threads waits for a busy one) and
full garbage collections (a pause that walks the whole heap). Batch workers keep Python's defaults.
"""

from __future__ import annotations

import gc
import sys


def prefer_latency(*, gil_switch_s: float) -> None:
    """Set at start-up, before the process serves anything: ``gil_switch_s`` 0 keeps Python's 5 ms."""
    if gil_switch_s > 0:
        sys.setswitchinterval(gil_switch_s)


def space_full_collections(full_every: int) -> None:
    """Run a full collection only after ``full_every`` generation-1 collections (Python: 10): each walks every object
    the process made since start-up, a pause every viewer waits through, so fewer of them fall on fewer turns."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, full_every)


def freeze_startup_heap() -> int:
    """Leave what start-up built (modules, settings, URL maps, compiled schemas) out of every later collection and
    return how many objects were frozen. Call once everything the process needs is imported. Garbage first, so none
    is frozen; what start-up keeps lives as long as the process, so freezing it loses nothing. Later objects are
    collected as before, only a full collection no longer walks the start-up heap as well."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def log_gc_pauses(directory: str, *, min_ms: float = 1.0) -> None:
    """Benchmarks only (``HAT_GC_PAUSE_LOG``): append each collection of at least ``min_ms`` as
    ``<unix time> <generation> <ms>`` to ``<directory>/<pid>.gc``, so a benchmark can tell GC pauses from the rest."""
    import os
    import time

    os.makedirs(directory, exist_ok=True)
    out = open(os.path.join(directory, f"{os.getpid()}.gc"), "a", buffering=1)  # noqa: SIM115 (process lifetime)
    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        ms = (time.perf_counter() - started[0]) * 1000
        if ms >= min_ms:
            out.write(f"{time.time():.3f} {info['generation']} {ms:.2f}\n")

    gc.callbacks.append(on_gc)
