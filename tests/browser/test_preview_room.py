"""The preview room in Chromium against a real ASGI server (the web process in a subprocess, on the test database and
the Redis channel layer) with turns in the real Celery worker: open a preview, send a comment, watch tokens
arrive and the tool calls shown; drop the socket and see the room resume without duplicates."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from playwright.sync_api import expect

from console.web_server import web_server_argv
from streams.models import ModelEndpoint, PreviewEvent, PreviewRoom
from tests.browser.conftest import SCREENSHOTS, watch_csp
from tests.streams.preview_helpers import GOOD
from tests.streams.scripted_endpoint import (
    ScriptedEndpoint,
    free_port,
    hermes_calls,
    native_calls,
    reply,
)

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def asgi_server(transactional_db):
    """The web process as deployed (console.web_server: uvicorn) serving console.asgi plus static files
    (tests.browser.asgi_app) on a free loopback port, on the test database."""
    if not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        pytest.skip("the server and the worker are other processes: they need the PostgreSQL test database")
    env = dict(os.environ)
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("postgresql"):
        env["DATABASE_URL"] = (f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                               f"{db['PORT'] or 5432}/{db['NAME']}")
    port = free_port()
    log = open(Path(settings.ENV.data_dir) / "test-web.log", "w")
    argv = web_server_argv("127.0.0.1", port, app="tests.browser.asgi_app:application", log_level="warning")
    proc = subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/health/live", timeout=1).status_code < 500:  # up; readiness also needs workers
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the web process did not start; see {log.name}")
        time.sleep(0.1)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def asgi_page(browser, asgi_server):
    context = browser.new_context(base_url=asgi_server, viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(15_000)
    page = context.new_page()
    violations = watch_csp(page)  # the room's script and WebSocket under the real ASGI server's CSP
    yield page
    context.close()
    assert not violations, f"Content-Security-Policy violations: {violations}"


def _login(page, user, base_url: str) -> None:
    """A real session in the database, handed to the browser as its cookie (the server process does not
    know the tests' fast password hasher, so the login form cannot be used here)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    page.context.add_cookies([{"name": name, "value": client.cookies[name].value, "url": base_url}])
    page.goto("/")
    expect(page.get_by_test_id("current-user")).to_have_text(user.username)


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _open_preview(page, version_label: str, endpoint_name: str) -> str:
    page.goto("/preview/")
    page.select_option("#id_version", label=version_label)
    page.select_option("#id_endpoint", label=endpoint_name)
    page.click("text=Open the preview")
    page.wait_for_url("**/preview/*/")
    expect(page.get_by_test_id("conn-status")).to_have_text("live")
    return page.url.rstrip("/").rsplit("/", 1)[-1]


def test_preview_streams_tokens_and_shows_tool_calls(asgi_page, asgi_server, harness_with_history, manager,
                                                     celery_worker_process):
    page = asgi_page
    ep = ScriptedEndpoint()
    try:
        slow = reply(GOOD, size=3)
        slow.stall_after, slow.stall_s = 8, 1.0  # hold the stream open so tokens are seen arriving
        ep.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
               native_calls(("get_product_details", {"link_id": 101})), slow)  # v3 renamed lookup_product
        ModelEndpoint.objects.create(name="scripted", base_url=ep.base_url, model="scripted", kind="vllm",
                                     timeout_s=10, connect_timeout_s=1)
        _login(page, manager, asgi_server)
        page.get_by_role("link", name="Preview", exact=True).click()
        expect(page.get_by_role("heading", name="Preview room", exact=True)).to_be_visible()
        room_id = _open_preview(page, "glow-gadget v3 (draft)", "scripted")
        expect(page.get_by_test_id("room-log")).to_contain_text("opened by cm_alice: glow-gadget v3")

        page.fill("#comment-text", "how much is #101?")
        page.click("#comment-send")
        turn = page.get_by_test_id("turn").first
        expect(turn.get_by_test_id("comment")).to_contain_text("how much is #101?")
        expect(turn.get_by_test_id("tool-call").first).to_contain_text("load_skill")
        expect(turn.get_by_test_id("skill")).to_contain_text("price_stock_qa")
        # tokens arrive before the reply is final
        streams = turn.get_by_test_id("stream")
        expect(streams.last).to_contain_text("HydraGl")
        assert turn.get_by_test_id("reply").count() == 0
        _shot(page, "preview-01-streaming")
        expect(turn.get_by_test_id("reply")).to_have_text(GOOD, timeout=20_000)
        expect(turn.get_by_test_id("tool-call")).to_have_count(2)
        expect(turn.get_by_test_id("tool-call").nth(1)).to_contain_text('get_product_details({"link_id":101})')
        expect(turn.get_by_test_id("tool-call").nth(1)).to_contain_text("valid")
        expect(turn.get_by_test_id("tool-result").first).to_be_visible()
        expect(turn.get_by_test_id("hook").first).to_be_visible()
        expect(turn.get_by_test_id("timings")).to_contain_text("TTFT")
        assert int(turn.get_attribute("data-tokens")) >= 10
        _shot(page, "preview-02-reply")

        # drop the socket: the page reconnects with ?after=<last seq>; nothing shown twice
        last = page.evaluate("window.hatPreview.lastSeq()")
        page.evaluate("window.hatPreview.drop()")
        expect(page.get_by_test_id("conn-status")).to_have_text("reconnecting…")
        expect(page.get_by_test_id("conn-status")).to_have_text("live")
        page.select_option("#version-select", label="v1 (approved)")
        page.click("#switch-version")
        expect(page.get_by_test_id("room-version")).to_have_text("glow-gadget v1")
        expect(page.get_by_test_id("room-log")).to_contain_text("switched v3 → v1")
        assert page.evaluate("window.hatPreview.lastSeq()") == last + 1
        expect(page.get_by_test_id("turn")).to_have_count(1)
        expect(page.get_by_test_id("reply")).to_have_count(1)
        room = PreviewRoom.objects.get(pk=room_id)
        assert room.harness_version.number == 1 and room.last_seq == last + 1
        assert PreviewEvent.objects.filter(room=room, type="token").count() == int(turn.get_attribute("data-tokens"))

        # the transcript of the stored turn
        page.click("text=Transcript")
        expect(page.get_by_test_id("transcript-reply")).to_contain_text(GOOD)
        _shot(page, "preview-03-transcript")
    finally:
        ep.close()


def test_version_page_links_to_the_preview(asgi_page, asgi_server, harness_with_history, manager):
    page = asgi_page
    _login(page, manager, asgi_server)
    page.goto("/harnesses/glow-gadget/v3/")
    page.get_by_test_id("preview-link").click()
    expect(page.locator("#id_version")).to_have_value(str(harness_with_history["v3"].pk))


def test_preview_with_the_local_model(request, asgi_page, asgi_server, manager, demo_manifest,
                                      celery_worker_process):
    """The same page on real tokens from the tiny local model (skipped only without the
    ``local_model_server`` fixture)."""
    from tests.streams.test_preview_local_model import (
        QUESTION,
        local_model_endpoint,
        tiny_version,
    )

    endpoint = local_model_endpoint(request)
    tiny_version(manager, demo_manifest)
    page = asgi_page
    _login(page, manager, asgi_server)
    _open_preview(page, "tiny-room v1 (draft)", endpoint.name)
    page.fill("#comment-text", QUESTION)
    page.click("#comment-send")
    turn = page.get_by_test_id("turn").first
    expect(turn).to_have_attribute("data-tokens", re.compile(r"^[1-9]"), timeout=60_000)  # tokens arriving
    expect(turn.get_by_test_id("reply")).to_be_visible(timeout=180_000)
    expect(turn.get_by_test_id("timings")).to_contain_text("TTFT")
    assert int(turn.get_attribute("data-tokens") or 0) > 0
    assert turn.get_by_test_id("tool-call").count() >= 1  # the demo model loads a reply skill first
    _shot(page, "preview-04-local-model")
