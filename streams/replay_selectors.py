"""Reads for session replays and for saving a session as an eval set: a live session's recorded turns, and the
replays of a session with their turns.

A recorded turn is what the session runner stored under one ``turn_id``: its ``turn_started`` event (the harness
version, the endpoint, the comments it answered and the room state it started from), the turn engine's events and
what became of the reply (``reply_spoken`` / ``reply_rejected``). :func:`session_turns` folds them with the
preview room's one fold (:func:`streams.selectors.fold_turns`) and adds what a replay needs to play the turn again
alone: ``replay_comments``, ``replay_room``, ``replay_history`` and ``not_replayable`` (why not, or "").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet

from streams.models import LiveComment, LiveEvent, LiveSession
from streams.replay_models import SessionReplay, SessionReplayTurn
from streams.selectors import fold_turns

HISTORY_TURNS_MAX = 6  # spoken turns rebuilt as history, as the runner gives them (live_turns.HISTORY_TURNS)
OUTCOMES = ("regressed", "improved", "changed", "unchanged", "skipped", "failed")


def live_session_get(*, session_id) -> LiveSession:
    return LiveSession.objects.select_related("room", "deployment__harness").get(pk=session_id)


def _comments(turn: Mapping[str, Any], by_turn: Mapping[str, list[dict[str, Any]]],
              by_id: Mapping[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    """The comments a turn answered: those its ``turn_started`` lists (comment dicts, or the session's comment
    ids as the runner stores them), else the session's comments the runner put in that turn, else the engine's
    ``comment_received`` events."""
    started = turn.get("started") or {}
    listed = started.get("comments")
    rows: list = []
    if isinstance(listed, list) and listed:
        rows = [c if isinstance(c, Mapping) else by_id.get(c) for c in listed]
        rows = [c for c in rows if c is not None]
    if not rows:
        rows = by_turn.get(turn["turn_id"]) or turn.get("comments") or []
    return [{"viewer": str(c.get("viewer") or "viewer"), "viewer_id": str(c.get("viewer_id") or c.get("viewer")
                                                                          or "viewer"),
             "text": str(c.get("text") or "")} for c in rows if isinstance(c, Mapping)]


def session_turns(*, session: LiveSession, answered_only: bool = True) -> list[dict[str, Any]]:
    """The session's turns in order (:func:`streams.selectors.fold_turns` of its events), each with
    ``replay_comments``, ``replay_room`` (the state it started from, or None), ``replay_history`` (the chat history
    it was given — as the runner builds it: the replies spoken before it started, with their comments — unless
    ``turn_started`` carries it), ``spoken`` (the text said, when it was), ``rejected`` and ``not_replayable``.
    ``answered_only``: only the turns that started and ended with a reply event."""
    rows = (LiveEvent.objects.filter(session=session).exclude(turn_id="").exclude(type="token").order_by("seq")
            .values("seq", "turn_id", "type", "payload"))
    spoken: dict[str, str] = {}
    spoken_at: list[tuple[int, str]] = []  # (seq, turn id) of each reply spoken, in order
    started_at: dict[str, int] = {}
    rejected: set[str] = set()
    engine_rows = []
    for row in rows:
        if row["type"] == "reply_spoken":
            spoken[row["turn_id"]] = str((row["payload"] or {}).get("text") or "")
            spoken_at.append((row["seq"], row["turn_id"]))
        elif row["type"] == "reply_rejected":
            rejected.add(row["turn_id"])
        else:
            if row["type"] == "turn_started":
                started_at.setdefault(row["turn_id"], row["seq"])
            engine_rows.append(row)
    by_turn: dict[str, list[dict[str, Any]]] = {}
    by_id: dict[Any, dict[str, Any]] = {}
    for c in LiveComment.objects.filter(session=session).order_by("id").values("id", "turn_id", "viewer",
                                                                               "viewer_id", "text"):
        by_id[c["id"]] = c
        if c["turn_id"]:
            by_turn.setdefault(c["turn_id"], []).append(c)
    turns = [t for t in fold_turns(engine_rows) if t.get("started") is not None]
    comments_of = {t["turn_id"]: _comments(t, by_turn, by_id) for t in turns}
    out = []
    for t in turns:
        started = t["started"] or {}
        comments = comments_of[t["turn_id"]]
        room = started.get("room")
        t["replay_comments"] = comments
        t["replay_room"] = room if isinstance(room, Mapping) and room else None
        history = started.get("history")
        if not (isinstance(history, list) and all(isinstance(m, Mapping) for m in history)):
            history = []
            before = [tid for seq, tid in spoken_at if seq < started_at.get(t["turn_id"], 0) and tid != t["turn_id"]]
            for tid in before[-HISTORY_TURNS_MAX:]:
                said = by_turn.get(tid) or comments_of.get(tid) or []
                if said and spoken.get(tid):
                    history += [{"role": "user", "content": "\n".join(f"[{c['viewer']}] {c['text']}" for c in said)},
                                {"role": "assistant", "content": spoken[tid]}]
        t["replay_history"] = [dict(m) for m in history]
        t["spoken"] = spoken.get(t["turn_id"])
        t["rejected"] = t["turn_id"] in rejected
        t["not_replayable"] = ("the turn did not record the room state it started from"
                               if t["replay_room"] is None else
                               "the turn recorded no comments" if not comments else "")
        if answered_only and t.get("state") != "done":
            continue
        out.append(t)
    return out


def turn_event_payloads(*, session: LiveSession, turn_id: str) -> list[dict[str, Any]]:
    """The stored engine events of one turn, in order (no tokens)."""
    return list(LiveEvent.objects.filter(session=session, turn_id=turn_id).exclude(type="token").order_by("seq")
                .values_list("payload", flat=True))


def session_replay_list(*, session: LiveSession | None = None) -> QuerySet[SessionReplay]:
    qs = SessionReplay.objects.select_related("session", "harness_version__harness", "endpoint", "created_by")
    return qs.filter(session=session) if session is not None else qs


def session_replay_get(*, session_id, replay_id) -> SessionReplay:
    """The replay of that session (DoesNotExist for another session's: the address names both)."""
    return session_replay_list().get(pk=replay_id, session_id=session_id)


def replay_turn_list(*, replay: SessionReplay, outcome: str | None = None) -> list[SessionReplayTurn]:
    """The replay's stored turns in session order; ``outcome``: only those (regressed, improved, changed,
    unchanged, skipped, failed)."""
    turns = list(replay.turns.order_by("position").defer("events"))
    return [t for t in turns if outcome is None or t.outcome == outcome]
