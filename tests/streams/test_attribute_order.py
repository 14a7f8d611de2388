"""A product's attributes keep their written order through PostgreSQL (jsonb sorts object keys its own way): the demo
model reads a tool result's attributes in the order it was trained on and loops on lookup_product otherwise."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from streams.bindings import ordered_attribute_keys, product_info

TINY = Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / "tiny_room.yaml"


def test_ordered_attribute_keys_puts_the_written_order_first_and_keeps_the_rest():
    attrs = {"size": "30 ml", "category": "skincare", "skin_type": "all"}
    assert ordered_attribute_keys(attrs, ["category", "skin_type", "size"]) == ["category", "skin_type", "size"]
    assert ordered_attribute_keys(attrs, ["category", "gone"]) == ["category", "size", "skin_type"]
    assert ordered_attribute_keys(attrs, None) == list(attrs)
    assert ordered_attribute_keys(attrs, "category") == list(attrs)  # not a list: the dict's own order


def _through_jsonb(value):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb", [json.dumps(value)])
        raw = cursor.fetchone()[0]
    return json.loads(raw) if isinstance(raw, str) else raw


@pytest.mark.django_db
def test_a_stored_room_gives_the_attributes_in_their_written_order():
    from streams import services
    from streams.selectors import room_state
    from streams.services.catalog import DEMO_ROOM_PATH

    import yaml

    written = yaml.safe_load(DEMO_ROOM_PATH.read_text(encoding="utf-8"))
    written = written.get("room", written)
    first = written["products"][0]
    room = services.catalog_seed_demo(reset=True)
    stored = _through_jsonb(room_state(room))  # as a session's or a preview room's room_state comes back
    product = next(p for p in stored["products"] if p["link_id"] == first["link_id"])
    assert list(product["attributes"]) != list(first["attributes"])  # jsonb did reorder them...
    assert list(product_info(stored, first["link_id"])["attributes"]) == list(first["attributes"])  # ...not here


@pytest.mark.django_db
def test_the_demo_model_answers_a_price_from_a_room_stored_in_postgresql(vllm_server):
    from harness_editor.schemas import manifest_from_yaml
    from streams import services
    from streams.engine.client import ModelEndpoint, OpenAIChatClient
    from streams.engine.turn import run_turn
    from streams.selectors import room_state

    manifest = manifest_from_yaml(TINY.read_text(encoding="utf-8"))
    stored = _through_jsonb(room_state(services.catalog_seed_demo(reset=True)))
    client = OpenAIChatClient(ModelEndpoint(base_url=vllm_server.openai_base_url, model=vllm_server.model,
                                            kind="vllm", timeout_s=120))
    try:
        result = run_turn(manifest=manifest, room=copy.deepcopy(stored), backend=client,
                          comments=[{"viewer": "ann", "text": "price of #102?"}], sampling={"temperature": 0},
                          deadline_s=120)
    finally:
        client.close()
    assert not result.fallback, (result.reason, result.reply)
    assert "$29" in result.reply
