"""Viewer feeds: where a live session's comments come from, beside the REST and WebSocket ingest.

A :class:`Feed` runs in a thread beside the session's runner loop (the runner starts it and asks it to stop through
``should_stop``); every comment it brings goes through :func:`streams.services.live_sessions.live_comments_ingest`,
so it is stored, deduped, rate-limited, filtered and prioritised like any other.

- :class:`ReplayFeed` plays a stored scenario's viewer comments (:mod:`streams.simulator`: a scenario minute is a
  real minute) or a recorded session's comments (at the gaps they came in), at ``feed_config["speed"]`` times real
  speed, timed from the session's start. Each comment has a stable id (``replay:<scenario>:<seed>:<n>``,
  ``replay:<session>:<comment id>``): a replay resumed by another runner skips what is stored and sends at once what
  fell due while no runner played it (the queue's max age decides whether that is still answered).
- :class:`WebhookFeed` (and :class:`ApiFeed`) are passive: the platform pushes comments to the webhook (or the
  ingest API); ``run`` only waits to be stopped.

The feed uses the calling thread's database connection; the runner's thread closes it when the feed returns.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from console.errors import InvalidTransition
from streams.live.schemas import MAX_BATCH, ReplayConfig

logger = logging.getLogger(__name__)

STEP_S = 0.25  # how often a waiting feed looks at should_stop


class Feed(ABC):
    name = ""

    @abstractmethod
    def run(self, should_stop: Callable[[], bool]) -> None:
        """Bring comments in until there are no more or ``should_stop()`` is true."""


class PassiveFeed(Feed):
    """Comments are pushed to the console; nothing to do but wait to be stopped."""

    def __init__(self, *, sleep: Callable[[float], None] = time.sleep):
        self._sleep = sleep

    def run(self, should_stop: Callable[[], bool]) -> None:
        while not should_stop():
            self._sleep(STEP_S)


class WebhookFeed(PassiveFeed):
    name = "webhook"


class ApiFeed(PassiveFeed):
    name = "api"


@dataclass(frozen=True)
class ReplayItem:
    offset_s: float  # seconds after the start at real speed
    external_id: str
    viewer_id: str
    viewer: str
    text: str

    def as_comment(self) -> dict[str, str]:
        return {"external_id": self.external_id, "viewer_id": self.viewer_id, "viewer": self.viewer,
                "text": self.text}


def scenario_items(scenario, *, seed: int | None = None, slug: str = "") -> list[ReplayItem]:
    """A scenario's viewer comments from its first minute to its end, in order, one scenario minute a minute."""
    from streams.simulator import ScenarioRun

    run = ScenarioRun(scenario, seed)
    start = run.minute
    comments = run.advance_to(run.duration)
    tag = f"replay:{slug or scenario.id}:{run.seed}"
    return [ReplayItem(offset_s=(c.minute - start) * 60.0, external_id=f"{tag}:{n}", viewer_id=c.viewer_id,
                       viewer=c.viewer_name, text=c.text)
            for n, c in enumerate(comments)]


def recorded_items(session_id) -> list[ReplayItem]:
    """A recorded session's comments at the gaps they came in (every comment it stored, whatever became of it:
    the replaying session's handling decides again)."""
    from streams.models import LiveComment

    rows = list(LiveComment.objects.filter(session_id=session_id).order_by("received_at", "id")
                .values_list("id", "viewer_id", "viewer", "text", "received_at"))
    if not rows:
        return []
    first = rows[0][4]
    return [ReplayItem(offset_s=(at - first).total_seconds(), external_id=f"replay:{session_id}:{pk}",
                       viewer_id=viewer_id, viewer=viewer, text=text)
            for pk, viewer_id, viewer, text, at in rows]


class ReplayFeed(Feed):
    name = "replay"

    def __init__(self, session, items: Sequence[ReplayItem], *, speed: float = 1.0, started_at: float | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
        self.session = session
        self.items = sorted(items, key=lambda i: i.offset_s)
        self.speed = float(speed)
        self.started_at = session.started_at.timestamp() if started_at is None else started_at
        self._clock, self._sleep = clock, sleep
        self.sent = 0  # comments this feed handed to the ingest (duplicates of a resumed replay not counted)

    @classmethod
    def for_session(cls, session, **kwargs) -> ReplayFeed:
        from streams.models import Scenario

        config = ReplayConfig.model_validate(session.feed_config or {})
        if config.scenario:
            scenario = Scenario.objects.get(slug=config.scenario)
            items = scenario_items(scenario.parsed(), seed=config.seed, slug=scenario.slug)
        else:
            items = recorded_items(config.session)
        return cls(session, items, speed=config.speed, **kwargs)

    def due_at(self, item: ReplayItem) -> float:
        return self.started_at + item.offset_s / self.speed

    def pending(self) -> list[ReplayItem]:
        """The items not stored yet (a resumed replay goes on where the last runner left it)."""
        from streams.models import LiveComment

        stored = set(LiveComment.objects.filter(session_id=self.session.pk, external_id__startswith="replay:")
                     .values_list("external_id", flat=True))
        return [i for i in self.items if i.external_id not in stored]

    def run(self, should_stop: Callable[[], bool]) -> None:
        from streams.services.live_sessions import live_comments_ingest

        pending = self.pending()
        i = 0
        while i < len(pending) and not should_stop():
            wait = self.due_at(pending[i]) - self._clock()
            if wait > 0:
                self._sleep(min(wait, STEP_S))
                continue
            now = self._clock()
            batch = [pending[i]]
            while (i + len(batch) < len(pending) and len(batch) < MAX_BATCH
                   and self.due_at(pending[i + len(batch)]) <= now):
                batch.append(pending[i + len(batch)])
            try:
                results = live_comments_ingest(session=self.session, comments=[b.as_comment() for b in batch],
                                               source="replay")
            except InvalidTransition:  # the session ended
                return
            self.sent += sum(1 for r in results if r["status"] != "duplicate")
            i += len(batch)


def feed_for(session) -> Feed:
    """The feed of a session (``LiveSession.feed``)."""
    if session.feed == "replay":
        return ReplayFeed.for_session(session)
    if session.feed == "webhook":
        return WebhookFeed()
    return ApiFeed()
