"""Celery tasks of the streams app: take ids, call one service."""

from __future__ import annotations

from celery import shared_task

from streams import services
from streams.events import publish_flush

# A turn is bounded by the endpoint's own deadlines (timeout per request x a few model calls); these
# limits only catch a stuck worker. At most once (acks_late off): a turn redelivered after a crash would
# answer the same comments twice, and preview_turn_run skips a turn that already started anyway.
TURN_SOFT_TIME_LIMIT_S = 300
TURN_TIME_LIMIT_S = 330
TICK_TIME_LIMIT_S = 60  # a tick is a few queries and one scenario replay


@shared_task(name="streams.preview_turn", acks_late=False, soft_time_limit=TURN_SOFT_TIME_LIMIT_S,
             time_limit=TURN_TIME_LIMIT_S)
def preview_turn(room_id: str, turn_id: str) -> dict:
    try:
        result = services.preview_turn_run(room_id=room_id, turn_id=turn_id)
    finally:
        publish_flush(timeout=5)  # the turn's last events are out before the worker takes the next task
        # a playing clock waits for this turn: let it go on now (also after a failed turn)
        services.preview_play_nudge(room_id=room_id)
    if result is None:
        return {"turn_id": turn_id, "ran": False}
    return {"turn_id": turn_id, "ran": True, "reason": result.reason, "fallback": result.fallback}


# Duplicates are harmless (only the tick holding the room's current token acts), so a tick lost in a crash
# is the worse outcome: acknowledged late, redelivered.
@shared_task(name="streams.preview_clock_tick", acks_late=True, ignore_result=True, time_limit=TICK_TIME_LIMIT_S)
def preview_clock_tick(room_id: str, token: str) -> dict:
    try:
        return services.preview_clock_tick(room_id=room_id, token=token)
    finally:
        publish_flush(timeout=5)


@shared_task(name="streams.preview_play_sweep_stalled", ignore_result=True, time_limit=60)
def preview_play_sweep_stalled() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): send again the clock ticks that playing rooms lost with the broker."""
    return services.preview_play_sweep_stalled()


# live sessions, deployments and serving: their own task modules (imported here so Celery discovers them)

from streams.live_tasks import *  # noqa: E402,F401,F403
from streams.serving_tasks import *  # noqa: E402,F401,F403
from streams.replay_tasks import *  # noqa: E402,F401,F403
