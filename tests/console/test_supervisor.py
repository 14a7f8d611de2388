"""scripts/supervise.py (what `make run` runs): a process that dies is started again, a real Celery worker killed
with SIGKILL comes back, and stopping kills (SIGKILL) what ignores SIGTERM past the stop timeout. The deployment
files start the workers as console/celery.py says."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from console.celery import WORKER_OPTIONS, WORKER_POOL

ROOT = Path(__file__).resolve().parents[2]
SUPERVISE = ROOT / "scripts" / "supervise.py"


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state  # a zombie waiting for init is dead too


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def _supervise(*specs: str, stop_timeout: float, tmp_path: Path, env: dict | None = None):
    log = open(tmp_path / "supervise.log", "w")
    proc = subprocess.Popen([sys.executable, str(SUPERVISE), "--stop-timeout", str(stop_timeout), *specs],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, log


def test_restarts_what_exits_and_kills_what_ignores_sigterm(tmp_path):
    starts, pids = tmp_path / "starts", tmp_path / "pids"
    flaky = f"bash -c 'echo start >> {starts}; sleep 0.2; exit 3'"
    stuck = f"bash -c \"trap '' TERM; sleep 1000 & echo \\$\\$ \\$! > {pids}; wait\""
    proc, log = _supervise(f"flaky={flaky}", f"stuck={stuck}", stop_timeout=1.0, tmp_path=tmp_path)
    try:
        # started, then again after 1 s and 2 s of back-off
        assert _wait(lambda: starts.exists() and len(starts.read_text().split()) >= 3, 15), \
            (tmp_path / "supervise.log").read_text()
        assert _wait(lambda: pids.exists() and len(pids.read_text().split()) == 2, 5)
        stuck_pids = [int(p) for p in pids.read_text().split()]
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(timeout=10) == 0
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    out = (tmp_path / "supervise.log").read_text()
    assert re.search(r"flaky exited with 3 after [\d.]+ s; restarting in 1 s", out)
    assert "restarting in 2 s" in out
    assert "stuck still running after 1 s: SIGKILL" in out
    assert 1.0 <= took < 4.0, took
    assert all(_wait(lambda pid=pid: _gone(pid), 5) for pid in stuck_pids)  # the shell and its child


def test_bad_arguments_are_refused(tmp_path):
    for specs in (["nameless"], ["a=sleep 1", "a=sleep 2"], ["=sleep 1"]):
        result = subprocess.run([sys.executable, str(SUPERVISE), *specs], capture_output=True, text=True)
        assert result.returncode == 2 and "error" in result.stderr, specs


@pytest.mark.skipif(not settings.ENV.redis_url, reason="a broker other processes can reach")
@pytest.mark.django_db
def test_a_killed_worker_comes_back(tmp_path):
    from console.celery import app

    name = f"supervised-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    queue = name.split("@")[0]
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    if db["ENGINE"].endswith("postgresql"):
        env["DATABASE_URL"] = (f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                               f"{db['PORT'] or 5432}/{db['NAME']}")
    worker = (f"{sys.executable} -m celery -A console worker -Q {queue} -n {name} --concurrency 1 "
              f"--pool {WORKER_POOL} {' '.join(WORKER_OPTIONS)} -l info")
    proc, log = _supervise(f"worker={worker}", stop_timeout=20, tmp_path=tmp_path, env=env)

    def worker_pid() -> int | None:
        stats = app.control.inspect([name], timeout=1.0).stats() or {}
        return stats.get(name, {}).get("pid")

    try:
        assert _wait(lambda: worker_pid() is not None, 90), (tmp_path / "supervise.log").read_text()
        first = worker_pid()
        os.kill(first, signal.SIGKILL)
        assert _wait(lambda: worker_pid() not in (None, first), 90), (tmp_path / "supervise.log").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert _wait(lambda: not app.control.ping([name], timeout=0.5), 5)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    assert re.search(r"worker exited with -9 after", (tmp_path / "supervise.log").read_text())


def test_deployment_starts_workers_as_console_celery_says():
    makefile = (ROOT / "Makefile").read_text()
    unit = (ROOT / "deploy" / "systemd" / "hat-console-worker@.service").read_text()
    for flag in [f"--pool {WORKER_POOL}", *WORKER_OPTIONS]:
        assert flag in makefile and flag in unit, flag
    assert " -B" not in makefile and " -B" not in unit  # the sweeps run in the scheduler
    assert "manage.py run_scheduler" in makefile
    assert (ROOT / "deploy" / "systemd" / "hat-console-scheduler.service").read_text().count("run_scheduler") == 2
