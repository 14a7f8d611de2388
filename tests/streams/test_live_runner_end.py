"""A session ended while its runner waits: the runner's lease beat finds it first (found by the end-to-end walk: the
session ended mid-turn, the beat noticed before the loop did, the runner reported "lease lost" and left its id on the
ended session, where the API still showed it). The runner stops with "session ended" and gives the lease back
whichever noticed first."""

from __future__ import annotations

import pytest

from streams.models import LiveSession
from streams.services import live_controls as C
from streams.services import live_sessions as S
from tests.streams.live_runner_helpers import RunnerThread, live_deployment, session_start, wait_for  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_session_ended_while_the_runner_waits_is_let_go(operator, live_deployment, monkeypatch):
    monkeypatch.setattr(C, "live_runner_ensure", lambda session_id: False)  # the test runs the runner itself
    monkeypatch.setattr(S, "live_runner_wake", lambda session_id: None)  # so the lease beat notices the end first
    session = session_start(operator, live_deployment)
    # between looks at the queue the loop waits longer than a beat: the beat finds the session ended first
    runner = RunnerThread(session.pk, poll_s=10.0)
    with runner:
        wait_for(lambda: LiveSession.objects.get(pk=session.pk).runner_id == runner.runner.runner, timeout=60)
        S.live_session_end(user=operator, session=LiveSession.objects.get(pk=session.pk))
        wait_for(runner.runner.lost.is_set, timeout=60)  # the beat saw it
        runner.thread.join(60)
    assert runner.result["reason"] == "session ended", runner.result
    assert LiveSession.objects.get(pk=session.pk).runner_id == ""
