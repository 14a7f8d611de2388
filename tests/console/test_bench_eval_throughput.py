"""bench/eval_throughput.py stays runnable: a smoke run with tiny sizes (its scratch database, model server and worker,
one pair of two cases) prints the ratio and drops its own database; asked to use an existing database it refuses and
leaves it alone. The figures themselves are the bench's to print, never asserted here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.console.test_bench_safety import BENCH, ROOT, _databases, _sentinel_intact, needs_postgres, sentinels  # noqa: F401,E501


def _run(sentinel: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    from tests.console.test_bench_safety import _url

    env = dict(os.environ, DATABASE_URL=_url(sentinel), HAT_LOG_LEVEL="WARNING")
    return subprocess.run([sys.executable, str(BENCH / "eval_throughput.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@needs_postgres
def test_a_tiny_run_prints_the_ratio_and_drops_its_database(sentinels):
    proc = _run(sentinels, "--cases", "2", "--pairs", "1", timeout=600)
    out = proc.stdout
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: the ratio missed the target on a busy machine
    assert re.search(r"ratio job/plain: median of per-pair ratios \d+\.\d+", out), out[-3000:]
    assert re.search(r"samples/s over the run: plain \d+\.\d+, job \d+\.\d+", out)
    made = re.search(r"created scratch database (hat_evalbench_\d+_[0-9a-f]+)", proc.stderr).group(1)
    assert _databases(made) == [] and _sentinel_intact(sentinels)


@needs_postgres
def test_it_refuses_an_existing_database(sentinels):
    proc = _run(sentinels, "--scratch-db", sentinels, timeout=120)
    assert proc.returncode == 2 and f"refused: database '{sentinels}' already exists" in proc.stderr
    assert _sentinel_intact(sentinels)
