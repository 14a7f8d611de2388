"""Fixtures for the turn-engine tests live in scripted_endpoint.py (the loopback endpoint and demo data)."""

from tests.streams.scripted_endpoint import (  # noqa: F401
    _engine_demo_manifest,
    _engine_demo_room,
    engine_client,
    engine_manifest,
    engine_room,
    scripted_endpoint,
)
from tests.streams.preview_helpers import demo_scenarios, scripted_model  # noqa: E402, F401
