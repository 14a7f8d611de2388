"""The job page's WebSocket (training_jobs.consumers): role checks with close codes, the job's state and its
progress points on connect, new points pushed when the worker's reporter stores them (through the channel
layer), each point sent once, a client resuming with ?after=<t> gets only newer ones."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from console.asgi import application
from tests.streams.test_preview_channels import _COOKIES, login_cookie  # noqa: F401
from training_jobs import services
from training_jobs.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from training_jobs.models import TrainingJob


def ws(job_id, user=None, after=None):
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", _COOKIES[user.pk]))
    return WebsocketCommunicator(application, f"/ws/training/{job_id}/" + (f"?after={after}" if after else ""),
                                 headers=headers)


@pytest.fixture
def job(ml_staff):
    base = services.demo_base_model()
    return TrainingJob.objects.create(name="j", kind="sft", config={}, base_model=base, created_by=ml_staff,
                                      status="running", progress_total=10,
                                      metrics=[{"step": 1, "loss": 3.0, "t": 100.0}, {"step": 2, "loss": 2.5, "t": 101.0}])


@pytest.mark.django_db(transaction=True)
def test_roles_and_unknown_jobs_are_refused(job, manager, ml_staff):
    import uuid

    login_cookie(manager)
    login_cookie(ml_staff)

    async def go():
        out = []
        for comm in (ws(job.pk), ws(job.pk, manager), ws(uuid.uuid4(), ml_staff)):
            connected, code = await comm.connect(timeout=5)
            out.append((connected, code))
            await comm.disconnect()
        return out

    assert asyncio.run(go()) == [(False, CLOSE_UNAUTHENTICATED), (False, CLOSE_FORBIDDEN), (False, CLOSE_NOT_FOUND)]


@pytest.mark.django_db(transaction=True)
def test_progress_is_pushed_once_per_point_and_resumes_after_t(job, ml_staff):
    login_cookie(ml_staff)
    reporter = services.JobReporter(job)

    async def go():
        comm = ws(job.pk, ml_staff)
        assert (await comm.connect(timeout=5))[0]
        first = await comm.receive_json_from(timeout=5)
        reporter.stage_name = "sft"
        await database_sync_to_async(reporter.report)({"step": 3, "max_steps": 10, "loss": 2.0})
        await database_sync_to_async(reporter.flush)(force=True)
        pushed = await comm.receive_json_from(timeout=1.5)  # before the 2 s poll: the layer carried it
        await database_sync_to_async(reporter.log)("checkpoint saved")
        logged = await comm.receive_json_from(timeout=3)
        await comm.disconnect()
        again = ws(job.pk, ml_staff, after=pushed["points"][-1]["t"])
        assert (await again.connect(timeout=5))[0]
        resumed = await again.receive_json_from(timeout=5)
        nothing = await again.receive_nothing(timeout=0.5)
        await again.disconnect()
        return first, pushed, logged, resumed, nothing

    first, pushed, logged, resumed, nothing = asyncio.run(go())
    assert [p["step"] for p in first["points"]] == [1, 2] and first["job"]["status"] == "running"
    assert [p["step"] for p in pushed["points"]] == [3] and pushed["job"]["step"] == 3
    assert logged["points"] == [] and "checkpoint saved" in logged["job"]["log_tail"]
    assert resumed["points"] == [] and resumed["job"]["step"] == 3 and nothing
