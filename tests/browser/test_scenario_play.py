"""Play mode in Chromium against the real stack (the web process (uvicorn) on the test database and the Redis channel layer,
the real Celery worker driving the clock and the turns): press play at ×60, watch the clock advance by
itself and the scenario's first comment become a streamed turn; pause holds the clock; resumed, the
scenario plays to its end and the clock stops by itself."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from streams import services
from streams.models import ModelEndpoint, PreviewRoom
from tests.browser.test_preview_room import _login, _shot, asgi_page, asgi_server  # noqa: F401 (fixtures)
from tests.streams.preview_helpers import GOOD, price_script
from tests.streams.scripted_endpoint import ScriptedEndpoint
from tests.streams.test_scenario_runs import quick_yaml

pytestmark = pytest.mark.browser


def _minute(page) -> float:
    return float(page.get_by_test_id("room-minute").inner_text())


def test_play_advances_the_clock_and_turns_arrive(asgi_page, asgi_server, harness_with_history, manager,
                                                  celery_worker_process):
    page = asgi_page
    ep = ScriptedEndpoint()
    try:
        price_script(ep)  # the minute-1 comment "how much is #101?"; later turns fall back (nothing scripted)
        ModelEndpoint.objects.create(name="scripted", base_url=ep.base_url, model="scripted", kind="vllm",
                                     timeout_s=10, connect_timeout_s=1)
        services.scenario_import(yaml_text=quick_yaml(), user=manager)
        _login(page, manager, asgi_server)
        page.goto("/preview/")
        page.select_option("#id_version", label="glow-gadget v1 (approved)")
        page.select_option("#id_scenario", label="Quick check")
        page.select_option("#id_endpoint", label="scripted")
        page.click("text=Open the preview")
        page.wait_for_url("**/preview/*/")
        expect(page.get_by_test_id("conn-status")).to_have_text("live")
        room_id = page.url.rstrip("/").rsplit("/", 1)[-1]
        expect(page.get_by_test_id("room-minute")).to_have_text("0")
        expect(page.get_by_test_id("room-playing")).to_be_hidden()

        page.select_option("#id_speed", label="×60 (a minute a second)")
        page.click("#play")  # a plain form: the page comes back from the server, then the socket
        expect(page.get_by_test_id("conn-status")).to_have_text("live")
        expect(page.get_by_test_id("room-playing")).to_have_text("playing ×60")
        expect(page.get_by_test_id("room-minute")).not_to_have_text("0")  # the clock moves by itself
        turn = page.get_by_test_id("turn").first
        expect(turn.get_by_test_id("comment")).to_contain_text("how much is #101?")
        expect(turn.get_by_test_id("reply")).to_have_text(GOOD, timeout=20_000)
        expect(turn.get_by_test_id("timings")).to_contain_text("TTFT")
        _shot(page, "play-01-turn")

        page.click("#pause")  # over the socket: no reload
        expect(page.get_by_test_id("room-paused")).to_be_visible()
        expect(page.get_by_test_id("room-playing")).to_be_hidden()
        held = _minute(page)
        time.sleep(1.5)
        assert _minute(page) == held
        assert PreviewRoom.objects.get(pk=room_id).scenario_minute == pytest.approx(held, abs=0.005)

        page.click("#resume")
        expect(page.get_by_test_id("room-playing")).to_be_visible()
        expect(page.get_by_test_id("room-log")).to_contain_text("scenario over at minute 6", timeout=60_000)
        expect(page.get_by_test_id("room-minute")).to_have_text("6")
        expect(page.get_by_test_id("room-playing")).to_be_hidden()
        expect(page.get_by_test_id("turn")).to_have_count(3)
        expect(page.get_by_test_id("reply")).to_have_count(3)
        room = PreviewRoom.objects.get(pk=room_id)
        assert not room.playing and room.tick_token == "" and room.scenario_minute == 6
        _shot(page, "play-02-finished")

        page.click("text=Transcript")
        expect(page.get_by_test_id("transcript-turn")).to_have_count(3)
        expect(page.get_by_test_id("transcript-reply").first).to_contain_text(GOOD)
        assert re.search(r"scenario_finished", page.content())
    finally:
        ep.close()


def test_a_run_is_cancelled_from_its_page(asgi_page, asgi_server, harness_with_history, manager,
                                          celery_worker_process):
    """A scenario run is a job: its page shows its status and, to its owner, a Cancel button; the clock's next tick
    ends it cancelled (the one cancel of every job kind) and the page stops refreshing."""
    from console.models import AuditEvent
    from tests.console.test_redis_outage import long_scenario_yaml
    from tests.streams.scripted_endpoint import reply

    page = asgi_page
    ep = ScriptedEndpoint()
    try:
        ep.add(*[reply(f"Link 101 is $24.90 ({i}).") for i in range(300)])
        for s in ep.queue:
            s.hang_s = 0.3  # turns take a moment: the run is still playing when it is cancelled
        ModelEndpoint.objects.create(name="scripted", base_url=ep.base_url, model="scripted", kind="vllm",
                                     timeout_s=10, connect_timeout_s=1)
        scenario = services.scenario_import(yaml_text=long_scenario_yaml(), user=manager)
        room_id = str(services.scenario_run_start(user=manager, version=harness_with_history["v1"], scenario=scenario,
                                                  endpoint=ModelEndpoint.objects.get(name="scripted")).pk)
        _login(page, manager, asgi_server)
        page.goto(f"/preview/{room_id}/transcript/")
        status = page.get_by_test_id("run-status")
        expect(status).to_have_text(re.compile("queued|running"))
        deadline = time.monotonic() + 60
        while PreviewRoom.objects.get(pk=room_id).events.filter(type="reply").count() < 2:
            assert time.monotonic() < deadline, "the run did not play"
            time.sleep(0.2)
        page.reload()
        expect(status).to_have_text("running")
        _shot(page, "run-01-running")
        page.click("[data-testid=run-cancel]")
        expect(status).to_have_text(re.compile("cancelling|cancelled"))
        expect(status).to_have_text("cancelled", timeout=30_000)  # the page refreshes while the run is active
        expect(page.get_by_test_id("run-cancel")).to_have_count(0)
        _shot(page, "run-02-cancelled")
        room = PreviewRoom.objects.select_related("job").get(pk=room_id)
        assert (room.status, room.playing, room.job.status) == ("closed", False, "cancelled")
        assert AuditEvent.objects.filter(scope=f"scenario_run:{room_id}", action="scenario_run.cancel",
                                         actor=manager).exists()
    finally:
        ep.close()
