"""The training issue's "done when", walked in Chromium against real parts: the console on a real ASGI server
(uvicorn, WebSockets), a real Celery worker on Redis training the tiny demo model on CPU and serving the result.

An ML user launches HSA-SFT on a small ready HSA dataset, watches the loss curve grow, cancels the job (it stops
cooperatively and saves a checkpoint), resumes it (it continues from that checkpoint and succeeds at the last
step), opens the registered model and serves it on a local OpenAI-compatible server (a task on the gpu queue),
then opens a preview room on that model's endpoint with the tiny demo harness and gets a turn streamed from it.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

from streams.models import ModelEndpoint, PreviewEvent, PreviewRoom
from tests.browser.test_preview_room import _login, asgi_page, asgi_server  # noqa: F401  (fixtures)
from tests.browser.test_training_page import ready_hsa  # noqa: F401  (fixture)
from tests.streams.test_preview_local_model import QUESTION, assert_real_turn, tiny_version
from training_jobs import services
from training_jobs.hat.stage import latest_checkpoint
from training_jobs.models import TrainedModel, TrainingJob

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
                                 reason="the worker and the server are other processes: they need the PostgreSQL "
                                        "test database")]

MAX_STEPS = 40
SERVE_WAIT_S = 420  # a vLLM-CPU start (~90 s) on a slow, shared 2-core machine


@pytest.fixture
def page(asgi_page):  # noqa: F811
    """This test's browser page is on the ASGI server (the preview room needs WebSockets; the training pages use
    them too); the conftest's ``shot`` fixture screenshots it."""
    return asgi_page


@pytest.fixture
def served_models(ready_hsa):  # noqa: F811  (torn down before ready_hsa removes the model directories)
    """The models the test asked to serve: their servers are stopped (and endpoints removed) at the end, after
    waiting for a serve task still starting one, so that no server process is left behind."""
    requested: list = []
    yield requested
    from streams.models import ServerInstance
    from streams.services.serving import server_stop_run

    for model_id in requested:
        deadline = time.monotonic() + SERVE_WAIT_S
        while (ServerInstance.objects.filter(model_id=model_id, status="starting").exists()
               and time.monotonic() < deadline):
            time.sleep(1)
        for instance in ServerInstance.objects.filter(model_id=model_id):  # launched by the model page's Serve
            server_stop_run(instance.pk)
            if instance.log_path:
                Path(instance.log_path).unlink(missing_ok=True)
        assert TrainedModel.objects.get(pk=model_id).serve_pid is None


def _progress(page) -> tuple[int, int]:
    text = page.get_by_test_id("progress-text").inner_text()
    m = re.fullmatch(r"step (\d+) / (\d+)", text.strip())
    assert m, text
    return int(m[1]), int(m[2])


def test_cancel_resume_serve_and_preview(page, asgi_server, shot, ml_staff, manager, demo_manifest,  # noqa: F811
                                         ready_hsa, served_models, celery_worker_process):
    base = services.demo_base_model()
    _login(page, ml_staff, asgi_server)

    # 1. launch HSA-SFT from the demo base model, long enough to be cancelled half-way
    page.goto("/training/new/")
    page.check("input[name=kind][value=sft]")
    expect(page.locator(f"#id_dataset option[value='{ready_hsa.pk}']")).to_have_count(1)
    page.select_option("#id_dataset", value=str(ready_hsa.pk))
    page.select_option("#id_base_model", label=f"{base.name} · Base model")
    page.fill("#id_name", "browser-cancel-resume")
    page.fill("#id_max_steps", str(MAX_STEPS))
    page.fill("#id_per_device_batch_size", "2")
    page.fill("#id_max_length", "1024")
    page.fill("#id_save_steps", "5")
    shot("launch")
    page.click("[data-testid=launch]")
    expect(page).to_have_url(re.compile(r"/training/[0-9a-f-]{36}/$"))
    job = TrainingJob.objects.get()
    assert (job.config["max_steps"], job.config["save_steps"]) == (MAX_STEPS, 5)
    job_url = page.url

    # 2. watch it train, then cancel it while it runs
    status = page.get_by_test_id("job-status")
    expect(status).to_have_text(re.compile("queued|running"))
    expect(page.locator("[data-testid=loss-curve] polyline")).to_have_count(1, timeout=240_000)
    expect(status).to_have_text("running")
    step, total = _progress(page)
    assert 0 < step < total == MAX_STEPS, (step, total)
    shot("running")
    page.click("[data-testid=cancel]")
    expect(status).to_have_text(re.compile("cancelling|cancelled"))
    expect(status).to_have_text("cancelled", timeout=120_000)  # cooperative: at the end of a step, checkpoint saved
    stopped_at, total = _progress(page)
    assert 0 < stopped_at < total, (stopped_at, total)
    expect(page.get_by_test_id("log-tail")).to_contain_text(f"stopping at step {stopped_at} as asked; checkpoint saved")
    expect(page.get_by_test_id("model-link")).to_have_count(0)
    checkpoint = latest_checkpoint(Path(job.output_dir) / "sft")
    assert checkpoint is not None and checkpoint.name == f"checkpoint-{stopped_at}"
    shot("cancelled")

    # 3. resume: it continues from that checkpoint and ends at the last step
    page.click("[data-testid=resume]")
    expect(page).to_have_url(job_url)
    expect(status).to_have_text(re.compile("queued|running|succeeded"))
    expect(status).to_have_text("succeeded", timeout=300_000)
    expect(page.get_by_test_id("progress-text")).to_have_text(f"step {MAX_STEPS} / {MAX_STEPS}")
    log_tail = page.get_by_test_id("log-tail")
    expect(log_tail).to_contain_text(f"resuming from checkpoint-{stopped_at}")
    expect(log_tail).to_contain_text(f"training from step {stopped_at} to {MAX_STEPS}")
    expect(page.get_by_text("resumed 1×")).to_be_visible()
    points = page.locator("[data-testid=loss-curve] polyline").get_attribute("points").split()
    assert len(points) == MAX_STEPS  # both runs' points, one per step
    job.refresh_from_db()
    assert job.resumes == 1 and job.result["stages"][0]["metrics"]["steps_this_run"] == MAX_STEPS - stopped_at
    shot("resumed-succeeded")

    # 4. the registered model, served on a local server by the worker
    model = TrainedModel.objects.get(job=job)
    page.click("[data-testid=model-link]")
    expect(page).to_have_url(re.compile(rf"/models/{model.pk}/$"))
    model_url = page.url
    expect(page.get_by_test_id("endpoint")).to_have_count(0)
    page.click("[data-testid=serve]")
    served_models.append(model.pk)
    expect(page).to_have_url(model_url)  # answered with a redirect: reloading does not serve it again
    expect(page.get_by_test_id("messages")).to_contain_text("Starting a local server")
    endpoint_name = f"cpu-default-{str(model.pk)[:8]}"  # the default CPU serve profile's server (vLLM)
    deadline = time.monotonic() + SERVE_WAIT_S
    while True:
        page.reload()
        if page.get_by_test_id("endpoint").count():
            break
        assert time.monotonic() < deadline, f"no endpoint after {SERVE_WAIT_S} s"
        time.sleep(2)
    expect(page.get_by_test_id("endpoint")).to_have_text(endpoint_name)
    expect(page.get_by_test_id("unserve")).to_be_visible()
    endpoint = ModelEndpoint.objects.get(name=endpoint_name)
    assert endpoint.model == str(model.directory.resolve()) and endpoint.kind == "vllm"
    shot("served")

    # 5. a preview room on that endpoint with the tiny demo harness: a viewer comment gets a turn from it
    tiny_version(manager, demo_manifest)
    page.goto("/preview/")
    expect(page.locator("#id_endpoint option", has_text=endpoint_name)).to_have_count(1)
    page.select_option("#id_version", label="tiny-room v1 (draft)")
    page.select_option("#id_endpoint", label=endpoint.name)
    page.click("text=Open the preview")
    page.wait_for_url("**/preview/*/")
    expect(page.get_by_test_id("conn-status")).to_have_text("live")
    room = PreviewRoom.objects.get(pk=page.url.rstrip("/").rsplit("/", 1)[-1])
    assert room.endpoint_id == endpoint.pk
    expect(page.get_by_test_id("room-endpoint")).to_have_text(endpoint_name)
    shot("preview-open")

    page.fill("#comment-text", QUESTION)
    page.click("#comment-send")
    turn = page.get_by_test_id("turn").first
    expect(turn.get_by_test_id("comment")).to_contain_text(QUESTION)
    expect(turn.get_by_test_id("reply")).to_be_visible(timeout=180_000)  # the turn completed (maybe a fallback)
    expect(turn.get_by_test_id("timings")).to_contain_text("TTFT")
    streamed = int(turn.get_attribute("data-tokens") or 0) + turn.get_by_test_id("tool-call").count()
    assert streamed > 0  # the model's own tokens or tool calls reached the page
    shot("preview-turn")
    turn_id = turn.get_attribute("data-turn")
    assert_real_turn(room, turn_id)  # model request, tokens or tool calls, no connect/timeout error, timings
    started = PreviewEvent.objects.get(room=room, turn_id=turn_id, type="turn_started").payload
    assert started["endpoint"]["name"] == endpoint_name, started
