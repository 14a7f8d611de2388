"""A preview room's people in Chromium (issue 10, point 8), against the real ASGI server, Redis layer and Celery
worker: the owner invites a colleague from the room page; the colleague finds the room in their list, joins it,
is refused a colleague's name as viewer name and sees their comment marked "sent by" them; someone not invited
gets a 404; once the owner removes the colleague, the colleague's open room says "not allowed"."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from streams.models import ModelEndpoint
from tests.browser.conftest import watch_csp
from tests.browser.test_preview_room import _login, _open_preview, _shot, asgi_server  # noqa: F401
from tests.streams.preview_helpers import GOOD, price_script
from tests.streams.scripted_endpoint import ScriptedEndpoint

pytestmark = pytest.mark.browser


def _page(browser, base_url):
    context = browser.new_context(base_url=base_url, viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(15_000)
    page = context.new_page()
    return page, watch_csp(page)


def test_owner_invites_member_comments_as_themselves_then_is_removed(browser, asgi_server, harness_with_history,
                                                                     manager, manager2, reviewer,
                                                                     celery_worker_process):
    ep = ScriptedEndpoint()
    try:
        price_script(ep)
        ModelEndpoint.objects.create(name="scripted", base_url=ep.base_url, model="scripted", kind="vllm",
                                     timeout_s=10, connect_timeout_s=1)
        alice, alice_csp = _page(browser, asgi_server)
        _login(alice, manager, asgi_server)
        room_id = _open_preview(alice, "glow-gadget v1 (approved)", "scripted")
        alice.fill("#id_username", "op_nobody")
        alice.get_by_role("button", name="Invite", exact=True).click()
        expect(alice.get_by_test_id("invite-error")).to_contain_text("no console user is called 'op_nobody'")
        alice.fill("#id_username", "cm_bob")
        alice.get_by_role("button", name="Invite", exact=True).click()
        expect(alice.get_by_test_id("member")).to_contain_text("cm_bob")
        expect(alice.get_by_test_id("room-log")).to_contain_text("cm_alice invited cm_bob")

        bob, bob_csp = _page(browser, asgi_server)
        _login(bob, manager2, asgi_server)
        bob.goto("/preview/")
        expect(bob.get_by_test_id("invited")).to_be_visible()
        bob.click(f"a[href='/preview/{room_id}/']")
        expect(bob.get_by_test_id("conn-status")).to_have_text("live")
        expect(bob.locator("#close-room")).to_have_count(0)
        expect(bob.get_by_test_id("invite-form")).to_have_count(0)
        expect(bob.locator("#comment-viewer")).to_have_value("cm_bob")
        bob.fill("#comment-viewer", "cm_alice")
        bob.fill("#comment-text", "approve the coupon")
        bob.click("#comment-send")
        expect(bob.get_by_test_id("preview-error")).to_contain_text("another console user")
        bob.fill("#comment-viewer", "Mia")
        bob.fill("#comment-text", "how much is #101?")
        bob.click("#comment-send")
        comment = bob.get_by_test_id("comment").first
        expect(comment).to_contain_text("Mia")
        expect(comment.get_by_test_id("sent-by")).to_have_text("sent by cm_bob")
        expect(alice.get_by_test_id("sent-by").first).to_have_text("sent by cm_bob")  # the owner sees who, live
        expect(alice.get_by_test_id("reply").first).to_contain_text(GOOD, timeout=30_000)
        _shot(alice, "room-members-owner")
        _shot(bob, "room-members-member")

        carol, carol_csp = _page(browser, asgi_server)
        _login(carol, reviewer, asgi_server)
        assert carol.goto(f"/preview/{room_id}/").status == 404

        alice.get_by_test_id("remove-member").click()
        expect(alice.get_by_test_id("member")).to_have_count(0)
        expect(bob.get_by_test_id("conn-status")).to_have_text("not allowed", timeout=15_000)
        assert bob.goto(f"/preview/{room_id}/").status == 404
        for page in (alice, bob, carol):
            page.context.close()
        assert not (alice_csp or bob_csp or carol_csp)
    finally:
        ep.close()
