"""The catalog and the scenario library in the database: the demo room seeded idempotently, room_state in
the bindings' shape, scenario imports validated with paths and all-or-nothing."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.errors import NotAllowed, ValidationFailed
from console.models import AuditEvent
from streams import selectors, services
from streams.bindings import BINDINGS
from streams.models import CampaignEvent, Coupon, LiveRoom, Product, Scenario
from streams.scenarios import demo_scenario_paths, load_scenario, scenario_hash
from streams.simulator import ScenarioRun

ROOT = Path(__file__).resolve().parents[2]
DEMO_ROOM = yaml.safe_load((ROOT / "harness_editor" / "demo" / "room.yaml").read_text(encoding="utf-8"))
FLASH_TEXT = (ROOT / "streams" / "scenarios" / "evening-flash-sale.yaml").read_text(encoding="utf-8")

pytestmark = pytest.mark.django_db


def expected_demo_room() -> dict:
    """The file's room as the bindings get it: each product's attribute order written beside its attributes."""
    room = copy.deepcopy(DEMO_ROOM)
    room["room_id"] = services.DEMO_ROOM_SLUG
    for p in room["products"]:
        p["attribute_order"] = list(p.get("attributes") or {})
    return room


# --- the demo live room -------------------------------------------------------------------------------


def test_seed_creates_the_demo_room_once():
    room = services.catalog_seed_demo()
    again = services.catalog_seed_demo()
    assert room.pk == again.pk
    assert LiveRoom.objects.count() == 1
    assert Product.objects.count() == len(DEMO_ROOM["products"])
    assert Coupon.objects.count() == len(DEMO_ROOM["coupons"])


def test_seed_leaves_an_edited_room_alone_unless_reset():
    room = services.catalog_seed_demo()
    Product.objects.filter(room=room, link_id=101).update(stock=1)
    services.catalog_seed_demo()
    assert Product.objects.get(room=room, link_id=101).stock == 1
    services.catalog_seed_demo(reset=True)
    assert Product.objects.get(room=room, link_id=101).stock == 180
    assert Product.objects.count() == len(DEMO_ROOM["products"])


def test_room_state_is_the_demo_room_dict():
    room = services.catalog_seed_demo()
    state = selectors.room_state(LiveRoom.objects.get(pk=room.pk))
    assert state == expected_demo_room()
    assert list(state) == list(expected_demo_room())  # same key order as the file


def test_room_state_takes_two_queries_or_none_when_prefetched():
    services.catalog_seed_demo()
    room = LiveRoom.objects.get(slug=services.DEMO_ROOM_SLUG)
    with CaptureQueriesContext(connection) as ctx:
        selectors.room_state(room)
    assert len(ctx.captured_queries) == 2
    with CaptureQueriesContext(connection) as ctx:
        prefetched = selectors.live_room_get(slug=services.DEMO_ROOM_SLUG)
        with CaptureQueriesContext(connection) as inner:
            selectors.room_state(prefetched)
    assert len(inner.captured_queries) == 0 and len(ctx.captured_queries) == 3


def test_bindings_work_on_the_room_state():
    state = selectors.room_state(services.catalog_seed_demo())
    info = BINDINGS["catalog.product_info"].func(state, link_id=101)
    assert info["price"] == 24.9 and info["flash_sale"] == {"price": 19.9, "ends_at_minute": 55}
    assert BINDINGS["catalog.stock"].func(state, link_id=102)["low_stock"] is True
    assert BINDINGS["coupons.issue"].func(state, coupon_code="EARLYBIRD", viewer_id="v")["code"] == "expired"
    assert BINDINGS["coupons.issue"].func(state, coupon_code="GLOW5", viewer_id="v")["remaining"] == 199
    assert BINDINGS["policy.shipping"].func(state, region="Hawaii")["free_over"] == 60.0
    assert BINDINGS["campaign.state"].func(state)["phase"] == "flash_sale"
    # the dict is a copy: mutating it does not touch the database
    assert Coupon.objects.get(code="GLOW5").remaining == 200


def test_a_simulated_room_round_trips_through_the_database():
    run = ScenarioRun(load_scenario(FLASH_TEXT))
    run.advance_to(13)
    BINDINGS["coupons.issue"].func(run.room, coupon_code="GLOW5", viewer_id="v1")
    room = run.snapshot()
    room.pop("issued_coupons")  # a viewer's coupons are session state, not catalog
    live = services.live_room_load(room=room)
    assert live.slug == "evening-flash-sale"
    assert selectors.room_state(live) == room
    assert Coupon.objects.get(room=live, code="GLOW5").remaining == 199


def test_live_room_load_rejects_an_invalid_room_with_paths_and_saves_nothing():
    bad = copy.deepcopy(DEMO_ROOM)
    bad["products"][0]["price"] = "cheap"
    with pytest.raises(ValidationFailed) as info:
        services.live_room_load(room=bad)
    assert [e["path"] for e in info.value.errors] == ["products[0].price"]
    bad = copy.deepcopy(DEMO_ROOM)
    bad["products"][1]["link_id"] = 101
    with pytest.raises(ValidationFailed) as info:
        services.live_room_load(room=bad)
    assert info.value.errors[0]["path"] == "products[1].link_id"
    assert not LiveRoom.objects.exists()


def test_campaign_events_belong_to_a_room():
    room = services.catalog_seed_demo()
    CampaignEvent.objects.create(room=room, at_minute=5, kind=CampaignEvent.Kind.FLASH_SALE_START,
                                 params={"link_id": 101, "price": 19.9})
    services.catalog_seed_demo(reset=True)  # reloading the catalog keeps the schedule
    assert list(room.events.values_list("kind", flat=True)) == ["flash_sale_start"]


# --- scenarios ----------------------------------------------------------------------------------------


def test_scenarios_seed_demo_is_idempotent():
    records = services.scenarios_seed_demo()
    assert {r.slug for r in records} == {p.stem for p in demo_scenario_paths()}
    stamps = {r.slug: r.updated_at for r in Scenario.objects.all()}
    audits = AuditEvent.objects.filter(action__startswith="scenario.").count()
    assert audits == len(records)
    services.scenarios_seed_demo()
    assert Scenario.objects.count() == len(records)
    assert {r.slug: r.updated_at for r in Scenario.objects.all()} == stamps
    assert AuditEvent.objects.filter(action__startswith="scenario.").count() == audits


def test_scenario_list_and_parsed_record():
    services.scenarios_seed_demo()
    listed = list(selectors.scenario_list())
    assert [s.title for s in listed] == sorted(s.title for s in listed)
    record = selectors.scenario_get(slug="evening-flash-sale")
    spec = record.parsed()
    assert spec.id == "evening-flash-sale" and record.content_hash == scenario_hash(spec)
    assert record.duration_minutes == spec.duration_minutes


def test_import_stores_text_hash_author_and_audit(manager):
    record = services.scenario_import(yaml_text=FLASH_TEXT, user=manager)
    assert record.slug == "evening-flash-sale" and record.yaml_text == FLASH_TEXT
    assert record.created_by == manager and record.title == "Evening flash sale"
    event = AuditEvent.objects.get(action="scenario.created")
    assert event.actor == manager and event.scope == "scenario:evening-flash-sale"
    # same text again: nothing changes; new content under the same id: an update
    services.scenario_import(yaml_text=FLASH_TEXT, user=manager)
    assert AuditEvent.objects.filter(action__startswith="scenario.").count() == 1
    changed = FLASH_TEXT.replace("seed: 7\n", "seed: 8\n")
    updated = services.scenario_import(yaml_text=changed, user=manager)
    assert updated.pk == record.pk and updated.content_hash != record.content_hash
    assert AuditEvent.objects.get(action="scenario.updated").data["previous_hash"] == record.content_hash


def test_import_errors_carry_paths_and_nothing_is_saved(manager):
    bad = FLASH_TEXT.replace("params: {link_id: 101, price: 19.9, ends_at_minute: 20}",
                             "params: {link_id: 909, price: 19.9, ends_at_minute: 20}")
    bad = bad.replace("duration_minutes: 30", "duration_minutes: 30\ncolour: red")
    with pytest.raises(ValidationFailed) as info:
        services.scenario_import(yaml_text=bad, user=manager)
    assert info.value.status_code == 400
    assert info.value.errors == [{"path": "colour", "message": "unknown field 'colour'"}]  # structure first
    bad = bad.replace("\ncolour: red", "")
    with pytest.raises(ValidationFailed) as info:
        services.scenario_import(yaml_text=bad, user=manager)
    assert [e["path"] for e in info.value.errors] == ["timeline[1].params.link_id"]
    assert "909" in info.value.errors[0]["message"]
    with pytest.raises(ValidationFailed) as info:
        services.scenario_import(yaml_text="id: [", user=manager)
    assert info.value.errors[0]["path"] == ""
    assert not Scenario.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="scenario.").exists()


def test_a_failed_update_keeps_the_stored_scenario(manager):
    record = services.scenario_import(yaml_text=FLASH_TEXT, user=manager)
    with pytest.raises(ValidationFailed):
        services.scenario_import(yaml_text=FLASH_TEXT.replace("duration_minutes: 30", "duration_minutes: 10"),
                                 user=manager)
    record.refresh_from_db()
    assert record.yaml_text == FLASH_TEXT


@pytest.mark.parametrize("who", ["outsider", "operator", "reviewer"])
def test_only_campaign_managers_import(request, who):
    user = request.getfixturevalue(who)
    with pytest.raises(NotAllowed):
        services.scenario_import(yaml_text=FLASH_TEXT, user=user)
    assert not Scenario.objects.exists()


def test_every_model_is_in_the_admin():
    from django.contrib import admin

    for model in (LiveRoom, Product, Coupon, CampaignEvent, Scenario):
        assert admin.site.is_registered(model)
