from django.contrib import admin

from console.models import AuditEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """For records that only services write (versions, audit events, dataset builds): the admin shows them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Read-only: the timeline is append-only (the database refuses updates and deletes too)."""

    list_display = ("at", "actor", "action", "scope", "target", "from_state", "to_state")
    list_filter = ("action",)
    search_fields = ("scope", "target", "comment")
    date_hierarchy = "at"
