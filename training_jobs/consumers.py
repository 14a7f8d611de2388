"""A training job's live progress over a WebSocket: ``ws/training/<uuid>/?after=<t>``.

Only translates: the job's row out. On connect (and whenever the job's worker says it wrote progress, through
the job's group; and every ``POLL_S`` seconds as a safety net, which is all the in-memory layer of the embedded
default can offer across processes) it sends a frame with the job's state and the progress points newer than the
last one sent (by their time ``t``: steps repeat after a resume from an earlier checkpoint, times do not).
Close codes: 4401 not signed in, 4403 no permission, 4404 no such job.

Frames: ``{"type": "progress", "job": {status, stage, step, total, percent, error, log_tail}, "points": [...]}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from console import roles
from console.parsing import SafeJsonWebsocketConsumer  # a bad frame: an error frame, not 1011
from training_jobs.models import TrainingJob

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
POLL_S = 2.0
PROGRESS_MESSAGE_TYPE = "job.progress"


def training_group(job_id: Any) -> str:
    return f"training-{job_id}"


def job_frame(job_id: Any, after: float) -> dict[str, Any] | None:
    """The frame for a client that has the points up to time ``after`` (None: no such job)."""
    job = TrainingJob.objects.filter(pk=job_id).first()
    if job is None:
        return None
    points = [p for p in (job.metrics or []) if float(p.get("t", 0)) > after]
    return {"type": "progress", "points": points,
            "job": {"id": str(job.pk), "status": job.status, "stage": job.stage, "step": job.progress_done,
                    "total": job.progress_total, "percent": job.percent, "error": job.error,
                    "log_tail": job.log_tail[-4000:], "active": job.is_active}}


class TrainingJobConsumer(SafeJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.poller = None
        self.group = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(roles.VIEW_TRAINING):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.job_id = self.scope["url_route"]["kwargs"]["job_id"]
        if not await database_sync_to_async(TrainingJob.objects.filter(pk=self.job_id).exists)():
            await self.close(code=CLOSE_NOT_FOUND)
            return
        try:
            self.after = float((parse_qs(self.scope.get("query_string", b"").decode()).get("after") or ["0"])[0])
        except ValueError:
            self.after = 0.0
        self.lock = asyncio.Lock()
        self.last_state: dict[str, Any] | None = None
        self.group = training_group(self.job_id)
        await self.channel_layer.group_add(self.group, self.channel_name)  # before the first read: nothing lost
        await self.accept()
        await self.push()
        self.poller = asyncio.create_task(self._poll())

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if self.poller is not None:
            self.poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.poller

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            await self.push()

    async def job_progress(self, message: dict[str, Any]) -> None:
        await self.push()

    async def push(self) -> None:
        async with self.lock:
            frame = await database_sync_to_async(job_frame)(self.job_id, self.after)
            if frame is None or (not frame["points"] and frame["job"] == self.last_state):
                return
            if frame["points"]:
                self.after = max(float(p.get("t", 0)) for p in frame["points"])
            self.last_state = frame["job"]
            await self.send_json(frame)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        pass  # the page only listens; cancel and resume are forms (services with their own checks)
