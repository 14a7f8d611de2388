"""Database connections under load: HTTP requests + WebSocket viewers against the web process (uvicorn), with and without the pool.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/db_load.py [--rps 20] [--viewers 50] [--seconds 60] [--modes pool,no-pool]

DATABASE_URL names the server only: the bench creates its own scratch database (``hat_dbload_<pid>_<hex>``,
:mod:`bench.scratch_db`), migrates and seeds it, and drops exactly that database at the end (also on failure,
Ctrl-C or SIGTERM). For each mode
it starts the web process (``console.web_server``: uvicorn serving ``console.asgi``) on that database and REDIS_URL (the Redis channel layer) with
- ``pool``: Django's psycopg pool, ``HAT_DB_POOL_MAX`` (default 8) connections for the web process;
- ``no-pool``: ``HAT_DB_POOL_MAX=0``, a connection opened and closed per request (``CONN_MAX_AGE=0``);
and, for ``--seconds``, sends ``--rps`` requests a second (open loop: a slow answer does not slow the sender)
over a mix of pages and APIs as a signed-in campaign manager, while ``--viewers`` WebSocket viewers stay
connected to one preview room. Every 0.2 s it counts the connections PostgreSQL holds to the scratch
database (``pg_stat_activity``). It prints, per mode: requests, server errors (5xx, connection failures,
timeouts), p50/p95 latency, viewers still connected at the end, and the most connections seen.

PASS: the pooled mode has 0 errors, every viewer stays connected, and its connection count never exceeds
the pool's bound (``HAT_DB_POOL_MAX`` plus the few connections of the bench process itself).
The issue that asked for this saw ~95 connections and 2-3 % failed requests with ``conn_max_age=60``.
Wall-clock figures on a shared machine: latency depends on what else runs; the counts do not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scratch_db import ScratchDatabase, ScratchRefused, server_url  # noqa: E402

PATHS = ["/", "/harnesses/", "/api/harnesses/", "/preview/", "/api/audit/", "/timeline/", "/health/live"]
# the bench process itself: its ORM connection (seed, session) and the pg_stat_activity probe
BENCH_OWN_CONNECTIONS = 2


def log(msg: str) -> None:
    print(f"[db_load] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _admin(db_url: str):
    import psycopg

    return psycopg.connect(server_url(db_url, "postgres"), autocommit=True)


class ConnectionProbe(threading.Thread):
    """Counts the scratch database's connections every ``every`` seconds (its own connection included)."""

    def __init__(self, db_url: str, name: str, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.db_url, self.name, self.every = db_url, name, every
        self.samples: list[int] = []
        self._halt = threading.Event()

    def run(self) -> None:
        with _admin(self.db_url) as conn:
            while not self._halt.is_set():
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.name,))
                self.samples.append(int(row.fetchone()[0]))
                self._halt.wait(self.every)

    def stop(self) -> list[int]:
        self._halt.set()
        self.join(5)
        return self.samples


def start_web(env: dict, log_path: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    from training_jobs.tiny_model.serve import free_port

    port = free_port()
    out = open(log_path, "wb")  # noqa: SIM115
    from console.web_server import web_server_argv

    proc = subprocess.Popen([sys.executable, *web_server_argv("127.0.0.1", port, access_log=False,
                                                              log_level="warning")],
                            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/accounts/login/", timeout=2, trust_env=False).status_code == 200:
                return proc, url
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the web process did not start; see {log_path}")
        time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


async def http_load(url: str, cookie: str, rps: float, seconds: float) -> dict:
    import httpx

    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors: list[str] = []
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=url, headers={"Cookie": cookie}, timeout=30, limits=limits,
                                 trust_env=False) as client:
        async def one(path: str) -> None:
            started = time.perf_counter()
            try:
                r = await client.get(path)
            except httpx.HTTPError as exc:
                errors.append(f"{path}: {type(exc).__name__}")
                return
            latencies.append((time.perf_counter() - started) * 1000)
            statuses[str(r.status_code)] = statuses.get(str(r.status_code), 0) + 1
            if r.status_code >= 500:
                errors.append(f"{path}: {r.status_code} {r.text[:120]!r}")

        tasks = []
        t0 = time.perf_counter()
        n = int(rps * seconds)
        for i in range(n):  # open loop: request i goes out at t0 + i/rps whatever the earlier ones do
            delay = t0 + i / rps - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(PATHS[i % len(PATHS)])))
        await asyncio.gather(*tasks)
    return {"requests": n, "statuses": statuses, "errors": errors, "latencies": latencies}


async def viewers_hold(ws_url: str, origin: str, cookie: str, count: int, until: asyncio.Event) -> dict:
    """``count`` viewers connect, read their backlog and stay; returns how many were still open at the end."""
    from websockets.asyncio.client import connect

    sem = asyncio.Semaphore(10)
    connected: list = []
    failures: list[str] = []

    async def one() -> None:
        try:
            async with sem:
                ws = await connect(ws_url, additional_headers={"Cookie": cookie, "Origin": origin}, open_timeout=60,
                                   ping_interval=None, max_size=None)
            connected.append(ws)
            while not until.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(ws.recv(), 1.0)
        except Exception as exc:  # noqa: BLE001 — a viewer that drops is a finding, not a crash of the bench
            if not until.is_set():  # after the end the bench closes them itself
                failures.append(f"{type(exc).__name__}: {exc}"[:200])

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    await until.wait()
    open_at_end = sum(1 for ws in connected if ws.state.name == "OPEN")
    for ws in connected:
        with contextlib.suppress(Exception):
            await ws.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"connected": len(connected), "open_at_end": open_at_end, "failures": failures}


async def one_mode(url: str, cookie: str, room_id: str, args) -> dict:
    until = asyncio.Event()
    ws_base = url.replace("http://", "ws://")
    viewers = asyncio.create_task(viewers_hold(f"{ws_base}/ws/preview/{room_id}/", url, cookie, args.viewers, until))
    await asyncio.sleep(min(10.0, 0.2 * args.viewers))  # let the viewers connect before the requests start
    load = await http_load(url, cookie, args.rps, args.seconds)
    until.set()
    return {"load": load, "viewers": await viewers}


def prepare(env: dict) -> tuple[str, str]:
    """Migrate + seed the scratch database; a session cookie for alice and a preview room she owns."""
    for cmd in (["migrate", "--noinput", "-v", "0"], ["seed_demo"]):
        done = subprocess.run([sys.executable, "manage.py", *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "HAT_DB_POOL_MAX", "HAT_SECRET_KEY")})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from harness_editor.models import HarnessVersion
    from streams import services as stream_services
    from streams.models import ModelEndpoint

    alice = get_user_model().objects.get(username="alice")
    client = Client()
    client.force_login(alice)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    version = HarnessVersion.objects.filter(status=HarnessVersion.Status.APPROVED).order_by("id").first()
    endpoint = ModelEndpoint.objects.order_by("-is_default").first()
    room = stream_services.preview_open(user=alice, version=version, scenario=None, endpoint=endpoint)
    from django.db import connections

    connections.close_all()
    return cookie, str(room.pk)


def report(mode: str, out: dict, samples: list[int], bound: int | None) -> bool:
    load, viewers = out["load"], out["viewers"]
    lat = load["latencies"]
    errors = load["errors"]
    peak = max(samples) if samples else 0
    print(f"\n== {mode} ==")
    print(f"requests {load['requests']}  statuses {json.dumps(load['statuses'], sort_keys=True)}  "
          f"errors {len(errors)} ({100 * len(errors) / max(1, load['requests']):.1f} %)")
    print(f"latency p50 {pct(lat, 50):.0f} ms  p95 {pct(lat, 95):.0f} ms  max {max(lat or [0]):.0f} ms")
    print(f"viewers connected {viewers['connected']}  still open at the end {viewers['open_at_end']}  "
          f"failures {len(viewers['failures'])}")
    print(f"PostgreSQL connections to the database: max {peak}  median {statistics.median(samples or [0]):.0f}"
          + (f"  (bound {bound})" if bound is not None else ""))
    for line in sorted(set(errors))[:5] + sorted(set(viewers["failures"]))[:5]:
        print(f"  e.g. {line}")
    ok = not errors and viewers["open_at_end"] == viewers["connected"] and not viewers["failures"]
    return ok and (bound is None or peak <= bound)


def run_modes(args, modes: list[str], db_url: str, redis_url: str, scratch: ScratchDatabase, logdir: Path) -> bool:
    name = scratch.name
    log(f"scratch database {name}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    env = dict(os.environ, DATABASE_URL=scratch.url, REDIS_URL=redis_url, HAT_LOG_LEVEL="WARNING", HAT_DB_POOL_MAX="0",
               HAT_SECRET_KEY=os.environ.get("HAT_SECRET_KEY") or secrets.token_urlsafe(50),
               HAT_DATA_DIR=str(logdir / name))
    passed = True
    try:
        cookie, room_id = prepare(env)
        for mode in modes:
            pool_max = args.pool_max if mode == "pool" else 0
            proc, url = start_web(dict(env, HAT_DB_POOL_MAX=str(pool_max)), logdir / f"db_load-{mode}.log")
            probe = ConnectionProbe(db_url, name)
            try:
                probe.start()
                log(f"{mode}: {args.rps:g} requests/s and {args.viewers} viewers for {args.seconds:g} s")
                out = asyncio.run(one_mode(url, cookie, room_id, args))
            finally:
                samples = probe.stop()
                stop(proc)
            bound = pool_max + BENCH_OWN_CONNECTIONS if mode == "pool" else None
            ok = report(mode, out, samples, bound)
            passed = passed and (ok or mode != "pool")
    finally:  # the scratch database is dropped next: no connection of this process may hold it
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
    return passed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rps", type=float, default=20.0)
    p.add_argument("--viewers", type=int, default=50)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--modes", default="pool,no-pool", help="comma-separated: pool, no-pool")
    p.add_argument("--pool-max", type=int, default=8, help="HAT_DB_POOL_MAX of the pooled mode")
    p.add_argument("--scratch-db", default=None, help="name of the scratch database to create (refused if it exists)")
    args = p.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in ("pool", "no-pool") for m in modes):
        p.error("--modes takes pool and/or no-pool")
    db_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not db_url.startswith(("postgres://", "postgresql://")) or not redis_url.startswith("redis"):
        print("set DATABASE_URL=postgres://... (the server; the bench makes its own database) and "
              "REDIS_URL=redis://.../<db>", file=sys.stderr)
        return 2

    logdir = Path(os.environ.get("HAT_DATA_DIR", ROOT / "var")) / "bench"
    logdir.mkdir(parents=True, exist_ok=True)
    try:
        with ScratchDatabase(db_url, "hat_dbload", name=args.scratch_db, log=log) as scratch:
            passed = run_modes(args, modes, db_url, redis_url, scratch, logdir)
    except ScratchRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(f"\n{'PASS' if passed else 'FAIL'}: pooled web process, 0 errors and a bounded connection count")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
