"""Live tokens stay out of the web process's log: the web process as deployed (console.web_server: uvicorn with its
access log on, serving console.asgi) on a free loopback port and the test database; a real overlay page load with
``?token=`` and a real ingest socket with ``?token=`` (which must work), then the captured log has neither secret,
only ``token=[redacted]`` (uvicorn wrote both in full: the HTTP access line and the WebSocket handshake line)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from websockets.sync.client import connect

from console.log_filters import QueryTokenRedacted, redact_query_tokens
from console.web_server import web_server_argv
from streams.services import live_sessions as svc
from tests.streams.live_helpers import comment, live_session, live_world  # noqa: F401
from tests.streams.scripted_endpoint import free_port

pytestmark = pytest.mark.django_db(transaction=True)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_runner(monkeypatch):
    monkeypatch.setattr(svc, "_runner_ensure", lambda session_id: None)  # comments are stored, nobody answers


@pytest.fixture
def web_process():
    """(base URL, log path) of the web process; stopped (its log complete) by calling the third item."""
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        pytest.skip("the web process is another process: it needs the PostgreSQL test database")
    env = dict(os.environ, DATABASE_URL=(f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                                         f"{db['PORT'] or 5432}/{db['NAME']}"))
    port = free_port()
    log_path = Path(settings.ENV.data_dir) / "test-web-token-log.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, *web_server_argv("127.0.0.1", port)], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/health/live", timeout=1).status_code < 500:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the web process did not start; see {log_path}")
        time.sleep(0.2)

    def stop() -> str:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        return log_path.read_text()

    yield url, stop
    stop()


def test_overlay_and_ingest_tokens_are_not_written_to_the_access_log(live_session, operator, web_process):
    _t, overlay = svc.live_token_create(user=operator, session=live_session, scope="overlay")
    _t, ingest = svc.live_token_create(user=operator, session=live_session, scope="ingest")
    url, stop = web_process

    page = httpx.get(f"{url}/live/{live_session.pk}/overlay/?token={overlay}", timeout=10)
    assert page.status_code == 200  # the real token worked
    ws_url = url.replace("http://", "ws://") + f"/ws/live/{live_session.pk}/ingest/?token={ingest}"
    with connect(ws_url, open_timeout=10) as ws:
        ws.send(json.dumps(comment(1)))
        ack = json.loads(ws.recv(timeout=10))
    assert ack["type"] == "ack" and ack["status"] == "queued"

    text = stop()
    assert f"/live/{live_session.pk}/overlay/?token=[redacted]" in text, text[-2000:]  # the access line is there
    assert f"/ws/live/{live_session.pk}/ingest/?token=[redacted]" in text, text[-2000:]  # the handshake line too
    for secret in (overlay, ingest):
        assert secret not in text and secret[len("hat_"):][:16] not in text


def test_the_filter_redacts_every_token_parameter_and_nothing_else():
    assert redact_query_tokens("/live/x/overlay/?token=hat_abc-_1&v=2") == "/live/x/overlay/?token=[redacted]&v=2"
    assert redact_query_tokens("/p?a=1&access_token=q;%74oken=s") == "/p?a=1&access_token=[redacted];%74oken=[redacted]"
    assert redact_query_tokens("/live/?page=2&next=/a?b=c") == "/live/?page=2&next=/a?b=c"

    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/o/?token=hat_s", "1.1", 200), None)
    assert QueryTokenRedacted().filter(record)
    assert record.getMessage().endswith('"GET /o/?token=[redacted] HTTP/1.1" 200')
