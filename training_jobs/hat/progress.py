"""How a training stage reports to whoever runs it (a console job, the CLI, a test), and stops when asked.

:class:`ProgressCallback` is a ``transformers.TrainerCallback`` shared by every stage: on each log it reports
a point (step, loss, learning rate, reward components, tokens/s, samples/s, ETA); at each step's end it asks
whether to stop, and then stops *cooperatively*: the trainer saves a checkpoint at that step and returns, so
the job can resume from it later. The reporter is a plain object with three methods; nothing here knows about
Django.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from transformers import TrainerCallback


class StageReporter(Protocol):
    def report(self, point: dict[str, Any]) -> None:
        """One progress point: ``step``, ``max_steps`` and whatever the trainer logged (numbers only)."""

    def log(self, line: str) -> None:
        """A line for the job's log."""

    def should_stop(self) -> bool:
        """True once the job was asked to stop. Asked at every step's end: a reporter whose answer costs
        something (a database read) keeps it for a while itself."""


class NullReporter:
    """Reports nowhere and never stops (a stage run from a script)."""

    def report(self, point: dict[str, Any]) -> None:
        pass

    def log(self, line: str) -> None:
        pass

    def should_stop(self) -> bool:
        return False


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


class ProgressCallback(TrainerCallback):
    """Reports each logged step and stops the trainer (saving a checkpoint first) when the reporter says so."""

    def __init__(self, reporter: StageReporter, *, clock: Callable[[], float] = time.monotonic):
        self.reporter = reporter
        self.clock = clock
        self.stopped = False  # the trainer was stopped on request (not at max_steps)
        self._t0 = self._first_step = None
        self._last: tuple[float, float | None, int] | None = None  # (time, num_tokens, step) of the last point

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0, self._first_step = self.clock(), state.global_step  # a resumed run starts past 0
        self._last = (self._t0, None, state.global_step)
        self.reporter.log(f"training from step {state.global_step} to {state.max_steps}")
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        now = self.clock()
        point: dict[str, Any] = {"step": state.global_step, "max_steps": state.max_steps}
        for key, value in (logs or {}).items():
            number = _number(value)
            if number is not None:
                point[key] = number
        done = state.global_step - (self._first_step or 0)
        if self._t0 is not None and done > 0:
            elapsed = now - self._t0
            point["eta_s"] = round(elapsed / done * max(state.max_steps - state.global_step, 0), 1)
            batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)
            point["samples_per_s"] = round(done * batch / elapsed, 3) if elapsed > 0 else None
        tokens = point.get("num_tokens")
        if self._last is not None and tokens is not None and self._last[1] is not None and now > self._last[0]:
            point["tokens_per_s"] = round((tokens - self._last[1]) / (now - self._last[0]), 1)
        self._last = (now, tokens, state.global_step)
        self.reporter.report({k: v for k, v in point.items() if v is not None})
        return control

    def on_step_end(self, args, state, control, **kwargs):
        stop = self.reporter.should_stop()
        if _world_size() > 1:
            # every process must stop at the same step (or the others wait in the next all-reduce forever): they
            # agree on it each step, the stop counting when any process was asked (the request reaches them apart)
            stop = _any_process(stop, args.device)
        if stop:
            self.stopped = True
            control.should_save = True  # a checkpoint at this step: the job resumes from here
            control.should_training_stop = True
            self.reporter.log(f"stopping at step {state.global_step} as asked; checkpoint saved")
        return control


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _any_process(flag: bool, device: Any) -> bool:
    import torch
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
