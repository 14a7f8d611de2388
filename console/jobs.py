"""One lifecycle for every long job: dataset builds, training jobs, scenario runs, evaluation runs, ...

A job kind is a concrete model that subclasses :class:`Job` (the common columns: status, progress, cancel,
task, heartbeat, times) and says in a few class attributes and methods what differs (its audit name, its task
and queue, whether it resumes, what to clean up). Every kind goes through the same service functions here:

- :func:`job_enqueue` sends the kind's task on commit under a task id stored on the row (the revoke fallback
  needs it);
- :func:`job_claim` is the worker's atomic queued → running (``None`` when the job is not claimable: a
  redelivered task, a job cancelled meanwhile or claimed elsewhere); :func:`job_run` wraps claim, heartbeat
  (:class:`console.heartbeat.Heartbeat`) and finish around the kind's work;
- :class:`JobReporter` writes progress and reads the cancel flag, each at most every so often;
- :func:`job_finish` ends a job (succeeded / failed / cancelled), audited;
- :func:`job_cancel` is the one cancel semantic: a queued job is cancelled at once; a running one becomes
  ``cancelling`` and its worker stops cooperatively at its next check; one still running ``JOB_CANCEL_GRACE_S``
  after the request has its task revoked with SIGTERM by the sweep, which then ends it cancelled once its
  heartbeat stops;
- :func:`job_resume` queues a cancelled or failed job again (kinds with ``job_resumable``);
- :func:`jobs_sweep_stalled` is the one periodic sweep over every job model (the task
  ``console.jobs_sweep_stalled``): overdue cancels are revoked, running jobs whose heartbeat is older than the
  kind's :meth:`Job.stale_after_s` end failed ("WorkerLost: ...") or, when they were being cancelled, cancelled.

Every concrete subclass of :class:`Job` is swept (:func:`job_models`): a new kind plugs in by subclassing, nothing
to register. Permissions stay with each kind's services (who may cancel whose work differs per kind).
"""

from __future__ import annotations

import importlib
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.apps import apps
from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from console.errors import InvalidTransition
from console.heartbeat import Heartbeat, stale_before
from console.services import audit_record

logger = logging.getLogger(__name__)

ERROR_MAX_CHARS = 4000


class Job(models.Model):
    """The columns and states every job kind shares (abstract: each kind is its own table)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        CANCELLING = "cancelling", "Cancelling"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.CANCELLING)
    IN_WORKER = (Status.RUNNING, Status.CANCELLING)  # a worker holds it (it beats)
    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)
    RESUMABLE = (Status.CANCELLED, Status.FAILED)

    # --- what each kind declares (class attributes; override in the concrete model) ------------------------
    job_kind: ClassVar[str] = "job"  # audit actions "<job_kind>.<event>", scope "<job_kind>:<pk>"
    job_noun: ClassVar[str] = "job"  # in messages: "this build has succeeded: ..."
    job_task: ClassVar[str] = ""  # dotted path of the Celery task that runs it, called with (str(pk),)
    job_queue: ClassVar[str] = ""  # the queue of that task; "" = CELERY_TASK_DEFAULT_QUEUE
    job_resumable: ClassVar[bool] = False  # cancelled / failed → queued again (job_resume)
    job_progress_every_s: ClassVar[float] = 0.5  # JobReporter: progress written at most this often
    job_cancel_check_every_s: ClassVar[float] = 0.25  # ... and the cancel flag read at most this often

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    stage = models.CharField(max_length=40, blank=True, help_text="what a running job is doing now")
    progress_done = models.PositiveBigIntegerField(default=0)
    progress_total = models.PositiveBigIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True, help_text="the Celery task of the latest run (revoked "
                                                                     "when a cancel is not honoured in time)")
    revoked_at = models.DateTimeField(null=True, blank=True)
    worker_host = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True, max_length=ERROR_MAX_CHARS,
                             help_text="why it failed: exception type and message")
    resumes = models.PositiveIntegerField(default=0, help_text="times the job was resumed")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True,
                                        help_text="last sign of life of the worker running it (console.heartbeat)")

    class Meta:
        abstract = True

    # --- reading ------------------------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def can_resume(self) -> bool:
        return self.job_resumable and self.status in self.RESUMABLE

    @property
    def percent(self) -> int:
        if self.status == self.Status.SUCCEEDED:
            return 100
        if not self.progress_total:
            return 0
        return min(100, int(100 * self.progress_done / self.progress_total))

    # --- what a kind may override (methods) ---------------------------------------------------------------

    def audit_scope(self) -> str:
        return f"{self.job_kind}:{self.pk}"

    def audit_target(self) -> str:
        return f"{self.job_kind}:{getattr(self, 'name', '') or self.pk}"

    @classmethod
    def stale_after_s(cls) -> float:
        """A running job whose heartbeat is older than this is taken for dead by the sweep."""
        return float(settings.HEARTBEAT_STALE_S)

    @classmethod
    def stalled_filter(cls) -> Q:
        """Narrows which running jobs the sweep may take for dead (default: all); e.g. not one paused on
        purpose."""
        return Q()

    @classmethod
    def job_lock(cls, pk: Any) -> Job:
        """The row, locked for update, inside the caller's transaction. A kind whose related rows are also
        locked by its workers overrides this to lock them first, always in the same order (no deadlock)."""
        return cls.objects.select_for_update().get(pk=pk)

    def on_finish(self, from_state: str) -> None:
        """Called on the locked row as it ends (any path: its worker, a cancel of a queued job, the sweep),
        inside the transaction, before it is saved: set more fields, update related rows."""

    def finish_audit_data(self, status: str) -> dict[str, Any]:
        """Extra data for the audit row of its end (e.g. a build's row counts)."""
        return {}

    def on_stalled(self) -> None:
        """The sweep found this job's worker dead: clean up what it left behind (before it is ended)."""

    def on_revoked(self, waited_s: int) -> None:
        """Its task was just revoked: the job did not stop within ``waited_s`` of the cancel."""

    def stalled_message(self, last: datetime, now: datetime) -> str:
        """The error of a job the sweep fails (its worker stopped beating at ``last``)."""
        return (f"WorkerLost: the worker running this {self.job_noun} stopped answering (on "
                f"{self.worker_host or 'an unknown host'}; last heartbeat {last:%Y-%m-%d %H:%M:%S} UTC, "
                f"{int((now - last).total_seconds())} s before the check): it was killed, ran out of memory or lost "
                f"the database.")


# --- the service functions ----------------------------------------------------------------------------------


def error_text(exc: BaseException) -> str:
    """How a failure is stored: exception type and message (a ValidationFailed with its located errors)."""
    from console.errors import ValidationFailed

    if isinstance(exc, ValidationFailed):
        detail = "; ".join(f"{e['path']}: {e['message']}" for e in exc.errors) or exc.message
        return f"{type(exc).__name__}: {detail}"
    return f"{type(exc).__name__}: {exc}"


def _task(job: Job):
    module, _, name = type(job).job_task.rpartition(".")
    return getattr(importlib.import_module(module), name)


def job_enqueue(job: Job, *, queue: str | None = None) -> str:
    """Give ``job`` a new task id (stored, with ``revoked_at`` cleared) and send its kind's task with it when the
    current transaction commits, on ``queue`` (default: the kind's ``job_queue``). Returns the task id."""
    if not type(job).job_task:
        raise TypeError(f"{type(job).__name__} declares no job_task")
    job.task_id, job.revoked_at = str(uuid.uuid4()), None
    type(job).objects.filter(pk=job.pk).update(task_id=job.task_id, revoked_at=None)
    task, args, task_id = _task(job), (str(job.pk),), job.task_id
    queue = queue or type(job).job_queue or settings.CELERY_TASK_DEFAULT_QUEUE
    transaction.on_commit(lambda: task.apply_async(args=args, queue=queue, task_id=task_id))
    return task_id


def job_claim(model: type[Job], pk: Any, *, stage: str = "starting", task_id: str | None = None) -> Job | None:
    """queued → running for this worker, atomically (stamps ``worker_host``, ``started_at`` the first time,
    ``heartbeat_at``). ``None`` when the job is not claimable: not queued (cancelled meanwhile, claimed by another
    worker, a redelivered task), or ``task_id`` given and not the job's current one (a message of an earlier
    run)."""
    with transaction.atomic():
        locked = model.job_lock(pk)
        if locked.status != Job.Status.QUEUED or (task_id and locked.task_id and task_id != locked.task_id):
            return None
        now = timezone.now()
        locked.status, locked.stage, locked.worker_host = Job.Status.RUNNING, stage[:40], socket.gethostname()[:200]
        locked.started_at, locked.heartbeat_at = locked.started_at or now, now
        locked.save(update_fields=["status", "stage", "worker_host", "started_at", "heartbeat_at"])
    return locked


def job_finish(job: Job, *, status: str, error: str = "", actor=None, audit_data: dict | None = None,
               **fields: Any) -> Job:
    """End ``job`` as ``status`` (succeeded / failed / cancelled) with ``error`` and more ``fields``, audited as
    ``<job_kind>.<status>`` (with ``audit_data``, default the kind's :meth:`Job.finish_audit_data`); the kind's
    :meth:`Job.on_finish` runs in the same transaction. Returns the row."""
    if status not in Job.FINISHED:
        raise ValueError(f"a job finishes succeeded, failed or cancelled, not {status!r}")
    with transaction.atomic():
        locked = type(job).job_lock(job.pk)
        from_state = locked.status
        locked.status, locked.error, locked.finished_at, locked.stage = status, error[:ERROR_MAX_CHARS], \
            timezone.now(), ""
        for key, value in fields.items():
            setattr(locked, key, value)
        locked.on_finish(from_state)
        locked.save()
        audit_record(actor=actor, action=f"{locked.job_kind}.{status}", scope=locked.audit_scope(),
                     target=locked.audit_target(), from_state=from_state, to_state=status, comment=error[:500],
                     data=locked.finish_audit_data(status) if audit_data is None else audit_data)
    return locked


def job_cancel(job: Job, *, user) -> Job:
    """The one cancel: a queued job is cancelled at once; a running one becomes ``cancelling`` (its worker stops
    at its next check; after ``JOB_CANCEL_GRACE_S`` the sweep revokes its task). Idempotent while cancelling.
    InvalidTransition (409) for a finished job. Audited as ``<job_kind>.cancel``. The caller checks who may."""
    with transaction.atomic():
        locked = type(job).job_lock(job.pk)
        from_state = locked.status
        now = timezone.now()
        if locked.status == Job.Status.QUEUED:
            locked.status, locked.finished_at, locked.stage = Job.Status.CANCELLED, now, ""
        elif locked.status in Job.IN_WORKER:
            locked.status = Job.Status.CANCELLING
        else:
            noun = locked.job_noun
            raise InvalidTransition(f"this {noun} has {locked.status}: only a queued or running {noun} can be "
                                    "cancelled")
        locked.cancel_requested = True
        locked.cancel_requested_at = locked.cancel_requested_at or now
        if locked.status == Job.Status.CANCELLED:
            locked.on_finish(from_state)
        locked.save()
        if from_state != locked.status:
            audit_record(actor=user, action=f"{locked.job_kind}.cancel", scope=locked.audit_scope(),
                         target=locked.audit_target(), from_state=from_state, to_state=locked.status)
    return locked


def job_resume(job: Job, *, user, queue: str | None = None) -> Job:
    """Queue a cancelled or failed job again (kinds with ``job_resumable``): its task is sent on commit under a
    new task id; ``resumes`` counts up. InvalidTransition (409) otherwise. Audited as ``<job_kind>.resume``."""
    with transaction.atomic():
        locked = type(job).job_lock(job.pk)
        noun = locked.job_noun
        if not locked.job_resumable:
            raise InvalidTransition(f"a {noun} cannot be resumed: start a new one")
        if locked.status not in Job.RESUMABLE:
            raise InvalidTransition(f"this {noun} has {locked.status}: only a cancelled or failed {noun} can be "
                                    "resumed")
        from_state = locked.status
        locked.status, locked.error, locked.finished_at, locked.stage = Job.Status.QUEUED, "", None, ""
        locked.cancel_requested, locked.cancel_requested_at = False, None
        locked.resumes += 1
        locked.save()
        audit_record(actor=user, action=f"{locked.job_kind}.resume", scope=locked.audit_scope(),
                     target=locked.audit_target(), from_state=from_state, to_state=Job.Status.QUEUED)
        if locked.job_task:
            job_enqueue(locked, queue=queue)
    return locked


class JobCancelled(Exception):
    """Raised by a job's work when it stopped on request; ``fields`` are stored as it ends cancelled."""

    def __init__(self, **fields: Any) -> None:
        super().__init__("cancelled")
        self.fields = fields


class JobReporter:
    """A running job's progress and cancel flag, each touching the database at most every
    ``job_progress_every_s`` / ``job_cancel_check_every_s`` of the kind (a last progress, ``done >= total`` or
    ``force``, is always written). Subclass it for kind-specific reports (metrics, log lines)."""

    def __init__(self, job: Job) -> None:
        self.model, self.pk = type(job), job.pk
        self.last_write = self.last_check = float("-inf")  # the first write and read happen at once

    def progress(self, done: int, total: int | None = None, *, force: bool = False) -> bool:
        """Store ``done`` (and ``total``); returns whether it was written now."""
        now = time.monotonic()
        if not force and (total is None or done < total) and now - self.last_write < self.model.job_progress_every_s:
            return False
        self.last_write = now
        fields: dict[str, Any] = {"progress_done": int(done)}
        if total is not None:
            fields["progress_total"] = int(total)
        self.model.objects.filter(pk=self.pk).update(**fields)
        self.on_progress()
        return True

    def stage(self, stage: str) -> None:
        self.model.objects.filter(pk=self.pk).update(stage=stage[:40])
        self.on_progress()

    def cancel_requested(self, *, force: bool = False) -> bool:
        """Whether someone asked the job to stop (read at most every ``job_cancel_check_every_s``; False between
        reads)."""
        now = time.monotonic()
        if not force and now - self.last_check < self.model.job_cancel_check_every_s:
            return False
        self.last_check = now
        return self.model.objects.filter(pk=self.pk, cancel_requested=True).exists()

    def on_progress(self) -> None:
        """After a write: tell whoever watches (a kind's WebSocket group), if anyone."""


def job_run(model: type[Job], pk: Any, work: Callable[[Job], dict[str, Any] | None], *, task_id: str | None = None,
            stage: str = "starting") -> Job:
    """The worker's side of a job: claim it (a job that is not claimable is returned as it is, untouched), keep
    its heartbeat while ``work(job)`` runs, then finish it: succeeded with the fields ``work`` returns, cancelled
    when it raised :class:`JobCancelled` (with that exception's fields), failed with :func:`error_text` of any
    other exception (the task itself succeeds: the failure is stored)."""
    job = job_claim(model, pk, stage=stage, task_id=task_id)
    if job is None:
        return model.objects.get(pk=pk)
    with Heartbeat(model, job.pk):
        try:
            fields = work(job) or {}
        except JobCancelled as stop:
            return job_finish(job, status=Job.Status.CANCELLED, **stop.fields)
        except Exception as exc:
            logger.info("%s %s failed", model.__name__, pk, exc_info=True)
            return job_finish(job, status=Job.Status.FAILED, error=error_text(exc))
    return job_finish(job, status=Job.Status.SUCCEEDED, **fields)


# --- the one sweep ----------------------------------------------------------------------------------------------


def job_models() -> list[type[Job]]:
    """Every concrete job model of the installed apps (what the sweep covers), by label."""
    return sorted((m for m in apps.get_models() if issubclass(m, Job)), key=lambda m: m._meta.label)


def jobs_revoke_overdue(now: datetime | None = None, *, models: Iterable[type[Job]] | None = None) -> list[str]:
    """Revoke (terminate with SIGTERM) the task of every job still cancelling ``JOB_CANCEL_GRACE_S`` after the
    request (a step that hangs); once its heartbeat stops, :func:`jobs_sweep_stalled` ends it cancelled. Jobs
    without a task (started otherwise) are only ended by the sweep. Returns their ids."""
    from console.celery import app

    now = now or timezone.now()
    overdue = now - timedelta(seconds=settings.JOB_CANCEL_GRACE_S)
    revoked = []
    for model in (job_models() if models is None else models):
        for job in model.objects.filter(status=Job.Status.CANCELLING, cancel_requested_at__lt=overdue,
                                        revoked_at__isnull=True).exclude(task_id=""):
            app.control.revoke(job.task_id, terminate=True, signal="SIGTERM")
            if not model.objects.filter(pk=job.pk, revoked_at__isnull=True).update(revoked_at=now):
                continue
            waited = int((now - job.cancel_requested_at).total_seconds())
            audit_record(actor=None, action=f"{job.job_kind}.revoked", scope=job.audit_scope(),
                         target=job.audit_target(), from_state=job.status, to_state=job.status,
                         comment=f"did not stop within {waited} s of the cancel: task {job.task_id} terminated")
            job.on_revoked(waited)
            revoked.append(str(job.pk))
    return revoked


def jobs_sweep_stalled(now: datetime | None = None, *, models: Iterable[type[Job]] | None = None) -> list[str]:
    """The one periodic sweep over every job model (``models``: only these): revoke overdue cancels, then end
    the running or cancelling jobs whose heartbeat (or start, if they never beat) is older than their kind's
    :meth:`Job.stale_after_s`: a job being cancelled ends cancelled, any other failed with the kind's
    :meth:`Job.stalled_message` (:meth:`Job.stalled_filter` may exempt some); :meth:`Job.on_stalled` cleans up
    first. Returns the ids of the jobs it ended.
    Idempotent (a job is ended once; one its worker finished meanwhile is left alone)."""
    now = now or timezone.now()
    models = job_models() if models is None else list(models)
    jobs_revoke_overdue(now, models=models)
    ended: list[str] = []
    for model in models:
        limit = stale_before(now, model.stale_after_s())
        for pk in model.objects.filter(status__in=Job.IN_WORKER).filter(model.stalled_filter()).filter(
                Q(heartbeat_at__lt=limit) | Q(heartbeat_at__isnull=True, started_at__lt=limit)
        ).values_list("pk", flat=True):
            with transaction.atomic():  # the worker may have come back and finished it meanwhile
                locked = model.job_lock(pk)
                last = locked.heartbeat_at or locked.started_at
                if locked.status not in Job.IN_WORKER or last is None or last >= limit:
                    continue
                locked.on_stalled()
                if locked.status == Job.Status.CANCELLING or locked.cancel_requested:
                    job_finish(locked, status=Job.Status.CANCELLED)
                else:
                    job_finish(locked, status=Job.Status.FAILED, error=locked.stalled_message(last, now))
            ended.append(str(pk))
    return ended
