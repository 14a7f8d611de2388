"""Writes to the catalog (live rooms) and the scenario library.

Each service is one transaction; scenario imports are recorded in the audit timeline inside it. Invalid
input raises :class:`console.errors.ValidationFailed` with ``[{"path", "message"}]`` errors (paths as in
the YAML: ``timeline[2].params.link_id``) and saves nothing.
"""

from __future__ import annotations

import copy
import json
import logging
import time
import uuid
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from streams import selectors
from streams.events import TRACE, EventBatcher, publish_on_commit
from streams.engine.outbound import OutboundRefused
from streams.models import Coupon, LiveRoom, ModelEndpoint, PreviewEvent, PreviewRoom, Product, Scenario
from streams.scenarios import (
    Room,
    ScenarioError,
    demo_scenario_paths,
    parse_room,
    scenario_from_yaml,
    scenario_hash,
)
from streams.scenarios import Scenario as ScenarioSpec

logger = logging.getLogger(__name__)

DEMO_ROOM_PATH = Path(__file__).resolve().parent.parent / "harness_editor" / "demo" / "room.yaml"
DEMO_ROOM_SLUG = "glow-gadget-demo"

# Importing scenarios is part of editing what the preview room plays: the campaign managers' permission.
IMPORT_SCENARIO = roles.EDIT_DRAFT


def _failed(message: str, exc: ScenarioError) -> ValidationFailed:
    return ValidationFailed(message, errors=[{"path": e.path, "message": e.message} for e in exc.errors])


def _money(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


# --- live rooms ---------------------------------------------------------------------------------------


def live_room_load(*, room: dict[str, Any] | Room, slug: str | None = None) -> LiveRoom:
    """Create a live room from a room dict (the bindings' shape), or replace the state of the one with the
    same slug (default: the dict's ``room_id``). Products and coupons are replaced as a whole; scheduled
    campaign events are kept."""
    if not isinstance(room, Room):
        try:
            room = parse_room(room)
        except ScenarioError as exc:
            raise _failed("the room is invalid", exc) from None
    slug = slug or room.room_id
    if not slug:
        raise ValidationFailed("a live room needs a slug", errors=[{"path": "room_id", "message": "field required"}])
    data = room.to_dict()
    campaign = data["campaign"]
    fields = {
        "title": room.title or slug,
        "currency": room.currency,
        "clock_minute": room.clock_minute,
        "phase": campaign["phase"],
        "flash_sale": campaign["flash_sale"],
        "low_stock_threshold": room.low_stock_threshold,
        "shipping": data["shipping"],
        "pinned": data["pinned"],
    }
    with transaction.atomic():
        live, _created = LiveRoom.objects.update_or_create(slug=slug, defaults=fields)
        live.products.all().delete()
        live.coupons.all().delete()
        Product.objects.bulk_create(
            Product(room=live, position=i, link_id=p.link_id, title=p.title, price=_money(p.price),
                    list_price=_money(p.list_price), stock=p.stock, attributes=p.attributes,
                    compliance_notes=p.compliance_notes)
            for i, p in enumerate(room.products)
        )
        Coupon.objects.bulk_create(
            Coupon(room=live, position=i, code=c.code, discount=_money(c.discount), min_spend=_money(c.min_spend),
                   expires_at_minute=c.expires_at_minute, remaining=c.remaining)
            for i, c in enumerate(room.coupons)
        )
    return live


def catalog_seed_demo(*, reset: bool = False) -> LiveRoom:
    """The demo live room (slug ``glow-gadget-demo``) from harness_editor/demo/room.yaml. Idempotent: an
    existing room is left as it is unless ``reset`` puts it back to the file's state."""
    existing = LiveRoom.objects.filter(slug=DEMO_ROOM_SLUG).first()
    if existing is not None and not reset:
        return existing
    import yaml

    data = yaml.safe_load(DEMO_ROOM_PATH.read_text(encoding="utf-8"))
    return live_room_load(room=data, slug=DEMO_ROOM_SLUG)


# --- scenarios ----------------------------------------------------------------------------------------


def _scenario_upsert(*, spec: ScenarioSpec, yaml_text: str, user) -> tuple[Scenario, str]:
    """Insert or update by slug; returns (record, "created" | "updated" | "unchanged")."""
    digest = scenario_hash(spec)
    fields = {"title": spec.title, "description": spec.description, "yaml_text": yaml_text,
              "content_hash": digest, "duration_minutes": spec.duration_minutes}
    record = Scenario.objects.select_for_update().filter(slug=spec.id).first()
    if record is None:
        record = Scenario.objects.create(slug=spec.id, created_by=user if getattr(user, "pk", None) else None,
                                         **fields)
        outcome, old_hash = "created", ""
    elif record.content_hash == digest and record.yaml_text == yaml_text:
        return record, "unchanged"
    else:
        old_hash = record.content_hash
        for name, value in fields.items():
            setattr(record, name, value)
        record.save()
        outcome = "updated"
    audit_record(actor=user, action=f"scenario.{outcome}", scope=f"scenario:{spec.id}", target=f"scenario:{spec.id}",
                 to_state=outcome, data={"content_hash": digest, "previous_hash": old_hash})
    return record, outcome


def scenario_import(*, yaml_text: str, user) -> Scenario:
    """Validate a scenario's YAML and store it under its ``id`` (a new record, or a new text for the
    existing one). Raises ValidationFailed with every error and its path; nothing is saved then."""
    if not user.has_perm(IMPORT_SCENARIO):
        raise NotAllowed("your role does not allow you to import scenarios")
    try:
        spec = scenario_from_yaml(yaml_text)
    except ScenarioError as exc:
        raise _failed("the scenario is invalid", exc) from None
    with transaction.atomic():
        record, _outcome = _scenario_upsert(spec=spec, yaml_text=yaml_text, user=user)
    return record


def scenarios_seed_demo() -> list[Scenario]:
    """Load streams/scenarios/*.yaml into the library; idempotent (unchanged files are not rewritten)."""
    records = []
    with transaction.atomic():
        for path in demo_scenario_paths():
            text = path.read_text(encoding="utf-8")
            try:
                spec = scenario_from_yaml(text)
            except ScenarioError as exc:
                raise _failed(f"demo scenario {path.name} is invalid", exc) from None
            records.append(_scenario_upsert(spec=spec, yaml_text=text, user=None)[0])
    return records


# --- model endpoints ----------------------------------------------------------------------------------

DEFAULT_ENDPOINT_NAME = "local"


def _check_endpoint(endpoint: ModelEndpoint) -> None:
    """A room or run may only be opened on an endpoint the outbound check lets through (located at
    ``endpoint``); it is checked again each time a turn calls it."""
    try:
        endpoint.check_usable()
    except OutboundRefused as exc:
        raise ValidationFailed(str(exc), errors=[
            {"path": "endpoint", "message": str(exc)}]) from None


def model_endpoint_ensure_default() -> ModelEndpoint:
    """The endpoint named ``local`` from the environment (HAT_LOCAL_MODEL_URL, HAT_LOCAL_MODEL_NAME), created
    or brought up to date; it is the default unless another endpoint already is. Idempotent."""
    fields = {"base_url": settings.HAT_LOCAL_MODEL_URL, "model": settings.HAT_LOCAL_MODEL_NAME,
              "kind": ModelEndpoint.Kind.LOCAL}
    with transaction.atomic():
        other_default = ModelEndpoint.objects.select_for_update().filter(is_default=True).exclude(
            name=DEFAULT_ENDPOINT_NAME).first()
        local, _created = ModelEndpoint.objects.update_or_create(
            name=DEFAULT_ENDPOINT_NAME, defaults={**fields, "is_default": other_default is None})
    return other_default or local


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
    trace = {"store": time.time()} if TRACE else None
    batch = list(events) or [(type, payload if payload is not None else {})]
    now = timezone.now()
    if connection.vendor == "postgresql":
        # one statement, one round trip (atomic on its own; a savepoint-free part of the caller's transaction
        # if there is one): take the room's row lock and the next seqs, insert the rows. A preview event is
        # cheap to lose in a crash, a flush to disk per token is not: this commit returns before the WAL is on
        # disk (the database stays consistent either way).
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH cfg AS (SELECT set_config('synchronous_commit', 'off', true)), "
                f"r AS (UPDATE {PreviewRoom._meta.db_table} SET last_seq = last_seq + %s FROM cfg WHERE id = %s "
                f"RETURNING last_seq) "
                f"INSERT INTO {PreviewEvent._meta.db_table} (room_id, seq, turn_id, type, payload, created_at) "
                f"SELECT %s, r.last_seq - %s + e.ord, %s, e.item->>0, e.item->1, %s "
                f"FROM r, jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(item, ord) RETURNING id, seq",
                [len(batch), PreviewRoom._meta.pk.get_db_prep_value(room_id, connection),
                 PreviewRoom._meta.pk.get_db_prep_value(room_id, connection), len(batch), turn_id, now,
                 json.dumps([[t, p] for t, p in batch], ensure_ascii=False)])
            rows = sorted(cursor.fetchall(), key=lambda r: r[1])
        if not rows:
            raise PreviewRoom.DoesNotExist(f"no preview room {room_id}")
        stored = []
        for (pk, seq), (kind, data) in zip(rows, batch):
            event = PreviewEvent(id=pk, room_id=room_id, seq=seq, turn_id=turn_id, type=kind, payload=data,
                                 created_at=now)
            event._state.adding, event._state.db = False, connection.alias
            stored.append(event)
        publish_on_commit(room_id, [e.as_message() for e in stored], trace)
        return stored[-1]
    with transaction.atomic():
        updated = PreviewRoom.objects.filter(pk=room_id).update(last_seq=F("last_seq") + len(batch))
        if not updated:
            raise PreviewRoom.DoesNotExist(f"no preview room {room_id}")
        last = PreviewRoom.objects.filter(pk=room_id).values_list("last_seq", flat=True).get()
        stored = PreviewEvent.objects.bulk_create(
            PreviewEvent(room_id=room_id, seq=last - len(batch) + i, turn_id=turn_id, type=kind, payload=data)
            for i, (kind, data) in enumerate(batch, 1))
        publish_on_commit(room_id, [e.as_message() for e in stored], trace)
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
    from streams.tasks import preview_turn

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


# --- play mode and scenario runs ----------------------------------------------------------------------------
# A playing clock is driven server-side by a chain of Celery ticks (streams.tasks.preview_clock_tick): each
# tick advances the clock by the real time elapsed since the last one times the speed, records what became
# due (turns queued as for a step) and queues the next tick. While a turn of the room is queued or running
# the clock stands still, so comments never pile up behind a slow model; the end of each turn nudges the
# clock (preview_play_nudge) instead of waiting for the next poll. Only the tick carrying the room's current
# ``tick_token`` acts, and it hands a new token to its successor: a duplicated, stale or superseded tick
# does nothing, so there is never more than one chain per room.
#
# A scenario run is a room (kind "run") that plays "as fast as turns finish" from the start and closes
# itself at the end with a summary; ``scenario_run_execute`` plays one in-process (the CLI, CI).

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
    """Close the room: the clock stops, nothing can be posted any more; the events stay as its transcript. A
    run closed before its end is marked failed (cancelled). Only the owner closes a room or cancels a run."""
    _require_owner(user, room, "close it")
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        if locked.status != PreviewRoom.Status.CLOSED:
            locked.status, locked.playing, locked.tick_token = PreviewRoom.Status.CLOSED, False, ""
            fields = ["status", "playing", "tick_token"]
            if locked.is_run:  # closed before its end: the run did not finish
                locked.run_status, locked.finished_at = PreviewRoom.RunStatus.FAILED, timezone.now()
                locked.error = f"closed by {user.get_username()} at minute {locked.scenario_minute:g}"
                locked.summary = selectors.scenario_run_summary(room_id=locked.pk)
                fields += ["run_status", "finished_at", "error", "summary"]
            locked.save(update_fields=fields)
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
    """The scenario is over and its last turn answered: stop playing; a run closes with its summary."""
    locked.playing, locked.tick_token, locked.clock_ticked_at = False, "", None
    fields = ["playing", "tick_token", "clock_ticked_at"]
    payload: dict[str, Any] = {"minute": locked.scenario_minute}
    if locked.is_run and locked.started_at is None:
        locked.started_at = now
        fields.append("started_at")
    if locked.is_run:
        locked.summary = selectors.scenario_run_summary(room_id=locked.pk)
        locked.run_status, locked.finished_at = PreviewRoom.RunStatus.FINISHED, now
        locked.status = PreviewRoom.Status.CLOSED
        fields += ["summary", "run_status", "finished_at", "status"]
        payload["summary"] = locked.summary
    locked.save(update_fields=fields)
    preview_event_append(room_id=locked.pk, type="scenario_finished", payload=payload)


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
        if locked.is_run and locked.run_status == PreviewRoom.RunStatus.QUEUED:
            locked.run_status, locked.started_at = PreviewRoom.RunStatus.RUNNING, now
            fields += ["run_status", "started_at"]
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
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().filter(pk=room_id).first()
        if locked is None or (token is not None and locked.tick_token != token):
            return
        locked.playing, locked.tick_token = False, ""
        fields = ["playing", "tick_token"]
        if locked.is_run:
            locked.run_status, locked.finished_at, locked.error = PreviewRoom.RunStatus.FAILED, timezone.now(), message[:2000]
            locked.status = PreviewRoom.Status.CLOSED
            locked.summary = selectors.scenario_run_summary(room_id=locked.pk)
            fields += ["run_status", "finished_at", "error", "status", "summary"]
        locked.save(update_fields=fields)
        preview_event_append(room_id=locked.pk, type="play_failed", payload={"message": message[:1000],
                                                                             "minute": locked.scenario_minute})


def scenario_run_sweep_stalled(*, now=None) -> list[str]:
    """Fail the scenario runs no worker advances any more: a running run's clock ticks every few seconds (every
    ``WAIT_TICK_S`` while a turn runs, and a turn is cut at ``LOST_TURN_S``), so a clock silent for longer than
    that plus ``HEARTBEAT_STALE_S`` means the worker died and its tick was lost. Returns their ids. Run by the
    periodic task ``streams.scenario_runs_sweep_stalled``."""
    from console.heartbeat import stale_before

    now = now or timezone.now()
    limit = stale_before(now, LOST_TURN_S + settings.HEARTBEAT_STALE_S)
    stalled = list(PreviewRoom.objects.filter(kind=PreviewRoom.Kind.RUN, run_status=PreviewRoom.RunStatus.RUNNING,
                                              playing=True, clock_ticked_at__lt=limit)
                   .values_list("pk", "clock_ticked_at"))
    for room_id, last in stalled:
        _play_fail(room_id=room_id, token=None, message=(
            f"WorkerLost: no worker advanced this run since {last:%Y-%m-%d %H:%M:%S} UTC "
            f"({int((now - last).total_seconds())} s): the worker was stopped or killed. Start the run again."))
    return [str(pk) for pk, _ in stalled]


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


def scenario_run_start(*, user, version, scenario: Scenario, endpoint: ModelEndpoint | None = None,
                       seed: int | None = None, play: bool = True) -> PreviewRoom:
    """Queue a scenario run: a room of kind "run" that plays ``scenario`` on ``version`` against ``endpoint``
    as fast as the model answers, through the Celery workers, and closes itself at the end with a summary.
    ``play=False`` only creates it (for :func:`scenario_run_execute`)."""
    if scenario is None:
        raise ValidationFailed("a run plays a scenario", errors=[{"path": "scenario", "message": "pick one"}])
    fields = {"kind": PreviewRoom.Kind.RUN, "run_status": PreviewRoom.RunStatus.QUEUED, "play_speed": ASAP}
    if play:
        fields.update(playing=True, clock_ticked_at=timezone.now(), tick_token=uuid.uuid4().hex)
    with transaction.atomic():
        room, _turn_ids = _preview_create(user=user, version=version, scenario=scenario, endpoint=endpoint,
                                          seed=seed, enqueue=play, **fields)
        if play:
            _tick_enqueue(room.pk, room.tick_token)  # after the first turns: the tick waits for them
    return room


def scenario_run_execute(*, room_id, on_turn=None) -> PreviewRoom:
    """Play a queued run to the end in this process (the ``run_scenario`` command): the same clock moves as
    the ticks make at full speed, each turn run here through :func:`preview_turn_run` as soon as its
    comments are due. ``on_turn(turn_id, result)`` is called after each turn. A turn that raises is recorded
    (``turn_failed``) and the run goes on; any other error marks the run failed and is raised again."""
    now = timezone.now()
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room_id)
        if not locked.is_run or locked.run_status != PreviewRoom.RunStatus.QUEUED:
            raise InvalidTransition("only a queued scenario run can be executed")
        locked.run_status, locked.started_at = PreviewRoom.RunStatus.RUNNING, now
        locked.save(update_fields=["run_status", "started_at"])
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
                run = _scenario_run_at(locked)
                next_at = run.next_at
                if locked.scenario_minute >= run.duration and next_at is None:
                    _play_finish(locked, timezone.now())
                    break
                pending = _clock_advance(locked, run.duration if next_at is None else next_at, run=run,
                                         enqueue=False)["turn_ids"]
    except Exception as exc:
        _play_fail(room_id=room_id, token=None, message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        from streams.events import publish_flush

        publish_flush(timeout=5)
    return selectors.preview_room_get(room_id=room_id)


def _changes(before: Any, after: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """The leaf changes from ``before`` to ``after`` (dict keys and list indexes as paths)."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in after:
            if key not in before:
                out.append((path + (key,), after[key]))
            else:
                out.extend(_changes(before[key], after[key], path + (key,)))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for i, (b, a) in enumerate(zip(before, after)):
            out.extend(_changes(b, a, path + (i,)))
        return out
    return [] if before == after else [(path, after)]


def _apply_changes(state: dict[str, Any], changes: list[tuple[tuple, Any]]) -> dict[str, Any]:
    state = copy.deepcopy(state)
    for path, value in changes:
        if not path:
            return copy.deepcopy(value)
        target = state
        try:
            for key in path[:-1]:
                target = target[key]
            if isinstance(target, list) and path[-1] >= len(target):
                continue
            target[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # the clock removed what the turn changed: the clock wins
    return state


def preview_turn_run(*, room_id, turn_id: str, comments: list[dict[str, Any]] | None = None):
    """Run one turn of a preview room with the ONE engine (:func:`streams.engine.run_turn`): the room's
    current harness version, room state, previous turns as history, the scenario's faults at the current
    minute, the room's model endpoint. Every engine event is stored (next seq) and published on commit;
    what the turn's tools changed in the room state is saved. ``comments`` default to the turn's stored
    ``viewer_comment`` events. Returns the TurnResult, or None when the turn had already run or has no
    comments."""
    from streams.engine.client import OpenAIChatClient
    from streams.engine.turn import run_turn

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
        preview_event_append(room_id=room.pk, type="turn_failed", turn_id=turn_id,
                             payload={"message": f"{type(exc).__name__}: {exc}"[:1000]})
        return None

    # Every engine event is stored as emitted, in order, but a few per transaction and published message
    # (streams.events.EventBatcher): what a viewer waits for goes at once (the request to the model, the first
    # token of each model call, the turn's end), the rest within a short window. A caller's open transaction
    # (tests) hides rows from other threads: then nothing is stored in the background.
    batcher = EventBatcher(lambda batch: preview_event_append(room_id=room.pk, turn_id=turn_id, events=batch),
                           background=not connection.in_atomic_block)
    streaming = False  # a token of the current model call was already sent

    def emit(event) -> None:
        nonlocal streaming
        first_token = event.type == "token" and not streaming
        streaming = (streaming or first_token) and event.type != "model_request"
        batcher.add(event.type, event.model_dump(mode="json"),
                    urgent=first_token or event.type in ("model_request", "timings"))
        if event.type == "timings":  # the engine's last event
            batcher.close()

    client = OpenAIChatClient(config)
    try:
        result = run_turn(manifest=version.manifest, room=work, comments=comments, history=history,
                          backend=client, emit=emit, faults=faults, turn_id=turn_id)
    except Exception as exc:
        try:
            batcher.close()  # what the engine emitted before the failure is stored before turn_failed
        except Exception:
            logger.warning("storing the held events of failed turn %s failed", turn_id, exc_info=True)
        preview_event_append(room_id=room.pk, type="turn_failed", turn_id=turn_id,
                             payload={"message": f"{type(exc).__name__}: {exc}"[:1000]})
        raise
    finally:
        client.close()
    changes = _changes(before, work)
    if changes:
        with transaction.atomic():
            locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
            locked.room_state = _apply_changes(locked.room_state, changes)
            locked.save(update_fields=["room_state"])
    return result
