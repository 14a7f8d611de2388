"""Evaluation throughput through the job system vs. the turn engine in a plain loop: same cases, same endpoint,
same run (issue 11: target ratio >= 0.90). Optionally (``--scores``) the demo model's T1–T4 scores.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/10 \\
        .venv/bin/python bench/eval_throughput.py [--cases 16] [--pairs 4] [--set t1-live-stream-qa]
        [--scores [--score-cases N]] [--model-threads 1] [--scratch-db NAME]

Self-contained and self-cleaning, like bench/preview_ttft.py: it creates its own scratch database on the server of
DATABASE_URL (``hat_evalbench_<pid>_<random>``, or ``--scratch-db NAME``, refused if that database exists; DATABASE_URL's
own database is never touched; see bench/scratch_db.py), migrates it and runs ``manage.py seed_demo`` (the shipped
eval sets, the demo model's harness ``tiny-room``), starts the local model server on the committed demo model
(models/demo-tiny) and a real Celery worker, and drops the database at the end -- also on failure, Ctrl-C or SIGTERM.
The worker is the one users run (``celery -A console worker``, solo pool, as on the ``gpu`` queue) but consumes a
queue of this bench's own (``gpu-evalbench-<pid>``), where the bench sends each run's task under the task id the run
stores: on a Redis shared with a console or a test run it takes none of their tasks, and they none of its.

The two sides play the first ``--cases`` cases of the set's pinned version once each (k = 1, seed 0) under
tiny-room v1 against the same ``local`` endpoint:

- **job**: :func:`training_jobs.eval_run_services.eval_run_start` creates an evaluation run; the worker process
  claims it, keeps its heartbeat, plays every case through :func:`training_jobs.evals.runner.run_case`, judges it,
  writes each sample's row (with its turn events) and the progress, then aggregates (bootstrap intervals) and
  ends it -- what a user's run does. Its time runs from the run's creation to its ``finished_at`` (both clocks
  of this machine), so queueing and pick-up count, polling for the end does not;
- **plain**: a loop in this process calling the same :func:`run_case` with the same judge, manifest, sampling and
  seed on a fresh :class:`streams.engine.client.OpenAIChatClient` of the same endpoint, then the same aggregates
  (:func:`training_jobs.evals.runner.aggregate`: scores with bootstrap intervals, which any evaluation needs): no
  database, no worker. The ratio is what the job system adds, not the statistics (their time is printed).

They alternate in pairs (plain job, job plain, ...; bench/paired.py), after one unmeasured warm-up of each, so a
shared machine's drift and neighbours' load hit both. Printed: samples/s of each side per pair and in all, the
ratio job/plain as the median of per-pair ratios (with quartiles) and over the whole run, and whether the two
sides' replies agree (the demo model is deterministic for a fixed seed, so they should: the same work). PASS when
the median ratio is >= --target.

``--scores``: each shipped set (T1–T3 under tiny-room v1; T4 IFEval without a harness) run like ``manage.py
run_eval`` (in this process), all its cases or the first ``--score-cases`` (the count is printed); accuracy,
effectiveness and pass^1 with their 95 % intervals, and IFEval's four figures.

Wall-clock figures on a shared 2-core machine: the model server (one OpenMP thread by default), the worker and
this process compete for the same cores; the load average is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from paired import pair_order, paired_ratio, whole_run_ratio  # noqa: E402
from scratch_db import ScratchDatabase, ScratchRefused  # noqa: E402

MODEL_DIR = ROOT / "models" / "demo-tiny"
USERNAME = "erin"  # seed_demo's ML staff
HARNESS = "tiny-room"  # the harness the demo model was trained on (seed_demo)
SIDES = ("plain", "job")
# how often this process looks for the run's end: rarely, so its queries take no CPU from the worker and the model
# server on a small machine (the job's time comes from the run's own timestamps, not from when the end is seen)
POLL_S = 0.5
SCORE_SETS = ("t1-live-stream-qa", "t2-harness-variant-qa", "t3-robustness", "t4-ifeval")


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; this process: time.process_time)."""
    if pid == os.getpid():
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return float("nan")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Procs:
    """The model server and the worker, stopped in reverse order on the way out."""

    def __init__(self) -> None:
        self.items: list[subprocess.Popen] = []
        self.server = None
        self.boot: threading.Thread | None = None

    def stop_all(self) -> None:
        for proc in reversed(self.items):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.items):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self.boot is not None:  # interrupted while the model server loads: wait for it, then stop it too
            self.boot.join(150)
        if self.server is not None:
            self.server.stop()


def start_worker(procs: Procs, env: dict, log_path: Path, queue: str) -> None:
    out = open(log_path, "wb")  # noqa: SIM115 (the child's)
    name = f"evalbench-{os.getpid()}@localhost"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "-Q", queue, "--pool", "solo", "-n", name,
         "--concurrency", "1", "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    procs.items.append(proc)
    from console.celery import app

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited with {proc.returncode}; see {log_path}")
        if app.control.ping(destination=[name], timeout=0.5):
            return
    raise RuntimeError(f"celery worker did not answer within 90 s; see {log_path}")


# --- the two sides -------------------------------------------------------------------------------------------------


def job_side(ctx: dict, max_cases: int) -> dict:
    """One evaluation run through the job system (queued → the worker → finished). Seconds: created → finished."""
    from training_jobs import eval_run_services as services
    from training_jobs.eval_run_models import EvalRun

    from unittest import mock

    from training_jobs import tasks

    t0 = time.perf_counter()
    with mock.patch.object(tasks.eval_run, "apply_async"):  # sent below, to this bench's own worker
        run = services.eval_run_start(user=ctx["user"], eval_set_version=ctx["version"], endpoint=ctx["endpoint"],
                                      harness_version=ctx["harness"], max_cases=max_cases, seed=0,
                                      name=f"throughput bench ({max_cases} cases)")
    tasks.eval_run.apply_async(args=(str(run.pk),), queue=ctx["queue"], task_id=run.task_id)
    deadline = time.monotonic() + 1800
    while True:
        run = EvalRun.objects.get(pk=run.pk)
        if run.is_finished:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"evaluation run {run.pk} did not finish within 30 min ({run.status})")
        time.sleep(POLL_S)
    observed = time.perf_counter() - t0
    if run.status != EvalRun.Status.SUCCEEDED:
        raise RuntimeError(f"evaluation run {run.pk} ended {run.status}: {run.error}")
    replies = dict(run.results.values_list("case_id", "reply"))
    return {"seconds": (run.finished_at - run.created_at).total_seconds(), "observed": observed,
            "queued_s": (run.started_at - run.created_at).total_seconds(), "samples": run.results.count(),
            "replies": replies, "solved": run.results.filter(solved=True).count()}


def plain_side(ctx: dict, max_cases: int) -> dict:
    """The same cases through run_case in a plain loop in this process (no database, no worker)."""
    from streams.engine.client import OpenAIChatClient
    from training_jobs.evals import runner

    cases = ctx["cases"][:max_cases]
    t0 = time.perf_counter()
    client = OpenAIChatClient(ctx["config"])
    outcomes = []
    try:
        for case, manifest in cases:
            outcomes.append(runner.run_case(case, 0, manifest=manifest, backend=client, judge=ctx["judge"],
                                            sampling={}, seed=0))
    finally:
        client.close()
    t_agg = time.perf_counter()
    runner.aggregate(outcomes, k=1, seed=0)  # the same scores with intervals the run stores: statistics, not overhead
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "observed": seconds, "samples": len(outcomes),
            "aggregate_s": time.perf_counter() - t_agg,
            "replies": {o.case_id: o.reply for o in outcomes}, "solved": sum(o.solved for o in outcomes)}


# --- the job system's own cost per sample ---------------------------------------------------------------------------


class _InstantModel:
    """A chat backend that answers at once with one line (the harness's hooks send it back twice: three calls), so
    a turn costs only the engine and the judge: what is left of a job's time is the job system's."""

    def stream_chat(self, messages, tools=None, **sampling):
        from streams.engine.client import ChatDelta

        yield ChatDelta(content="Hi there, welcome to the room!")
        yield ChatDelta(finish_reason="stop")


def overhead(ctx: dict, n: int, pairs: int) -> dict[str, list[float]]:
    """Milliseconds per sample with an instant in-process model: the plain loop (engine + judge) and
    :func:`eval_run_execute` in this process (claim, heartbeat, a cancel check, the sample's row with its events and
    the progress per sample, then the aggregates and the end), alternating in pairs."""
    from training_jobs import eval_run_services as services
    from training_jobs.evals import runner

    cases = ctx["cases"][:n]

    def plain() -> None:
        backend = _InstantModel()
        outcomes = [runner.run_case(case, 0, manifest=manifest, backend=backend, judge=ctx["judge"], sampling={},
                                    seed=0) for case, manifest in cases]
        runner.aggregate(outcomes, k=1, seed=0)

    def job() -> None:
        run = services.eval_run_start(user=ctx["user"], eval_set_version=ctx["version"], endpoint=ctx["endpoint"],
                                      harness_version=ctx["harness"], max_cases=n, seed=0, enqueue=False,
                                      name="throughput bench (overhead)")
        run = services.eval_run_execute(run_id=run.pk, backend_factory=_InstantModel)
        if run.status != "succeeded":
            raise RuntimeError(f"overhead run ended {run.status}: {run.error}")

    plain()
    job()
    out: dict[str, list[float]] = {s: [] for s in SIDES}
    for k in range(pairs):
        for side in pair_order(k, SIDES):
            t0 = time.perf_counter()
            (job if side == "job" else plain)()
            out[side].append(1000 * (time.perf_counter() - t0) / len(cases))
    return out


# --- scores ----------------------------------------------------------------------------------------------------------


def scores(ctx: dict, limit: int | None) -> list[dict]:
    from training_jobs import eval_run_services as services
    from training_jobs.eval_models import EvalSet

    out = []
    for name in SCORE_SETS:
        eval_set = EvalSet.objects.filter(name=name).first()
        if eval_set is None:
            log(f"no eval set {name}: skipped")
            continue
        version = eval_set.pinned or eval_set.versions.order_by("-number").first()
        harness = None if eval_set.kind == "t4" else ctx["harness"]
        cases = min(limit, version.case_count) if limit else version.case_count
        log(f"scores: {name} v{version.number}, {cases} of {version.case_count} cases")
        run = services.eval_run_start(user=ctx["user"], eval_set_version=version, endpoint=ctx["endpoint"],
                                      harness_version=harness, max_cases=cases if cases < version.case_count else None,
                                      seed=0, enqueue=False, name=f"demo model scores: {name}")
        t0 = time.perf_counter()
        run = services.eval_run_execute(run_id=run.pk)
        reasons: dict[str, int] = {}
        for reason in run.results.values_list("reason", flat=True):
            reasons[reason] = reasons.get(reason, 0) + 1
        out.append({"reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
                    "errors": run.results.exclude(error="").count(),
                    "set": name, "kind": eval_set.kind, "version": version.number, "cases": cases,
                    "of": version.case_count, "status": run.status, "error": run.error, "summary": run.summary,
                    "seconds": time.perf_counter() - t0})
    return out


def _pct(score: dict | None) -> str:
    if not score or score.get("mean") is None:
        return "—"
    return f"{100 * score['mean']:5.1f} [{100 * score['ci_low']:.1f}, {100 * score['ci_high']:.1f}]"


def print_scores(rows: list[dict]) -> None:
    print("=" * 100)
    print(f"T1–T4 scores of the committed demo model (models/demo-tiny) on the local server, harness {HARNESS} v1 "
          "(T1–T3), k=1, seed 0, greedy-equivalent (seeded):")
    print(f"{'set':<24} {'cases':>11} {'accuracy % [95% CI]':>24} {'effectiveness %':>24} {'pass^1 %':>24} "
          f"{'turn P50 s':>10}")
    for r in rows:
        s = r["summary"] or {}
        count = f"{r['cases']}/{r['of']}"
        if r["status"] != "succeeded":
            print(f"{r['set']:<24} {count:>11}  {r['status']}: {r['error']}")
            continue
        lat = (s.get("latency") or {}).get("p50_s")
        if r["kind"] == "t4":
            figures = (s.get("ifeval") or {}).get("0") or {}
            print(f"{r['set']:<24} {count:>11}  IFEval prompt strict {figures.get('prompt_strict', 0):.2f} · "
                  f"instruction strict {figures.get('instruction_strict', 0):.2f} · prompt loose "
                  f"{figures.get('prompt_loose', 0):.2f} · instruction loose {figures.get('instruction_loose', 0):.2f}"
                  f"   (turn P50 {lat or 0:.2f} s)")
        else:
            print(f"{r['set']:<24} {count:>11} {_pct(s.get('accuracy')):>24} {_pct(s.get('effectiveness')):>24} "
                  f"{_pct(s.get('pass_1')):>24} {lat or 0:>10.2f}")
            problems = ", ".join(f"{k} {v}" for k, v in list((s.get("problems") or {}).items())[:6]) or "none"
            print(f"{'':<24} {'':>11}  fallbacks {s.get('fallbacks', 0)}, errors {s.get('errors', 0)}; "
                  f"problems: {problems}")
        ends = ", ".join(f"{k} {v}" for k, v in r["reasons"].items())
        print(f"{'':<24} {'':>11}  turns ended: {ends}; {r['errors']} could not be run (judged 0); {r['seconds']:.0f} s")


# --- main ------------------------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=16, help="cases per side per measurement (default 16)")
    p.add_argument("--pairs", type=int, default=4, help="measured pairs (each: one plain, one job; default 4)")
    p.add_argument("--set", default="t1-live-stream-qa", help="the eval set whose first cases are played")
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--scores", action="store_true", help="also run each shipped set (T1–T4) on the demo model")
    p.add_argument("--score-cases", type=int, default=None, help="with --scores: only the first N cases of each set "
                                                                 "(default: all)")
    p.add_argument("--overhead-pairs", type=int, default=3,
                   help="pairs of the instant-model measurement of the job system's own cost (0: skip)")
    p.add_argument("--no-throughput", action="store_true", help="with --scores: skip the throughput pairs")
    p.add_argument("--model-threads", type=int, default=1, help="torch/OpenMP threads of the model server")
    p.add_argument("--keep-logs", action="store_true", help="keep the model server's and worker's logs (var/bench/)")
    p.add_argument("--scratch-db", default=None,
                   help="name of the scratch database to create (refused if it exists; default: a unique name)")
    args = p.parse_args()
    if args.cases < 1 or args.pairs < 1:
        p.error("--cases and --pairs must be at least 1")

    db_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not db_url.startswith(("postgres://", "postgresql://")) or not redis_url.startswith("redis"):
        print("set DATABASE_URL=postgres://... (the server; the bench creates and drops its own database) and "
              "REDIS_URL=redis://.../<db>", file=sys.stderr)
        return 2
    started = time.monotonic()
    log(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    logdir = ROOT / "var" / "bench"
    logdir.mkdir(parents=True, exist_ok=True)
    logs = {k: logdir / f"eval_throughput-{os.getpid()}-{k}.log" for k in ("model", "worker")}
    import redis as redis_lib

    rds = redis_lib.Redis.from_url(redis_url)
    redis_was_empty = rds.dbsize() == 0
    procs = Procs()
    try:
        with ScratchDatabase(db_url, "hat_evalbench", name=args.scratch_db, log=log) as scratch:
            log(f"created scratch database {scratch.name}")
            try:
                return run(args, scratch.url, redis_url, procs, logs, started)
            finally:
                log(f"cleaning up: stopping subprocesses, dropping the scratch database {scratch.name}")
                procs.stop_all()
                with contextlib.suppress(Exception):
                    from django.db import connections

                    connections.close_all()
                if redis_was_empty:
                    rds.flushdb()  # it was empty before: leave it empty (Celery messages and results)
    except ScratchRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep_logs:
            for path in logs.values():
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                logdir.rmdir()  # only when empty
        log(f"done in {time.monotonic() - started:.0f} s")


def run(args, db_url: str, redis_url: str, procs: Procs, logs: dict, started: float) -> int:
    from training_jobs.tiny_model.serve import start_local_server

    holder: dict = {}

    def boot_model():  # loads while this process migrates and seeds
        try:
            holder["server"] = procs.server = start_local_server(MODEL_DIR, log_path=logs["model"],
                                                                 threads=args.model_threads)
        except BaseException as exc:  # noqa: BLE001
            holder["error"] = exc

    procs.boot = threading.Thread(target=boot_model, daemon=True)
    procs.boot.start()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings", DATABASE_URL=db_url, REDIS_URL=redis_url,
               HAT_CELERY_ALWAYS_EAGER="false", PYTHONUNBUFFERED="1", HAT_LOG_LEVEL="WARNING")
    os.environ.update(env)
    import django

    django.setup()
    import logging

    from django.core.management import call_command

    logging.getLogger("httpx").setLevel(logging.WARNING)
    log("migrate + seed_demo")
    call_command("migrate", verbosity=0, interactive=False)
    call_command("seed_demo", verbosity=0, stdout=io.StringIO())
    procs.boot.join(180)
    if "error" in holder or "server" not in holder:
        raise RuntimeError(f"local model server did not start: {holder.get('error')}; see {logs['model']}")
    server = holder["server"]
    log(f"model server ready at {server.base_url} ({server.ready_s:.1f} s)")

    from django.contrib.auth import get_user_model
    from django.db import transaction

    from harness_editor.models import HarnessVersion
    from streams.models import ModelEndpoint
    from training_jobs.eval_models import EvalSet
    from training_jobs.eval_run_services import case_manifest
    from training_jobs.evals.cases import parse_case
    from training_jobs.evals.judging import judge_case

    with transaction.atomic():
        ModelEndpoint.objects.exclude(name="local").update(is_default=False)
        endpoint, _ = ModelEndpoint.objects.update_or_create(name="local", defaults={
            "base_url": server.openai_base_url, "model": server.model, "kind": ModelEndpoint.Kind.LOCAL,
            "timeout_s": 120, "connect_timeout_s": 5, "is_default": True})
    harness = HarnessVersion.objects.select_related("harness").get(harness__slug=HARNESS, number=1)
    ctx = {"user": get_user_model().objects.get(username=USERNAME), "endpoint": endpoint, "harness": harness,
           "config": endpoint.as_config(), "judge": judge_case}

    if not args.no_throughput:
        eval_set = EvalSet.objects.get(name=args.set)
        if eval_set.kind == "t4":
            raise SystemExit("--set: pick a T1–T3 set (the throughput compares agent turns)")
        version = ctx["version"] = eval_set.pinned or eval_set.versions.order_by("-number").first()
        n = min(args.cases, version.case_count)
        rows = version.cases.order_by("position").values_list("case_json", flat=True)[:n]
        ctx["cases"] = [(case, case_manifest(case, harness.manifest)) for case in map(parse_case, map(json.loads, rows))]
        ctx["queue"] = f"gpu-evalbench-{os.getpid()}"
        log(f"starting the Celery worker (queue {ctx['queue']})")
        start_worker(procs, env, logs["worker"], ctx["queue"])
        ctx["pids"] = {"model server": server.proc.pid, "worker": procs.items[-1].pid, "bench": os.getpid()}
        log("warm-up: 2 cases each side (not measured)")
        plain_side(ctx, 2)
        job_side(ctx, 2)
        results: dict[str, list[dict]] = {s: [] for s in SIDES}
        for k in range(args.pairs):
            for side in pair_order(k, SIDES):
                before = {name: cpu_seconds(pid) for name, pid in ctx["pids"].items()}
                r = (job_side if side == "job" else plain_side)(ctx, n)
                r["cpu"] = {name: cpu_seconds(pid) - before[name] for name, pid in ctx["pids"].items()}
                results[side].append(r)
                log(f"pair {k + 1}/{args.pairs} {side:<5} {r['samples']} samples in {r['seconds']:.2f} s "
                    f"({r['samples'] / r['seconds']:.2f} samples/s)")
        report_throughput(args, version, n, results)
        if args.overhead_pairs:
            ms = overhead(ctx, n, args.overhead_pairs)
            plain_ms, job_ms = statistics.median(ms["plain"]), statistics.median(ms["job"])
            turn_ms = 1000 * statistics.median(r["seconds"] / r["samples"] for r in results["plain"])
            print(f"job system's own cost (instant in-process model, {args.overhead_pairs} pairs, median): plain loop "
                  f"{plain_ms:.1f} ms/sample (engine + judge + aggregates), eval_run_execute {job_ms:.1f} ms/sample -> "
                  f"{job_ms - plain_ms:.1f} ms per sample more; against this run's {turn_ms:.0f} ms per real turn "
                  f"that bounds the ratio at about {turn_ms / (turn_ms + job_ms - plain_ms):.3f} (aggregates whose "
                  f"samples all score alike skip the bootstrap, so this is a floor of the cost)")
    verdict = 0
    if not args.no_throughput:
        verdict = results_verdict(args, results)
    if args.scores:
        print_scores(scores(ctx, args.score_cases))
    print(f"elapsed {time.monotonic() - started:.0f} s (setup included); load average now {os.getloadavg()[0]:.2f}")
    return verdict


def report_throughput(args, version, n: int, results: dict[str, list[dict]]) -> None:
    plain, job = results["plain"], results["job"]
    ratio = paired_ratio([r["seconds"] for r in plain], [r["seconds"] for r in job])
    whole = whole_run_ratio([r["seconds"] for r in plain], [r["seconds"] for r in job])
    agree = [sum(p["replies"].get(c) == j["replies"].get(c) for c in p["replies"]) / max(1, len(p["replies"]))
             for p, j in zip(plain, job, strict=True)]
    print("=" * 100)
    print(f"Evaluation throughput: {version.eval_set.name} v{version.number}, first {n} cases, k=1, seed 0, harness "
          f"{HARNESS} v1, endpoint local (models/demo-tiny, {args.model_threads} OpenMP thread(s)); "
          f"{args.pairs} pairs, order {' '.join(s for k in range(args.pairs) for s in pair_order(k, SIDES))}")
    print(f"{'pair':>4} {'plain s':>9} {'plain samples/s':>16} {'job s':>9} {'job samples/s':>14} {'job queued s':>13} "
          f"{'ratio job/plain':>16} {'same replies':>13}")
    for i, (p, j) in enumerate(zip(plain, job, strict=True)):
        print(f"{i + 1:>4} {p['seconds']:>9.2f} {p['samples'] / p['seconds']:>16.3f} {j['seconds']:>9.2f} "
              f"{j['samples'] / j['seconds']:>14.3f} {j['queued_s']:>13.3f} {p['seconds'] / j['seconds']:>16.3f} "
              f"{100 * agree[i]:>12.0f}%")
    total_plain = sum(r["samples"] for r in plain) / sum(r["seconds"] for r in plain)
    total_job = sum(r["samples"] for r in job) / sum(r["seconds"] for r in job)
    print("-" * 100)
    print(f"samples/s over the run: plain {total_plain:.3f}, job {total_job:.3f} (median per pair: plain "
          f"{statistics.median(r['samples'] / r['seconds'] for r in plain):.3f}, job "
          f"{statistics.median(r['samples'] / r['seconds'] for r in job):.3f})")
    print(f"ratio job/plain: median of per-pair ratios {ratio.median:.3f} (quartiles {ratio.q1:.3f}–{ratio.q3:.3f}, "
          f"n={ratio.n}); whole run {whole:.3f}")
    print(f"job time = run created → finished_at (queue, pick-up, claim, heartbeat, per-sample rows with events, "
          f"progress, aggregates); polled end seen {statistics.median(r['observed'] for r in job):.2f} s median")
    for side, rows in (("plain", plain), ("job", job)):
        cpu = {name: statistics.median(r["cpu"][name] for r in rows) for name in rows[0]["cpu"]}
        print(f"CPU s per measurement ({side}, median): " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
    print(f"of the plain side: aggregates {1000 * statistics.median(r['aggregate_s'] for r in plain):.0f} ms "
          "per measurement (median; the job computes the same ones as it ends)")
    print(f"solved per measurement: plain {[r['solved'] for r in plain]}, job {[r['solved'] for r in job]}")


def results_verdict(args, results: dict[str, list[dict]]) -> int:
    ratio = paired_ratio([r["seconds"] for r in results["plain"]], [r["seconds"] for r in results["job"]])
    ok = ratio.median >= args.target
    print(f"{'PASS' if ok else 'FAIL'}  throughput ratio job/plain {ratio.median:.3f} (target >= {args.target:.2f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
