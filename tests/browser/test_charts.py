"""The training charts in Chromium: ML staff compares runs on shared axes (two runs with the same seed stay apart by
colour and dash, the legend hides a run), reads the step and each run's value under the cursor, smooths the lines,
switches the loss to a log scale, drags to zoom and double-clicks back; a running job's chart grows as points
arrive without losing its zoom; a resumed job's chart covers its whole run; without script the SVG is the chart.
No Content-Security-Policy violation on the way (the page fixture checks)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SCREENSHOTS
from training_jobs import services
from training_jobs.models import TrainedModel, TrainingJob

pytestmark = pytest.mark.browser


def _points(steps, loss, *, t0=1700000000):
    return [{"step": s, "stage_step": s, "max_steps": 40, "loss": loss(s), "learning_rate": 1e-3 * (1 - s / 41),
             "t": t0 + s} for s in steps]


def _job(user, name, metrics, **fields) -> TrainingJob:
    values = {"kind": "sft", "status": "succeeded", "config": {"max_steps": 40}, "progress_done": 40,
              "progress_total": 40, **fields}
    return TrainingJob.objects.create(name=name, base_model=services.demo_base_model(), created_by=user,
                                      metrics=metrics, **values)


def _legend_step(page, testid: str) -> str:
    """The step the legend shows for the cursor (once it shows one)."""
    cell = page.locator(f"[data-testid={testid}] .u-legend .u-series").first.locator("td")
    expect(cell).to_have_text(re.compile(r"^\d+$"))
    return cell.inner_text()


def _drag_zoom(page, chart, testid: str) -> tuple[int, int, tuple[float, float]]:
    """Drag across the right half of ``chart``'s plot: the step under the cursor at a quarter of its width before
    and after, and the plot's middle (where a double-click resets the zoom)."""
    _hover(page, testid, 0.25)
    before = int(_legend_step(page, testid))
    over = chart.locator(".u-over").bounding_box()
    y = over["y"] + over["height"] / 2
    page.mouse.move(over["x"] + over["width"] * 0.5, y)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.7, y, steps=5)
    page.mouse.move(over["x"] + over["width"] * 0.9, y, steps=5)
    page.mouse.up()
    _hover(page, testid, 0.25)
    return before, int(_legend_step(page, testid)), (over["x"] + over["width"] * 0.5, y)


def _hover(page, testid: str, fraction: float) -> None:
    over = page.locator(f"[data-testid={testid}] .u-over")
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * fraction, box["y"] + box["height"] / 2)


def test_ml_staff_compares_two_runs_on_the_improved_charts(page, login, shot, ml_staff):
    noisy = lambda s: 3.0 / s + (0.4 if s % 2 else -0.2) / s  # noqa: E731
    seed = _job(ml_staff, "sft seed 7", _points(range(1, 41), noisy))
    same = _job(ml_staff, "sft seed 7 (rerun)", _points(range(1, 41), noisy))
    first = _points(range(1, 26), lambda s: 4.0 / s)
    resumed = _job(ml_staff, "baseline (resumed)", first + _points(range(21, 41), lambda s: 3.6 / s, t0=1700000100),
                   resumes=1)
    login(ml_staff)
    page.goto(f"/training/compare/?jobs={seed.pk}&jobs={same.pk}&jobs={resumed.pk}")
    loss = page.locator("[data-testid=compare-loss]")
    expect(loss.locator(".uplot canvas")).to_have_count(1)
    expect(loss.locator("[data-testid=compare-loss-tools]")).to_be_visible()
    # one legend row per run (and the step), each in its own colour; the rerun is dashed and says why
    rows = loss.locator(".u-legend .u-series")
    expect(rows).to_have_count(4)
    expect(rows.nth(2)).to_contain_text("same values as sft seed 7")
    expect(page.locator("[data-testid=compare-runs]")).to_have_text(re.compile(r"2 runs · resumed at step 21"))
    shot("compare")

    # hover: the step and each run's value
    _hover(page, "compare-loss", 0.5)
    expect(rows.nth(0).locator("td")).to_have_text(re.compile(r"^\d+$"))
    for i in (1, 2, 3):
        expect(rows.nth(i).locator("td")).to_have_text(re.compile(r"^\d+(\.\d+)?$"))
    assert rows.nth(1).locator("td").inner_text() == rows.nth(2).locator("td").inner_text()
    shot("hover")

    # the legend hides a run and shows it again
    off = re.compile(r"(^|\s)(u-)?off(\s|$)")
    rows.nth(2).locator("th").click()
    expect(rows.nth(2)).to_have_class(off)
    rows.nth(2).locator("th").click()
    expect(rows.nth(2)).not_to_have_class(off)

    # drag to zoom: the same place under the cursor is a later step; a double-click resets
    before, zoomed, middle = _drag_zoom(page, loss, "compare-loss")
    assert zoomed > before + 10, (before, zoomed)
    shot("zoomed")
    page.mouse.dblclick(*middle)
    _hover(page, "compare-loss", 0.25)
    assert int(_legend_step(page, "compare-loss")) == before

    # smoothing: each run gets its raw line (faded) beside the smoothed one
    # (a range input cannot be typed into: set it as a drag of its thumb would, with its input event)
    loss.locator("[data-testid=compare-loss-smoothing]").evaluate(
        "el => { el.value = '0.8'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
    expect(loss.locator("[data-testid=compare-loss-tools] output")).to_have_text("0.80")
    expect(rows).to_have_count(7)
    expect(rows.nth(2)).to_contain_text("sft seed 7 · raw")
    _hover(page, "compare-loss", 0.5)
    smoothed, raw = rows.nth(1).locator("td").inner_text(), rows.nth(2).locator("td").inner_text()
    assert smoothed != raw
    # log scale for the loss (every value above 0)
    loss.locator("[data-testid=compare-loss-log]").check()
    expect(loss.locator(".uplot canvas")).to_have_count(1)
    expect(rows).to_have_count(7)
    shot("smoothed-log")
    # the learning rate chart has its own settings
    expect(page.locator("[data-testid=compare-learning_rate] [data-testid=compare-learning_rate-smoothing]")
           ).to_have_value("0")


def test_a_running_job_s_chart_grows_and_keeps_its_zoom(page, login, shot, ml_staff):
    job = _job(ml_staff, "live-sft", _points(range(1, 11), lambda s: 3.0 / s), status="running",
               progress_done=10, worker_host="gpu-host-1", stage="training")
    login(ml_staff)
    page.goto(f"/training/{job.pk}/")
    chart = page.locator("[data-testid=loss-curve]")
    expect(chart.locator(".uplot canvas")).to_have_count(1)
    # zoom into steps ~4-8 of the schedule (0-40 on the x axis: the schedule's length)
    over = chart.locator(".u-over").bounding_box()
    y = over["y"] + over["height"] / 2
    page.mouse.move(over["x"] + over["width"] * 0.05, y)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.15, y, steps=5)
    page.mouse.move(over["x"] + over["width"] * 0.2, y, steps=5)
    page.mouse.up()
    _hover(page, "loss-curve", 0.9)
    zoomed_step = int(_legend_step(page, "loss-curve"))
    assert zoomed_step <= 10
    # the worker stores more points: the page redraws its live part (htmx, every 2 s) and the chart takes them
    TrainingJob.objects.filter(pk=job.pk).update(metrics=job.metrics + _points(range(11, 21), lambda s: 3.0 / s),
                                                 progress_done=20)
    expect(page.locator("[data-testid=progress-text]")).to_have_text("step 20 / 40", timeout=15_000)
    expect(chart.locator(".uplot canvas")).to_have_count(1)
    _hover(page, "loss-curve", 0.9)
    assert int(_legend_step(page, "loss-curve")) == zoomed_step  # still zoomed
    page.locator("[data-testid=loss-curve-reset]").click()
    _hover(page, "loss-curve", 0.45)
    assert int(_legend_step(page, "loss-curve")) >= 17  # the whole run, up to step 20 of 40
    shot("live")


def test_a_resumed_model_s_page_reads_as_a_table_with_its_curve(page, login, shot, ml_staff):
    first = _points(range(1, 26), lambda s: 4.0 / s)
    job = _job(ml_staff, "resumed-sft", first + _points(range(21, 41), lambda s: 3.6 / s, t0=1700000100), resumes=1)
    model = TrainedModel.objects.create(name="resumed-sft · HSA-SFT", kind="sft", path="/tmp/r/sft/final",
                                        parent=services.demo_base_model(), job=job, config={"max_steps": 40},
                                        created_by=ml_staff, metrics={"final_loss": 0.09, "train_loss": 0.2,
                                                                      "wall_s": 75.0, "steps_this_run": 20,
                                                                      "samples_per_s": 4.0})
    login(ml_staff)
    page.goto(f"/models/{model.pk}/")
    expect(page.locator("[data-testid=metric-runs]")).to_contain_text("resumed at step 21")
    expect(page.locator("[data-testid=metric-steps]")).to_contain_text("40")
    expect(page.locator("[data-testid=metric-wall_s]")).to_contain_text("1 min 15 s")
    expect(page.locator("[data-testid=model-loss] .uplot canvas")).to_have_count(1)
    _hover(page, "model-loss", 0.99)
    assert int(_legend_step(page, "model-loss")) == 40
    shot("model")


def test_without_script_the_svg_is_the_chart(browser, live_server, ml_staff):
    from tests.conftest import PASSWORD

    a = _job(ml_staff, "a", _points(range(1, 11), lambda s: 2.0 / s))
    b = _job(ml_staff, "b", _points(range(1, 11), lambda s: 2.0 / s))
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False,
                                  viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", ml_staff.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"/training/compare/?jobs={a.pk}&jobs={b.pk}")
    loss = page.locator("[data-testid=compare-loss]")
    expect(loss.locator("svg.fallback polyline")).to_have_count(2)
    expect(loss.locator("svg.fallback")).to_be_visible()
    expect(loss.locator("svg.fallback line.grid").first).to_be_attached()
    expect(loss.locator("[data-testid=compare-loss-tools]")).to_be_hidden()
    expect(loss.locator("[data-testid=compare-loss-legend]")).to_contain_text("the same values as a")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "test_without_script_the_svg_is_the_chart-compare.png"), full_page=True)
    context.close()
