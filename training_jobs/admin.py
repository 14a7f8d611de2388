"""Admin for dataset builds: read-only (builds are launched and cancelled through the console's services)."""

from django.contrib import admin

from console.admin import ReadOnlyAdmin
from training_jobs.models import Dataset


@admin.register(Dataset)
class DatasetAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "status", "progress_done", "progress_total", "created_by", "created_at")
    list_filter = ("kind", "status")
    search_fields = ("name", "id", "error")
    list_select_related = ("created_by",)
