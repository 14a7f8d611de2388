"""The catalog and live rooms (the state tool bindings read), and the stored scenarios.

A :class:`LiveRoom` owns its products, coupons and scheduled campaign events; ``streams.selectors.room_state``
turns one into the plain room dict of :mod:`streams.bindings`, which the turn engine works on. Money is a
``Decimal`` here and a float in the room dict (the shape JSON tools see).

A :class:`Scenario` keeps the YAML as written (comments and all) plus the canonical content hash of the
parsed scenario; :mod:`streams.scenarios` is the schema and :mod:`streams.simulator` plays it.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

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
