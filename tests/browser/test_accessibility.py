"""Keyboard and screen-reader basics, checked by axe-core in Chromium on every page a role reaches.

The demo seed (``seed_demo``) gives every role its objects; each demo user signs in, opens every page of the header's
navigation and, from each of those, the detail pages it links to (one per kind of address), and axe-core — vendored
under static/vendor/axe-core/, loaded by this test only, from the console's own static files so the page's
Content-Security-Policy allows it — checks each page. A violation of impact "serious" or "critical" fails the test,
listed by rule id, page and target, and so does one of the rules in FAILED_RULES whatever its impact (fixed across the
console once; they must not come back). The skip link, landmarks and focus ring are checked by hand below.
"""

from __future__ import annotations

import io
import re
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from tests.conftest import PASSWORD

AXE_URL = "/static/vendor/axe-core/axe.min.js"
CHECKED: list[str] = []  # "user path" of every page checked, printed with the result
MINOR: dict[str, set[str]] = {}  # moderate and minor findings outside FAILED_RULES: rule -> pages, printed only
EXTRA_PAGES: dict[str, list[str]] = {}  # pages no link in <main> leads to, per user (the demo fixture fills it)
BLOCKING = {"serious", "critical"}
# failed on at any impact: every table header names its column (action and link columns with visually hidden text,
# static/console/app.css .visually-hidden), and heading levels go down one at a time
FAILED_RULES = {"empty-table-header", "heading-order"}
# the demo users of seed_demo, one per role
DEMO_USERS = ["alice", "carol", "erin", "ivan", "frank", "grace"]
PAGES_PER_USER = 34  # the navigation's pages, then those they link to, breadth first
# links that are not pages to check: downloads, the OBS overlay, the API, the admin, signing out
SKIP = re.compile(r"/(export|download|overlay|api|admin|accounts)/|\.(jsonl?|ya?ml|csv|txt|zip|png|svg)$")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# the console's focus ring (static/console/app.css), not the browser's default one
FOCUS_RING = """() => { const s = getComputedStyle(document.activeElement);
                         return s.outlineStyle === "solid" && s.outlineWidth === "3px"; }"""
AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                      targets: v.nodes.map(n => n.target.join(" ")).slice(0, 5)}));
}"""


def _shape(path: str) -> str:
    """One kind of address: ids, version numbers and slugs (segments with a digit, '-' or '_') made alike."""
    parts = [("X" if UUID.fullmatch(p) or re.search(r"[\d_-]", p) else p) for p in path.split("/")]
    return "/".join(parts)


def _axe(page) -> list[dict]:
    """Every violation axe finds on the page (the test fails on the BLOCKING ones and FAILED_RULES, lists the
    rest)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(url=AXE_URL)
    return page.evaluate(AXE_RUN)


def _links(page, selector: str) -> list[str]:
    hrefs = page.eval_on_selector_all(
        selector, "els => els.filter(e => !e.hasAttribute('download')).map(e => e.getAttribute('href'))")
    out = []
    for href in hrefs:
        if not href or href.startswith(("#", "mailto:", "javascript:")):
            continue
        parts = urlsplit(href)
        if parts.netloc or SKIP.search(parts.path):
            continue
        if parts.path not in out:
            out.append(parts.path)
    return out


@pytest.fixture
def demo(transactional_db):
    """The demo seed, and what it does not make so that the detail pages of jobs and sessions have something to show:
    a running and a failed training job, a dataset build, a finished evaluation run with results, a live session
    on air and an ended one, a draft and a preview room (rows as their services leave them; nothing is run)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from harness_editor import services as harness_services
    from harness_editor.models import HarnessVersion
    from streams.models import Deployment, LiveRoom, LiveSession
    from streams.services.preview import preview_open
    from training_jobs import eval_run_services
    from training_jobs.eval_models import EvalSetVersion
    from training_jobs.eval_run_models import EvalResult, EvalRun
    from training_jobs.models import Dataset, TrainedModel, TrainingJob

    call_command("seed_demo", password=PASSWORD, stdout=io.StringIO())
    users = {u.username: u for u in get_user_model().objects.all()}
    v3 = HarnessVersion.objects.get(harness__slug="glow-gadget", number=3)
    draft = harness_services.version_create_draft(user=users["alice"], harness=v3.harness,
                                                  manifest=v3.manifest, parent=v3, change_note="a draft to edit")
    EXTRA_PAGES["alice"] = [f"/harnesses/glow-gadget/v{draft.number}/edit/"]
    EXTRA_PAGES["carol"] = ["/harnesses/glow-gadget/diff/?a=2&b=3"]
    preview_open(user=users["alice"], version=HarnessVersion.objects.get(harness__slug="tiny-room", number=1))
    base = TrainedModel.objects.filter(kind="base").first()
    config = {"max_steps": 6, "per_device_batch_size": 2, "learning_rate": 5e-3, "save_steps": 3, "max_length": 1024}
    TrainingJob.objects.create(name="erin-sft", kind="sft", status="running", config=config, base_model=base,
                               created_by=users["erin"], progress_done=3, progress_total=6, stage="training",
                               metrics=[{"step": 1, "loss": 2.0, "t": 1.0}, {"step": 2, "loss": 1.5, "t": 2.0}])
    TrainingJob.objects.create(name="ivan-sft", kind="sft", status="failed", config=config, base_model=base,
                               created_by=users["ivan"], error="OSError: disk full")
    Dataset.objects.create(name="erin-build", kind="hsa", created_by=users["erin"], status="running",
                           progress_done=5, progress_total=16, stage="building rows")
    version = EvalSetVersion.objects.order_by("eval_set__name", "number").first()
    deployment = Deployment.objects.get(name="tiny-room-live")
    revision = deployment.current_revision
    run = EvalRun.objects.create(name="t1 on the demo model", eval_set_version=version,
                                 harness_version=revision.harness_version, endpoint_id=revision.endpoints[0],
                                 created_by=users["erin"], status="succeeded", finished_at=timezone.now())
    for position, case in enumerate(version.cases.order_by("position")[:3]):
        EvalResult.objects.create(run=run, case_id=case.case_id, position=case.position, sample=0,
                                  solved=position != 1, accuracy=float(position != 1), effectiveness=1.0,
                                  reply="It is in stock.")
    run.summary = eval_run_services.eval_run_summary(run)
    run.save(update_fields=["summary"])
    room = LiveRoom.objects.order_by("pk").first()
    LiveSession.objects.create(title="Evening show", room=room, deployment=deployment, started_by=users["frank"],
                               revision_in_force=revision, version_in_force=revision.harness_version)
    LiveSession.objects.create(title="Morning show", room=room, deployment=deployment, started_by=users["frank"],
                               status="ended", ended_at=timezone.now(), ended_by=users["frank"])


def _sign_in(page, username: str) -> None:
    page.context.clear_cookies()
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/")


def _check(page, path: str, who: str, found: dict[str, list[str]], not_found: list[str]) -> None:
    CHECKED.append(f"{who} {path}")
    response = page.goto(path, wait_until="load")
    if response is not None and response.status == 404:
        not_found.append(f"{who} {path}")
    page.wait_for_timeout(150)  # htmx fragments that load with the page
    for v in _axe(page):
        if v["impact"] not in BLOCKING and v["id"] not in FAILED_RULES:
            MINOR.setdefault(f"{v['id']} ({v['impact']})", set()).add(path)
            continue
        found.setdefault(f"{who} {path}", []).append(f"{v['id']} ({v['impact']}): {v['help']} — {v['targets']}")


def test_every_page_a_role_reaches_has_no_serious_accessibility_violation(page, demo):
    """Each demo user: the header's pages first, then breadth first the pages they link to, one of each kind of
    address per user (a role sees its own controls), up to PAGES_PER_USER. Every 404 a page asks for (the favicon
    among them) and every link that leads nowhere fails the test as well."""
    found: dict[str, list[str]] = {}
    not_found: list[str] = []
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    pages = 0
    for who in DEMO_USERS:
        _sign_in(page, who)
        page.goto("/")
        queue = _links(page, "header nav a")
        assert queue, f"{who}: no navigation"
        queue += EXTRA_PAGES.get(who, [])
        seen = {_shape(p) for p in queue}
        checked = 0
        while queue and checked < PAGES_PER_USER:
            path = queue.pop(0)
            _check(page, path, who, found, not_found)
            checked += 1
            for link in _links(page, "main a[href]"):
                if _shape(link) not in seen:
                    seen.add(_shape(link))
                    queue.append(link)
        pages += checked
    # the pages every visitor can meet: sign-in, not found, not allowed
    page.context.clear_cookies()
    _check(page, "/accounts/login/", "anonymous", found, not_found)
    _sign_in(page, "alice")
    _check(page, "/no-such-page/", "alice", found, [])
    _check(page, "/training/new/", "alice", found, [])  # 403: campaign managers do not train
    pages += 3
    report = "\n".join(f"{where}:\n  " + "\n  ".join(items) for where, items in sorted(found.items()))
    print(f"\naxe-core checked {pages} pages:\n  " + "\n  ".join(CHECKED))
    print("moderate or minor findings (not failed on):\n" + "\n".join(
        f"  {rule}: {len(paths)} page(s), e.g. {sorted(paths)[:3]}" for rule, paths in sorted(MINOR.items())))
    print(f"serious or critical violations, or of {sorted(FAILED_RULES)}:\n{report or '  none'}")
    assert not found, f"accessibility violations (serious, critical or {sorted(FAILED_RULES)}) on {len(found)} " \
                      f"page(s):\n{report}"
    favicon_404 = [url for url in missing if "favicon" in url]
    assert not favicon_404, favicon_404
    assert not not_found, f"links that lead nowhere: {not_found}"


def test_skip_link_landmarks_and_visible_focus(page, login, manager):
    login(manager)
    page.goto("/")
    # landmarks: one banner, a labelled main navigation, one main
    assert page.locator("header.site-header").count() == 1 and page.locator("main#content").count() == 1
    assert page.get_by_role("navigation", name="Main").count() == 1
    # the first Tab reaches the skip link, which is then on screen; Enter moves focus to the main content
    page.keyboard.press("Tab")
    skip = page.locator("a.skip-link")
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    box = skip.bounding_box()
    assert box is not None and box["x"] >= 0 and box["width"] > 0
    assert page.evaluate(FOCUS_RING), "the skip link shows no focus ring"
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "content"
    # the next Tab goes to the first control of the page's content, not back to the header
    page.keyboard.press("Tab")
    assert page.evaluate("() => !!document.activeElement.closest('main')")
    # every focusable control in the header shows a focus ring
    page.goto("/")
    page.keyboard.press("Tab")
    for _ in range(4):
        page.keyboard.press("Tab")
        assert page.evaluate(FOCUS_RING), page.evaluate("() => document.activeElement.outerHTML")


def test_sign_in_page_controls_are_labelled(page):
    page.goto("/accounts/login/")
    assert page.get_by_label("Username").count() == 1 and page.get_by_label("Password").count() == 1
    assert page.locator("main h1").inner_text() == "Log in"
