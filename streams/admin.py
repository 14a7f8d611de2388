"""Admin for the catalog and the scenario library. Scenarios are imported through the console (validated,
audited), so their text is read-only here. Model endpoints are administrators' records (superusers only): the
URL passes the outbound check, the API key is a secret picked by name."""

from django import forms
from django.conf import settings
from django.contrib import admin

from console import secrets
from streams.models import CampaignEvent, Coupon, LiveRoom, ModelEndpoint, PreviewRoom, Product, Scenario


class ProductInline(admin.TabularInline):
    model = Product
    extra = 0
    fields = ("position", "link_id", "title", "price", "list_price", "stock")


class CouponInline(admin.TabularInline):
    model = Coupon
    extra = 0
    fields = ("position", "code", "discount", "min_spend", "expires_at_minute", "remaining")


class CampaignEventInline(admin.TabularInline):
    model = CampaignEvent
    extra = 0
    fields = ("at_minute", "kind", "params", "note", "applied_at")


@admin.register(LiveRoom)
class LiveRoomAdmin(admin.ModelAdmin):
    list_display = ("slug", "title", "phase", "clock_minute", "updated_at")
    search_fields = ("slug", "title")
    inlines = [ProductInline, CouponInline, CampaignEventInline]


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ("room", "link_id", "title", "price", "list_price", "stock")
    list_filter = ("room",)
    search_fields = ("title",)
    list_select_related = ("room",)


@admin.register(Coupon)
class CouponAdmin(admin.ModelAdmin):
    list_display = ("room", "code", "discount", "min_spend", "expires_at_minute", "remaining")
    list_filter = ("room",)
    list_select_related = ("room",)


@admin.register(CampaignEvent)
class CampaignEventAdmin(admin.ModelAdmin):
    list_display = ("room", "at_minute", "kind", "note", "applied_at")
    list_filter = ("kind", "room")
    list_select_related = ("room",)


@admin.register(Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    list_display = ("slug", "title", "duration_minutes", "content_hash", "created_by", "updated_at")
    search_fields = ("slug", "title", "description")
    readonly_fields = ("slug", "yaml_text", "content_hash", "duration_minutes", "created_by", "created_at",
                       "updated_at")

    def has_add_permission(self, request):
        return False  # import through the console: validated and audited


class ModelEndpointForm(forms.ModelForm):
    """The API key is picked from the administrators' secrets by name (``HAT_ENDPOINT_SECRET_<NAME>`` on this
    host); the URL must pass the outbound check (``ModelEndpoint.clean``)."""

    api_key_secret = forms.ChoiceField(required=False, label="API key secret",
                                       help_text="the secret sent as the Bearer token: an environment variable "
                                                 f"{secrets.PREFIX}<NAME> of the web and worker hosts")

    class Meta:
        model = ModelEndpoint
        fields = ("name", "kind", "base_url", "model", "api_key_secret", "timeout_s", "connect_timeout_s",
                  "is_default")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = secrets.secret_names()
        current = self.instance.api_key_secret if self.instance and self.instance.pk else ""
        choices = [("", "— none —")] + [(n, n) for n in names]
        if current and current not in names:  # still shown, so the form says it is missing instead of hiding it
            choices.append((current, f"{current} (not set on this host)"))
        self.fields["api_key_secret"].choices = choices
        self.fields["base_url"].help_text = (f"http(s) on a host of HAT_OUTBOUND_HOSTS "
                                             f"({', '.join(settings.HAT_OUTBOUND_HOSTS)}), e.g. "
                                             "http://127.0.0.1:8001/v1")


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    """Administrators (superusers) only: an endpoint is where the workers send requests, with which secret."""

    form = ModelEndpointForm
    list_display = ("name", "kind", "model", "base_url", "api_key_secret", "is_default", "timeout_s")
    search_fields = ("name", "model", "base_url")

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser


@admin.register(PreviewRoom)
class PreviewRoomAdmin(admin.ModelAdmin):
    """Read-only: rooms are driven from the preview page; their events are the record."""

    list_display = ("id", "kind", "run_status", "created_by", "harness_version", "scenario", "endpoint",
                    "scenario_minute", "playing", "last_seq", "created_at")
    list_filter = ("kind", "job__status", "status")
    list_select_related = ("created_by", "harness_version__harness", "scenario", "endpoint", "job")
    readonly_fields = [f.name for f in PreviewRoom._meta.fields]

    @admin.display(description="run status")
    def run_status(self, room: PreviewRoom) -> str:
        return room.job.status if room.is_run else ""

    def has_add_permission(self, request) -> bool:
        return False
