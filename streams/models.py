"""The catalog and live rooms (the state tool bindings read), and the stored scenarios.

A :class:`LiveRoom` owns its products, coupons and scheduled campaign events; ``streams.selectors.room_state``
turns one into the plain room dict of :mod:`streams.bindings`, which the turn engine works on. Money is a
``Decimal`` here and a float in the room dict (the shape JSON tools see).

A :class:`Scenario` keeps the YAML as written (comments and all) plus the canonical content hash of the
parsed scenario; :mod:`streams.scenarios` is the schema and :mod:`streams.simulator` plays it.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from console.jobs import Job
from streams.labels import model_short_name

MONEY = {"max_digits": 10, "decimal_places": 2, "validators": [MinValueValidator(0)]}


class LiveRoom(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    title = models.CharField(max_length=120)
    currency = models.CharField(max_length=8, blank=True, help_text='display prefix for prices, e.g. "$"')
    clock_minute = models.PositiveIntegerField(default=0, help_text="minutes since the broadcast started")
    phase = models.CharField(max_length=40, default="warm_up")
    flash_sale = models.JSONField(null=True, blank=True,
                                  help_text='{"link_id": int, "price": float, "ends_at_minute": int} or null')
    low_stock_threshold = models.PositiveIntegerField(default=10)
    shipping = models.JSONField(default=dict, blank=True,
                                help_text='{"free_over", "delivery_days", "return_days", "regions": {name: {...}}}')
    pinned = models.JSONField(null=True, blank=True,
                              help_text='{"link_id", "title", "duration_s", "pinned_at_minute"} or null')
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title"]

    def __str__(self) -> str:
        return self.title


class Product(models.Model):
    room = models.ForeignKey(LiveRoom, on_delete=models.CASCADE, related_name="products")
    position = models.PositiveIntegerField(default=0)
    link_id = models.PositiveIntegerField(help_text="the number viewers see on the product card")
    title = models.CharField(max_length=200)
    price = models.DecimalField(**MONEY)
    list_price = models.DecimalField(**MONEY)
    stock = models.PositiveIntegerField(default=0)
    attributes = models.JSONField(default=dict, blank=True)
    # jsonb keeps no key order: the attributes' written order, which the model reads them in (streams.bindings)
    attribute_order = models.JSONField(default=list, blank=True, help_text="the attribute keys in written order")
    compliance_notes = models.JSONField(default=list, blank=True,
                                        help_text="claims that must not be made, wording to use (a list of strings)")

    class Meta:
        ordering = ["room", "position", "link_id"]
        constraints = [models.UniqueConstraint(fields=["room", "link_id"], name="product_link_id_unique")]

    def __str__(self) -> str:
        return f"{self.link_id} {self.title}"


class Coupon(models.Model):
    room = models.ForeignKey(LiveRoom, on_delete=models.CASCADE, related_name="coupons")
    position = models.PositiveIntegerField(default=0)
    code = models.CharField(max_length=32)
    discount = models.DecimalField(**MONEY)
    min_spend = models.DecimalField(default=0, **MONEY)
    expires_at_minute = models.PositiveIntegerField()
    remaining = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["room", "position", "code"]
        constraints = [models.UniqueConstraint(fields=["room", "code"], name="coupon_code_unique")]

    def __str__(self) -> str:
        return self.code


class CampaignEvent(models.Model):
    """A scheduled change of a live room (the timeline entry of a scenario): applied at ``at_minute``."""

    class Kind(models.TextChoices):
        FLASH_SALE_START = "flash_sale_start", "Flash sale starts"
        FLASH_SALE_END = "flash_sale_end", "Flash sale ends"
        PRICE_CHANGE = "price_change", "Price change"
        STOCK_CHANGE = "stock_change", "Stock change"
        COUPON_EXPIRE = "coupon_expire", "Coupon expires"
        COUPON_ADD = "coupon_add", "Coupon added"
        PHASE_CHANGE = "phase_change", "Phase change"
        RESTOCK = "restock", "Restock"

    room = models.ForeignKey(LiveRoom, on_delete=models.CASCADE, related_name="events")
    at_minute = models.PositiveIntegerField()
    kind = models.CharField(max_length=32, choices=Kind.choices)
    params = models.JSONField(default=dict, blank=True)
    note = models.CharField(max_length=200, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["room", "at_minute", "id"]
        indexes = [models.Index(fields=["room", "at_minute"], name="campaign_event_due")]

    def __str__(self) -> str:
        return f"{self.room.slug}@{self.at_minute} {self.kind}"


class Scenario(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    title = models.CharField(max_length=120)
    description = models.TextField(blank=True, max_length=4000)
    yaml_text = models.TextField()
    content_hash = models.CharField(max_length=64, db_index=True)
    duration_minutes = models.PositiveIntegerField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title"]

    def __str__(self) -> str:
        return self.title

    def parsed(self):
        """The validated :class:`streams.scenarios.Scenario` (the text was validated on import)."""
        from streams.scenarios import scenario_from_yaml

        return scenario_from_yaml(self.yaml_text)


# --- preview rooms --------------------------------------------------------------------------------------


class ModelEndpoint(models.Model):
    """A model served behind an OpenAI-compatible endpoint (the local CPU server, vLLM, OpenAI)."""

    class Kind(models.TextChoices):
        LOCAL = "local", "Local server"
        VLLM = "vllm", "vLLM"
        OPENAI = "openai", "OpenAI"

    name = models.CharField(max_length=64, unique=True)
    base_url = models.CharField(max_length=300, help_text="e.g. http://127.0.0.1:8001/v1")
    model = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LOCAL)
    timeout_s = models.FloatField(default=60.0, validators=[MinValueValidator(0.1)])
    connect_timeout_s = models.FloatField(default=5.0, validators=[MinValueValidator(0.1)])
    # The name of an administrator-managed secret (never its value, never an environment variable's name):
    # resolved on the worker when the endpoint is called; only administrators set or see it.
    api_key_secret = models.CharField(max_length=64, blank=True, default="",
                                      help_text="name of the secret holding the API key ('' = none)")
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-is_default", "name"]
        constraints = [models.UniqueConstraint(fields=["is_default"], condition=models.Q(is_default=True),
                                               name="model_endpoint_one_default")]

    def __str__(self) -> str:
        # the admin's lists and pickers: the model's last path component, never where its weights lie on a host
        return f"{self.name} ({model_short_name(self.model)})"

    # --- the outbound check (streams.engine.outbound) and the secret (console.secrets) -----------------------
    # An endpoint is checked when an administrator saves it (clean: the admin form), when someone picks it
    # (check_usable: datasets, preview rooms, scenario runs) and when it is called (as_config, on the worker), so a row
    # edited behind the form's back is refused at use with a clear error.

    @staticmethod
    def check_url(url: str) -> str:
        """``url`` when outbound requests may go there (http(s), no credentials, a host on HAT_OUTBOUND_HOSTS);
        else :class:`streams.engine.outbound.OutboundRefused`."""
        from streams.engine.outbound import check_url

        return check_url(url, settings.HAT_OUTBOUND_HOSTS)

    def check_usable(self) -> None:
        """OutboundRefused (naming this endpoint) when it may not be used: its URL, or a secret name outside
        the administrators' set. Reads no secret value."""
        from console import secrets
        from streams.engine.outbound import OutboundRefused

        try:
            self.check_url(self.base_url)
        except OutboundRefused as exc:
            raise OutboundRefused(f"model endpoint {self.name!r} is refused: {exc}") from None
        if self.api_key_secret and not secrets.valid_name(self.api_key_secret):
            raise OutboundRefused(f"model endpoint {self.name!r} is refused: its secret name is not valid")

    def clean(self) -> None:
        from console import secrets
        from streams.engine.outbound import OutboundRefused

        super().clean()
        errors: dict[str, str] = {}
        try:
            if self.base_url:  # an empty one is already "required"
                self.check_url(self.base_url)
        except OutboundRefused as exc:
            errors["base_url"] = str(exc)
        if self.api_key_secret and self.api_key_secret not in secrets.secret_names():
            errors["api_key_secret"] = (f"no secret {self.api_key_secret!r} is set on this host: set "
                                        f"{secrets.PREFIX}<NAME> in the environment of the web and worker hosts")
        if errors:
            raise ValidationError(errors)

    def as_config(self):
        """The engine's :class:`streams.engine.client.ModelEndpoint` (plain, no ORM), with the API key read from
        the named secret now. Call it where the request is made (the worker), never to show or store: the
        config holds the key (it is left out of its repr and dumps). OutboundRefused when the endpoint may not
        be used or its secret is not set here."""
        from console import secrets
        from streams.engine.client import ModelEndpoint as EndpointConfig
        from streams.engine.outbound import OutboundRefused

        self.check_usable()
        api_key = ""
        if self.api_key_secret:
            try:
                api_key = secrets.secret_value(self.api_key_secret)
            except secrets.SecretMissing:  # the message reaches non-administrators: no secret name in it
                raise OutboundRefused(f"model endpoint {self.name!r} cannot be used: the secret holding its API key "
                                      "is not set on this host (ask an administrator)") from None
        return EndpointConfig(base_url=self.base_url, model=self.model, kind=self.kind, timeout_s=self.timeout_s,
                              connect_timeout_s=self.connect_timeout_s, api_key=api_key)


class PreviewRoom(models.Model):
    """One user's preview of a harness version (a draft too) playing a scenario against a model endpoint.

    ``room_state`` is the bindings' room dict: turns mutate it (a coupon issued), the scenario clock applies
    the timeline to it. Every event (engine events of every turn, comments, clock steps, switches) is a
    :class:`PreviewEvent` with a room-wide ``seq``; ``last_seq`` hands them out under a row lock.

    A *scenario run* (``kind="run"``) is the same room played to the end at once, without anyone watching:
    its events are the stored transcript; its lifecycle (queued → running → succeeded, failed or cancelled) and
    summary are its :class:`ScenarioRun` (``room.job``).
    """

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    class Kind(models.TextChoices):
        INTERACTIVE = "interactive", "Interactive preview"
        RUN = "run", "Scenario run"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # the room's owner invites these people: they may watch, comment and drive it; others get a 404
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+",
                                     help_text="people the owner invited into the room")
    harness_version = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.PROTECT, related_name="+")
    scenario = models.ForeignKey(Scenario, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.PROTECT, related_name="+")
    room_state = models.JSONField(default=dict)
    scenario_minute = models.FloatField(default=0.0)
    seed = models.IntegerField(default=0)
    paused = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    last_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    # play mode: the clock advances by itself (streams.tasks.preview_clock_tick) while playing and not paused
    playing = models.BooleanField(default=False)
    play_speed = models.FloatField(default=10.0, validators=[MinValueValidator(0)],
                                   help_text="simulated/real time ratio (60: a minute a second); 0: as fast as "
                                             "turns finish")
    clock_ticked_at = models.DateTimeField(null=True, blank=True,
                                           help_text="real time the playing clock last read (None: not playing)")
    tick_token = models.CharField(max_length=32, blank=True,
                                  help_text="the one tick chain allowed to advance the clock; a stale or "
                                            "duplicated tick carries another token and does nothing")
    # scenario runs: a room played to the end without anyone watching
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INTERACTIVE, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("use_previewroom", "Can open and drive preview rooms")]

    def __str__(self) -> str:
        return f"{'run' if self.kind == self.Kind.RUN else 'preview'} {self.pk}"

    @property
    def is_run(self) -> bool:
        return self.kind == self.Kind.RUN


class ScenarioRun(Job):
    """The job of a scenario run (console.jobs): one per room of kind "run", sharing its id. The room keeps the
    events and the clock; this row keeps the lifecycle. A run has no task of its own: the room's clock ticks
    (streams.tasks.preview_clock_tick) drive it and beat for it (``heartbeat_at``; ``progress_done`` / ``_total``: the
    clock and the scenario's length in scenario seconds),
    and a tick ends it when it is cancelled. Not resumable: start the run again."""

    job_kind = "scenario_run"
    job_noun = "run"

    room = models.OneToOneField(PreviewRoom, on_delete=models.CASCADE, primary_key=True, related_name="job")
    summary = models.JSONField(default=dict, blank=True,
                               help_text="turns, replies, fallbacks, hook failures, tool faults, latency (on its end)")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="scenariorun_status_recent")]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    # --- the job lifecycle (console.jobs) -----------------------------------------------------------------

    def audit_target(self) -> str:
        return f"scenario:{self.room.scenario.slug}" if self.room.scenario_id else super().audit_target()

    @classmethod
    def stale_after_s(cls) -> float:
        """A tick waits behind the worker's current turn (cut at LOST_TURN_S), so a run's clock may be silent
        that long before the worker can be taken for dead."""
        from streams.services.play import LOST_TURN_S

        return LOST_TURN_S + float(settings.HEARTBEAT_STALE_S)

    @classmethod
    def stalled_filter(cls) -> models.Q:
        return models.Q(room__paused=False)  # a paused run's clock stands still on purpose

    @classmethod
    def job_lock(cls, pk):
        """The room first, then the run: the order the clock's ticks lock them in."""
        PreviewRoom.objects.select_for_update().filter(pk=pk).values_list("pk", flat=True).get()
        return super().job_lock(pk)

    def on_finish(self, from_state: str) -> None:
        from streams.services.runs import run_ended

        run_ended(self, from_state)

    def stalled_message(self, last, now) -> str:
        return (f"WorkerLost: no worker advanced this run since {last:%Y-%m-%d %H:%M:%S} UTC "
                f"({int((now - last).total_seconds())} s): the worker was stopped or killed. Start the run again.")


class StoredEvent(models.Model):
    """The columns and message shape of a stored, numbered event (preview rooms, live sessions): ``seq`` increases
    by one per owner (1, 2, 3, ...); the owner's ``last_seq`` hands them out (streams.services.preview.events_store)."""

    seq = models.BigIntegerField()
    turn_id = models.CharField(max_length=64, blank=True, db_index=True)
    type = models.CharField(max_length=32)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True

    def as_message(self) -> dict:
        """What the WebSocket, the transcript (and a live session's overlay) see."""
        return {"seq": self.seq, "turn_id": self.turn_id, "type": self.type, "payload": self.payload,
                "at": self.created_at.isoformat() if self.created_at else None}


class PreviewEvent(StoredEvent):
    """One stored event of a preview room."""

    room = models.ForeignKey(PreviewRoom, on_delete=models.CASCADE, related_name="events")

    class Meta:
        ordering = ["room", "seq"]
        constraints = [models.UniqueConstraint(fields=["room", "seq"], name="preview_event_seq_unique")]
        # the clock asks "is a turn still running" and the transcript reads turns by type
        indexes = [models.Index(fields=["room", "type"], name="preview_event_room_type")]

    def __str__(self) -> str:
        return f"{self.room_id}#{self.seq} {self.type}"


from streams.live_models import (  # noqa: E402,F401  (serving, deployments and live sessions: their own module)
    Deployment, DeploymentRevision, LiveComment, LiveEvent, LiveSession, LiveToken, LiveWebhookReceipt, ServeProfile,
    ServerInstance)

from streams.replay_models import SessionReplay, SessionReplayTurn  # noqa: E402,F401  (session replays: their own module)
