"""Tags and notes on the things ML staff launch: datasets, training jobs, trained models and evaluation runs.

One table of tags and one of notes for all four kinds, keyed by (subject, object id): every kind has a UUID key, so
"the datasets tagged X" is one indexed sub-select, and a fifth kind needs only a new Subject value. The rules of a
tag and a note live in :mod:`training_jobs.tags`; writes go through :mod:`training_jobs.tag_services` (audited).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from training_jobs.tags import TAG_MAX_CHARS


class Subject(models.TextChoices):
    DATASET = "dataset", "dataset"
    TRAINING_JOB = "training_job", "training job"
    MODEL = "model", "model"
    EVAL_RUN = "eval_run", "evaluation run"


class ObjectTag(models.Model):
    subject = models.CharField(max_length=16, choices=Subject.choices)
    object_id = models.UUIDField()
    slug = models.CharField(max_length=TAG_MAX_CHARS)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(fields=["subject", "object_id", "slug"], name="objecttag_unique"),
            # the rule of training_jobs.tags, kept by the database too
            models.CheckConstraint(condition=models.Q(slug__regex=r"^[a-z0-9-]{1,32}$"), name="objecttag_slug"),
        ]
        indexes = [models.Index(fields=["subject", "slug"], name="objecttag_subject_slug")]

    def __str__(self) -> str:
        return f"{self.subject}:{self.object_id} #{self.slug}"


class ObjectNote(models.Model):
    """The one note on a thing; ``revision`` counts its edits, so a save made over a newer note is refused (409)
    rather than overwriting someone else's words."""

    subject = models.CharField(max_length=16, choices=Subject.choices)
    object_id = models.UUIDField()
    text = models.TextField(blank=True)
    revision = models.PositiveIntegerField(default=0)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["subject", "object_id"], name="objectnote_unique")]

    def __str__(self) -> str:
        return f"{self.subject}:{self.object_id} note r{self.revision}"
