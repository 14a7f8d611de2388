"""A worker in warm shutdown that still takes a session's runner task (a hand-over can reach the worker that is
stopping) does not start a runner that would hold its shutdown: it sends the session another runner task, which the
queued mark of the one it took does not block."""

from __future__ import annotations

import pytest

from streams.live import runner as R
from streams.models import LiveSession
from streams.services.live_turns import QUEUED_PREFIX
from tests.streams.live_helpers import live_session, live_world  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def shutting_down(monkeypatch):
    monkeypatch.setattr(R, "PASS_ON_PAUSE_S", 0)
    R._shutting_down.set()
    yield
    R._shutting_down.clear()


@pytest.fixture
def sent(monkeypatch, django_capture_on_commit_callbacks):
    from streams import tasks

    out: list[str] = []
    monkeypatch.setattr(tasks.live_session_run, "apply_async",
                        lambda args, queue, task_id: out.append(task_id))
    return out


def test_a_shutting_down_worker_passes_the_session_on(live_session, shutting_down, sent,  # noqa: F811
                                                      django_capture_on_commit_callbacks) -> None:
    from streams.services.live_controls import live_runner_ensure

    with django_capture_on_commit_callbacks(execute=True):
        assert live_runner_ensure(live_session.pk)
    taken = sent[-1]
    with django_capture_on_commit_callbacks(execute=True):
        out = R.SessionRunner(live_session.pk, task_id=taken).run()
    assert out["ran"] is False and "shutting down" in out["reason"]
    assert len(sent) == 2 and sent[-1] != taken  # another runner task went out at once
    held = LiveSession.objects.get(pk=live_session.pk).runner_id
    assert held.startswith(f"{QUEUED_PREFIX}{sent[-1]}:")  # queued for the new task: no one ran meanwhile


def test_the_queued_mark_of_another_task_still_blocks(live_session, sent,  # noqa: F811
                                                      django_capture_on_commit_callbacks) -> None:
    from streams.services.live_controls import live_runner_ensure

    with django_capture_on_commit_callbacks(execute=True):
        assert live_runner_ensure(live_session.pk)
        assert not live_runner_ensure(live_session.pk)  # one was just sent
        assert not live_runner_ensure(live_session.pk, replacing="not-the-queued-task")
    assert len(sent) == 1
