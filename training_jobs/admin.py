"""Admin for dataset builds: read-only (builds are launched and cancelled through the console's services)."""

from django.contrib import admin

from training_jobs.models import Dataset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "status", "progress_done", "progress_total", "created_by", "created_at")
    list_filter = ("kind", "status")
    search_fields = ("name", "id", "error")
    list_select_related = ("created_by",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
