"""Admin for the catalog and the scenario library. Scenarios are imported through the console (validated,
audited), so their text is read-only here."""

from django.contrib import admin

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


@admin.register(ModelEndpoint)
class ModelEndpointAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "model", "base_url", "is_default", "timeout_s")
    search_fields = ("name", "model", "base_url")


@admin.register(PreviewRoom)
class PreviewRoomAdmin(admin.ModelAdmin):
    """Read-only: rooms are driven from the preview page; their events are the record."""

    list_display = ("id", "kind", "run_status", "created_by", "harness_version", "scenario", "endpoint",
                    "scenario_minute", "playing", "last_seq", "created_at")
    list_filter = ("kind", "run_status", "status")
    list_select_related = ("created_by", "harness_version__harness", "scenario", "endpoint")
    readonly_fields = [f.name for f in PreviewRoom._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
