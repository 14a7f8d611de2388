"""Where the recorded transcript puts a version change (found by the end-to-end walk): the runner claims a turn's
comments (``turn_queued``) before it resolves the deployment, and stores ``version_changed`` just before that turn's
``turn_started``; the turn that first ran on the new version comes after the marker, not before it."""

from __future__ import annotations

import pytest

from streams.live_page_selectors import live_transcript
from streams.services.live_events import live_event_append
from tests.streams.deployment_helpers import deploy_world, deployed  # noqa: F401  (fixtures)
from tests.streams.live_page_helpers import (
    GOOD,
    live_session_for,
    play_turn,
    token_events,
    turn_end_events,
    turn_start_events,
)

pytestmark = pytest.mark.django_db


def test_the_first_turn_on_a_new_version_follows_the_version_change(deployed, operator):
    session = live_session_for(deployed["deployment"], operator)
    first = play_turn(session)
    v2 = {"slug": "tiny-room", "number": 2, "id": 0}
    live_event_append(session_id=session.pk, turn_id="second", type="turn_queued",
                      payload={"comment_ids": [], "queued_behind": 0})  # claimed on v1's watch...
    live_event_append(session_id=session.pk, type="version_changed", payload={  # ...started on v2
        "from": {"slug": "tiny-room", "number": 1}, "to": v2, "label": "production"})
    live_event_append(session_id=session.pk, turn_id="second", events=turn_start_events(session, version=v2)
                      + token_events(GOOD) + turn_end_events(GOOD))
    order = [i["turn"]["turn_id"] if i["kind"] == "turn" else i["type"] for i in live_transcript(
        session_id=session.pk) if i["kind"] == "turn" or i["type"] == "version_changed"]
    assert order == [first, "version_changed", "second"]
