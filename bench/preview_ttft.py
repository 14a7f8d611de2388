"""Preview-room TTFT through the console (Celery + Channels + Redis + WebSocket) vs. directly at the endpoint.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/7 \\
        .venv/bin/python bench/preview_ttft.py [--viewers 1,10,50] [--turns 5] [--target 1.10] [--scratch-db NAME]

Self-contained and self-cleaning. It
1. creates its own scratch database on the PostgreSQL server of DATABASE_URL (``hat_ttft_<pid>_<random>``, or
   ``--scratch-db NAME``, refused if that database exists; DATABASE_URL's own database is never touched; see
   ``bench/scratch_db.py``), migrates it and runs ``manage.py seed_demo`` in it, and drops it at the end -- also
   on failure, Ctrl-C or SIGTERM; it never drops a database it did not create;
2. starts the local model server on models/demo-tiny (:func:`training_jobs.tiny_model.serve.start_local_server`),
   a Celery worker subprocess and a web subprocess (console.web_server) serving ``console.asgi`` on a free loopback port, all on
   that database and REDIS_URL (the Redis channel layer and the Celery broker);
3. registers the local server as the default ModelEndpoint (``local``) and uses the harness the tiny model
   was trained on (harness_editor/demo/tiny_room.yaml: seed_demo's tiny-room v1, else created here;
   glow-gadget v1 if that file is missing);
4. for every measured turn opens a FRESH preview room through ``streams.services.preview_open`` (so every
   turn sends the model exactly the same prompt: same manifest, same room, same comment, no history),
   connects V real WebSocket clients (``websockets``, session cookie of the demo campaign manager ``alice``)
   to ``ws://.../ws/preview/<room>/``, and one of them posts the comment; every viewer timestamps what
   arrives;
5. after each measured console turn, sends the SAME first model request (messages + tools captured from the
   real engine, :func:`streams.engine.turn.run_turn`, on the same manifest + room + comment) directly to the
   endpoint with :class:`streams.engine.client.OpenAIChatClient` (the class the engine uses, the same
   endpoint config): the direct TTFT baseline, interleaved with the console turns in the same run.

Figures (TTFT = time to the first streamed delta carrying content, reasoning or a tool call -- the engine's
own definition; the tiny model's first delta is the reasoning of its ``<think>`` block):
- direct TTFT: request sent -> first delta, at the endpoint, no console in between;
- A "comment -> first token @viewer": the sender's ``send()`` of the comment -> a viewer receives the first
  ``token`` event (the whole console path: WebSocket in, service, Celery queue, worker, prompt, model, event
  store, Redis, web process, WebSocket out), per viewer;
- B "model request -> first token @viewer": the engine's ``model_request`` event (its ``at`` wall-clock stamp,
  taken in the worker just before the HTTP request goes out) -> a viewer receives the first ``token`` event:
  the endpoint TTFT as seen through the console's fan-out, without the comment/queue/prompt stages;
- engine TTFT: first token ``t_ms`` - model_request ``t_ms`` inside the worker (what the engine measured);
- fan-out: first ``token`` event created in the worker (its ``at``) -> received by a viewer (store + commit +
  Redis publish + web consumer + WebSocket), per viewer.
Ratios: A p50 / direct p50 (the user-visible one) and B p50 / direct p50 (the streaming path only); PASS
when <= --target at the largest V. Beside them: the same p50s as absolute overhead in ms over the direct
TTFT, and where A goes stage by stage (the worker and the web process run with ``HAT_PREVIEW_TRACE=1``, which stamps
each published run with the wall-clock times it was stored, committed and handed to the channel layer, and
the consumer adds when it sent it on: see ``STAGES``), and the CPU time of the model server, the worker,
the web process and this process (the clients) per turn and per phase of the turn (connecting the viewers, comment
-> first token, the rest), with the share of all CPUs busy (every process on the machine, /proc/stat). Wall-clock figures on a shared 2-core machine: every process (model,
worker, the web process, the 50 clients) competes for the same cores; run it on an otherwise idle machine (the load
average is printed). The model server runs with ONE OpenMP thread by default (``--model-threads``): with two
threads on two shared cores, OpenMP barrier stalls made the same request take either ~50 ms or ~1,200 ms
depending on what else was scheduled (measured on this machine with a training job running), which swamps
what this benchmark is about.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import io
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scratch_db import ScratchDatabase, ScratchRefused  # noqa: E402

MODEL_DIR = ROOT / "models" / "demo-tiny"
TINY_MANIFEST = ROOT / "harness_editor" / "demo" / "tiny_room.yaml"
COMMENT = "how much is #101?"
USERNAME = "alice"  # seed_demo's campaign manager


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def wall(at: str) -> float:
    return datetime.fromisoformat(at).timestamp()


# --- subprocesses --------------------------------------------------------------------------------------------


class Procs:
    def __init__(self) -> None:
        self.items: list[tuple[str, subprocess.Popen]] = []
        self.server = None
        self.boot: threading.Thread | None = None  # starts the model server beside the migrations

    def add(self, name: str, proc: subprocess.Popen) -> subprocess.Popen:
        self.items.append((name, proc))
        return proc

    def stop_all(self) -> None:
        for _name, proc in reversed(self.items):
            if proc.poll() is None:
                proc.terminate()
        for _name, proc in reversed(self.items):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self.boot is not None:  # interrupted while the model server loads: wait for it, then stop it too
            self.boot.join(150)
        if self.server is not None:
            self.server.stop()


def start_worker(procs: Procs, env: dict, log_path: Path) -> None:
    out = open(log_path, "wb")  # noqa: SIM115
    proc = procs.add("worker", subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "-Q", "celery,gpu", "--pool", "solo",
         "--concurrency", "1", "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
    from console.celery import app

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited with {proc.returncode}; see {log_path}")
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError(f"celery worker did not answer within 90 s; see {log_path}")


def _web_argv(server: str, port: int) -> list[str]:
    if server == "daphne":  # what the console ran before (compared in bench/live_bench.py --server daphne)
        return ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]
    from console.web_server import web_server_argv

    return web_server_argv("127.0.0.1", port, access_log=False, log_level="warning")


def start_web(procs: Procs, env: dict, log_path: Path, probe: str = "/health/", server: str = "uvicorn") -> str:
    """The console's web process as deployed (console.web_server: uvicorn), or daphne to compare."""
    import httpx

    from training_jobs.tiny_model.serve import free_port

    port = free_port()
    out = open(log_path, "wb")  # noqa: SIM115
    proc = procs.add(server, subprocess.Popen(
        [sys.executable, *_web_argv(server, port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + probe, timeout=2, trust_env=False).status_code < 500:
                return url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{server} did not start; see {log_path}")
        time.sleep(0.2)


# --- the direct baseline -------------------------------------------------------------------------------------


class _Capture:
    """A backend for run_turn that records the first request and answers at once."""

    def __init__(self) -> None:
        self.requests: list[tuple[list, list]] = []

    def stream_chat(self, messages, tools=None, **sampling):
        from streams.engine.client import ChatDelta

        self.requests.append((copy.deepcopy(list(messages)), copy.deepcopy(list(tools or []))))
        yield ChatDelta(content="Thanks for asking!")
        yield ChatDelta(finish_reason="stop")


def engine_first_request(manifest, room_state: dict, comments: list, history: list) -> tuple[list, list, dict]:
    """The exact (messages, tools) of the engine's first model request for this input, and its prompt_built."""
    from streams.engine.turn import run_turn

    cap = _Capture()
    events: list = []
    run_turn(manifest=manifest, room=copy.deepcopy(room_state), comments=comments, history=history, backend=cap,
             emit=events.append)
    built = next(e for e in events if e.type == "prompt_built").model_dump(mode="json")
    return cap.requests[0][0], cap.requests[0][1], built


def direct_request(client, messages, tools, count_tokens) -> dict:
    t0 = time.perf_counter()
    first = last = None
    pieces: list[str] = []
    chunks = 0
    for d in client.stream_chat(messages, tools):
        if d.content or d.reasoning or d.tool_calls:
            now = time.perf_counter()
            first = now if first is None else first
            last = now
            chunks += 1
            pieces.append(d.reasoning + d.content)
            for tc in d.tool_calls:
                pieces.append(f'<tool_call>\n{{"name": "{tc.name}", "arguments": {tc.arguments}}}\n</tool_call>')
    if first is None:
        return {"ttft_ms": None}
    tokens = count_tokens("".join(pieces))
    decode = (tokens - 1) / (last - first) if tokens > 1 and last > first else None
    return {"ttft_ms": (first - t0) * 1000, "total_ms": (last - t0) * 1000, "tokens": tokens, "chunks": chunks,
            "decode_tps": decode, "e2e_tps": tokens / max(last - t0, 1e-9)}


# --- the WebSocket viewers -----------------------------------------------------------------------------------


async def console_turn(ws_base: str, origin: str, cookie: str, room_id: str, viewers: int, probe=None) -> dict:
    """V viewers on one fresh room; viewer 0 posts the comment. Returns per-viewer arrival times + events, and
    ``probe()`` (CPU counters) taken when all viewers are connected and when viewer 0 gets the first token."""
    from websockets.asyncio.client import connect

    url = f"{ws_base}/ws/preview/{room_id}/"
    headers = {"Cookie": cookie, "Origin": origin}
    sem = asyncio.Semaphore(10)

    async def open_one():
        async with sem:
            ws = await connect(url, additional_headers=headers, open_timeout=60, max_size=None,
                               ping_interval=None, compression=None)
            while True:  # the backlog: room_opened
                msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if msg.get("type") == "events" and any(e["type"] == "room_opened" for e in msg["events"]):
                    return ws

    socks = await asyncio.gather(*(open_one() for _ in range(viewers)))
    probes = {"connected": probe() if probe else None}
    sent: dict[str, float] = {}

    async def watch(i: int, ws) -> dict:
        rec: dict = {"events": [] if i == 0 else None, "traces": {} if i == 0 else None, "frames": 0}
        while True:
            raw = await ws.recv()
            now_p, now_w = time.perf_counter(), time.time()
            msg = json.loads(raw)
            if msg.get("type") == "ack":
                rec.setdefault("ack_p", now_p)
                continue
            if msg.get("type") != "events":
                if msg.get("type") == "error":
                    raise RuntimeError(f"console error: {msg}")
                continue
            rec["frames"] += 1
            for ev in msg["events"]:
                if rec["events"] is not None:
                    rec["events"].append(ev)
                    rec["traces"][ev["seq"]] = msg.get("trace")  # the frame's: when its run was stored, sent
                t = ev["type"]
                if t == "model_request" and "req_p" not in rec:
                    rec["req_p"], rec["req_w"] = now_p, now_w
                elif t == "token" and "tok_p" not in rec:
                    rec["tok_p"], rec["tok_w"], rec["tok_seq"] = now_p, now_w, ev["seq"]
                    rec["tok_trace"] = msg.get("trace")
                    if i == 0 and probe:
                        probes["first_token"] = probe()
                elif t in ("timings", "turn_failed"):
                    rec["end_p"] = now_p
                    return rec

    tasks = [asyncio.create_task(watch(i, ws)) for i, ws in enumerate(socks)]
    await asyncio.sleep(0.05)
    sent["p"], sent["w"] = time.perf_counter(), time.time()
    await socks[0].send(json.dumps({"type": "comment", "text": COMMENT}))
    try:
        recs = await asyncio.wait_for(asyncio.gather(*tasks), 180)
    finally:
        await asyncio.gather(*(ws.close() for ws in socks), return_exceptions=True)
    return {"sent_p": sent["p"], "sent_w": sent["w"], "viewers": recs, "probes": probes}


def analyse_turn(out: dict) -> dict:
    events = out["viewers"][0]["events"]
    failed = [e for e in events if e["type"] in ("turn_failed", "error")]
    tok = next((e for e in events if e["type"] == "token"), None)
    if tok is None:
        return {"ok": False, "why": f"no token event ({[e['type'] for e in events]}, {failed})"}
    req = [e for e in events if e["type"] == "model_request" and e["seq"] < tok["seq"]][-1]
    timings = next(e for e in events if e["type"] == "timings")["payload"]
    req_w, tok_w = wall(req["at"]), wall(tok["at"])
    res = {"ok": True, "call_index": req["payload"]["call_index"],
           "engine_ttft": tok["payload"]["t_ms"] - req["payload"]["t_ms"],
           "timings_ttft": timings.get("ttft_ms"), "total_ms": timings.get("total_ms"),
           "prompt": next((e["payload"] for e in events if e["type"] == "prompt_built"), {}),
           "queue_ms": (wall(next(e for e in events if e["type"] == "turn_started")["at"]) - out["sent_w"]) * 1000,
           "A": [], "B": [], "fan": [], "req_fan": [], "stages": {}, "viewer_stages": {},
           "frames": out["viewers"][0]["frames"], "token_events": sum(1 for e in events if e["type"] == "token"),
           "token_chars": sum(len(e["payload"]["delta"]) for e in events if e["type"] == "token")}
    for v in out["viewers"]:
        res["A"].append((v["tok_p"] - out["sent_p"]) * 1000)
        res["B"].append((v["tok_w"] - req_w) * 1000)
        res["fan"].append((v["tok_w"] - tok_w) * 1000)
        res["req_fan"].append((v["tok_p"] - v["req_p"]) * 1000)
    res["stages"], res["viewer_stages"] = stage_breakdown(out, events, tok, req)
    return res


# the stages of the comment -> first token path, from the wall-clock stamps the worker and the web process add to each
# message with HAT_PREVIEW_TRACE=1 (streams.events): store = the service starts storing the event, commit =
# its transaction committed, pub = the publisher thread hands it to the channel layer, consumer = the
# viewer's consumer in the web process got it; the viewer's own receive time closes the path
STAGES = (
    ("ws in + comment service", "sent -> viewer_comment store started (WebSocket in, consumer, service reads)"),
    ("comment store+commit", "viewer_comment store -> commit"),
    ("Celery queue + pick-up", "viewer_comment commit -> turn_started store (enqueue, worker pick-up, task reads)"),
    ("turn start + prompt", "turn_started store -> model_request store (3 events stored, context, prompt render)"),
    ("model_request store", "model_request store -> commit (the HTTP request goes out right after)"),
    ("model (to 1st token)", "model_request commit -> first token's store started (endpoint TTFT in the worker)"),
    ("1st token store+commit", "first token store -> commit (DB write + commit)"),
    ("publish", "first token commit -> handed to the channel layer (publisher thread)"),
    ("layer + web", "handed to the layer -> the viewer's consumer runs (Redis, the web process); per viewer"),
    ("websocket send", "consumer -> viewer receives the frame (send, the web process, TCP, client loop); per viewer"),
)


def stage_breakdown(out: dict, events: list, tok: dict, req: dict) -> tuple[dict, dict]:
    traces = out["viewers"][0]["traces"]
    by_type = {}
    for e in events:
        by_type.setdefault(e["type"], e)
    need = [by_type.get("viewer_comment"), by_type.get("turn_started"), req, tok]
    if any(e is None or not traces.get(e["seq"]) for e in need):
        return {}, {}  # the console runs without HAT_PREVIEW_TRACE
    vc, ts, rq, tk = (traces[e["seq"]] for e in need)
    ms = lambda a, b: (b - a) * 1000  # noqa: E731
    stages = {
        "ws in + comment service": ms(out["sent_w"], vc["store"]),
        "comment store+commit": ms(vc["store"], vc["commit"]),
        "Celery queue + pick-up": ms(vc["commit"], ts["store"]),
        "turn start + prompt": ms(ts["store"], rq["store"]),
        "model_request store": ms(rq["store"], rq["commit"]),
        "model (to 1st token)": ms(rq["commit"], tk["store"]),
        "1st token store+commit": ms(tk["store"], tk["commit"]),
        "publish": ms(tk["commit"], tk["pub"]),
    }
    per_viewer: dict[str, list[float]] = {"layer + web": [], "websocket send": []}
    for v in out["viewers"]:
        t = v.get("tok_trace")
        if t:
            per_viewer["layer + web"].append(ms(t["pub"], t["consumer"]))
            per_viewer["websocket send"].append(ms(t["consumer"], v["tok_w"]))
    return stages, per_viewer


# --- CPU ------------------------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CPU_PHASES = ("connect viewers", "comment -> 1st token", "rest of the turn")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its waited-for children (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / _TICK
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot (/proc/stat), every process of every user."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return (sum(vals) - idle) / _TICK, sum(vals) / _TICK
    except (OSError, ValueError):
        return float("nan"), float("nan")


# --- main ----------------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--viewers", default="1,10,50")
    p.add_argument("--turns", type=int, default=5, help="measured turns per V (after one warm-up turn)")
    p.add_argument("--target", type=float, default=1.10)
    p.add_argument("--model-threads", type=int, default=1,
                   help="torch/OpenMP threads of the model server (default 1: see the module docstring)")
    p.add_argument("--keep-logs", action="store_true", help="keep the subprocess logs under var/bench/")
    p.add_argument("--settings", default="console.settings",
                   help="Django settings module of every process (e.g. one that imports console.settings and "
                        "swaps CHANNEL_LAYERS, to compare channel-layer backends); it must be importable")
    p.add_argument("--scratch-db", default=None,
                   help="name of the scratch database to create (refused if it exists; default: a unique name)")
    args = p.parse_args()
    levels = [int(x) for x in args.viewers.split(",") if x.strip()]

    db_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not db_url.startswith(("postgres://", "postgresql://")) or not redis_url.startswith("redis"):
        print("set DATABASE_URL=postgres://... (the server; the bench creates and drops its own database) and "
              "REDIS_URL=redis://.../<db>", file=sys.stderr)
        return 2

    started = time.monotonic()
    log(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    logdir = ROOT / "var" / "bench"
    logdir.mkdir(parents=True, exist_ok=True)
    logs = {k: logdir / f"preview_ttft-{os.getpid()}-{k}.log" for k in ("model", "worker", "web")}
    import redis as redis_lib

    rds = redis_lib.Redis.from_url(redis_url)
    redis_was_empty = rds.dbsize() == 0

    procs = Procs()
    try:
        with ScratchDatabase(db_url, "hat_ttft", name=args.scratch_db, log=log) as scratch:
            log(f"created scratch database {scratch.name}")
            try:
                return run(args, levels, scratch.url, redis_url, procs, logs, started)
            finally:
                log(f"cleaning up: stopping subprocesses, dropping the scratch database {scratch.name}")
                procs.stop_all()
                with contextlib.suppress(Exception):
                    from django.db import connections

                    connections.close_all()
                if redis_was_empty:
                    rds.flushdb()  # it was empty before: leave it empty (Celery results, channel-layer keys)
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


def run(args, levels, db_url, redis_url, procs: Procs, logs, started) -> int:
    from training_jobs.tiny_model.serve import start_local_server

    # the model server loads while this process migrates and seeds
    holder: dict = {}

    def boot_model():
        try:
            holder["server"] = procs.server = start_local_server(MODEL_DIR, log_path=logs["model"],
                                                                 threads=args.model_threads)
        except BaseException as exc:  # noqa: BLE001
            holder["error"] = exc

    t_model = procs.boot = threading.Thread(target=boot_model, daemon=True)
    t_model.start()

    env = dict(os.environ, DJANGO_SETTINGS_MODULE=args.settings, DATABASE_URL=db_url, REDIS_URL=redis_url,
               HAT_CELERY_ALWAYS_EAGER="false", PYTHONUNBUFFERED="1",
               HAT_PREVIEW_TRACE="1")  # per-stage stamps (streams.events); a few time.time() calls per event
    os.environ.update(env)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    log("migrate + seed_demo")
    call_command("migrate", verbosity=0, interactive=False)
    call_command("seed_demo", verbosity=0, stdout=io.StringIO())
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)

    t_model.join(180)
    if "error" in holder or "server" not in holder:
        raise RuntimeError(f"local model server did not start: {holder.get('error')}; see {logs['model']}")
    server = procs.server = holder["server"]
    log(f"model server ready at {server.base_url} ({server.ready_s:.1f} s)")

    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.test import Client

    from harness_editor import services as editor
    from harness_editor.models import HarnessVersion
    from harness_editor.schemas import manifest_from_yaml
    from streams import selectors, services
    from streams.engine.client import OpenAIChatClient
    from streams.models import ModelEndpoint

    with transaction.atomic():
        ModelEndpoint.objects.exclude(name="local").update(is_default=False)
        endpoint, _ = ModelEndpoint.objects.update_or_create(name="local", defaults={
            "base_url": server.openai_base_url, "model": server.model, "kind": ModelEndpoint.Kind.LOCAL,
            "timeout_s": 120, "connect_timeout_s": 5, "is_default": True})
    user = get_user_model().objects.get(username=USERNAME)
    if TINY_MANIFEST.exists():  # the harness models/demo-tiny was trained on (training_jobs/tiny_model/gold.py)
        version = HarnessVersion.objects.filter(harness__slug="tiny-room", number=1).first()  # seed_demo's
        if version is None:
            version = editor.harness_create(user=user, slug="tiny-room", name="Tiny demo room",
                                            manifest=manifest_from_yaml(TINY_MANIFEST.read_text(encoding="utf-8")))
        harness_label = "tiny-room v1 (harness_editor/demo/tiny_room.yaml)"
    else:
        version = HarnessVersion.objects.get(harness__slug="glow-gadget", number=1)
        harness_label = "glow-gadget v1 (approved)"

    log("starting the Celery worker and the web process")
    start_worker(procs, env, logs["worker"])
    http_base = start_web(procs, env, logs["web"])
    ws_base = http_base.replace("http://", "ws://")
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    log(f"console at {http_base}; endpoint {endpoint.name} -> {endpoint.base_url}; harness {harness_label}")

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))

    def count_tokens(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids) if text else 0

    direct_client = OpenAIChatClient(endpoint.as_config())
    first_request: dict = {}
    direct: dict[str, list[dict]] = {"pre": []}
    results: dict[int, list[dict]] = {}
    problems: list[str] = []

    pids = {"model server": server.proc.pid, **{name: proc.pid for name, proc in procs.items},
            "bench (clients)": os.getpid()}

    def one_console_turn(viewers: int) -> dict:
        room = services.preview_open(user=user, version=version, endpoint=endpoint)
        def probe() -> dict:
            return {k: cpu_seconds(p) for k, p in pids.items()} | {"wall": time.perf_counter()}

        cpu0, busy0, wall0 = probe(), machine_busy(), time.perf_counter()
        out = asyncio.run(console_turn(ws_base, http_base, cookie, str(room.pk), viewers, probe))
        cpu1, busy1, wall1 = probe(), machine_busy(), time.perf_counter()
        res = analyse_turn(out)
        res["cpu_ms"] = {k: (cpu1[k] - cpu0[k]) * 1000 for k in pids}
        marks = [cpu0, out["probes"]["connected"], out["probes"].get("first_token"), cpu1]
        if all(marks):  # CPU ms per process in each phase: connecting the viewers, comment -> 1st token, rest
            res["cpu_phases"] = {phase: {k: (b[k] - a[k]) * 1000 for k in [*pids, "wall"]}
                                 for phase, a, b in zip(CPU_PHASES, marks, marks[1:])}
        res["wall_ms"] = (wall1 - wall0) * 1000
        res["machine_busy"] = (busy1[0] - busy0[0]) / max(busy1[1] - busy0[1], 1e-9)  # share of all CPUs
        res["load1"] = os.getloadavg()[0]
        if not first_request:  # the engine's exact first request for this room + comment, for the baseline
            turn_id = next(e["turn_id"] for e in out["viewers"][0]["events"] if e["type"] == "viewer_comment")
            comments = selectors.preview_turn_comments(room_id=room.pk, turn_id=turn_id)
            history = selectors.preview_history(room_id=room.pk, before_turn_id=turn_id)
            fresh = services.preview_open(user=user, version=version, endpoint=endpoint)  # the untouched room
            msgs, tools, built = engine_first_request(version.manifest, fresh.room_state, comments, history)
            keys = ("message_count", "tool_count", "token_estimate", "system_chars")
            same = all(built[k] == res["prompt"].get(k) for k in keys)
            first_request.update(messages=msgs, tools=tools, same=same)
        time.sleep(0.3)  # the worker finishes the turn (state save, publish flush) before the next request
        return res

    def one_direct(bucket: str) -> None:
        r = direct_request(direct_client, first_request["messages"], first_request["tools"], count_tokens)
        direct.setdefault(bucket, []).append(r)

    log("warm-up: one console turn (V=1) and two direct requests")
    warm = one_console_turn(1)
    if not warm.get("ok"):
        raise RuntimeError(f"warm-up turn failed: {warm.get('why')}")
    for _ in range(2):
        direct_request(direct_client, first_request["messages"], first_request["tools"], count_tokens)
    for _ in range(3):
        one_direct("pre")

    for v in levels:
        log(f"V={v}: 1 warm-up + {args.turns} measured turns, a direct request after each")
        one_console_turn(v)
        results[v] = []
        for i in range(args.turns):
            res = one_console_turn(v)
            if not res.get("ok"):
                problems.append(f"V={v} turn {i}: {res.get('why')}")
                continue
            results[v].append(res)
            one_direct(f"V{v}")
    direct_client.close()

    # --- report ------------------------------------------------------------------------------------------
    all_direct = [r for rs in direct.values() for r in rs if r.get("ttft_ms") is not None]
    d_ttft = [r["ttft_ms"] for r in all_direct]
    d_p50 = statistics.median(d_ttft)
    decode = [r["decode_tps"] for r in all_direct if r.get("decode_tps")]
    e2e = [r["e2e_tps"] for r in all_direct]
    prompt = warm["prompt"]
    print()
    print("=" * 100)
    print(f"preview-room TTFT benchmark  ({os.cpu_count()} CPUs, load average now {os.getloadavg()[0]:.2f}; "
          f"channel layer {settings.CHANNEL_LAYERS['default']['BACKEND']}; "
          f"model {MODEL_DIR.name} with {args.model_threads} thread(s); harness {harness_label})")
    print(f"prompt: {prompt.get('message_count')} messages, {prompt.get('tool_count')} tools, "
          f"~{prompt.get('token_estimate')} tokens (engine estimate); "
          f"{count_tokens(json.dumps(first_request['messages']))} tokenizer tokens of message JSON; "
          f"comment {COMMENT!r}; fresh room per turn")
    print(f"baseline prompt vs the worker's prompt_built (counts, token estimate, system chars): "
          f"{'identical' if first_request['same'] else 'DIFFERENT -- the baseline is not comparable'}")
    print(f"direct baseline: OpenAIChatClient -> {endpoint.base_url}, the engine's exact first request, "
          f"{len(d_ttft)} requests interleaved with the console turns (max_tokens 512 as the engine)")
    print("-" * 100)
    print("tiny model on this machine (direct, same prompt):")
    print(f"  TTFT          p50 {d_p50:8.1f} ms   p95 {pct(d_ttft, 95):8.1f} ms   "
          f"(idle before the console phases: p50 {statistics.median([r['ttft_ms'] for r in direct['pre']]):.1f} ms)")
    print(f"  decode        p50 {statistics.median(decode) if decode else float('nan'):8.1f} tokens/s  "
          f"(tokenizer tokens after the first delta / time from first to last delta)")
    print(f"  end to end    p50 {statistics.median(e2e):8.1f} tokens/s  (incl. prefill); "
          f"reply p50 {statistics.median([r['tokens'] for r in all_direct]):.0f} tokens, "
          f"{statistics.median([r['total_ms'] for r in all_direct]):.0f} ms")
    print("-" * 100)
    hdr = (f"{'V':>3} {'turns':>5} {'direct p50':>10} | {'A comment->tok@viewer':>22} | "
           f"{'B modelreq->tok@viewer':>23} | {'engine TTFT':>11} | {'fan-out tok->viewer':>20} | "
           f"{'A/direct':>8} {'B/direct':>8}")
    print(hdr)
    print(f"{'':>3} {'':>5} {'ms':>10} | {'p50':>10} {'p95':>11} | {'p50':>11} {'p95':>11} | {'p50':>11} | "
          f"{'p50':>9} {'p95':>10} | {'(p50)':>8} {'(p50)':>8}")
    summary = {}
    for v in levels:
        rs = results.get(v) or []
        if not rs:
            print(f"{v:>3} {0:>5}  no successful turn")
            continue
        A = [x for r in rs for x in r["A"]]
        B = [x for r in rs for x in r["B"]]
        fan = [x for r in rs for x in r["fan"]]
        eng = [r["engine_ttft"] for r in rs]
        vd = [r["ttft_ms"] for r in direct.get(f"V{v}", []) if r.get("ttft_ms") is not None]
        ra, rb = statistics.median(A) / d_p50, statistics.median(B) / d_p50
        summary[v] = (ra, rb, statistics.median(A) - d_p50, statistics.median(B) - d_p50)
        print(f"{v:>3} {len(rs):>5} {statistics.median(vd) if vd else float('nan'):>10.1f} | "
              f"{statistics.median(A):>10.1f} {pct(A, 95):>11.1f} | {statistics.median(B):>11.1f} {pct(B, 95):>11.1f} | "
              f"{statistics.median(eng):>11.1f} | {statistics.median(fan):>9.1f} {pct(fan, 95):>10.1f} | "
              f"{ra:>8.2f} {rb:>8.2f}")
    print("-" * 100)
    for v in levels:
        rs = results.get(v) or []
        if rs:
            q = [r["queue_ms"] for r in rs]
            tt = [r["timings_ttft"] for r in rs if r["timings_ttft"] is not None]
            rf = [x for r in rs for x in r["req_fan"]]
            print(f"V={v:<3} comment sent -> turn_started in the worker p50 {statistics.median(q):.1f} ms; "
                  f"model_request arrival -> first token arrival @viewer p50 {statistics.median(rf):.1f} ms "
                  f"(/direct {statistics.median(rf) / d_p50:.2f}); "
                  f"timings.ttft_ms (from turn start) p50 {statistics.median(tt):.1f} ms; "
                  f"first token from model call #{sorted({r['call_index'] for r in rs})}; "
                  f"turn total p50 {statistics.median([r['total_ms'] for r in rs]):.0f} ms")
    print("-" * 100)
    print("absolute console overhead over the direct TTFT p50 (ms; what the ratios hide):")
    for v in levels:
        if v in summary:
            ra, rb, oa, ob = summary[v]
            print(f"  V={v:<3} A - direct = {oa:7.1f} ms (ratio {ra:.2f})   B - direct = {ob:7.1f} ms (ratio {rb:.2f})")
    print("-" * 100)
    print("where the time goes, comment -> first token @viewer (p50 ms per stage over the measured turns; the")
    print("per-viewer stages over every viewer; stages are medians, so they need not add up to A exactly):")
    names = [n for n, _ in STAGES]
    print(f"  {'stage':<24}" + "".join(f"{'V=' + str(v):>10}" for v in levels) + "   what")
    for name, what in STAGES:
        row = []
        for v in levels:
            rs = results.get(v) or []
            vals = [r["stages"][name] for r in rs if name in r["stages"]]
            vals += [x for r in rs for x in r["viewer_stages"].get(name, [])]
            row.append(f"{statistics.median(vals):>10.1f}" if vals else f"{'-':>10}")
        print(f"  {name:<24}" + "".join(row) + f"   {what}")

    def turn_ms(r: dict, stages) -> float:
        """The sum of ``stages`` in one turn (the per-viewer ones at that turn's median viewer)."""
        return (sum(r["stages"][n] for n in stages if n in r["stages"])
                + sum(statistics.median(r["viewer_stages"][n]) for n in stages if r["viewer_stages"].get(n)))

    fixed = [n for n in names if n != "model (to 1st token)"]
    leg = ("1st token store+commit", "publish", "layer + web", "websocket send")
    sums = []
    for v in levels:
        per = [turn_ms(r, names) for r in results.get(v) or [] if r["stages"]]
        sums.append(f"{statistics.median(per):>10.1f}" if per else f"{'-':>10}")
    print(f"  {'sum (p50 viewer)':<24}" + "".join(sums))
    for v in levels:
        rs = [r for r in results.get(v) or [] if r["stages"]]
        if rs:
            print(f"  V={v:<3} console overhead (every stage but the model's): "
                  f"{statistics.median(turn_ms(r, fixed) for r in rs):.1f} ms p50 per turn; "
                  f"of it the streaming leg (1st token store -> viewer): "
                  f"{statistics.median(turn_ms(r, leg) for r in rs):.1f} ms")
    print("-" * 100)
    print("CPU per measured turn (ms of CPU time, p50) and the machine's load while the turns ran:")
    some = next((rs for rs in results.values() if rs), [])
    procs_names = list(some[0]["cpu_ms"]) if some else []
    print(f"  {'V':>3} " + "".join(f"{n:>17}" for n in procs_names)
          + f"{'turn wall':>11}{'all CPUs busy':>15}{'load1':>7}"
          f"{'frames/viewer':>15}{'token events':>14}{'token chars':>13}")
    for v in levels:
        rs = results.get(v) or []
        if not rs:
            continue
        print(f"  {v:>3} " + "".join(f"{statistics.median([r['cpu_ms'][n] for r in rs]):>17.0f}" for n in procs_names)
              + f"{statistics.median([r['wall_ms'] for r in rs]):>11.0f}"
              + f"{100 * statistics.median([r['machine_busy'] for r in rs]):>14.0f}%"
              + f"{statistics.median([r['load1'] for r in rs]):>7.2f}"
              + f"{statistics.median([r['frames'] for r in rs]):>15.0f}"
              + f"{statistics.median([r['token_events'] for r in rs]):>14.0f}"
              + f"{statistics.median([r['token_chars'] for r in rs]):>13.0f}")
    print("CPU by phase of the turn (ms of CPU time, p50; 'wall' is the phase's duration; 10 ms clock ticks):")
    print(f"  {'V':>3} {'phase':<22}" + "".join(f"{n:>17}" for n in procs_names) + f"{'wall':>9}")
    for v in levels:
        rs = [r for r in results.get(v) or [] if r.get("cpu_phases")]
        for phase in CPU_PHASES if rs else ():
            print(f"  {v:>3} {phase:<22}"
                  + "".join(f"{statistics.median([r['cpu_phases'][phase][n] for r in rs]):>17.0f}" for n in procs_names)
                  + f"{statistics.median([r['cpu_phases'][phase]['wall'] for r in rs]):>9.0f}")
    print("""
Columns (ms; p50/p95 over every viewer of every measured turn):
  direct p50   the same first request sent straight to the endpoint right after each console turn (this V)
  A            the sender's WebSocket send() of the comment -> this viewer receives the first `token` event:
               the whole console path (WebSocket in, service, Celery queue + worker pick-up, prompt, model,
               event store, Redis, web process, WebSocket out) -- the TTFT a user of the preview room sees
  B            the engine's `model_request` event (its `at` stamp: worker wall clock just before the HTTP
               request) -> this viewer receives the first `token` event: endpoint TTFT + fan-out, without the
               comment/queue/prompt stages
  engine TTFT  first `token` t_ms - `model_request` t_ms inside the worker (the engine's own measurement)
  fan-out      first `token` event created in the worker (`at`) -> received by this viewer
  A/direct, B/direct   p50 ratios against the direct TTFT p50 of the whole run""")
    if problems:
        print("\nproblems:\n  " + "\n  ".join(problems))
    print("-" * 100)
    top = max(levels)
    verdict = 0
    if top in summary:
        ra, rb, oa, ob = summary[top]
        for label, r, over in (("A (comment -> first token @viewer) / direct", ra, oa),
                               ("B (model request -> first token @viewer) / direct", rb, ob)):
            ok = r <= args.target
            verdict |= 0 if ok else 1
            print(f"{'PASS' if ok else 'FAIL'}  V={top}: {label} = {r:.2f}  (target <= {args.target:.2f}); "
                  f"{over:+.1f} ms over the direct TTFT p50 of {d_p50:.1f} ms")
    else:
        verdict = 1
        print(f"FAIL  V={top}: no successful turn")
    print(f"elapsed {time.monotonic() - started:.0f} s (setup included)")
    print("=" * 100)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
