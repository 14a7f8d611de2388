"""Admin for dataset builds, training jobs and the model registry: read-only (builds and jobs are launched,
cancelled and resumed through the console's services; models are registered by them)."""

from django.contrib import admin

from console.admin import ReadOnlyAdmin
from training_jobs.models import Dataset, TrainedModel, TrainingJob


@admin.register(Dataset)
class DatasetAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "status", "progress_done", "progress_total", "created_by", "created_at")
    list_filter = ("kind", "status")
    search_fields = ("name", "id", "error")
    list_select_related = ("created_by",)


@admin.register(TrainingJob)
class TrainingJobAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "status", "progress_done", "progress_total", "worker_host", "created_by",
                    "created_at")
    list_filter = ("kind", "status")
    search_fields = ("name", "id", "error", "worker_host")
    list_select_related = ("created_by",)


@admin.register(TrainedModel)
class TrainedModelAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "parent", "dataset", "created_by", "created_at")
    list_filter = ("kind",)
    search_fields = ("name", "id", "path")
    list_select_related = ("parent", "dataset", "created_by")
from training_jobs import gate_admin  # noqa: E402,F401  (the approval gate policy: its own module)
