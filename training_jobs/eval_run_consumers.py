"""An evaluation run's live progress over a WebSocket: ``ws/evals/<uuid>/``.

Only translates: the run's row out. On connect, whenever the worker says it stored progress (the run's group,
``eval-<id>``: :func:`training_jobs.eval_run_services.poke_eval_watchers` after each progress write), and every
``POLL_S`` seconds as a safety net (all the in-memory layer of the embedded default can offer across processes),
it sends the run's state when it changed. The run page (``static/training_jobs/live.js``) then asks htmx to redraw.
Close codes: 4401 not signed in, 4403 no permission, 4404 no such run.

Frames: ``{"type": "progress", "job": {id, status, stage, done, total, percent, error, active}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from channels.db import database_sync_to_async

from console import roles
from console.parsing import SafeJsonWebsocketConsumer  # a bad frame: an error frame, not 1011
from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_run_services import eval_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
POLL_S = 2.0


def run_frame(run_id: Any) -> dict[str, Any] | None:
    """The run's state as a frame (None: no such run)."""
    run = EvalRun.objects.filter(pk=run_id).first()
    if run is None:
        return None
    return {"type": "progress",
            "job": {"id": str(run.pk), "status": run.status, "stage": run.stage, "done": run.progress_done,
                    "total": run.progress_total, "percent": run.percent, "error": run.error,
                    "active": run.is_active}}


class EvalRunConsumer(SafeJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.poller = None
        self.group = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(roles.VIEW_EVAL_RUNS):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        if not await database_sync_to_async(EvalRun.objects.filter(pk=self.run_id).exists)():
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.lock = asyncio.Lock()
        self.last_state: dict[str, Any] | None = None
        self.group = eval_group(self.run_id)
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

    async def eval_progress(self, message: dict[str, Any]) -> None:  # EVAL_PROGRESS_MESSAGE_TYPE "eval.progress"
        await self.push()

    async def push(self) -> None:
        async with self.lock:
            frame = await database_sync_to_async(run_frame)(self.run_id)
            if frame is None or frame["job"] == self.last_state:
                return
            self.last_state = frame["job"]
            await self.send_json(frame)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        pass  # the page only listens; cancel and resume are forms (services with their own checks)
