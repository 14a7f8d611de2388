"""Play mode: the clock of a preview room (or a scenario run) running by itself, server-side.

A playing clock is driven by a chain of Celery ticks (streams.tasks.preview_clock_tick): each tick advances the
clock by the real time elapsed since the last one times the speed, records what became due (turns queued as for a
step) and queues the next tick. While a turn of the room is queued or running the clock stands still, so comments
never pile up behind a slow model; the end of each turn nudges the clock (preview_play_nudge) instead of waiting for
the next poll. Only the tick carrying the room's current ``tick_token`` acts, and it hands a new token to its
successor: a duplicated, stale or superseded tick does nothing, so there is never more than one chain per room.

A scenario run (kind "run") plays "as fast as turns finish" from the start; its ticks also drive its job
(:class:`streams.models.ScenarioRun`): the first claims it, each beats for it, one finds it cancelled and ends it,
the last finishes it (:mod:`streams.services.runs`).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.errors import InvalidTransition, ValidationFailed
from console.jobs import Job, job_claim, job_finish
from streams import selectors
from streams.models import PreviewRoom, ScenarioRun
from streams.services.preview import (
    _clock_advance,
    _require_driver,
    _require_open,
    _require_owner,
    _scenario_run_at,
    preview_event_append,
)

logger = logging.getLogger(__name__)

ASAP = 0.0  # play_speed: jump to the next comment or event as soon as the last turn finished
MAX_PLAY_SPEED = 3600.0  # an hour a second
TICK_MINUTES = 0.25  # a playing clock moves about this many simulated minutes a tick...
TICK_MIN_S, TICK_MAX_S = 0.5, 5.0  # ...but ticks at most every TICK_MIN_S and at least every TICK_MAX_S
WAIT_TICK_S = 2.0  # while a turn runs: the turn's end nudges the clock, this poll is only the safety net
LOST_TURN_S = 360  # a turn without any event for this long is lost (worker killed): the clock goes on
TURN_END_TYPES = ("timings", "turn_failed")  # the last event of a turn that ran


def _tick_enqueue(room_id, token: str, countdown: float = 0.0) -> None:
    from streams.tasks import preview_clock_tick

    room_id = str(room_id)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        # an eager "worker" would run the whole chain (ticks, turns, nudges) recursively inside this call,
        # ignoring the countdowns: the clock plays only with a real worker (the embedded default has one)
        return
    # robust: a tick that cannot be sent (the broker is down) must not fail what was committed; the scheduler's
    # preview_play_sweep_stalled sends the room's current tick again once the broker is back
    transaction.on_commit(lambda: preview_clock_tick.apply_async((room_id, token), countdown=countdown),
                          robust=True)


def _play_speed(speed: Any) -> float:
    try:
        speed = float(speed)
    except (TypeError, ValueError):
        speed = -1.0
    if not (speed == speed and 0 <= speed <= MAX_PLAY_SPEED):  # NaN is not equal to itself
        raise ValidationFailed("invalid speed", errors=[
            {"path": "speed",
             "message": f"a ratio above 0 and at most {MAX_PLAY_SPEED:g}, or 0: as fast as turns finish"}])
    return speed


def _tick_delay(room: PreviewRoom, next_at: float | None) -> float:
    """Real seconds until the next tick of a clock playing at a fixed speed: about TICK_MINUTES of simulated
    time, sooner when the next comment or event is due earlier (it is posted as its minute passes)."""
    per_minute_s = 60.0 / room.play_speed
    delay = min(max(TICK_MINUTES * per_minute_s, TICK_MIN_S), TICK_MAX_S)
    if next_at is not None:
        delay = min(delay, max((next_at - room.scenario_minute) * per_minute_s, 0.05))
    return delay


def preview_play(*, user, room: PreviewRoom, speed: float) -> PreviewRoom:
    """Let the clock run by itself at ``speed`` (simulated/real time; ``ASAP``: as fast as turns finish);
    also the way to change the speed, and it resumes a paused room. Recorded as a ``playing`` event; the
    first tick is queued on commit."""
    _require_driver(user, room)
    _require_open(room)
    speed = _play_speed(speed)
    if room.scenario_id is None:
        raise ValidationFailed("this preview room plays no scenario: there is no clock to play")
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update(of=("self",)).select_related("scenario").get(pk=room.pk)
        _require_open(locked)
        if locked.scenario_minute >= locked.scenario.duration_minutes and _scenario_run_at(locked).next_at is None:
            raise InvalidTransition("the scenario is over: nothing left to play")
        locked.playing, locked.paused, locked.play_speed = True, False, speed
        locked.clock_ticked_at, locked.tick_token = timezone.now(), uuid.uuid4().hex
        locked.save(update_fields=["playing", "paused", "play_speed", "clock_ticked_at", "tick_token"])
        preview_event_append(room_id=locked.pk, type="playing", payload={
            "by": user.get_username(), "speed": speed, "minute": locked.scenario_minute})
        _tick_enqueue(locked.pk, locked.tick_token)
    room.playing, room.paused, room.play_speed = True, False, speed
    room.clock_ticked_at, room.tick_token = locked.clock_ticked_at, locked.tick_token
    return room


def preview_close(*, user, room: PreviewRoom) -> PreviewRoom:
    """Close the room: the clock stops, nothing can be posted any more; the events stay as its transcript. Only the
    owner closes a room. Closing a scenario run cancels it (:func:`streams.services.runs.scenario_run_cancel`)."""
    if room.is_run:
        from streams.services.runs import scenario_run_cancel

        return scenario_run_cancel(user=user, room=room)
    _require_owner(user, room, "close it")
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        if locked.status != PreviewRoom.Status.CLOSED:
            locked.status, locked.playing, locked.tick_token = PreviewRoom.Status.CLOSED, False, ""
            locked.save(update_fields=["status", "playing", "tick_token"])
            preview_event_append(room_id=locked.pk, type="room_closed", payload={
                "by": user.get_username(), "minute": locked.scenario_minute})
    room.refresh_from_db()
    return room


def _turns_settle(room_id, now) -> list[str]:
    """The turns of the room still queued or running; a turn silent for LOST_TURN_S is recorded as failed
    and no longer holds the clock."""
    waiting = selectors.preview_turns_in_flight(room_id=room_id)
    lost = [t for t, last in waiting.items() if (now - last).total_seconds() > LOST_TURN_S]
    for turn_id in lost:
        preview_event_append(room_id=room_id, type="turn_failed", turn_id=turn_id, payload={
            "message": f"lost: no event for {LOST_TURN_S} s (the worker stopped?)", "lost": True})
    return [t for t in waiting if t not in lost]


def _play_finish(locked: PreviewRoom, now) -> None:
    """The scenario is over and its last turn answered: stop playing; a run succeeds (its room closes with the
    summary: streams.services.runs.run_ended). ``locked`` is stale after a run's end: do not save it again."""
    if locked.is_run:
        job_finish(ScenarioRun.objects.get(pk=locked.pk), status=Job.Status.SUCCEEDED)
        return
    locked.playing, locked.tick_token, locked.clock_ticked_at = False, "", None
    locked.save(update_fields=["playing", "tick_token", "clock_ticked_at"])
    preview_event_append(room_id=locked.pk, type="scenario_finished", payload={"minute": locked.scenario_minute})


def _run_tick(locked: PreviewRoom, now) -> ScenarioRun | None:
    """A run's side of a tick (the room locked): the first tick claims the run; a run asked to stop ends
    cancelled here (None: the tick does nothing more)."""
    run = ScenarioRun.objects.get(pk=locked.pk)
    if run.status == Job.Status.QUEUED:
        run = job_claim(ScenarioRun, locked.pk, stage="playing") or run
    if run.status == Job.Status.CANCELLING or run.cancel_requested:
        job_finish(run, status=Job.Status.CANCELLED)
        return None
    return run if run.status == Job.Status.RUNNING else None


def run_beat(room: PreviewRoom, now) -> None:
    """A sign of life of a running run (the clock moved or waited for a turn), with its clock as progress (scenario
    seconds)."""
    ScenarioRun.objects.filter(pk=room.pk, status__in=Job.IN_WORKER).update(
        heartbeat_at=now, progress_done=int(room.scenario_minute * 60))


def _clock_tick(room_id, token: str, now) -> dict[str, Any]:
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update(of=("self",)).select_related("scenario").get(pk=room_id)
        if not token or locked.tick_token != token:
            return {"ran": False, "reason": "stale"}  # duplicated delivery, or superseded by play/pause
        if (locked.status != PreviewRoom.Status.OPEN or not locked.playing or locked.paused
                or locked.scenario_id is None):
            locked.tick_token = ""
            locked.save(update_fields=["tick_token"])
            return {"ran": False, "reason": "stopped"}
        fields = ["tick_token", "clock_ticked_at"]
        if locked.is_run and _run_tick(locked, now) is None:
            return {"ran": False, "reason": "cancelled"}  # ended (the room is closed) or not running
        out: dict[str, Any] = {"ran": True, "minute": locked.scenario_minute, "turn_ids": [], "finished": False}
        if _turns_settle(locked.pk, now):
            delay = WAIT_TICK_S  # the clock stands still while the avatar answers
        else:
            run = _scenario_run_at(locked)
            next_at = run.next_at
            if locked.scenario_minute >= run.duration and next_at is None:
                locked.save(update_fields=fields)
                _play_finish(locked, now)
                return {**out, "finished": True}
            if locked.play_speed == ASAP:
                target = run.duration if next_at is None else next_at
            else:
                elapsed = max((now - (locked.clock_ticked_at or now)).total_seconds(), 0.0)
                target = round(locked.scenario_minute + elapsed * locked.play_speed / 60.0, 3)
            if target > locked.scenario_minute or locked.play_speed == ASAP:
                out.update(_clock_advance(locked, target, run=run))
            if out["turn_ids"]:
                delay = WAIT_TICK_S
            elif locked.play_speed == ASAP:
                delay = 0.0
            else:
                delay = _tick_delay(locked, run.next_at)
        locked.clock_ticked_at, locked.tick_token = now, uuid.uuid4().hex
        locked.save(update_fields=fields)
        if locked.is_run:
            run_beat(locked, now)
        _tick_enqueue(locked.pk, locked.tick_token, countdown=delay)
    return {**out, "next_tick_s": delay}


def preview_clock_tick(*, room_id, token: str, now=None) -> dict[str, Any]:
    """One tick of a playing clock (the task ``streams.preview_clock_tick``): advance by the real time elapsed
    since the last tick times the speed (to the next comment or event when playing as fast as turns finish),
    record what became due, queue the turns and the next tick. Does nothing for a stale token, a paused,
    stopped or closed room; finishes the play at the scenario's end once the last turn is answered. An error
    stops the play (a run is marked failed) and is raised again."""
    now = now or timezone.now()
    try:
        return _clock_tick(room_id, token, now)
    except PreviewRoom.DoesNotExist:
        return {"ran": False, "reason": "no such room"}
    except Exception as exc:
        _play_fail(room_id=room_id, token=token, message=f"{type(exc).__name__}: {exc}")
        raise


def _play_fail(*, room_id, token: str | None, message: str) -> None:
    """The clock broke: it stops (an event says why); a run ends failed with ``message``. ``token``: only if
    the room's chain is still that one (None: whatever it is)."""
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().filter(pk=room_id).first()
        if locked is None or (token is not None and locked.tick_token != token):
            return
        if locked.is_run:
            run = ScenarioRun.objects.get(pk=room_id)
            if not run.is_finished:
                job_finish(run, status=Job.Status.FAILED, error=message)  # play_failed: runs.run_ended
            return
        locked.playing, locked.tick_token = False, ""
        locked.save(update_fields=["playing", "tick_token"])
        preview_event_append(room_id=locked.pk, type="play_failed", payload={"message": message[:1000],
                                                                             "minute": locked.scenario_minute})


def _preview_set_paused(*, user, room: PreviewRoom, paused: bool) -> PreviewRoom:
    _require_driver(user, room)
    _require_open(room)
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        if locked.paused != paused:
            locked.paused = paused
            if locked.playing:
                # pausing drops the tick chain (its token goes stale); resuming starts a new one, counting
                # real time from now so the paused time is not played back
                locked.clock_ticked_at = None if paused else timezone.now()
                locked.tick_token = "" if paused else uuid.uuid4().hex
                if not paused:
                    _tick_enqueue(locked.pk, locked.tick_token)
                    if locked.is_run:  # the sweep leaves a paused run alone; from now on it beats again
                        run_beat(locked, timezone.now())
            locked.save(update_fields=["paused", "clock_ticked_at", "tick_token"])
            preview_event_append(room_id=locked.pk, type="paused" if paused else "resumed",
                                 payload={"by": user.get_username(), "minute": locked.scenario_minute,
                                          "playing": locked.playing})
    room.paused = paused
    return room


def preview_pause(*, user, room: PreviewRoom) -> PreviewRoom:
    """Pause the clock (recorded): a playing clock stops. Stepping stays possible; comments are still
    answered."""
    return _preview_set_paused(user=user, room=room, paused=True)


def preview_resume(*, user, room: PreviewRoom) -> PreviewRoom:
    """Resume the clock: a room that was playing plays on."""
    return _preview_set_paused(user=user, room=room, paused=False)


def preview_play_nudge(*, room_id) -> bool:
    """After a turn: if the room is playing, tick now rather than at the next poll (the tick carries the
    current token, so it and the scheduled one cannot both act). Returns whether a tick was queued."""
    room = (PreviewRoom.objects.filter(pk=room_id, status=PreviewRoom.Status.OPEN, playing=True, paused=False)
            .exclude(tick_token="").values("tick_token").first())
    if room is None:
        return False
    _tick_enqueue(room_id, room["tick_token"])
    return True


STALLED_TICK_S = TICK_MAX_S + 10.0  # a playing clock that has not ticked for this long lost its tick


def preview_play_sweep_stalled(*, now=None) -> list[str]:
    """Send the current tick again for the playing rooms whose clock is overdue. A tick is lost with the broker:
    sent while Redis was down, or held by a worker (a countdown) when its connection dropped, where Redis would
    only redeliver it after its visibility timeout (an hour). A duplicate is harmless: only the tick carrying the
    room's current token acts. Returns the rooms' ids. Run by the periodic task
    ``streams.preview_play_sweep_stalled``."""
    from datetime import timedelta

    limit = (now or timezone.now()) - timedelta(seconds=STALLED_TICK_S)
    stalled = list(PreviewRoom.objects.filter(status=PreviewRoom.Status.OPEN, playing=True, paused=False,
                                              clock_ticked_at__lt=limit)
                   .exclude(tick_token="").values_list("pk", "tick_token"))
    for room_id, token in stalled:
        _tick_enqueue(room_id, token)
    if stalled:
        logger.warning("re-sent the lost clock tick of %d playing room(s)", len(stalled))
    return [str(pk) for pk, _ in stalled]
