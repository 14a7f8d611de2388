"""Playwright (sync API) against pytest-django's live server, in the Debian Chromium.

Playwright's sync API runs an event loop in this thread, so Django's async-safety check would refuse the
ORM calls the tests make to set up and check data; DJANGO_ALLOW_ASYNC_UNSAFE turns that check off for this
test process only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def browser():
    """One Chromium per test. While Playwright's sync API is active an asyncio loop counts as running in this
    thread, so Django keeps this thread's DB connections in a separate (context-var) slot; they are closed
    before Playwright stops, or they would outlive the test and block dropping the test database."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from django.db import connections
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
            connections.close_all()


@pytest.fixture(autouse=True)
def _live_db(transactional_db, settings):
    """The live server runs in another thread: data must be committed for it to see it."""


def watch_csp(page) -> list[str]:
    """Chromium's console messages about Content-Security-Policy violations on ``page`` (appended as they come):
    a page that needs an inline script or a foreign origin shows up here instead of failing silently."""
    violations: list[str] = []
    page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    return violations


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(10_000)
    page = context.new_page()
    violations = page.csp_violations = watch_csp(page)
    yield page
    context.close()
    assert not violations, f"Content-Security-Policy violations: {violations}"


@pytest.fixture
def login(page):
    from tests.conftest import PASSWORD

    def do(user) -> None:
        page.goto("/accounts/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/")

    return do


@pytest.fixture
def shot(page, request):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(step: str, *, full_page: bool = True) -> Path:
        path = SCREENSHOTS / f"{request.node.name}-{step}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    return take
