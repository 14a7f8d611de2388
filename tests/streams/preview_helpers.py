"""Fixtures and helpers of the preview-room tests (imported by tests/streams/conftest.py)."""

from __future__ import annotations

import time

import pytest

from tests.streams.scripted_endpoint import hermes_calls, native_calls, reply

GOOD = "The HydraGlow serum is $24.9 right now, list price $34, and we have 180 in stock."
COUPON_REPLY = "Done! I've sent you the GLOW5 coupon, five dollars off when you spend thirty or more."


def price_script(ep, text: str = GOOD) -> None:
    """load_skill (Hermes text) → lookup_product 101 (native) → a reply the hooks accept."""
    ep.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
           native_calls(("lookup_product", {"link_id": 101})), reply(text))


def coupon_script(ep, viewer_id: str = "you") -> None:
    ep.add(hermes_calls(("load_skill", {"skill_id": "price_stock_qa"})),
           native_calls(("issue_coupon", {"coupon_code": "GLOW5", "viewer_id": viewer_id})), reply(COUPON_REPLY))


def event_types(room_id, turn_id: str | None = None) -> list[str]:
    from streams.models import PreviewEvent

    qs = PreviewEvent.objects.filter(room_id=room_id).order_by("seq")
    if turn_id is not None:
        qs = qs.filter(turn_id=turn_id)
    return list(qs.values_list("type", flat=True))


def wait_for(pred, timeout: float = 20.0, interval: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    return pred()


@pytest.fixture
def scripted_model(db, scripted_endpoint):
    """A ModelEndpoint row pointing at the scripted loopback endpoint."""
    from streams.models import ModelEndpoint

    return ModelEndpoint.objects.create(name="scripted", base_url=scripted_endpoint.base_url, model="scripted",
                                        kind="vllm", timeout_s=5.0, connect_timeout_s=1.0)


@pytest.fixture
def demo_scenarios(db):
    from streams.services import scenarios_seed_demo

    return {s.slug: s for s in scenarios_seed_demo()}
