"""Fixtures for the turn-engine tests live in scripted_endpoint.py (the loopback endpoint and demo data)."""

import pytest

from tests.streams.scripted_endpoint import (  # noqa: F401
    _engine_demo_manifest,
    _engine_demo_room,
    engine_client,
    engine_manifest,
    engine_room,
    scripted_endpoint,
)
from tests.streams.preview_helpers import demo_scenarios, scripted_model  # noqa: E402, F401



@pytest.fixture
def enqueued(monkeypatch):
    """The turns queued on commit (streams.tasks.preview_turn.delay), recorded instead of sent: the test runs
    them itself. Outside a test transaction a Celery worker left running by an earlier test would otherwise
    race the test for them."""
    from streams import tasks

    calls: list[tuple] = []
    monkeypatch.setattr(tasks.preview_turn, "delay", lambda *args: calls.append(args))
    return calls
