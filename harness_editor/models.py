"""The harness registry: harnesses, their versions and the labels that point at approved versions.

A version's manifest is stored as its canonical JSON *text* (not jsonb): JSON Schema property order is
part of what the model sees, and jsonb would reorder keys. Once a version leaves ``draft`` its content can
never change again; a trigger in the database enforces that (migration 0002), so neither raw SQL nor
``queryset.update()`` can get around it.
"""

from __future__ import annotations

from functools import cached_property

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

LABEL_NAME_RE = r"^[a-z][a-z0-9_\-]*(:[A-Za-z0-9_\-]+)?$"


class Harness(models.Model):
    """One avatar / room family; its versions form a history."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True, max_length=2000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "harnesses"

    def __str__(self) -> str:
        return self.name


class HarnessVersion(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        SUBMITTED = "submitted", "Submitted"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    harness = models.ForeignKey(Harness, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    change_note = models.TextField(blank=True, max_length=2000)
    manifest_json = models.TextField()
    content_hash = models.CharField(max_length=64, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT, db_index=True)
    # Optimistic concurrency: every draft save must name the lock_version it started from.
    lock_version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decision_comment = models.TextField(blank=True, max_length=4000)

    class Meta:
        ordering = ["harness", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["harness", "number"], name="harness_version_number_unique"),
        ]
        indexes = [models.Index(fields=["harness", "-number"], name="harness_version_history")]
        permissions = [
            ("submit_harnessversion", "Can submit a draft harness version for review"),
            ("review_harnessversion", "Can approve or reject a submitted harness version"),
            ("override_gate", "Can approve a version whose evaluation gate fails, giving a written reason"),
        ]

    def __str__(self) -> str:
        return f"{self.harness.slug} v{self.number} ({self.status})"

    @property
    def is_draft(self) -> bool:
        return self.status == self.Status.DRAFT

    @cached_property
    def manifest(self):
        from harness_editor.schemas import manifest_from_json
        from harness_editor.schemas.tool_schema import without_schema_lint

        with without_schema_lint():  # stored under the rules of its day: it must always load
            return manifest_from_json(self.manifest_json)


class Label(models.Model):
    """A movable pointer (production, staging, room:<id>, …) to an approved version of one harness."""

    harness = models.ForeignKey(Harness, on_delete=models.PROTECT, related_name="labels")
    name = models.CharField(
        max_length=64,
        validators=[RegexValidator(LABEL_NAME_RE, "lowercase name, optionally with ':<id>', e.g. room:42")],
    )
    version = models.ForeignKey(HarnessVersion, on_delete=models.PROTECT, related_name="labels")
    moved_at = models.DateTimeField(auto_now=True)
    moved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["harness", "name"]
        constraints = [models.UniqueConstraint(fields=["harness", "name"], name="label_name_unique")]
        permissions = [("move_label", "Can move a label to an approved version (deploy or roll back)")]

    def __str__(self) -> str:
        return f"{self.harness.slug}@{self.name}"


# Review comments and the approval checklist live in their own module; imported here so Django registers them.
from harness_editor.review_models import ApprovalChecklist, ReviewChecklistItem, ReviewComment  # noqa: E402, F401
