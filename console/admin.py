from django.contrib import admin

from console.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the timeline is append-only (the database refuses updates and deletes too)."""

    list_display = ("at", "actor", "action", "scope", "target", "from_state", "to_state")
    list_filter = ("action",)
    search_fields = ("scope", "target", "comment")
    date_hierarchy = "at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
