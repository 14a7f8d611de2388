"""Try this draft in Chromium, against the real ASGI web process, the real Celery worker and the tiny local model:
from the version page to the Try page, the notice that the model never saw this version (said before sending), one
comment, and both versions' turns streaming side by side."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from streams.models import ModelEndpoint
from tests.browser.test_preview_room import _login, _shot, asgi_page, asgi_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def test_try_a_draft_beside_production(request, asgi_page, asgi_server, harness_with_history, manager,  # noqa: F811
                                       celery_worker_process):
    from tests.streams.test_preview_local_model import QUESTION, local_model_endpoint
    from tests.streams.test_try_draft import glow_expected_level

    endpoint = local_model_endpoint(request)
    ModelEndpoint.objects.exclude(pk=endpoint.pk).update(is_default=False)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)
    page = asgi_page
    _login(page, manager, asgi_server)
    page.goto("/harnesses/glow-gadget/v3/")
    page.get_by_test_id("try-draft-link").click()
    page.wait_for_url("**/harnesses/glow-gadget/v3/try/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Try glow-gadget v3 beside production (v1)")
    fit = page.get_by_test_id("model-fit")
    if glow_expected_level(3) == "info":  # a demo model trained on other glow-gadget versions, not on v3
        expect(fit).to_have_attribute("data-level", "info")
        expect(fit).to_contain_text("of glow-gadget, not on v3")
    else:
        expect(fit).to_contain_text("was not trained on glow-gadget")
        expect(fit).to_contain_text("tiny_room")
    expect(page.get_by_test_id("try-endpoint")).to_have_text("local-test")
    _shot(page, "try-draft-01-before-sending")

    page.fill("#try-text", QUESTION)
    page.click("#try-send")
    page.wait_for_url("**/try/?draft=*")
    columns = {side: page.get_by_test_id(f"try-{side}") for side in ("draft", "production")}
    for column in columns.values():
        expect(column.get_by_test_id("conn-status")).to_have_text("live")
        expect(column.get_by_test_id("comment")).to_contain_text(QUESTION)
    expect(columns["draft"]).to_contain_text("v3")
    expect(columns["production"]).to_contain_text("production: v1")
    for column in columns.values():  # both turns end (the worker runs them one after the other)
        expect(column).to_have_attribute("data-done", re.compile(r"^(ok|fallback)$"), timeout=240_000)
        expect(column.get_by_test_id("reply")).to_be_visible()
        expect(column.get_by_test_id("timings")).to_contain_text("total")
        expect(column.get_by_test_id("try-outcome")).to_be_visible()
    turns = page.get_by_test_id("turn")
    expect(turns).to_have_count(2)
    expect(turns.nth(0)).to_contain_text("glow-gadget v3")
    expect(turns.nth(1)).to_contain_text("glow-gadget v1")
    _shot(page, "try-draft-02-side-by-side")

    # the notice now says what those turns did
    page.goto("/harnesses/glow-gadget/v3/try/")
    expect(page.get_by_test_id("model-fit-expectation")).to_contain_text("recorded turns of glow-gadget on this model")
    _shot(page, "try-draft-03-notice-with-evidence")
