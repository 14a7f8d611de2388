"""Scenario runs: a room of kind "run" that plays a scenario to its end at once, without anyone watching, and is a
job (:class:`streams.models.ScenarioRun`, :mod:`console.jobs`): queued when started, claimed by its clock's first
tick (or by :func:`scenario_run_execute` in the CLI), beating with every tick, swept when its clock stops for good,
cancelled with the one cancel of every job, and ended (succeeded, failed or cancelled) with its room closed and its
summary stored (:func:`run_ended`).
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from console.errors import InvalidTransition, ValidationFailed
from console.jobs import Job, job_cancel, job_claim, job_finish
from console.services import audit_record
from streams import selectors
from streams.models import ModelEndpoint, PreviewRoom, Scenario, ScenarioRun
from streams.services.play import ASAP, _play_fail, _play_finish, _tick_enqueue, run_beat
from streams.services.preview import (
    _clock_advance,
    _preview_create,
    _require_owner,
    _scenario_run_at,
    preview_event_append,
    preview_turn_run,
)

# The room's last event when its run ends, by how it ended.
END_EVENTS = {Job.Status.SUCCEEDED: "scenario_finished", Job.Status.FAILED: "play_failed",
              Job.Status.CANCELLED: "run_cancelled"}


def scenario_run_start(*, user, version, scenario: Scenario, endpoint: ModelEndpoint | None = None,
                       seed: int | None = None, play: bool = True) -> PreviewRoom:
    """Queue a scenario run: a room of kind "run" that plays ``scenario`` on ``version`` against ``endpoint``
    as fast as the model answers, through the Celery workers, and closes itself at the end with a summary.
    ``play=False`` only creates it (for :func:`scenario_run_execute`). Returns the room (``room.job``: the run)."""
    if scenario is None:
        raise ValidationFailed("a run plays a scenario", errors=[{"path": "scenario", "message": "pick one"}])
    fields = {"kind": PreviewRoom.Kind.RUN, "play_speed": ASAP}
    if play:
        fields.update(playing=True, clock_ticked_at=timezone.now(), tick_token=uuid.uuid4().hex)
    with transaction.atomic():
        room, _turn_ids = _preview_create(user=user, version=version, scenario=scenario, endpoint=endpoint,
                                          seed=seed, enqueue=play, **fields)
        # progress in scenario seconds: the clock's minute, fine enough for a bar in the first minute
        run = ScenarioRun.objects.create(room=room, created_by=user, progress_total=scenario.duration_minutes * 60)
        audit_record(actor=user, action="scenario_run.queued", scope=run.audit_scope(), target=run.audit_target(),
                     to_state=Job.Status.QUEUED, data={"harness": version.harness.slug, "version": version.number,
                                                       "endpoint": room.endpoint.name, "seed": room.seed})
        if play:
            _tick_enqueue(room.pk, room.tick_token)  # after the first turns: the tick waits for them
    return room


def scenario_run_cancel(*, user, room: PreviewRoom) -> PreviewRoom:
    """The one cancel (console.jobs.job_cancel) for a run, by its owner: a queued run ends cancelled at once; a
    running one is asked to stop and its clock's next tick (sent now) ends it cancelled, the room closed. A paused
    run has no tick coming: it ends at once. InvalidTransition (409) for a run that has ended."""
    _require_owner(user, room, "cancel it")
    if not room.is_run:
        raise InvalidTransition("only a scenario run can be cancelled: close a preview room instead")
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        preview_event_append(room_id=locked.pk, type="cancel_requested", payload={
            "by": user.get_username(), "minute": locked.scenario_minute})
        run = job_cancel(ScenarioRun.objects.get(pk=room.pk), user=user)  # refused (and all undone) once ended
        if run.status == Job.Status.CANCELLING:
            if locked.paused or not locked.tick_token:  # nothing will tick: nobody else can end it
                job_finish(run, status=Job.Status.CANCELLED)
            else:
                _tick_enqueue(locked.pk, locked.tick_token)
    room.refresh_from_db()
    return room


def run_ended(run: ScenarioRun, from_state: str) -> None:
    """ScenarioRun.on_finish: the run ends (inside console.jobs.job_finish / job_cancel, the room locked): its
    clock stops, its room closes, its summary is stored and the room's last event says how it ended."""
    room = PreviewRoom.objects.get(pk=run.pk)
    room.status, room.playing, room.tick_token, room.clock_ticked_at = PreviewRoom.Status.CLOSED, False, "", None
    room.save(update_fields=["status", "playing", "tick_token", "clock_ticked_at"])
    run.summary = selectors.scenario_run_summary(room_id=run.pk)
    if run.status == Job.Status.SUCCEEDED:
        run.started_at = run.started_at or run.finished_at
        run.progress_done = run.progress_total
    payload = {"minute": room.scenario_minute, "status": run.status}
    if run.status == Job.Status.SUCCEEDED:
        payload["summary"] = run.summary
    elif run.status == Job.Status.FAILED:
        payload["message"] = run.error[:1000]
    preview_event_append(room_id=room.pk, type=END_EVENTS[run.status], payload=payload)


def scenario_run_execute(*, room_id, on_turn=None) -> PreviewRoom:
    """Play a queued run to the end in this process (the ``run_scenario`` command): the same clock moves as
    the ticks make at full speed, each turn run here through :func:`preview_turn_run` as soon as its
    comments are due. ``on_turn(turn_id, result)`` is called after each turn. A turn that raises is recorded
    (``turn_failed``) and the run goes on; a cancel ends it between turns; any other error marks the run failed
    and is raised again."""
    if not ScenarioRun.objects.filter(pk=room_id).exists() or \
            job_claim(ScenarioRun, room_id, stage="playing") is None:
        raise InvalidTransition("only a queued scenario run can be executed")
    try:
        pending = list(selectors.preview_turns_in_flight(room_id=room_id))  # the first minute's comments
        while True:
            for turn_id in pending:
                try:
                    result = preview_turn_run(room_id=room_id, turn_id=turn_id)
                except Exception:  # stored as turn_failed by preview_turn_run; the run goes on
                    result = None
                if on_turn is not None:
                    on_turn(turn_id, result)
            with transaction.atomic():
                locked = PreviewRoom.objects.select_for_update(of=("self",)).select_related("scenario").get(pk=room_id)
                run = ScenarioRun.objects.get(pk=room_id)
                if run.is_finished:
                    break
                if run.cancel_requested:
                    job_finish(run, status=Job.Status.CANCELLED)
                    break
                clock = _scenario_run_at(locked)
                next_at = clock.next_at
                if locked.scenario_minute >= clock.duration and next_at is None:
                    _play_finish(locked, timezone.now())
                    break
                pending = _clock_advance(locked, clock.duration if next_at is None else next_at, run=clock,
                                         enqueue=False)["turn_ids"]
                run_beat(locked, timezone.now())
    except Exception as exc:
        _play_fail(room_id=room_id, token=None, message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        from streams.events import publish_flush

        publish_flush(timeout=5)
    return selectors.preview_room_get(room_id=room_id)
