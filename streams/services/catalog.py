"""Writes to the catalog (live rooms), the scenario library and the model endpoints.

Each service is one transaction; scenario imports are recorded in the audit timeline inside it. Invalid
input raises :class:`console.errors.ValidationFailed` with ``[{"path", "message"}]`` errors (paths as in
the YAML: ``timeline[2].params.link_id``) and saves nothing.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from console import roles
from console.errors import NotAllowed, ValidationFailed
from console.services import audit_record
from streams.engine.outbound import OutboundRefused
from streams.models import Coupon, LiveRoom, ModelEndpoint, Product, Scenario
from streams.scenarios import (
    Room,
    ScenarioError,
    demo_scenario_paths,
    parse_room,
    scenario_from_yaml,
    scenario_hash,
)
from streams.scenarios import Scenario as ScenarioSpec

DEMO_ROOM_PATH = Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / "room.yaml"
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
                    attribute_order=p.attribute_order, compliance_notes=p.compliance_notes)
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
# make run's second model server: SmolLM2-135M with the glow-gadget demo adapter (issue 14), never the default
FLAGSHIP_ENDPOINT_NAME = "flagship"


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


def model_endpoint_ensure_flagship() -> ModelEndpoint:
    """The endpoint named ``flagship`` from the environment (HAT_FLAGSHIP_MODEL_URL, HAT_FLAGSHIP_MODEL_NAME: make
    run's SmolLM2 server with the glow-gadget adapter), created or brought up to date; never the default (the
    default stays the tiny model, which answers in a second). Idempotent."""
    endpoint, _ = ModelEndpoint.objects.update_or_create(name=FLAGSHIP_ENDPOINT_NAME, defaults={
        "base_url": settings.HAT_FLAGSHIP_MODEL_URL, "model": settings.HAT_FLAGSHIP_MODEL_NAME,
        "kind": ModelEndpoint.Kind.LOCAL})
    return endpoint
