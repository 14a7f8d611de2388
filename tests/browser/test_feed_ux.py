"""Watching turns in Chromium (issue 14): the preview room's feed scrolls in its own box with the comment box in
reach, tool payloads and retried attempts are folded until opened, filters show only fallbacks or hook failures,
the feed follows new turns only while the reader is at its bottom ("Jump to latest" otherwise); the transcript's
filters; and every table of the console fits or scrolls in a box with a visible cue, at 1280 and 1440 px.

The turns are stored and published as the turn engine stores them (``preview_event_append``), so the page under the
real web process (uvicorn, the Redis channel layer) receives them over its WebSocket as it would from a worker."""

from __future__ import annotations

import time
import uuid

import pytest
from playwright.sync_api import expect

from streams import events as stream_events
from streams import services
from streams.models import ModelEndpoint
from tests.browser.conftest import SCREENSHOTS
from tests.browser.test_preview_room import _login, asgi_page, asgi_server  # noqa: F401 (fixtures)
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401 (fixtures)
from tests.streams.preview_helpers import demo_scenarios, scripted_model  # noqa: F401 (fixtures)
from tests.streams.scripted_endpoint import ScriptedEndpoint, scripted_endpoint  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser
LONG_RESULT = {"link_id": 101, "title": "HydraGlow serum 30 ml", "price": 24.9, "list_price": 34, "stock": 180,
               "claims": [f"claim {i}: hydrates for {i} hours, dermatologist tested" for i in range(30)]}


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"feed-{name}.png"), full_page=True)


def _turn_events(i: int, *, fallback: bool = False, hook_failed: bool = False) -> list[tuple[str, dict]]:
    """One turn as the engine stores it: comment, start, a streamed model call, a tool call with a long result,
    (a failed hook and its retry,) hooks, the reply and its timings."""
    text = f"Turn {i}: HydraGlow is $24.9 now, 180 in stock."
    out = [("viewer_comment", {"viewer": f"viewer{i}", "text": f"question {i}: how much is #101?", "source": "user"}),
           ("turn_started", {"version": {"harness": "glow-gadget", "number": 1},
                             "endpoint": {"name": "scripted", "model": "scripted"}, "comments": 1}),
           ("model_request", {"call_index": 0, "round": 1, "attempt": 1}),
           ("token", {"channel": "content", "delta": "Let me look that up."}),
           ("tool_call", {"call_id": f"c{i}", "name": "lookup_product", "arguments": {"link_id": 101}, "valid": True}),
           ("tool_result", {"call_id": f"c{i}", "result": LONG_RESULT, "duration_ms": 4})]
    if hook_failed:
        out += [("model_request", {"call_index": 1, "round": 2, "attempt": 1}),
                ("token", {"channel": "content", "delta": "Guaranteed to cure dry skin forever!"}),
                ("hook_result", {"hook_id": "banned_phrases", "passed": False, "kind": "banned_phrases",
                                 "point": "reply", "detail": "guaranteed"}),
                ("retry", {"attempt": 2, "hook_id": "banned_phrases", "message": "no efficacy promises"}),
                ("model_request", {"call_index": 2, "round": 2, "attempt": 2})]
    else:
        out.append(("model_request", {"call_index": 1, "round": 2, "attempt": 1}))
    out += [("token", {"channel": "content", "delta": text}),
            ("hook_result", {"hook_id": "reply_format", "passed": True, "kind": "reply_format", "point": "reply"}),
            ("reply", {"text": "Sorry, I can't answer that right now." if fallback else text, "fallback": fallback,
                       "reason": "model_error" if fallback else ""}),
            ("timings", {"ttft_ms": 80, "model_ms": 300, "tool_ms": 4, "engine_ms": 9, "total_ms": 320,
                         "model_calls": 2, "retries": int(hook_failed)})]
    return out


def _add_turn(room, i: int, **kind) -> None:
    services.preview_event_append(room_id=room.pk, turn_id=uuid.uuid4().hex, events=_turn_events(i, **kind))
    stream_events.publish_flush()


def _kind(i: int) -> dict:
    return {"fallback": i % 5 == 3, "hook_failed": i % 4 == 1}


def _at_bottom(page) -> bool:
    return page.evaluate("(() => { const f = document.getElementById('feed');"
                         " return f.scrollHeight - f.scrollTop - f.clientHeight <= 30; })()")


def _wait(pred, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def _in_viewport(page, selector: str) -> bool:
    return page.evaluate(f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
                         " return r.top >= -1 && r.bottom <= window.innerHeight + 1 && r.height > 0; })()")


@pytest.fixture
def feed_room(harness_with_history, manager):
    ep = ScriptedEndpoint()
    endpoint = ModelEndpoint.objects.create(name="scripted", base_url=ep.base_url, model="scripted", kind="vllm",
                                            timeout_s=10, connect_timeout_s=1)
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=endpoint)
    yield room
    ep.close()


def test_feed_folds_filters_and_follows(asgi_page, asgi_server, feed_room, manager):  # noqa: F811
    page, room = asgi_page, feed_room
    n = 30
    for i in range(n):
        _add_turn(room, i, **_kind(i))
    fallbacks = sum(1 for i in range(n) if _kind(i)["fallback"])
    hook_failures = sum(1 for i in range(n) if _kind(i)["hook_failed"])
    _login(page, manager, asgi_server)
    page.goto(f"/preview/{room.pk}/")
    expect(page.get_by_test_id("conn-status")).to_have_text("live")
    turns = page.get_by_test_id("turn")
    expect(turns).to_have_count(n)
    expect(page.get_by_test_id("feed-count")).to_have_text(f"{n} turns")

    # one screen: the feed scrolls in its own box, the page does not grow with it; the comment box is in view
    dims = page.evaluate("(() => { const f = document.getElementById('feed'); return {"
                         " feed: [f.scrollHeight, f.clientHeight], page: document.documentElement.scrollHeight,"
                         " view: window.innerHeight }; })()")
    assert dims["feed"][0] > 3 * dims["feed"][1], dims
    assert dims["page"] < 1.5 * dims["view"], dims
    assert _in_viewport(page, "#comment-form")
    assert _at_bottom(page)  # it opened on the latest turn
    expect(turns.last).to_be_in_viewport()

    # folded: tool payloads (one line of the result shown), the rejected attempt, the streamed output once replied
    last = turns.last
    expect(last.get_by_test_id("tool-result")).to_be_visible()
    expect(last.get_by_test_id("tool-result")).to_contain_text("→")
    expect(last.get_by_test_id("tool-result-full")).to_be_hidden()
    expect(last.get_by_test_id("tool-arguments")).to_be_hidden()
    expect(last.get_by_test_id("reply")).to_be_visible()
    expect(last.get_by_test_id("stream").first).to_be_hidden()
    assert page.locator("#feed details[open]").count() == 0
    retried = page.locator("[data-testid=turn][data-hook-failed]").first
    retried.scroll_into_view_if_needed()
    expect(retried.get_by_test_id("retry")).to_contain_text("retry 2 after banned_phrases")
    expect(retried.get_by_test_id("retry").locator("[data-testid=stream]")).to_contain_text("Guaranteed")
    expect(retried.get_by_test_id("retry").locator("[data-testid=stream]")).to_be_hidden()
    last.scroll_into_view_if_needed()
    _shot(page, "01-folded-1440")
    last.get_by_test_id("tool-call").locator("summary").click()  # opened: the arguments and the whole result
    expect(last.get_by_test_id("tool-result-full")).to_be_visible()
    expect(last.get_by_test_id("tool-result-full")).to_contain_text("claim 29")
    expect(last.get_by_test_id("tool-arguments")).to_contain_text('"link_id": 101')
    _shot(page, "02-payload-open")

    # filters
    page.get_by_test_id("filter-fallbacks").click()
    expect(page.locator("[data-testid=turn]:visible")).to_have_count(fallbacks)
    expect(page.get_by_test_id("feed-count")).to_have_text(f"{fallbacks} of {n} turns")
    for card in page.locator("[data-testid=turn]:visible").all():
        expect(card.get_by_test_id("reply")).to_contain_text("fallback: model_error")
    _shot(page, "03-fallbacks-only")
    page.get_by_test_id("filter-hook-failures").click()
    expect(page.locator("[data-testid=turn]:visible")).to_have_count(hook_failures)
    expect(page.get_by_test_id("filter-hook-failures")).to_have_attribute("aria-pressed", "true")
    page.get_by_test_id("filter-all").click()
    expect(page.locator("[data-testid=turn]:visible")).to_have_count(n)

    # at the bottom, new turns are followed
    page.evaluate("document.getElementById('feed').scrollTop = 1e9")
    expect(page.locator("#feed")).to_have_attribute("data-following", "1")
    _add_turn(room, n)
    expect(turns).to_have_count(n + 1)
    _wait(lambda: _at_bottom(page))
    expect(page.get_by_test_id("jump-latest")).to_be_hidden()

    # scrolled up, the feed stays where the reader is and offers "Jump to latest"
    page.locator("#feed").hover()
    page.mouse.wheel(0, -4000)
    expect(page.locator("#feed")).to_have_attribute("data-following", "0")
    top = page.evaluate("document.getElementById('feed').scrollTop")
    _add_turn(room, n + 1)
    _add_turn(room, n + 2)
    expect(turns).to_have_count(n + 3)
    jump = page.get_by_test_id("jump-latest")
    expect(jump).to_be_visible()
    expect(jump).to_contain_text("2 new")
    assert abs(page.evaluate("document.getElementById('feed').scrollTop") - top) < 5
    assert _in_viewport(page, "#comment-form")
    _shot(page, "04-jump-to-latest")
    jump.click()
    expect(jump).to_be_hidden()
    assert _at_bottom(page)
    expect(turns.last).to_be_in_viewport()

    # the comment box stays in reach at 1280 px too, with the page scrolled to its end or its top
    page.set_viewport_size({"width": 1280, "height": 800})
    for y in (0, 10_000):
        page.evaluate(f"window.scrollTo(0, {y})")
        assert _in_viewport(page, "#comment-form"), y
    _shot(page, "05-1280")


def test_transcript_filters_in_the_browser(asgi_page, asgi_server, feed_room, manager):  # noqa: F811
    page, room = asgi_page, feed_room
    for i in range(12):
        _add_turn(room, i, **_kind(i))
    _login(page, manager, asgi_server)
    page.goto(f"/preview/{room.pk}/transcript/")
    expect(page.get_by_test_id("transcript-turn")).to_have_count(12)
    expect(page.get_by_test_id("turn-details").first).not_to_have_attribute("open", "")
    page.get_by_test_id("show-fallbacks").click()
    expect(page.get_by_test_id("transcript-turn")).to_have_count(sum(1 for i in range(12) if _kind(i)["fallback"]))
    expect(page.get_by_test_id("show-fallbacks")).to_have_attribute("aria-current", "page")
    _shot(page, "06-transcript-fallbacks")
    page.get_by_test_id("show-hook-failures").click()
    expect(page.get_by_test_id("transcript-turn")).to_have_count(sum(1 for i in range(12) if _kind(i)["hook_failed"]))
    page.get_by_test_id("show-all").click()
    expect(page.get_by_test_id("transcript-turn")).to_have_count(12)


# --- tables ---------------------------------------------------------------------------------------------------

# For every table: its right edge inside the box that clips it (the window or a scroll box), or that box is a scroll
# box with the cue (overflow-x auto/scroll and the edge shadows); and the page itself never scrolls sideways.
TABLES = """
(() => {
  const out = [];
  const view = document.documentElement.clientWidth;
  for (const table of document.querySelectorAll("main table")) {
    if (!table.offsetParent) continue;  // not shown (a folded part of the page)
    const right = table.getBoundingClientRect().right;
    let box = table.parentElement, clip = null;
    for (; box && box !== document.body; box = box.parentElement) {
      const ox = getComputedStyle(box).overflowX;
      if (ox !== "visible") { clip = box; break; }
    }
    const edge = clip ? clip.getBoundingClientRect().right : view;
    const cut = right > Math.min(edge, view) + 1;
    const style = clip ? getComputedStyle(clip) : null;
    const scrolls = !!clip && ["auto", "scroll"].includes(style.overflowX) && clip.scrollWidth > clip.clientWidth
      && style.backgroundImage.includes("radial-gradient");
    out.push({ table: table.dataset.testid || table.className || table.querySelector("th")?.textContent || "?",
               cut: cut, scrolls: scrolls, clip: clip ? (clip.className || clip.tagName) : "window",
               right: Math.round(right), edge: Math.round(edge) });
  }
  return { tables: out, pageOverflow: document.documentElement.scrollWidth - view };
})()
"""


@pytest.fixture
def table_world(harness_with_history, deployed, manager, ml_lead, operator, scripted_model,  # noqa: F811
                demo_scenarios):  # noqa: F811
    """A row or more in every table the test visits, with long names and notes where people write them."""
    from harness_editor import services as harness_services
    from tests.streams.live_page_helpers import live_session_for
    from training_jobs.models import Dataset, TrainedModel, TrainingJob

    h = harness_with_history
    harness_services.version_create_draft(
        user=manager, harness=h["harness"], manifest=h["v3"].manifest, parent=h["v3"],
        change_note="reworded the coupon strategy and the compliance block after the review of the evening show; "
                    "the efficacy claims now cite the catalog's certified_claims field only")
    room = services.preview_open(user=ml_lead, version=h["v1"], endpoint=scripted_model)
    _add_turn(room, 0)
    run = services.scenario_run_start(user=ml_lead, version=h["v1"], scenario=demo_scenarios["compliance-traps"],
                                      endpoint=scripted_model, play=False)
    run.job.summary = {"turns": 42, "fallbacks": 3, "turn_ms_p50": 3407, "turn_ms_p95": 8114,
                       "hook_failures": {"factual_risk_unbacked_claims": 4, "banned_phrases_compliance_2026": 2,
                                         "reply_skill_loaded_before_final": 1}}
    run.job.save(update_fields=["summary"])
    Dataset.objects.create(name="hsa-skincare-evening-show-with-held-out-operators", kind="hsa", created_by=ml_lead,
                           status="succeeded")
    base = TrainedModel.objects.get(name="demo-tiny")
    TrainingJob.objects.create(name="stage-3-hsa-agentic-rl-evening-show", kind="rl", config={}, base_model=base,
                               created_by=ml_lead, status="running")
    live_session_for(deployed["deployment"], operator, title="Friday flash sale, skincare and gadgets")
    return {"room": room, "run": run}


PAGES = [("home", "/"), ("timeline", "/timeline/"), ("harnesses", "/harnesses/"), ("preview rooms", "/preview/"),
         ("scenario runs", "/preview/runs/"), ("datasets", "/datasets/"), ("training", "/training/"),
         ("models", "/models/"), ("eval runs", "/evals/runs/"), ("deployments", "/deployments/"),
         ("live sessions", "/live/")]


@pytest.mark.parametrize("width", [1280, 1440])
def test_every_table_fits_or_scrolls_visibly(page, login, table_world, ml_lead, reviewer, width):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": width, "height": 900})
    problems, seen = [], 0
    for user in (ml_lead, reviewer):
        login(user)
        for name, url in PAGES if user == ml_lead else [("home (reviewer)", "/")]:
            response = page.goto(url)
            assert response.status == 200, (name, url, response.status)
            result = page.evaluate(TABLES)
            seen += len(result["tables"])
            if result["pageOverflow"] > 1:
                problems.append(f"{name}: the page scrolls sideways by {result['pageOverflow']} px")
            problems += [f"{name}: table {t['table']!r} cut at {t['edge']} (right edge {t['right']}, in {t['clip']})"
                         for t in result["tables"] if t["cut"] and not t["scrolls"]]
            page.screenshot(path=str(SCREENSHOTS / f"tables-{width}-{name.replace(' ', '-')}.png"), full_page=True)
        page.context.clear_cookies()
    assert seen >= len(PAGES), seen  # every page had its table(s) on it
    assert not problems, "\n".join(problems)
    # a table that cannot fit scrolls in its box, with the cue: in a .table-wrap, and directly in a card
    login(ml_lead)
    widen = ("(sel) => { const row = document.querySelector(sel + ' tbody tr');"
             " const td = row.insertCell(-1); td.className = 'num'; td.textContent = '9'.repeat(260); }")
    for url, sel in (("/preview/", "[data-testid=preview-rooms]"), ("/training/", "[data-testid=jobs]")):
        page.goto(url)
        page.evaluate(widen, sel)
        tables = [t for t in page.evaluate(TABLES)["tables"] if t["table"] == sel.split("=")[1][:-1]]
        assert tables and tables[0]["cut"] and tables[0]["scrolls"], (url, tables)
        assert page.evaluate(TABLES)["pageOverflow"] <= 1, url
        page.screenshot(path=str(SCREENSHOTS / f"tables-{width}-overflow-{url.strip('/')}.png"), full_page=True)
    # the scenario runs list keeps its last columns in view at these widths
    page.goto("/preview/runs/")
    row = page.get_by_test_id("run-row").first
    for testid in ("run-hook-failures", "run-transcript"):
        expect(row.get_by_test_id(testid)).to_be_in_viewport()
