"""Preview rooms: open one, post comments, step the clock, switch versions, invite people, and run a turn.

A preview room's events are stored one by one (each in its own short transaction, so tokens reach the browser while
the turn runs) with a room-wide seq taken under the room's row lock, and published on commit. Turns run in a Celery
task (streams.tasks.preview_turn), never in a web request or the event loop. Play mode (the clock running by
itself) is :mod:`streams.services.play`; scenario runs are :mod:`streams.services.runs`.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from streams import selectors
from streams.engine.outbound import OutboundRefused
from streams.events import TRACE, publish_on_commit
from streams.models import LiveRoom, ModelEndpoint, PreviewEvent, PreviewRoom, Scenario
from streams.services.catalog import DEMO_ROOM_PATH, DEMO_ROOM_SLUG, _check_endpoint, model_endpoint_ensure_default
from streams.services.tool_runtime import tool_runtime_for
from streams.services.turns import room_changes, room_changes_apply, turn_failed_payload, turn_run_recorded

logger = logging.getLogger(__name__)

# --- preview rooms ------------------------------------------------------------------------------------
#
# A preview room's events are stored one by one (each in its own short transaction, so tokens reach the
# browser while the turn runs) with a room-wide seq taken under the room's row lock, and published on
# commit. Turns run in a Celery task (streams.tasks.preview_turn), never in a web request or the event loop.

USE_PREVIEW = roles.USE_PREVIEW
MAX_VIEWER_COMMENT_CHARS = 500
COMMENTS_PER_TURN = 5  # comments due in one clock step are answered in turns of at most this many
MAX_STEP_MINUTES = 60


def _require_preview(user) -> None:
    if not user.has_perm(USE_PREVIEW):
        raise NotAllowed("your role does not allow you to use the preview room")


def _require_open(room: PreviewRoom) -> None:
    if room.status != PreviewRoom.Status.OPEN:
        raise InvalidTransition("this preview room is closed")


def _require_driver(user, room: PreviewRoom) -> str:
    """Comment, step, play, pause, resume, switch version: the owner and the invited members (see
    :func:`streams.selectors.preview_room_access`). Returns the user's access."""
    _require_preview(user)
    access = selectors.preview_room_access(user=user, room=room)
    if access in (selectors.OWNER, selectors.MEMBER):
        return access
    if access == selectors.READER:
        raise NotAllowed(f"this scenario run was started by {room.created_by.get_username()}: "
                         "only they may drive or cancel it; you may read it")
    raise NotAllowed("you are not in this preview room: ask its owner to invite you")


def _require_owner(user, room: PreviewRoom, what: str) -> None:
    _require_preview(user)
    if room.created_by_id != user.pk:
        if selectors.preview_room_access(user=user, room=room) is None:
            raise NotAllowed("you are not in this preview room: ask its owner to invite you")
        raise NotAllowed(f"only {room.created_by.get_username()}, who opened this "
                         f"{'scenario run' if room.is_run else 'preview room'}, may {what}")


def preview_event_append(*, room_id, type: str = "", payload: dict[str, Any] | None = None, turn_id: str = "",
                         events: Sequence[tuple[str, dict[str, Any]]] = ()) -> PreviewEvent:
    """Store one event (``type``, ``payload``), or several of one turn in order (``events``: (type, payload)
    pairs), with the room's next seqs in one transaction, and publish them as one message when it commits.
    Returns the (last) stored event."""
    batch = list(events) or [(type, payload if payload is not None else {})]
    return events_store(PreviewRoom, PreviewEvent, "room", room_id, batch, turn_id=turn_id)


def events_store(owner_model, event_model, owner_field: str, owner_id, batch: Sequence[tuple[str, dict[str, Any]]],
                 *, turn_id: str = "", group: str | None = None):
    """Store ``batch`` ((type, payload) pairs) as events of one owner (a preview room, a live session: a row with
    ``last_seq``) with its next seqs, in one transaction; publish them as one message (to ``group``, default the
    preview room's) when it commits. Returns the last stored event."""
    trace = {"store": time.time()} if TRACE else None
    now = timezone.now()
    fk = f"{owner_field}_id"
    if connection.vendor == "postgresql":
        # one statement, one round trip (atomic on its own; a savepoint-free part of the caller's transaction
        # if there is one): take the owner's row lock and the next seqs, insert the rows. An event is cheap to
        # lose in a crash, a flush to disk per token is not: this commit returns before the WAL is on disk (the
        # database stays consistent either way).
        owner_pk = owner_model._meta.pk.get_db_prep_value(owner_id, connection)
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH cfg AS (SELECT set_config('synchronous_commit', 'off', true)), "
                f"r AS (UPDATE {owner_model._meta.db_table} SET last_seq = last_seq + %s FROM cfg WHERE id = %s "
                f"RETURNING last_seq) "
                f"INSERT INTO {event_model._meta.db_table} ({fk}, seq, turn_id, type, payload, created_at) "
                f"SELECT %s, r.last_seq - %s + e.ord, %s, e.item->>0, e.item->1, %s "
                f"FROM r, jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(item, ord) RETURNING id, seq",
                [len(batch), owner_pk, owner_pk, len(batch), turn_id, now,
                 json.dumps([[t, p] for t, p in batch], ensure_ascii=False)])
            rows = sorted(cursor.fetchall(), key=lambda r: r[1])
        if not rows:
            raise owner_model.DoesNotExist(f"no {owner_model._meta.verbose_name} {owner_id}")
        stored = []
        for (pk, seq), (kind, data) in zip(rows, batch):
            event = event_model(id=pk, seq=seq, turn_id=turn_id, type=kind, payload=data, created_at=now,
                                **{fk: owner_id})
            event._state.adding, event._state.db = False, connection.alias
            stored.append(event)
        publish_on_commit(owner_id, [e.as_message() for e in stored], trace, group=group)
        return stored[-1]
    with transaction.atomic():
        updated = owner_model.objects.filter(pk=owner_id).update(last_seq=F("last_seq") + len(batch))
        if not updated:
            raise owner_model.DoesNotExist(f"no {owner_model._meta.verbose_name} {owner_id}")
        last = owner_model.objects.filter(pk=owner_id).values_list("last_seq", flat=True).get()
        stored = event_model.objects.bulk_create(
            event_model(seq=last - len(batch) + i, turn_id=turn_id, type=kind, payload=data, **{fk: owner_id})
            for i, (kind, data) in enumerate(batch, 1))
        publish_on_commit(owner_id, [e.as_message() for e in stored], trace, group=group)
    return stored[-1]


def _version_info(version) -> dict[str, Any]:
    return {"id": version.pk, "harness": version.harness.slug, "number": version.number,
            "status": version.status}


def _initial_room(scenario: Scenario | None, seed: int) -> tuple[dict[str, Any], float, list, list]:
    """(room dict, minute, timeline events applied, comments due): a scenario starts with what is due at its
    first minute already applied."""
    if scenario is not None:
        from streams.simulator import ScenarioRun

        run = ScenarioRun(scenario.parsed(), seed)
        due = run.advance_to(run.minute)
        return run.snapshot(), run.minute, list(run.event_log), due
    live = LiveRoom.objects.filter(slug=DEMO_ROOM_SLUG).prefetch_related("products", "coupons").first()
    if live is not None:
        room = selectors.room_state(live)
    else:
        import yaml

        room = yaml.safe_load(DEMO_ROOM_PATH.read_text(encoding="utf-8"))
    return room, float(room.get("clock_minute") or 0), [], []


def _clock_record(room_id, applied: list, due: list, *, enqueue: bool = True) -> list[str]:
    """Record applied timeline events and the comments that became due; queue one turn per
    ``COMMENTS_PER_TURN`` comments (on commit; ``enqueue=False``: the caller runs them). Returns the turn
    ids."""
    for ev in applied:
        preview_event_append(room_id=room_id, type="timeline_event", payload=ev.to_dict())
    turn_ids = []
    for i in range(0, len(due), COMMENTS_PER_TURN):
        turn_id = uuid.uuid4().hex
        for c in due[i:i + COMMENTS_PER_TURN]:
            preview_event_append(room_id=room_id, type="viewer_comment", turn_id=turn_id, payload={
                "viewer": c.viewer_name, "viewer_id": c.viewer_id, "text": c.text, "source": "scenario",
                "persona": c.persona_id, "persona_kind": c.persona_kind, "link_ids": list(c.link_ids),
                "minute": c.minute})
        if enqueue:
            _turn_enqueue(room_id, turn_id)
        turn_ids.append(turn_id)
    return turn_ids


def preview_open(*, user, version, scenario: Scenario | None = None, endpoint: ModelEndpoint | None = None,
                 seed: int | None = None) -> PreviewRoom:
    """Open a preview room on a harness version (drafts too), playing ``scenario`` (else the demo live room)
    against ``endpoint`` (else the default one). ``seed`` defaults to the scenario's own seed."""
    room, _turn_ids = _preview_create(user=user, version=version, scenario=scenario, endpoint=endpoint, seed=seed)
    return room


def _preview_create(*, user, version, scenario: Scenario | None, endpoint: ModelEndpoint | None,
                    seed: int | None, enqueue: bool = True, **fields: Any) -> tuple[PreviewRoom, list[str]]:
    """Create the room (``fields``: kind, run status, play settings) with its opening events; returns the
    room and the turns answering the comments due at the first minute."""
    _require_preview(user)
    endpoint = endpoint or ModelEndpoint.objects.filter(is_default=True).first() or model_endpoint_ensure_default()
    _check_endpoint(endpoint)
    if seed is None:
        seed = scenario.parsed().seed if scenario is not None else 0
    room_dict, minute, applied, due = _initial_room(scenario, int(seed))
    with transaction.atomic():
        room = PreviewRoom.objects.create(created_by=user, harness_version=version, scenario=scenario,
                                          endpoint=endpoint, room_state=room_dict, scenario_minute=minute,
                                          seed=int(seed), **fields)
        preview_event_append(room_id=room.pk, type="room_opened", payload={
            "by": user.get_username(), "version": _version_info(version),
            "scenario": scenario.slug if scenario else None, "endpoint": {"name": endpoint.name,
                                                                        "model": endpoint.model},
            "minute": minute, "seed": int(seed), "kind": room.kind})
        turn_ids = _clock_record(room.pk, applied, due, enqueue=enqueue)
    room.refresh_from_db(fields=["last_seq"])
    return room, turn_ids


def _turn_enqueue(room_id, turn_id: str) -> None:
    """Queue the turn (on commit) on the interactive queue (settings.CELERY_TASK_ROUTES) and say so in the room: a
    ``turn_queued`` event (``queued_behind``: the room's turns queued or running before it) shows on the page
    until the runner's ``turn_started``."""
    from streams.tasks import preview_turn

    ahead = [t for t in selectors.preview_turns_in_flight(room_id=room_id) if t != turn_id]
    preview_event_append(room_id=room_id, type="turn_queued", turn_id=turn_id,
                         payload={"queued_behind": len(ahead), "queue": settings.INTERACTIVE_QUEUE})
    room_id = str(room_id)
    transaction.on_commit(lambda: preview_turn.delay(room_id, turn_id))


def _viewer_name(user, viewer: str | None) -> str:
    """The name the comment shows the model: the sender's username unless they typed another. A name that is
    another console user's username is refused (nobody speaks as a colleague); the sender is stored and shown
    beside every comment either way."""
    from django.contrib.auth import get_user_model

    name = (viewer or "").strip()[:40] or user.get_username()
    if name.casefold() != user.get_username().casefold() and \
            get_user_model().objects.filter(username__iexact=name).exists():
        raise ValidationFailed("that viewer name belongs to another console user", errors=[
            {"path": "viewer", "message": f"{name!r} is another console user's username: pick another viewer name "
                                          "or leave it empty to comment under your own"}])
    return name


def preview_comment_post(*, user, room: PreviewRoom, text: str, viewer: str | None = None) -> str:
    """The user speaks as a viewer (``viewer``: the name shown, default their username): the comment is stored
    with its sender and a turn answering it is queued (on commit). Returns the turn id."""
    _require_driver(user, room)
    _require_open(room)
    text = (text or "").strip()
    viewer = _viewer_name(user, viewer)
    if not text:
        raise ValidationFailed("the comment is empty", errors=[{"path": "text", "message": "write something"}])
    if len(text) > MAX_VIEWER_COMMENT_CHARS:
        raise ValidationFailed("the comment is too long", errors=[
            {"path": "text", "message": f"at most {MAX_VIEWER_COMMENT_CHARS} characters"}])
    turn_id = uuid.uuid4().hex
    with transaction.atomic():
        preview_event_append(room_id=room.pk, type="viewer_comment", turn_id=turn_id, payload={
            "viewer": viewer, "viewer_id": f"user-{user.pk}", "text": text, "source": "viewer",
            "sent_by": user.get_username(), "minute": room.scenario_minute})
        _turn_enqueue(room.pk, turn_id)
    return turn_id


def preview_clock_step(*, user, room: PreviewRoom, minutes: float = 1) -> dict[str, Any]:
    """Advance the scenario clock: timeline events due are applied to the room state and recorded; the
    comments that became due are recorded and answered by turns (queued on commit). Returns
    ``{"minute", "events", "comments", "turn_ids"}``."""
    _require_driver(user, room)
    _require_open(room)
    try:
        minutes = float(minutes)
    except (TypeError, ValueError):
        minutes = 0.0
    if not 0 < minutes <= MAX_STEP_MINUTES:
        raise ValidationFailed("invalid step", errors=[
            {"path": "minutes", "message": f"between 0 and {MAX_STEP_MINUTES} minutes"}])
    if room.scenario_id is None:
        raise ValidationFailed("this preview room plays no scenario: there is no clock to step")
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update(of=("self",)).select_related("scenario").get(pk=room.pk)
        out = _clock_advance(locked, locked.scenario_minute + minutes)
    room.scenario_minute, room.room_state = locked.scenario_minute, locked.room_state
    return out


def _scenario_run_at(room: PreviewRoom):
    """The room's scenario as a :class:`streams.simulator.ScenarioRun` standing at the room's minute, on the
    stored room state (which turns may have changed)."""
    from streams.simulator import ScenarioRun

    return ScenarioRun.resumed(room.scenario.parsed(), room.seed, room.scenario_minute, room.room_state)


def _clock_advance(locked: PreviewRoom, target: float, *, run=None, enqueue: bool = True) -> dict[str, Any]:
    """Move a locked room's clock to ``target`` (capped at the scenario's end): apply and record the
    timeline events due, record the comments that became due and queue turns answering them (on commit;
    ``enqueue=False``: the caller runs them), record a ``clock`` event. Returns ``{"minute", "events",
    "comments", "turn_ids"}``."""
    run = run or _scenario_run_at(locked)
    start = locked.scenario_minute
    done = len(run.event_log)
    due = run.advance_to(max(target, run.minute))
    applied = run.event_log[done:]
    locked.room_state = run.snapshot()
    locked.scenario_minute = run.minute
    locked.save(update_fields=["room_state", "scenario_minute"])
    turn_ids = _clock_record(locked.pk, applied, due, enqueue=enqueue)
    preview_event_append(room_id=locked.pk, type="clock", payload={
        "from": start, "minute": run.minute, "events": len(applied), "comments": len(due),
        "finished": run.minute >= run.duration})
    return {"minute": run.minute, "events": [e.to_dict() for e in applied], "comments": len(due),
            "turn_ids": turn_ids}


def preview_version_switch(*, user, room: PreviewRoom, version) -> PreviewRoom:
    """Play another version of the same harness from the next turn on (a turn already running keeps its
    version). Recorded as a ``version_switched`` event."""
    _require_driver(user, room)
    _require_open(room)
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update(of=("self",)).select_related("harness_version__harness").get(pk=room.pk)
        old = locked.harness_version
        if version.harness_id != old.harness_id:
            raise ValidationFailed("switch to a version of the same harness", errors=[
                {"path": "version", "message": f"not a version of {old.harness.slug}"}])
        if version.pk != old.pk:
            locked.harness_version = version
            locked.save(update_fields=["harness_version"])
            preview_event_append(room_id=locked.pk, type="version_switched", payload={
                "by": user.get_username(), "from": _version_info(old), "to": _version_info(version)})
    room.harness_version = version
    return room


# --- who is in a room ------------------------------------------------------------------------------------------


def _room_scope(room: PreviewRoom) -> str:
    return f"preview:{room.pk}"


def preview_member_add(*, user, room: PreviewRoom, username: str):
    """The owner invites a console user who holds the preview role: they may then see the room, comment and drive
    its clock. Recorded on the audit timeline and in the room. Returns the member. ValidationFailed (path
    ``username``) for an unknown user, one without the preview role, the owner themselves or someone already in."""
    from django.contrib.auth import get_user_model

    _require_owner(user, room, "invite people")
    if room.is_run:
        raise ValidationFailed("nobody is invited into a scenario run: every preview user may already read it")
    username = (username or "").strip()
    problem = None
    member = get_user_model().objects.filter(username=username).first() if username else None
    if not username:
        problem = "type the username of the person to invite"
    elif member is None:
        problem = f"no console user is called {username!r}"
    elif member.pk == user.pk:
        problem = "you own this room: you are in it already"
    elif not member.is_active or not member.has_perm(USE_PREVIEW):
        problem = f"{username} does not hold a role that may use the preview room"
    if problem:
        raise ValidationFailed("nobody was invited", errors=[{"path": "username", "message": problem}])
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        if locked.members.filter(pk=member.pk).exists():
            raise ValidationFailed("nobody was invited", errors=[
                {"path": "username", "message": f"{username} is already in this room"}])
        locked.members.add(member)
        audit_record(actor=user, action="preview.member_added", scope=_room_scope(room), target=f"user:{username}",
                     to_state="member", data={"room": str(room.pk), "harness": room.harness_version.harness.slug,
                                              "version": room.harness_version.number})
        preview_event_append(room_id=room.pk, type="member_added", payload={"by": user.get_username(),
                                                                            "user": username})
    return member


def preview_member_remove(*, user, room: PreviewRoom, username: str):
    """The owner takes someone out of the room: from then on it is hidden from them (an open WebSocket of theirs is
    closed within ``streams.consumers.ACCESS_CHECK_S``). Recorded on the audit timeline and in the room. Returns the
    former member; ValidationFailed (path ``username``) for someone who is not a member."""
    _require_owner(user, room, "remove people")
    username = (username or "").strip()
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        member = locked.members.filter(username=username).first() if username else None
        if member is None:
            raise ValidationFailed("nobody was removed", errors=[
                {"path": "username", "message": f"{username or 'nobody'} is not invited into this room"}])
        locked.members.remove(member)
        audit_record(actor=user, action="preview.member_removed", scope=_room_scope(room), target=f"user:{username}",
                     from_state="member", data={"room": str(room.pk), "harness": room.harness_version.harness.slug,
                                                "version": room.harness_version.number})
        preview_event_append(room_id=room.pk, type="member_removed", payload={"by": user.get_username(),
                                                                              "user": username})
    return member


def preview_turn_run(*, room_id, turn_id: str, comments: list[dict[str, Any]] | None = None):
    """Run one turn of a preview room with the ONE engine (:func:`streams.engine.run_turn`): the room's
    current harness version, room state, previous turns as history, the scenario's faults at the current
    minute, the room's model endpoint. Every engine event is stored (next seq) and published on commit;
    what the turn's tools changed in the room state is saved. ``comments`` default to the turn's stored
    ``viewer_comment`` events. Returns the TurnResult, or None when the turn had already run or has no
    comments."""
    from streams.engine.client import OpenAIChatClient

    room = selectors.preview_room_get(room_id=room_id)
    if PreviewEvent.objects.filter(room_id=room.pk, turn_id=turn_id, type="turn_started").exists():
        return None  # delivered twice: the turn already ran
    if comments is None:
        comments = selectors.preview_turn_comments(room_id=room.pk, turn_id=turn_id)
    if not comments:
        return None
    version = room.harness_version
    faults = {}
    if room.scenario_id is not None:
        from streams.simulator import ScenarioRun

        faults = ScenarioRun(room.scenario.parsed(), room.seed).active_faults(room.scenario_minute)
    history = selectors.preview_history(room_id=room.pk, before_turn_id=turn_id)
    before = copy.deepcopy(room.room_state)
    work = copy.deepcopy(before)
    with transaction.atomic():
        # Claim the turn: two deliveries of one task (a redelivered message, a caller running it directly)
        # both passed the check above; the room's row lock lets exactly one of them store turn_started.
        PreviewRoom.objects.select_for_update().filter(pk=room.pk).values_list("pk", flat=True).get()
        if PreviewEvent.objects.filter(room_id=room.pk, turn_id=turn_id, type="turn_started").exists():
            return None
        preview_event_append(room_id=room.pk, type="turn_started", turn_id=turn_id, payload={
            "version": _version_info(version),
            "endpoint": {"name": room.endpoint.name, "model": room.endpoint.model},
            "minute": room.scenario_minute, "faults": {k: f.kind for k, f in faults.items()},
            "comments": len(comments), "history_messages": len(history),
            "room": before})  # the state the turn started from: with its events, the turn replays alone
    try:  # checked again where it is called (a row edited since the room opened); the key is read here
        config = room.endpoint.as_config()
    except OutboundRefused as exc:
        preview_event_append(room_id=room.pk, type="turn_failed", turn_id=turn_id, payload=turn_failed_payload(exc))
        return None

    # Every engine event is stored as emitted, in order, a few per transaction and published message
    # (streams.services.turns: the one implementation preview rooms and live sessions share).
    client = OpenAIChatClient(config)
    try:
        result = turn_run_recorded(
            append=lambda **kw: preview_event_append(room_id=room.pk, turn_id=turn_id, **kw), turn_id=turn_id,
            manifest=version.manifest, room=work, comments=comments, history=history, backend=client, faults=faults,
            tools=tool_runtime_for(room.scenario if room.scenario_id is not None else None))
    finally:
        client.close()
    changes = room_changes(before, work)
    if changes:
        with transaction.atomic():
            locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
            locked.room_state = room_changes_apply(locked.room_state, changes)
            locked.save(update_fields=["room_state"])
    return result
