"""Serving, deployments and live sessions (imported by streams.models; their own module).

- :class:`ServeProfile` is a stored serve profile (:class:`streams.serve_profiles.ServeProfile`, the pydantic
  spec, in ``spec``); a :class:`ServerInstance` is one server a profile launched (or that was started outside the
  console and registered) on one host: which profile served which model (or adapter) when, and where.
- A :class:`Deployment` is what is approved, served and rolled back together: (harness version through a
  label, model or LoRA adapter, serve profile) plus the endpoints that serve it in failover order. Every change
  is a :class:`DeploymentRevision` that a second person approves (four eyes); the deployment's
  ``current_revision`` is the approved one in force. Rollback makes the previous approved revision current
  again (and moves the label back with it).
- A :class:`LiveSession` is one broadcast of one live room under one deployment: viewer comments come in
  (:class:`LiveComment`, each stored before it is acknowledged), the session runner answers them with turns of
  the one turn engine, and every event is a :class:`LiveEvent` with a session-wide ``seq`` (reconnecting
  clients resume after the last seq they saw). :class:`LiveToken` authorises ingest and the overlay per session.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid

from django.conf import settings
from django.db import models

from streams.models import StoredEvent  # streams.models imports this module last, once StoredEvent exists


class ServeProfile(models.Model):
    """A named, stored serve profile: the pydantic spec (kind, flags, LoRA options) as JSON. The model is not part
    of the profile: a deployment pairs a profile with a model."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.SlugField(max_length=64, unique=True)
    spec = models.JSONField(help_text="streams.serve_profiles.ServeProfile (without the model)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("manage_serving", "Can launch and stop model servers and load adapters")]

    def __str__(self) -> str:
        return self.name


class ServerInstance(models.Model):
    """One model server: launched by the console from a profile on a worker host (``managed``), or started
    outside it and registered (``managed=False``: the console never stops it). Stopping goes to the host that runs
    it (its own queue), so the record never says stopped while the process lives on elsewhere."""

    class Status(models.TextChoices):
        STARTING = "starting", "Starting"
        READY = "ready", "Ready"
        STOPPING = "stopping", "Stopping"
        STOPPED = "stopped", "Stopped"
        FAILED = "failed", "Failed"

    LIVE = (Status.STARTING, Status.READY, Status.STOPPING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    profile = models.ForeignKey(ServeProfile, on_delete=models.PROTECT, related_name="instances")
    model = models.ForeignKey("training_jobs.TrainedModel", on_delete=models.PROTECT, null=True, blank=True,
                              related_name="+", help_text="the base model the server loaded")
    model_path = models.CharField(max_length=500, help_text="the directory served (snapshot)")
    endpoint = models.ForeignKey("streams.ModelEndpoint", on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="+")
    managed = models.BooleanField(default=True, help_text="launched (and stopped) by the console")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTING, db_index=True)
    host = models.CharField(max_length=200, blank=True, help_text="the worker host running the process")
    pid = models.IntegerField(null=True, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    argv = models.JSONField(default=list, blank=True, help_text="the command line that started it")
    log_path = models.CharField(max_length=500, blank=True)
    adapters = models.JSONField(default=list, blank=True,
                                help_text='LoRA adapters loaded now: [{"name", "path", "model_id", "loaded_at"}]')
    error = models.TextField(blank=True)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.profile.name} on {self.host or '?'}:{self.port or '?'} ({self.status})"


class Deployment(models.Model):
    """(harness version through a label, model or adapter, serve profile) served and rolled back together. The
    fields in force are those of ``current_revision`` (approved); a proposed change waits in a revision."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.SlugField(max_length=64, unique=True)
    title = models.CharField(max_length=120, blank=True)
    harness = models.ForeignKey("harness_editor.Harness", on_delete=models.PROTECT, related_name="+")
    current_revision = models.OneToOneField("DeploymentRevision", on_delete=models.PROTECT, null=True, blank=True,
                                            related_name="+", help_text="the approved revision in force")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("propose_deployment", "Can propose deployments and changes to them"),
                       ("review_deployment", "Can approve or reject deployment changes (four eyes)"),
                       ("rollback_deployment", "Can roll a deployment back to its previous approved revision")]

    def __str__(self) -> str:
        return self.name


class DeploymentRevision(models.Model):
    """One proposed state of a deployment. Approved by someone other than its author (four eyes); the approved
    revisions of a deployment, newest first, are its rollback history."""

    class Status(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        WITHDRAWN = "withdrawn", "Withdrawn"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    label = models.CharField(max_length=64, help_text="the harness label whose version is served (production, ...)")
    harness_version = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.PROTECT, related_name="+",
                                        help_text="where the label pointed when this revision was approved "
                                                  "(rollback moves the label back here)")
    model = models.ForeignKey("training_jobs.TrainedModel", on_delete=models.PROTECT, null=True, blank=True,
                              related_name="+", help_text="the base model (None: whatever the endpoints serve)")
    adapter = models.ForeignKey("training_jobs.TrainedModel", on_delete=models.PROTECT, null=True, blank=True,
                                related_name="+", help_text="a LoRA adapter loaded on top of the model")
    serve_profile = models.ForeignKey(ServeProfile, on_delete=models.PROTECT, related_name="+")
    endpoints = models.JSONField(default=list, help_text="ModelEndpoint ids in failover order (first = primary)")
    note = models.TextField(blank=True, max_length=2000)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED, db_index=True)
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    proposed_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True, max_length=4000)

    class Meta:
        ordering = ["deployment", "-number"]
        constraints = [models.UniqueConstraint(fields=["deployment", "number"], name="deployment_revision_number")]

    def __str__(self) -> str:
        return f"{self.deployment.name} r{self.number} ({self.status})"


class LiveSession(models.Model):
    """One broadcast: a live room's comments in, the deployment's replies out, every event stored."""

    class Status(models.TextChoices):
        LIVE = "live", "Live"
        ENDED = "ended", "Ended"
        FAILED = "failed", "Failed"

    class Feed(models.TextChoices):
        REPLAY = "replay", "Replay (a recorded stream or a scenario at real speed)"
        WEBHOOK = "webhook", "Webhook (a platform pushes comments, HMAC-signed)"
        API = "api", "API and WebSocket ingest only"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    title = models.CharField(max_length=120)
    room = models.ForeignKey("streams.LiveRoom", on_delete=models.PROTECT, related_name="sessions")
    deployment = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="sessions")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.LIVE, db_index=True)
    feed = models.CharField(max_length=16, choices=Feed.choices, default=Feed.API)
    feed_config = models.JSONField(default=dict, blank=True,
                                   help_text='replay: {"scenario": slug} or {"session": id}, "speed"; webhook: {}')
    room_state = models.JSONField(default=dict, help_text="the bindings' room dict; turns and the pin change it")
    handling = models.JSONField(default=dict, blank=True,
                                help_text="comment handling (streams.live.schemas.CommentHandling): batching window, "
                                          "per-viewer rate limit, max comment age, comments per turn")
    # operator controls
    muted = models.BooleanField(default=False, help_text="no turns run; comments keep queueing")
    approve_before_speak = models.BooleanField(default=False, help_text="replies wait for an operator's approval")
    # who watches and drives
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                 related_name="+")
    # events: seq handed out under a row lock
    last_seq = models.BigIntegerField(default=0)
    # the runner holding the session (a lease it renews; a stale lease is taken over: resume within 60 s)
    runner_id = models.CharField(max_length=120, blank=True)
    runner_beat_at = models.DateTimeField(null=True, blank=True)
    # the revision and harness version the last turn used (a change is marked in the transcript)
    revision_in_force = models.ForeignKey(DeploymentRevision, on_delete=models.PROTECT, null=True, blank=True,
                                          related_name="+")
    version_in_force = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.PROTECT, null=True,
                                         blank=True, related_name="+")
    webhook_secret = models.CharField(max_length=80, blank=True,
                                      help_text="HMAC-SHA256 key of the webhook feed (shown once to the operator)")
    comments_refused = models.PositiveBigIntegerField(
        default=0, help_text="comments the per-token and per-session ingest limits refused (never stored: the "
                             "sender was told to retry)")

    class Meta:
        ordering = ["-started_at"]
        permissions = [("run_livesession", "Can start, steer and end live sessions")]
        indexes = [models.Index(fields=["status", "-started_at"], name="livesession_status_recent")]

    def __str__(self) -> str:
        return f"{self.title} ({self.status})"


class LiveComment(models.Model):
    """One viewer comment, stored before it is acknowledged. ``external_id`` (the platform's id, or one the
    ingest derived) dedupes redelivered comments per session."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        ANSWERING = "answering", "In a turn"
        ANSWERED = "answered", "Answered"
        SKIPPED = "skipped", "Skipped by an operator"
        FILTERED = "filtered", "Filtered (abuse)"
        RATE_LIMITED = "rate_limited", "Rate-limited"
        EXPIRED = "expired", "Too old when its turn came"

    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(LiveSession, on_delete=models.CASCADE, related_name="comments")
    external_id = models.CharField(max_length=200)
    viewer_id = models.CharField(max_length=200)
    viewer = models.CharField(max_length=120)
    text = models.TextField(max_length=4000)
    source = models.CharField(max_length=16, help_text="api, ws, webhook, replay")
    received_at = models.DateTimeField(auto_now_add=True)
    priority = models.IntegerField(default=0, help_text="higher first (a question about the product on screen)")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    reason = models.CharField(max_length=200, blank=True)
    turn_id = models.CharField(max_length=64, blank=True)
    token = models.ForeignKey("streams.LiveToken", on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="+", db_index=False, help_text="the ingest token it came with (REST, "
                                                                          "WebSocket): its per-token limit")

    class Meta:
        ordering = ["session", "id"]
        constraints = [models.UniqueConstraint(fields=["session", "external_id"], name="live_comment_dedupe")]
        # the queue; the last minute of a session and of a token (the ingest limits count them)
        indexes = [models.Index(fields=["session", "status", "-priority", "id"], name="live_comment_queue"),
                   models.Index(fields=["session", "received_at"], name="live_comment_recent"),
                   models.Index(fields=["token", "received_at"], name="live_comment_token_recent")]

    def __str__(self) -> str:
        return f"{self.viewer}: {self.text[:40]}"


class LiveEvent(StoredEvent):
    """One stored event of a live session (the preview room's shape)."""

    session = models.ForeignKey(LiveSession, on_delete=models.CASCADE, related_name="events")

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="live_event_seq_unique")]
        indexes = [models.Index(fields=["session", "type"], name="live_event_session_type")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


class LiveWebhookReceipt(models.Model):
    """A signed webhook request taken: its signature is kept while its timestamp is inside the signature window,
    so the same signed request sent again (a replay) is refused instead of stored twice."""

    session = models.ForeignKey(LiveSession, on_delete=models.CASCADE, related_name="+")
    signature = models.CharField(max_length=80, help_text="the X-Hat-Signature taken (sha256=<hex>)")
    expires_at = models.DateTimeField(help_text="its timestamp plus the window: refused as stale from then on")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "signature"], name="live_webhook_once")]
        indexes = [models.Index(fields=["session", "expires_at"], name="live_webhook_expiry")]

    def __str__(self) -> str:
        return f"{self.signature[:19]}… ({self.session_id})"


class LiveToken(models.Model):
    """A bearer token for one session and one scope: ``ingest`` (post comments over REST or the ingest
    WebSocket) or ``overlay`` (read the subtitle overlay). Only its SHA-256 is stored; it is shown once."""

    class Scope(models.TextChoices):
        INGEST = "ingest", "Post comments"
        OVERLAY = "overlay", "Read the subtitle overlay"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(LiveSession, on_delete=models.CASCADE, related_name="tokens")
    scope = models.CharField(max_length=16, choices=Scope.choices)
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="the first characters, to tell tokens apart")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.scope} {self.prefix}… ({self.session_id})"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode("utf-8")).hexdigest()

    @staticmethod
    def new_secret() -> str:
        return "hat_" + secrets.token_urlsafe(32)


__all__ = ["Deployment", "DeploymentRevision", "LiveComment", "LiveEvent", "LiveSession", "LiveToken",
           "LiveWebhookReceipt", "ServeProfile", "ServerInstance"]
