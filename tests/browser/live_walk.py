"""Steps of a Chromium walk through a live session, shared by the operator-page walk (test_live_operator.py) and the
end-to-end walk of issue 12 (frank starts a session, takes over, mutes, carol moves the label, the overlay shows the
reply). The pages run on a real ASGI server (``asgi_server`` / ``asgi_page`` from test_preview_room: the web process (uvicorn) on the
test database and the Redis channel layer).

Every step waits for what the page shows, never for a time: ``expect`` retries until its timeout.
"""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import SCREENSHOTS, watch_csp


def login_as(page, user, base_url: str) -> None:
    """A real session in the database handed to the browser as its cookie (the server process does not know the
    tests' fast password hasher, so the login form cannot be used)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    page.context.add_cookies([{"name": name, "value": client.cookies[name].value, "url": base_url}])


def script_errors(page) -> list[str]:
    """Uncaught script errors on ``page`` from now on (appended as they happen)."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors


def open_operator_page(page, session_id) -> None:
    """The session's page, its socket connected."""
    page.goto(f"/live/{session_id}/")
    expect(page.get_by_test_id("conn-status")).to_have_text("connected")


def open_overlay(browser, base_url: str, session_id, secret: str):
    """The subtitle overlay in its own browser context (no login, as streaming software opens it); returns
    (page, list of CSP violations and script errors)."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 720})
    context.set_default_timeout(15_000)
    overlay = context.new_page()
    violations = watch_csp(overlay)
    overlay.on("pageerror", lambda exc: violations.append(f"script error: {exc}"))
    overlay.goto(f"/live/{session_id}/overlay/?token={secret}")
    expect(overlay.get_by_test_id("overlay")).to_have_attribute("data-conn", "live")
    return overlay, violations


def subtitle(overlay):
    return overlay.get_by_test_id("subtitle")


def overlay_history(overlay, *, streaming: bool | None = None) -> list[str]:
    """Every line the overlay has shown (overlay.js keeps them for tests); ``streaming=True``: only lines shown while
    tokens streamed, ``False``: only final ones (spoken)."""
    lines = overlay.evaluate("window.hatOverlay.shown()")
    return [x["text"] for x in lines if streaming is None or x["final"] is (not streaming)]


def set_approval(page, *, on: bool) -> None:
    page.get_by_test_id("approval-toggle").click()
    expect_result(page, "approve-before-speak is " + ("on" if on else "off"))
    expect(page.get_by_test_id("approval")).to_have_attribute("data-on", "1" if on else "0")


def approve_pending(page, turn_id: str, text: str | None = None) -> None:
    """Approve the reply of ``turn_id`` waiting in the pending panel, edited to ``text`` if given."""
    reply = page.locator(f'[data-testid=pending-reply][data-turn="{turn_id}"]')
    if text is not None:
        reply.get_by_test_id("pending-text").fill(text)
    reply.get_by_test_id("approve").click()
    expect_result(page, "approved")
    expect(reply).to_have_count(0)


def expect_result(page, text: str) -> None:
    """The answer of the last control posted (a message, or an error with its verdicts)."""
    expect(page.get_by_test_id("control-result")).to_contain_text(text)


def toggle_mute(page, *, muted: bool) -> None:
    page.get_by_test_id("mute-toggle").click()
    expect_result(page, "muted" if muted else "unmuted")
    expect(page.get_by_test_id("muted")).to_have_attribute("data-muted", "1" if muted else "0")


def take_over(page, text: str) -> None:
    page.fill("#takeover-text", text)
    page.click("#takeover-send")


def pin(page, link_id: int) -> None:
    page.select_option("#pin-product", str(link_id))
    page.click("#pin-send")
    expect_result(page, f"#{link_id} pinned")
    expect(page.get_by_test_id("pinned")).to_contain_text(f"#{link_id}")


def queue_row(page, comment_id):
    return page.locator(f'[data-testid=queue-row][data-comment="{comment_id}"]')


def skip(page, comment_id) -> None:
    queue_row(page, comment_id).get_by_test_id("skip").click()
    expect(queue_row(page, comment_id)).to_have_attribute("data-status", "skipped")


def turn_card(page, turn_id):
    return page.locator(f'[data-testid=turn][data-turn="{turn_id}"]')


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
