"""The live session runner: one long-lived loop per session (the Celery task ``streams.live_session_run`` on the
interactive queue), not a cold task per turn.

It takes the session's lease and renews it from a thread of its own (:data:`RUNNER_BEAT_S`), so a long turn never
lets the lease go stale; it loses the lease only when another runner took over (it then stops at once, after at
most the turn in flight). Between turns it asks for the next batch of comments (:func:`live_batch_claim`) and waits
for a nudge from the ingest (:func:`streams.services.live_sessions.live_runner_wait`: Redis, with a timeout) or the
next look at the database, whichever comes first: a lost nudge costs at most :data:`POLL_S`. The session's viewer
feed (a replay playing comments in, :func:`streams.live.feeds.feed_for`) runs in a thread beside the loop.

Once running it needs neither the broker nor the channel layer: events are stored in the database (publishing
them is best effort) and the wait falls back to a plain timeout, so a Redis blip only delays what viewers see.
The loop ends when the session ends (a turn in flight finishes first), when the lease is lost, or on :meth:`stop`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import close_old_connections, connection

from streams.services import live_turns as T

logger = logging.getLogger(__name__)

RUNNER_BEAT_S = T.RUNNER_BEAT_S
POLL_S = 0.5  # between turns, the queue is read at least this often (a nudge wakes the runner sooner)
ERROR_BACKOFF_S = 2.0  # after a failed turn or a database error, before trying again...
MAX_BACKOFF_S = 30.0  # ...doubling while turns keep failing
FEED_JOIN_S = 5.0
PASS_ON_PAUSE_S = 0.5  # a shutting-down worker waits this long before passing a runner task on (its consumer stops)


_active: set[SessionRunner] = set()
_active_lock = threading.Lock()
_shutting_down = threading.Event()


def runners_stop_all() -> int:
    """Ask every runner of this process to stop after its turn in flight (the worker is shutting down: each hands
    its session to a runner elsewhere), and pass on any runner task this worker still takes meanwhile (a hand-over
    may reach the worker that is stopping: it must not start a runner that would hold its shutdown). Returns how
    many were asked."""
    _shutting_down.set()
    with _active_lock:
        runners = list(_active)
    for r in runners:
        r.stop()
    return len(runners)


def release_pooled_connection() -> None:
    """Give this thread's database connection back to the process's pool (PostgreSQL's default): a runner idle
    between turns and its beat thread between beats must not hold the pool (max HAT_DB_POOL_MAX a process), or a
    worker with several sessions starves its own turns and preview turns. Without a pool the connection is kept
    (reconnecting every poll would cost more than it saves)."""
    if connection.connection is not None and getattr(connection, "pool", None) is not None \
            and not connection.in_atomic_block:
        connection.close()


class SessionRunner:
    """Runs one live session until it ends (see the module docstring). ``task_id``: the Celery task it runs in
    (a lease queued for that task is taken as this runner's)."""

    def __init__(self, session_id: Any, *, task_id: str | None = None, poll_s: float = POLL_S,
                 handover: bool = True):
        self.session_id = str(session_id)
        self.task_id = task_id
        self.runner = T.runner_name(task_id)
        self.poll_s = poll_s
        self.handover = handover  # stopped while the session is live: send it another runner
        self.backends = T.Backends()
        self._stop = threading.Event()
        self.lost = threading.Event()  # the lease went to another runner (or the session ended)
        self.turns = 0

    def stop(self) -> None:
        self._stop.set()

    # -- the loop --

    def run(self) -> dict[str, Any]:
        if _shutting_down.is_set() and self.handover:
            return self._pass_on()
        claim = T.live_runner_claim(session_id=self.session_id, runner=self.runner, task_id=self.task_id)
        if claim is None:
            return {"session": self.session_id, "ran": False, "runner": self.runner,
                    "reason": "the session ended or another runner holds it"}
        with _active_lock:
            _active.add(self)
        beat = threading.Thread(target=self._beat, name=f"live-beat-{self.session_id[:8]}", daemon=True)
        beat.start()
        feed = self._feed_start()
        reason = "stopped"
        try:
            reason = self._loop()
        finally:
            with _active_lock:
                _active.discard(self)
            self._stop.set()
            beat.join(RUNNER_BEAT_S + 5)
            self._feed_stop(feed)
            self.backends.close()
            if not self.lost.is_set() or reason == "session ended":  # an ended session's lease is still ours
                self._hand_over(reason)
        return {"session": self.session_id, "ran": True, "runner": self.runner, "turns": self.turns,
                "resumed": claim["resumed"], "reason": reason}

    def _loop(self) -> str:
        from streams.services.live_sessions import live_runner_wait

        failures = 0
        while not self._stop.is_set():
            if self.lost.is_set():  # the beat found the lease gone: taken over, or the session ended
                return "session ended" if self._ended() else "lease lost"
            try:
                turn_id, wait_s = T.live_batch_claim(session_id=self.session_id, runner=self.runner)
            except T.LeaseLost:
                return "session ended" if self._ended() else "lease lost"
            except Exception:
                logger.exception("live session %s: reading the queue failed", self.session_id)
                close_old_connections()
                self._stop.wait(ERROR_BACKOFF_S)
                continue
            if turn_id is None:
                release_pooled_connection()
                live_runner_wait(self.session_id, min(wait_s if wait_s is not None else self.poll_s, self.poll_s))
                continue
            try:
                result = T.live_turn_run(session_id=self.session_id, runner=self.runner, turn_id=turn_id,
                                         backends=self.backends)
                self.turns += result is not None  # None: no turn started (muted meanwhile, nothing to answer)
                failures = 0
            except Exception:
                # e.g. the deployment has nothing in force (a fault event, the comments queued again): wait longer
                # each time rather than storing a fault every few seconds
                logger.exception("live session %s: turn %s failed", self.session_id, turn_id)
                close_old_connections()
                failures += 1
                self._stop.wait(min(ERROR_BACKOFF_S * 2 ** (failures - 1), MAX_BACKOFF_S))
        return "stopped"

    def _hand_over(self, reason: str) -> None:
        """Give the lease back; a session still live (this runner was stopped: its worker is shutting down) is sent
        to another runner at once rather than at the sweep's next look."""
        try:
            T.live_runner_release(session_id=self.session_id, runner=self.runner)
            if reason == "stopped" and self.handover:
                from streams.services.live_controls import live_runner_ensure

                live_runner_ensure(self.session_id)
        except Exception:  # the sweep finds the lease stale instead
            logger.warning("live session %s: handing the session over failed", self.session_id, exc_info=True)

    def _pass_on(self) -> dict[str, Any]:
        """This worker is shutting down but still took a runner task: send the session another one (after a pause,
        so that the worker's consumer has stopped and another worker takes it) instead of running."""
        from streams.services.live_controls import live_runner_ensure

        time.sleep(PASS_ON_PAUSE_S)
        try:
            live_runner_ensure(self.session_id, replacing=self.task_id)
        except Exception:  # the sweep finds the queued mark stale instead
            logger.warning("live session %s: passing the runner on failed", self.session_id, exc_info=True)
        return {"session": self.session_id, "ran": False, "runner": self.runner,
                "reason": "this worker is shutting down: the session went to another runner"}

    def _ended(self) -> bool:
        from streams.models import LiveSession

        return not LiveSession.objects.filter(pk=self.session_id, status=LiveSession.Status.LIVE).exists()

    # -- the lease --

    def _beat(self) -> None:
        try:
            while not self._stop.wait(RUNNER_BEAT_S):
                try:
                    if not T.live_runner_beat(session_id=self.session_id, runner=self.runner):
                        self.lost.set()
                        return
                except Exception:  # a database blip: the next beat tries again (the lease lasts RUNNER_STALE_S)
                    logger.warning("live session %s: renewing the lease failed", self.session_id, exc_info=True)
                    close_old_connections()
                release_pooled_connection()
        finally:
            connection.close()  # this thread's own connection

    # -- the viewer feed --

    def _feed_start(self):
        """The session's feed (a replay) in a thread beside the loop; None for pushed feeds (webhook, API)."""
        from streams.live.feeds import PassiveFeed, feed_for
        from streams.models import LiveSession

        try:
            feed = feed_for(LiveSession.objects.get(pk=self.session_id))
        except Exception:
            logger.exception("live session %s: its feed could not start", self.session_id)
            return None
        if isinstance(feed, PassiveFeed):
            return None  # comments are pushed: nothing to run

        def play() -> None:
            try:
                feed.run(self._stop.is_set)
            except Exception:
                logger.exception("live session %s: its feed failed", self.session_id)
            finally:
                connection.close()

        thread = threading.Thread(target=play, name=f"live-feed-{self.session_id[:8]}", daemon=True)
        thread.start()
        return thread

    def _feed_stop(self, thread) -> None:
        if thread is not None:
            thread.join(FEED_JOIN_S)


def live_session_run(session_id: Any, *, task_id: str | None = None) -> dict[str, Any]:
    """Run the session's runner here until the session ends (the task's body)."""
    started = time.monotonic()
    out = SessionRunner(session_id, task_id=task_id).run()
    out["seconds"] = round(time.monotonic() - started, 1)
    return out
