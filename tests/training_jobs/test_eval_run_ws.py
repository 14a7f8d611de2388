"""The run page's WebSocket (training_jobs.eval_run_consumers): close codes for anonymous users, roles without
VIEW_EVAL_RUNS and unknown runs; the run's state on connect; a new frame as soon as the worker pokes the run's group
(before the polling safety net), none when nothing changed; every role that reads runs may watch."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from console.asgi import application
from tests.streams.test_preview_channels import _COOKIES, login_cookie  # noqa: F401
from tests.training_jobs.eval_run_fixtures import (  # noqa: F401  (fixtures)
    queued_run, scripted_endpoint, scripted_model, t1_set, v1)
from training_jobs import eval_run_consumers as consumers
from training_jobs.eval_run_consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_run_services import poke_eval_watchers


def ws(run_id, user=None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", _COOKIES[user.pk]))
    return WebsocketCommunicator(application, f"/ws/evals/{run_id}/", headers=headers)


@pytest.mark.django_db(transaction=True)
def test_anonymous_outsiders_and_unknown_runs_are_refused(queued_run, outsider, reviewer):
    login_cookie(outsider)
    login_cookie(reviewer)

    async def go():
        out = []
        for comm in (ws(queued_run.pk), ws(queued_run.pk, outsider), ws(uuid.uuid4(), reviewer)):
            out.append(await comm.connect(timeout=5))
            await comm.disconnect()
        return out

    assert asyncio.run(go()) == [(False, CLOSE_UNAUTHENTICATED), (False, CLOSE_FORBIDDEN), (False, CLOSE_NOT_FOUND)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("role", ["ml_staff", "manager", "reviewer", "operator"])
def test_every_role_that_reads_runs_may_watch(request, role, queued_run):
    user = request.getfixturevalue(role)
    login_cookie(user)

    async def go():
        comm = ws(queued_run.pk, user)
        connected, _ = await comm.connect(timeout=5)
        frame = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return connected, frame

    connected, frame = asyncio.run(go())
    assert connected and frame["type"] == "progress"
    assert frame["job"] == {"id": str(queued_run.pk), "status": "queued", "stage": "", "done": 0, "total": 6,
                            "percent": 0, "error": "", "active": True}


@pytest.mark.django_db(transaction=True)
def test_progress_is_pushed_when_the_worker_pokes_and_only_when_it_changed(queued_run, ml_staff, monkeypatch):
    monkeypatch.setattr(consumers, "POLL_S", 30.0)  # only the poke can bring the frame within the test's wait
    login_cookie(ml_staff)

    def progress(done: int, status: str = "running") -> None:
        EvalRun.objects.filter(pk=queued_run.pk).update(progress_done=done, status=status, stage="playing cases")
        poke_eval_watchers(queued_run.pk)

    async def go():
        comm = ws(queued_run.pk, ml_staff)
        assert (await comm.connect(timeout=5))[0]
        first = await comm.receive_json_from(timeout=5)
        await database_sync_to_async(progress)(3)
        pushed = await comm.receive_json_from(timeout=2)
        await database_sync_to_async(poke_eval_watchers)(queued_run.pk)  # nothing changed: no frame
        nothing = await comm.receive_nothing(timeout=0.5)
        await database_sync_to_async(progress)(6, "succeeded")
        done = await comm.receive_json_from(timeout=2)
        await comm.send_json_to({"type": "anything"})  # the page only listens: ignored, the socket stays
        still = await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()
        return first, pushed, nothing, done, still

    first, pushed, nothing, done, still = asyncio.run(go())
    assert first["job"]["done"] == 0 and first["job"]["active"]
    assert pushed["job"]["done"] == 3 and pushed["job"]["status"] == "running" and pushed["job"]["percent"] == 50
    assert nothing and still
    assert done["job"] == {**done["job"], "status": "succeeded", "done": 6, "percent": 100, "active": False}


@pytest.mark.django_db(transaction=True)
def test_the_polling_safety_net_picks_up_progress_without_a_poke(queued_run, ml_staff, monkeypatch):
    monkeypatch.setattr(consumers, "POLL_S", 0.2)
    login_cookie(ml_staff)

    async def go():
        comm = ws(queued_run.pk, ml_staff)
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(timeout=5)
        await database_sync_to_async(EvalRun.objects.filter(pk=queued_run.pk).update)(progress_done=2)
        frame = await comm.receive_json_from(timeout=3)
        await comm.disconnect()
        return frame

    assert asyncio.run(go())["job"]["done"] == 2
