#!/usr/bin/env python3
"""A small process supervisor for `make run`: starts each ``NAME=COMMAND``, restarts any that exits, stops all
together.

    python scripts/supervise.py [--stop-timeout S] 'web=python -m console.web_server ...' 'worker=celery ... worker ...' ...

- A process that exits (crashed, killed, "Unrecoverable error") is started again after a back-off: 1 s,
  doubling up to 30 s while it keeps dying within 10 s of its start, back to 1 s once it stayed up.
- SIGINT/SIGTERM (Ctrl-C) stops everything: SIGTERM to each process group (a Celery worker's pool processes
  too), then SIGKILL to the groups still alive after ``--stop-timeout`` seconds (a worker stuck in warm shutdown
  does not hold the stop forever).
- Each output line is prefixed with the process name.

Standard library only. Production uses systemd units with the same policy (deploy/systemd/).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

BACKOFF_START_S, BACKOFF_MAX_S, STAYED_UP_S = 1.0, 30.0, 10.0


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} supervise | {message}", flush=True)


class Child:
    def __init__(self, name: str, command: str, width: int):
        self.name, self.command, self.width = name, command, width
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.restart_at: float | None = None
        self.backoff = BACKOFF_START_S
        self.starts = 0

    def start(self) -> None:
        # its own session (process group): signals reach its children too, and a Ctrl-C reaches it only from us
        self.proc = subprocess.Popen(["bash", "-c", f"exec {self.command}"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.started_at, self.restart_at = time.monotonic(), None
        self.starts += 1
        log(f"{self.name} started (pid {self.proc.pid})")
        threading.Thread(target=self._copy_output, args=(self.proc,), daemon=True).start()

    def _copy_output(self, proc: subprocess.Popen) -> None:
        prefix = f"{self.name:<{self.width}} | ".encode()
        for line in iter(proc.stdout.readline, b""):
            sys.stdout.buffer.write(prefix + line)
            sys.stdout.buffer.flush()

    def signal_group(self, sig: int) -> None:
        """The whole group: the process and what it started (a Celery worker's pool processes)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def group_alive(self) -> bool:
        """The process or anything left in its group (a pool process whose parent died)."""
        if self.proc is None:
            return False
        self.proc.poll()
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False


def supervise(children: list[Child], stop_timeout: float) -> int:
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    for child in children:
        child.start()
    while not stopping.wait(0.2):
        now = time.monotonic()
        for child in children:
            if child.restart_at is None and not child.alive():
                rc = child.proc.returncode
                child.signal_group(signal.SIGKILL)  # what it left behind
                up = now - child.started_at
                if up >= STAYED_UP_S:
                    child.backoff = BACKOFF_START_S
                delay, child.backoff = child.backoff, min(child.backoff * 2, BACKOFF_MAX_S)
                child.restart_at = now + delay
                log(f"{child.name} exited with {rc} after {up:.1f} s; restarting in {delay:g} s")
            elif child.restart_at is not None and now >= child.restart_at:
                child.start()
    log(f"stopping: SIGTERM, then SIGKILL after {stop_timeout:g} s")
    for child in children:
        child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + stop_timeout
    while any(c.group_alive() for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    for child in children:
        if child.group_alive():
            log(f"{child.name} still running after {stop_timeout:g} s: SIGKILL")
            child.signal_group(signal.SIGKILL)
    for child in children:
        if child.proc is not None:
            child.proc.wait()
    log("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop-timeout", type=float, default=30.0,
                        help="seconds between SIGTERM and SIGKILL when stopping (default 30)")
    parser.add_argument("process", nargs="+", help="NAME=COMMAND (run by bash)")
    args = parser.parse_args(argv)
    specs = []
    for item in args.process:
        name, sep, command = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z][\w-]*", name) or not command.strip():
            parser.error(f"expected NAME=COMMAND, got {item!r}")
        specs.append((name, command))
    if len({n for n, _ in specs}) != len(specs):
        parser.error("process names must be unique")
    width = max(len(n) for n, _ in specs)
    return supervise([Child(n, c, width) for n, c in specs], args.stop_timeout)


if __name__ == "__main__":
    sys.exit(main())
