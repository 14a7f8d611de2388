"""Interactive work apart from batch work: where each task goes, and a queued preview turn saying so on the page.
(Real workers: tests/streams/test_live_runner_workers.py runs a preview turn while a dataset build holds the gpu
worker.)"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

from streams import services
from streams.models import PreviewEvent

QUEUED_TEXT = "queued — waiting for the interactive runner"


def test_interactive_tasks_and_batch_jobs_go_to_their_own_queues():
    from console.celery import app
    from training_jobs.eval_run_models import EvalRun
    from training_jobs.models import Dataset, TrainingJob

    router = app.amqp.router
    for name in ("streams.preview_turn", "streams.preview_clock_tick", "streams.live_session_run"):
        assert router.route({}, name)["queue"].name == settings.INTERACTIVE_QUEUE, name
    assert router.route({}, "training_jobs.dataset_build")["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE
    assert {Dataset.job_queue, TrainingJob.job_queue, EvalRun.job_queue} == {"gpu"}  # batch: the jobs' own queue


@pytest.mark.django_db
def test_a_queued_preview_turn_says_so_until_the_runner_starts_it(client, manager, harness_with_history,
                                                                    scripted_model, enqueued):
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    first = services.preview_comment_post(user=manager, room=room, text="how much is #101?")
    second = services.preview_comment_post(user=manager, room=room, text="and #102?")
    queued = {e.turn_id: e.payload for e in PreviewEvent.objects.filter(room=room, type="turn_queued")}
    assert queued[first] == {"queued_behind": 0, "queue": settings.INTERACTIVE_QUEUE}
    assert queued[second]["queued_behind"] == 1  # the first turn is ahead of it
    client.force_login(manager)
    page = client.get(reverse("streams:preview_transcript", args=[room.pk])).content.decode()
    assert page.count(QUEUED_TEXT) == 2 and "(1 turn ahead)" in page
    # the room's script (turns.js draws turns for the preview and live pages) shows the same words from the event
    from pathlib import Path

    script = (Path(settings.BASE_DIR) / "static" / "streams" / "turns.js").read_text(encoding="utf-8")
    assert QUEUED_TEXT in script and '"turn_queued"' in script
