"""Writes of a live session's runner: its lease, the batch of comments each turn answers, and the turn itself.

- **The lease.** One runner at a time holds a session (``LiveSession.runner_id`` / ``runner_beat_at``), renewed
  every :data:`RUNNER_BEAT_S` (:func:`live_runner_beat`). A lease older than :data:`RUNNER_STALE_S` belongs to a
  dead runner: the next runner takes it over (:func:`live_runner_claim`), stores ``runner_resumed`` {runner,
  after_seq} and puts the comments the dead runner was answering back in the queue (its half-run turn ends
  ``turn_failed``): a reply is spoken only in the transaction that marks its comments answered, so nothing is lost
  and nothing is answered twice. :func:`streams.services.live_controls.live_runner_ensure` marks a lease as queued
  (``queued:<task id>:<last runner>``) when it sends a runner, so the sweep does not send another meanwhile.
- **The batch.** :func:`live_batch_claim` picks the next turn's comments with :func:`choose_batch` (the handling
  rules' :func:`streams.live.handling.next_batch`), expires too old ones and marks the batch ``answering``. No turn
  runs while the avatar is muted or a reply waits for an operator's approval (comments keep queueing).
- **The turn.** :func:`live_turn_run` resolves the deployment NOW (:func:`deployment_in_force`: a label moved since
  the last turn stores ``version_changed`` first; a turn in flight finishes on the version it started with), stores
  ``turn_started``, runs the ONE engine through :func:`streams.services.turns.turn_run_recorded` (every event stored
  as the preview room stores it) against the endpoints in force (:class:`streams.engine.breaker.FailoverBackend`),
  saves what its tools changed in the room, then speaks the reply (``reply_spoken`` by the avatar), holds it for an
  operator (``reply_pending``: approve-before-speak) or, when the avatar was muted meanwhile, withholds it and
  queues its comments again.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from console.errors import DomainError
from streams.deployment_selectors import deployment_in_force
from streams.live import handling as rules
from streams.live.schemas import handling_from
from streams.models import LiveComment, LiveEvent, LiveSession
from streams.services.live_events import live_event_append
from streams.services.live_tool_approval import gated_runtime
from streams.services.tool_runtime import tool_runtime_for
from streams.services.turns import TurnRecorder, room_changes, room_changes_apply, turn_run_recorded

logger = logging.getLogger(__name__)

RUNNER_BEAT_S = 3.0  # the lease is renewed this often...
RUNNER_STALE_S = 20.0  # ...and taken over when older than this (a killed runner resumes within stale + sweep)
HISTORY_TURNS = 6
QUEUED_PREFIX = "queued:"
SPOKEN_OR_PENDING = ("reply_spoken", "reply_pending")
DECIDED = ("reply_spoken", "reply_rejected")


class LeaseLost(Exception):
    """Another runner holds the session now (or it ended): this runner stops."""


def runner_name(task_id: str | None = None) -> str:
    """A runner's id: host, process and the task (or a random suffix)."""
    return f"{socket.gethostname()}:{os.getpid()}:{(task_id or uuid.uuid4().hex)[:12]}"


def queued_mark(task_id: str, previous: str) -> str:
    """The lease of a session whose runner was sent but has not started: ``queued:<task id>:<last real runner>``."""
    return f"{QUEUED_PREFIX}{task_id}:{previous_runner(previous)}"[:120]


def previous_runner(runner_id: str) -> str:
    """The last real runner a lease names (through a queued mark)."""
    if runner_id.startswith(QUEUED_PREFIX):
        return runner_id[len(QUEUED_PREFIX):].partition(":")[2]
    return runner_id


def lease_fresh(runner_id: str, beat_at, now=None) -> bool:
    now = now or timezone.now()
    return bool(runner_id) and beat_at is not None and now - beat_at < timedelta(seconds=RUNNER_STALE_S)


# --- the lease -----------------------------------------------------------------------------------------------------


def live_runner_claim(*, session_id, runner: str, task_id: str | None = None) -> dict[str, Any] | None:
    """Take the session's lease for ``runner`` (it was free, stale, queued for this task, or already ours). None when
    the session is not live or another runner's lease is fresh. A takeover (a runner held it before) stores
    ``runner_resumed`` and queues again the comments left answering by a turn that never spoke."""
    now = timezone.now()
    with transaction.atomic():
        session = LiveSession.objects.select_for_update().filter(pk=session_id).first()
        if session is None or session.status != LiveSession.Status.LIVE:
            return None
        held = session.runner_id
        mine = held == runner or (task_id and held.startswith(f"{QUEUED_PREFIX}{task_id}:"))
        if not mine and lease_fresh(held, session.runner_beat_at, now):
            return None
        after_seq = session.last_seq
        session.runner_id, session.runner_beat_at = runner, now
        session.save(update_fields=["runner_id", "runner_beat_at"])
        previous = previous_runner(held)
        if previous == runner:
            return {"runner": runner, "resumed": False, "requeued": []}
        requeued = _orphans_requeue(session, reason=f"runner {previous or '?'} was lost: answered again")
        if previous or requeued:
            live_event_append(session_id=session.pk, type="runner_resumed", payload={
                "runner": runner, "after_seq": after_seq, "previous": previous, "requeued": requeued})
    return {"runner": runner, "resumed": bool(previous or requeued), "requeued": requeued}


def _orphans_requeue(session: LiveSession, *, reason: str) -> list[int]:
    """Comments marked answering by a turn that neither spoke nor waits for approval: back to the queue (their turn
    ends ``turn_failed``). Inside the caller's transaction, under the session's lock."""
    answering = list(LiveComment.objects.filter(session=session, status=LiveComment.Status.ANSWERING)
                     .values_list("pk", "turn_id"))
    if not answering:
        return []
    turns = {t for _, t in answering}
    held = set(LiveEvent.objects.filter(session=session, turn_id__in=turns, type__in=SPOKEN_OR_PENDING)
               .values_list("turn_id", flat=True))
    orphans = [(pk, t) for pk, t in answering if t not in held]
    if not orphans:
        return []
    ids = [pk for pk, _ in orphans]
    LiveComment.objects.filter(pk__in=ids).update(status=LiveComment.Status.QUEUED, turn_id="", reason=reason[:200])
    started = set(LiveEvent.objects.filter(session=session, turn_id__in={t for _, t in orphans}, type="turn_started")
                  .values_list("turn_id", flat=True))
    ended = set(LiveEvent.objects.filter(session=session, turn_id__in=started, type__in=("turn_failed", "timings"))
                .values_list("turn_id", flat=True))
    for turn_id in sorted(started - ended):
        live_event_append(session_id=session.pk, turn_id=turn_id, type="turn_failed",
                          payload={"message": "the runner was lost mid-turn: its comments are answered again",
                                   "runner_lost": True})
    live_event_append(session_id=session.pk, events=[
        ("comment_status", {"comment_id": pk, "status": LiveComment.Status.QUEUED, "reason": reason[:200]})
        for pk in ids])
    return ids


def live_runner_beat(*, session_id, runner: str) -> bool:
    """Renew the lease; False when it is not ours any more (taken over, or the session ended)."""
    return LiveSession.objects.filter(pk=session_id, runner_id=runner, status=LiveSession.Status.LIVE).update(
        runner_beat_at=timezone.now()) == 1


def live_runner_release(*, session_id, runner: str) -> None:
    """Give the lease back (the session ended, or the runner stops on purpose)."""
    LiveSession.objects.filter(pk=session_id, runner_id=runner).update(runner_id="", runner_beat_at=None)


# --- the next batch ------------------------------------------------------------------------------------------------


def choose_batch(queue: list[rules.Queued], now: float, handling) -> rules.Batch:
    """The one place the runner asks which comments the next turn answers (the handling rules' choice)."""
    return rules.next_batch(queue, now, handling)


def live_batch_claim(*, session_id, runner: str) -> tuple[str | None, float | None]:
    """Pick the next turn's comments and mark them answering (with a new turn id). Returns (turn id, None), or
    (None, seconds to look again; None: nothing queued) when no turn runs now. LeaseLost when the lease is gone."""
    from streams.live_selectors import live_comment_queue

    with transaction.atomic():
        session = LiveSession.objects.select_for_update().filter(pk=session_id).first()
        if session is None or session.status != LiveSession.Status.LIVE or session.runner_id != runner:
            raise LeaseLost(f"live session {session_id}: not held by {runner}")
        if session.muted:
            return None, None  # comments wait; unmuting wakes the runner
        if LiveComment.objects.filter(session=session, status=LiveComment.Status.ANSWERING).exists():
            return None, None  # a reply waits for an operator (approve-before-speak): one at a time
        now = timezone.now()
        queue = live_comment_queue(session_id=session.pk)
        batch = choose_batch(queue, now.timestamp(), handling_from(session.handling))
        events: list[tuple[str, dict[str, Any]]] = []
        if batch.expired:
            ids = [q.id for q in batch.expired]
            reason = "too old when its turn came"
            LiveComment.objects.filter(pk__in=ids).update(status=LiveComment.Status.EXPIRED, reason=reason)
            events += [("comment_status", {"comment_id": i, "status": LiveComment.Status.EXPIRED, "reason": reason})
                       for i in ids]
        if events:
            live_event_append(session_id=session.pk, events=events)
        turn_id = None
        if batch.take:
            turn_id = uuid.uuid4().hex
            ids = [q.id for q in batch.take]
            LiveComment.objects.filter(pk__in=ids).update(status=LiveComment.Status.ANSWERING, turn_id=turn_id,
                                                          reason="")
            waiting = len(batch.take) + len(batch.expired)
            live_event_append(session_id=session.pk, turn_id=turn_id, events=[
                *[("comment_status", {"comment_id": i, "status": LiveComment.Status.ANSWERING, "reason": ""})
                  for i in ids],
                # the runner is free (it is asking): the turn starts now; the comments left wait for the next ones
                ("turn_queued", {"comment_ids": ids, "queued_behind": 0,
                                 "comments_waiting": max(0, len(queue) - waiting)})])
    return turn_id, (None if turn_id else batch.wait_s)


# --- the turn ------------------------------------------------------------------------------------------------------


def version_info(version) -> dict[str, Any]:
    return {"slug": version.harness.slug, "number": version.number, "id": version.pk}


def _history(session_id, before_turn_id: str, turns: int = HISTORY_TURNS) -> list[dict[str, str]]:
    """Previous turns the avatar spoke, as chat messages: their comments, then the reply."""
    spoken = list(LiveEvent.objects.filter(session_id=session_id, type="reply_spoken").exclude(turn_id="")
                  .exclude(turn_id=before_turn_id).order_by("-seq").values_list("turn_id", "payload")[:turns])
    spoken.reverse()
    by_turn: dict[str, list[str]] = {}
    for turn_id, viewer, text in (LiveComment.objects.filter(session_id=session_id,
                                                              turn_id__in=[t for t, _ in spoken])
                                  .order_by("id").values_list("turn_id", "viewer", "text")):
        by_turn.setdefault(turn_id, []).append(f"[{viewer}] {text}")
    history: list[dict[str, str]] = []
    for turn_id, payload in spoken:
        if by_turn.get(turn_id) and payload.get("text"):
            history += [{"role": "user", "content": "\n".join(by_turn[turn_id])},
                        {"role": "assistant", "content": payload["text"]}]
    return history


class Backends:
    """The runner's model backends: one :class:`FailoverBackend` per set of endpoints in force, kept between turns
    (its HTTP connections and the breakers' view), replaced when the deployment's endpoints change."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._backend = None

    def for_in_force(self, in_force):
        from streams.engine.breaker import FailoverBackend

        key = tuple((e.name, e.base_url, e.model, in_force.request_models.get(e.name, e.model))
                    for e in in_force.endpoints)
        if key != self._key:
            self.close()
            self._backend = FailoverBackend([(e.name, e.as_config()) for e in in_force.endpoints],
                                            request_models=in_force.request_models)
            self._key = key
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
        self._backend, self._key = None, None


def live_turn_run(*, session_id, runner: str, turn_id: str, backends: Backends):
    """Run the turn answering the comments marked with ``turn_id`` (module docstring). Returns the TurnResult, or
    None when the turn could not start (the deployment has nothing in force: a ``fault`` event, comments queued
    again; the avatar was muted after the batch was claimed: ``reply_rejected`` by muted, comments queued again)."""
    session = LiveSession.objects.select_related("deployment", "version_in_force__harness",
                                                 "revision_in_force").get(pk=session_id)
    comments = list(LiveComment.objects.filter(session=session, turn_id=turn_id,
                                               status=LiveComment.Status.ANSWERING).order_by("id"))
    if not comments:
        return None
    append = _appender(session.pk, turn_id)
    try:
        in_force = deployment_in_force(session.deployment)  # NOW: a label moved since the last turn counts
        if not in_force.endpoints:
            raise DomainError(f"no endpoint serves deployment {session.deployment.name!r} now")
        backend = backends.for_in_force(in_force)
    except Exception as exc:
        with transaction.atomic():
            locked = LiveSession.objects.select_for_update().get(pk=session.pk)
            _orphans_requeue(locked, reason="the deployment had nothing to serve with: answered again")
            live_event_append(session_id=session.pk, turn_id=turn_id, type="fault",
                              payload={"kind": "deployment", "endpoint": "", "message": str(exc)[:500]})
        raise
    version = in_force.version
    before = copy.deepcopy(session.room_state)
    work = copy.deepcopy(before)
    history = _history(session.pk, turn_id)
    described = in_force.describe()
    with transaction.atomic():
        locked = (LiveSession.objects.select_for_update(of=("self",))
                  .select_related("version_in_force__harness", "revision_in_force").get(pk=session.pk))
        if locked.muted:  # muted since the batch was claimed: no turn starts, its comments wait for the unmute
            closed = _comments_close(session.pk, [c.pk for c in comments], LiveComment.Status.QUEUED,
                                     "the avatar was muted: answered after unmuting")
            live_event_append(session_id=session.pk, turn_id=turn_id, events=[
                ("reply_rejected", {"text": "", "by": "muted", "message": "the avatar was muted before the turn "
                                    "started: nothing was asked, its comments are answered after unmuting"}),
                *closed])
            return None
        events: list[tuple[str, dict[str, Any]]] = []
        if locked.version_in_force_id != version.pk or locked.revision_in_force_id != in_force.revision.pk:
            events.append(("version_changed", {
                "from": version_info(locked.version_in_force) if locked.version_in_force_id else None,
                "to": version_info(version),
                "revision": {"from": locked.revision_in_force.number if locked.revision_in_force_id else None,
                             "to": in_force.revision.number},
                "label": in_force.label}))
            locked.version_in_force, locked.revision_in_force = version, in_force.revision
            locked.save(update_fields=["version_in_force", "revision_in_force"])
        if events:
            live_event_append(session_id=session.pk, events=events)  # before the turn, not one of its events
        append(type="turn_started", payload={
            "version": version_info(version), "revision": in_force.revision.number, "label": in_force.label,
            "endpoint": described["endpoints"][0] if described["endpoints"] else None,
            "endpoints": described["endpoints"], "model": described["model"], "adapter": described["adapter"],
            "comments": [c.pk for c in comments], "history_messages": len(history), "runner": runner,
            "room": before})
    recorder = TurnRecorder(append)
    backend.on_event = recorder.side_event  # faults, failovers and breaker changes land in this turn's events
    turn_comments = [{"viewer": c.viewer, "viewer_id": c.viewer_id, "text": c.text} for c in comments]
    try:
        result = turn_run_recorded(append=append, turn_id=turn_id, manifest=version.manifest, room=work,
                                   comments=turn_comments, history=history, backend=backend, recorder=recorder,
                                   tools=gated_runtime(tool_runtime_for(), version.manifest, session.pk, turn_id,
                                                       emit=recorder.side_event))
    except Exception as exc:
        with transaction.atomic():
            closed = _comments_close(session.pk, [c.pk for c in comments], LiveComment.Status.EXPIRED,
                                     f"the turn failed: {type(exc).__name__}")
            if closed:
                live_event_append(session_id=session.pk, events=closed)
        raise
    finally:
        backend.on_event = None
    _turn_finish(session.pk, turn_id, result, room_changes(before, work), [c.pk for c in comments])
    return result


def _appender(session_id, turn_id: str):
    return lambda **kw: live_event_append(session_id=session_id, turn_id=turn_id, **kw)


def _comments_close(session_id, ids: list[int], status: str, reason: str) -> list[tuple[str, dict[str, Any]]]:
    """Mark comments (only those still answering) and return their comment_status events (to store)."""
    updated = list(LiveComment.objects.filter(session_id=session_id, pk__in=ids,
                                              status=LiveComment.Status.ANSWERING).values_list("pk", flat=True))
    fields = {"status": status, "reason": reason[:200]}
    if status == LiveComment.Status.QUEUED:
        fields["turn_id"] = ""
    LiveComment.objects.filter(pk__in=updated).update(**fields)
    return [("comment_status", {"comment_id": pk, "status": status, "reason": reason[:200]}) for pk in updated]


def _turn_finish(session_id, turn_id: str, result, changes, comment_ids: list[int]) -> None:
    """Save the room changes and route the reply: spoken, pending approval, or withheld (muted meanwhile)."""
    with transaction.atomic():
        locked = LiveSession.objects.select_for_update().get(pk=session_id)
        if changes:
            locked.room_state = room_changes_apply(locked.room_state, changes)
            locked.save(update_fields=["room_state"])
        reply = {"text": result.reply, "fallback": result.fallback, "reason": result.reason}
        if locked.muted:
            events = [("reply_rejected", {**reply, "by": "muted",
                                          "message": "the avatar was muted while the turn ran: not spoken, its "
                                                     "comments are answered after unmuting"})]
            events += _comments_close(session_id, comment_ids, LiveComment.Status.QUEUED,
                                      "the avatar was muted: answered again")
        elif locked.approve_before_speak:
            events = [("reply_pending", reply)]  # comments stay answering until an operator decides
        else:
            events = [("reply_spoken", {**reply, "by": "avatar", "operator": None})]
            events += _comments_close(session_id, comment_ids, LiveComment.Status.ANSWERED, "")
        live_event_append(session_id=session_id, turn_id=turn_id, events=events)
