"""Paired, alternating step timing of two trainers, so a shared machine's drift and neighbours' load hit both.

Two trainers (the plain TRL script and the console's job) train in two threads of one process and take turns
step by step: pair 1 runs A then B, pair 2 B then A, and so on (A B B A A B ...). While one side holds the turn
the other waits on a condition (no CPU, GIL released), so each step runs alone and next to its partner in time.
A step's time runs from the moment its side gets the turn at ``on_step_begin`` to the moment it hands the turn
back at its next ``on_step_begin`` (or at ``on_train_end``): the forward/backward/optimizer step *and* whatever
its side does between steps -- the callbacks at the step's end, logging, the job's progress writes and cancel
check, a checkpoint, fetching the next batch. Setup before the first step (model loading, tokenisation) is out,
on both sides. No side starts its first step until both are ready.

Plain Python (threading + transformers' TrainerCallback); the statistics are pure functions.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

SIDES = ("plain", "job")


def pair_order(k: int, sides: tuple[str, str] = SIDES) -> tuple[str, str]:
    """The order of pair ``k`` (0-based): even pairs A then B, odd pairs B then A."""
    return sides if k % 2 == 0 else (sides[1], sides[0])


def turn_order(pairs: int, sides: tuple[str, str] = SIDES) -> list[str]:
    """Who runs each step, in time order, for ``pairs`` pairs: A B B A A B ..."""
    return [side for k in range(pairs) for side in pair_order(k, sides)]


def next_side(done: dict[str, int], sides: tuple[str, str] = SIDES) -> str:
    """Whose step comes next, given how many steps each side has done (always consistent with turn_order)."""
    a, b = done.get(sides[0], 0), done.get(sides[1], 0)
    if a != b:
        return sides[0] if a < b else sides[1]
    return pair_order(a, sides)[0]


@dataclass
class PairedRatio:
    """Per-pair throughput ratio job/plain = plain step time / job step time (same batch on both sides)."""

    median: float
    q1: float
    q3: float
    n: int
    ratios: list[float] = field(default_factory=list)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def paired_ratio(plain_s: list[float], job_s: list[float], *, skip: int = 0) -> PairedRatio:
    """The median (and quartiles) of the per-pair ratios plain_s[i] / job_s[i] -- not a ratio of medians or of
    sums: each ratio compares two steps that ran next to each other. ``skip``: leading pairs left out (warm-up).
    Pairs beyond the shorter list are left out."""
    n = min(len(plain_s), len(job_s))
    ratios = [p / j for p, j in zip(plain_s[skip:n], job_s[skip:n], strict=True) if j > 0]
    if not ratios:
        raise ValueError("no complete pair of steps to compare")
    med = statistics.median(ratios)
    if len(ratios) == 1:
        return PairedRatio(med, med, med, 1, ratios)
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return PairedRatio(med, q1, q3, len(ratios), ratios)


def whole_run_ratio(plain_s: list[float], job_s: list[float]) -> float:
    """The old whole-run figure: total plain step time / total job step time (= samples/s ratio job/plain)."""
    return sum(plain_s) / sum(job_s)


class Alternator:
    """Hands the turn between the sides in pair order and times each side's steps (see the module docstring).
    A side that ends (or fails) is marked done; the other then runs on alone, so no thread waits forever."""

    def __init__(self, sides: tuple[str, str] = SIDES, *, clock=time.perf_counter, cpu_clock=time.process_time,
                 timeout_s: float = 600.0):
        self.sides = sides
        self.clock, self.cpu_clock = clock, cpu_clock
        self.timeout_s = timeout_s
        self.cond = threading.Condition()
        self.ready: set[str] = set()
        self.ended: set[str] = set()
        self.holder: str | None = None
        self.started_at = self.cpu_started_at = 0.0
        self.times: dict[str, list[float]] = {s: [] for s in sides}  # wall seconds per step
        # CPU seconds of the whole process per step: only one side computes at a time, so this is that step's
        # CPU, and it counts no time spent waiting for a core other programs hold (less noise on a shared machine)
        self.cpu_times: dict[str, list[float]] = {s: [] for s in sides}
        self.trace: list[str] = []  # who ran, in time order

    def _may_go(self, side: str) -> bool:
        if side in self.ended:
            return True  # a side that ended keeps no turn
        if self.holder is not None:
            return False
        if any(s not in self.ready and s not in self.ended for s in self.sides):
            return False  # the other side is still loading: no step runs beside its setup
        other = next(s for s in self.sides if s != side)
        return other in self.ended or next_side({s: len(t) for s, t in self.times.items()}, self.sides) == side

    def begin_step(self, side: str) -> None:
        """At ``on_step_begin``: end this side's previous step (if any), then wait for its turn and start timing."""
        with self.cond:
            self._release(side)
            self.ready.add(side)
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self._may_go(side), timeout=self.timeout_s):
                raise TimeoutError(f"{side}: no turn within {self.timeout_s:.0f} s (the other side hangs?)")
            self.holder, self.started_at, self.cpu_started_at = side, self.clock(), self.cpu_clock()
            self.trace.append(side)

    def wait_ready(self, side: str) -> None:
        """Until ``side`` waits at its first step (or ended): its setup is done, the other's may start."""
        with self.cond:
            if not self.cond.wait_for(lambda: side in self.ready or side in self.ended, timeout=self.timeout_s):
                raise TimeoutError(f"{side}: not ready within {self.timeout_s:.0f} s")

    def end(self, side: str, *, wait: bool = True) -> None:
        """At ``on_train_end`` (or, ``wait=False``, when the side fails): end its last step; the other side runs on
        alone. ``wait``: return only once every side has ended, so what a side does after training (the job saves
        its model and registers it) does not run beside the other side's last steps."""
        with self.cond:
            self._release(side)
            self.ended.add(side)
            self.cond.notify_all()
            if wait:
                self.cond.wait_for(lambda: all(s in self.ended for s in self.sides), timeout=self.timeout_s)

    def _release(self, side: str) -> None:
        if self.holder == side:
            self.times[side].append(self.clock() - self.started_at)
            self.cpu_times[side].append(self.cpu_clock() - self.cpu_started_at)
            self.holder = None

    def callback(self, side: str):
        """A ``transformers.TrainerCallback`` that plays ``side``."""
        from transformers import TrainerCallback

        alternator = self

        class _Turns(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                alternator.begin_step(side)
                return control

            def on_train_end(self, args, state, control, **kwargs):
                alternator.end(side)
                return control

        return _Turns()
