"""Training datasets: one record per build job and the artifact it leaves.

A :class:`Dataset` is both the job (queued → running → succeeded | failed | cancelled, with progress and a
cancel flag the worker reads) and, once it succeeded, the artifact the training jobs pick by id: a folder under
``HAT_DATA_DIR/datasets/<id>/`` written by :func:`training_jobs.hsa.dataset.write_dataset` (``dataset/`` in
Hugging Face ``datasets`` format, ``recipe.json``, ``stats.json``, ``harnesses.jsonl``) plus the canonical samples
before augmentation (``samples.jsonl``, ``base_harnesses.jsonl``) for the sample browser. The folder appears
under its final name only when everything in it is written.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models


class Dataset(models.Model):
    class Kind(models.TextChoices):
        HSA = "hsa", "HSA (augmented)"
        FIXED_HARNESS = "fixed_harness", "Fixed harness (baseline)"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.HSA, db_index=True)
    recipe = models.JSONField(default=dict, blank=True,
                              help_text="training_jobs.hsa.dataset.Recipe as JSON (the augmentation; unused by a "
                                        "fixed-harness build except for its name)")
    sources = models.JSONField(default=dict, blank=True, help_text="training_jobs.schemas.Sources as JSON")
    baseline_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="baselines",
                                    help_text="the HSA dataset this fixed-harness baseline shares its samples with")
    split = models.CharField(max_length=16, default="train",
                             help_text="'train' (training names) or 'heldout' (Harness-Variant evaluation)")

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    stage = models.CharField(max_length=40, blank=True, help_text="what a running build is doing now")
    progress_done = models.PositiveBigIntegerField(default=0)
    progress_total = models.PositiveBigIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True, max_length=4000, help_text="why it failed: exception type and message")

    stats = models.JSONField(default=dict, blank=True,
                             help_text="BuildStats: rows, dropped, per operator applied / dropped / mean prompt "
                                       "tokens")
    sample_count = models.PositiveIntegerField(default=0, help_text="canonical samples the build started from")
    row_counts = models.JSONField(default=dict, blank=True, help_text="rows per split, e.g. {'train': 480}")
    artifact_path = models.CharField(max_length=500, blank=True)

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True,
                                        help_text="last sign of life of the worker running it (console.heartbeat)")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="dataset_status_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display().lower()}, {self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def is_ready(self) -> bool:
        """Succeeded, with its artifact on disk: what a training job may use."""
        return self.status == self.Status.SUCCEEDED and bool(self.artifact_path) and self.artifact_dir.is_dir()

    @property
    def artifact_dir(self) -> Path:
        return Path(self.artifact_path)

    @property
    def rows(self) -> int:
        return sum(int(n) for n in (self.row_counts or {}).values())

    @property
    def percent(self) -> int:
        if self.status == self.Status.SUCCEEDED:
            return 100
        if not self.progress_total:
            return 0
        return min(100, int(100 * self.progress_done / self.progress_total))
