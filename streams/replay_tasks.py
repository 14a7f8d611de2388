"""Celery tasks of session replays: take ids, call one service (imported by streams.tasks, which Celery
discovers)."""

from __future__ import annotations

from celery import shared_task

# A replay plays a whole recorded session through the turn engine against a model server: the gpu queue (batch
# work, never in front of preview or live turns), at most once (a redelivery finds the replay claimed), resumable.
REPLAY_SOFT_TIME_LIMIT_S = 24 * 3600


@shared_task(name="streams.session_replay", bind=True, acks_late=False, soft_time_limit=REPLAY_SOFT_TIME_LIMIT_S)
def session_replay(self, replay_id: str) -> dict:
    from streams.services.session_replays import session_replay_execute

    replay = session_replay_execute(replay_id=replay_id, task_id=self.request.id)
    return {"replay_id": str(replay.pk), "status": replay.status}


__all__ = ["session_replay"]
