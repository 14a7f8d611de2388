"""Writes to the catalog (live rooms) and the scenario library.

Each service is one transaction; scenario imports are recorded in the audit timeline inside it. Invalid
input raises :class:`console.errors.ValidationFailed` with ``[{"path", "message"}]`` errors (paths as in
the YAML: ``timeline[2].params.link_id``) and saves nothing.
"""

from __future__ import annotations

import copy
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from streams import selectors
from streams.events import publish_on_commit
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


def preview_event_append(*, room_id, type: str, payload: dict[str, Any], turn_id: str = "") -> PreviewEvent:
    """Store one event with the room's next seq and publish it when the transaction commits."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # a preview event is cheap to lose in a crash, a flush to disk per token is not: this commit
            # returns before the WAL is on disk (the database stays consistent either way)
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        with connection.cursor() as cursor:  # one round trip: take the row lock and the next seq
            cursor.execute(f"UPDATE {PreviewRoom._meta.db_table} SET last_seq = last_seq + 1 WHERE id = %s "
                           "RETURNING last_seq", [PreviewRoom._meta.pk.get_db_prep_value(room_id, connection)])
            row = cursor.fetchone()
        if row is None:
            raise PreviewRoom.DoesNotExist(f"no preview room {room_id}")
        seq = row[0]
        event = PreviewEvent.objects.create(room_id=room_id, seq=seq, turn_id=turn_id, type=type, payload=payload)
        publish_on_commit(room_id, event.as_message())
    return event


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


def _clock_record(room_id, applied: list, due: list) -> list[str]:
    """Record applied timeline events and the comments that became due; queue one turn per
    ``COMMENTS_PER_TURN`` comments (on commit). Returns the turn ids."""
    for ev in applied:
        preview_event_append(room_id=room_id, type="timeline_event", payload=ev.to_dict())
    turn_ids = []
    for i in range(0, len(due), COMMENTS_PER_TURN):
        turn_id = uuid.uuid4().hex
        for c in due[i:i + COMMENTS_PER_TURN]:
            preview_event_append(room_id=room_id, type="viewer_comment", turn_id=turn_id, payload={
                "viewer": c.viewer_name, "viewer_id": c.viewer_id, "text": c.text, "source": "scenario",
                "persona": c.persona_id, "minute": c.minute})
        _turn_enqueue(room_id, turn_id)
        turn_ids.append(turn_id)
    return turn_ids


def preview_open(*, user, version, scenario: Scenario | None = None, endpoint: ModelEndpoint | None = None,
                 seed: int | None = None) -> PreviewRoom:
    """Open a preview room on a harness version (drafts too), playing ``scenario`` (else the demo live room)
    against ``endpoint`` (else the default one). ``seed`` defaults to the scenario's own seed."""
    _require_preview(user)
    endpoint = endpoint or ModelEndpoint.objects.filter(is_default=True).first() or model_endpoint_ensure_default()
    if seed is None:
        seed = scenario.parsed().seed if scenario is not None else 0
    room_dict, minute, applied, due = _initial_room(scenario, int(seed))
    with transaction.atomic():
        room = PreviewRoom.objects.create(created_by=user, harness_version=version, scenario=scenario,
                                          endpoint=endpoint, room_state=room_dict, scenario_minute=minute,
                                          seed=int(seed))
        preview_event_append(room_id=room.pk, type="room_opened", payload={
            "by": user.get_username(), "version": _version_info(version),
            "scenario": scenario.slug if scenario else None, "endpoint": {"name": endpoint.name,
                                                                        "model": endpoint.model},
            "minute": minute, "seed": int(seed)})
        _clock_record(room.pk, applied, due)
    room.refresh_from_db(fields=["last_seq"])
    return room


def _turn_enqueue(room_id, turn_id: str) -> None:
    from streams.tasks import preview_turn

    room_id = str(room_id)
    transaction.on_commit(lambda: preview_turn.delay(room_id, turn_id))


def preview_comment_post(*, user, room: PreviewRoom, text: str, viewer: str = "you") -> str:
    """The user speaks as a viewer: the comment is stored and a turn answering it is queued (on commit).
    Returns the turn id."""
    _require_preview(user)
    _require_open(room)
    text = (text or "").strip()
    viewer = (viewer or "you").strip()[:40] or "you"
    if not text:
        raise ValidationFailed("the comment is empty", errors=[{"path": "text", "message": "write something"}])
    if len(text) > MAX_VIEWER_COMMENT_CHARS:
        raise ValidationFailed("the comment is too long", errors=[
            {"path": "text", "message": f"at most {MAX_VIEWER_COMMENT_CHARS} characters"}])
    turn_id = uuid.uuid4().hex
    with transaction.atomic():
        preview_event_append(room_id=room.pk, type="viewer_comment", turn_id=turn_id, payload={
            "viewer": viewer, "viewer_id": f"user-{user.pk}", "text": text, "source": "viewer",
            "minute": room.scenario_minute})
        _turn_enqueue(room.pk, turn_id)
    return turn_id


def preview_clock_step(*, user, room: PreviewRoom, minutes: float = 1) -> dict[str, Any]:
    """Advance the scenario clock: timeline events due are applied to the room state and recorded; the
    comments that became due are recorded and answered by turns (queued on commit). Returns
    ``{"minute", "events", "comments", "turn_ids"}``."""
    _require_preview(user)
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
    from streams.simulator import ScenarioRun

    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update(of=("self",)).select_related("scenario").get(pk=room.pk)
        start = locked.scenario_minute
        run = ScenarioRun(locked.scenario.parsed(), locked.seed)
        run.advance_to(start)  # deterministic replay up to now, then continue on the stored room state
        live = run.room
        live.clear()
        live.update(copy.deepcopy(locked.room_state))
        done = len(run.event_log)
        due = run.advance_to(start + minutes)
        applied = run.event_log[done:]
        locked.room_state = run.snapshot()
        locked.scenario_minute = run.minute
        locked.save(update_fields=["room_state", "scenario_minute"])
        turn_ids = _clock_record(locked.pk, applied, due)
        preview_event_append(room_id=locked.pk, type="clock", payload={
            "from": start, "minute": run.minute, "events": len(applied), "comments": len(due),
            "finished": run.minute >= run.duration})
    room.scenario_minute, room.room_state = locked.scenario_minute, locked.room_state
    return {"minute": run.minute, "events": [e.to_dict() for e in applied], "comments": len(due),
            "turn_ids": turn_ids}


def _preview_set_paused(*, user, room: PreviewRoom, paused: bool) -> PreviewRoom:
    _require_preview(user)
    _require_open(room)
    with transaction.atomic():
        locked = PreviewRoom.objects.select_for_update().get(pk=room.pk)
        if locked.paused != paused:
            locked.paused = paused
            locked.save(update_fields=["paused"])
            preview_event_append(room_id=locked.pk, type="paused" if paused else "resumed",
                                 payload={"by": user.get_username(), "minute": locked.scenario_minute})
    room.paused = paused
    return room


def preview_pause(*, user, room: PreviewRoom) -> PreviewRoom:
    """Pause the clock (recorded). Stepping stays possible; comments are still answered."""
    return _preview_set_paused(user=user, room=room, paused=True)


def preview_resume(*, user, room: PreviewRoom) -> PreviewRoom:
    return _preview_set_paused(user=user, room=room, paused=False)


def preview_version_switch(*, user, room: PreviewRoom, version) -> PreviewRoom:
    """Play another version of the same harness from the next turn on (a turn already running keeps its
    version). Recorded as a ``version_switched`` event."""
    _require_preview(user)
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
    preview_event_append(room_id=room.pk, type="turn_started", turn_id=turn_id, payload={
        "version": _version_info(version), "endpoint": {"name": room.endpoint.name, "model": room.endpoint.model},
        "minute": room.scenario_minute, "faults": {k: f.kind for k, f in faults.items()},
        "comments": len(comments), "history_messages": len(history)})

    def emit(event) -> None:
        preview_event_append(room_id=room.pk, type=event.type, turn_id=turn_id, payload=event.model_dump(mode="json"))

    client = OpenAIChatClient(room.endpoint.as_config())
    try:
        result = run_turn(manifest=version.manifest, room=work, comments=comments, history=history,
                          backend=client, emit=emit, faults=faults, turn_id=turn_id)
    except Exception as exc:
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
