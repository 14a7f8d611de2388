"""Review records of the registry: comments on lines of a version's semantic diff, and the checklist a compliance
lead sets that reviewers tick before approving (the ticks are kept with the approval).

Imported by :mod:`harness_editor.models` so Django registers them with the app."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ReviewComment(models.Model):
    """A comment on one line of the diff from ``base_number`` to ``version`` (a reply names its thread's first
    comment as ``thread``). A line is named by (component, path, line): ``line`` is ``o<n>`` / ``n<n>`` (line n of
    the old / new text of that change's unified diff) or ``""`` for the change as a whole. Both versions of a
    diff are fixed once submitted, so the same line gets the same name on every render; ``line_text`` keeps what
    the line said, so a comment whose line is gone (a draft edited since) is shown as outdated, never lost."""

    version = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.CASCADE,
                                related_name="review_comments")
    base_number = models.PositiveIntegerField(help_text="the version the diff compares against (usually the parent)")
    component = models.CharField(max_length=32)
    path = models.CharField(max_length=300)
    line = models.CharField(max_length=16, blank=True)
    line_text = models.TextField(blank=True, max_length=2000)
    thread = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="replies")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    body = models.TextField(max_length=4000)
    created_at = models.DateTimeField(auto_now_add=True)
    # only on a thread's first comment: the whole thread is resolved or open
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                    related_name="+")

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["version", "base_number"], name="review_comment_diff")]

    def __str__(self) -> str:
        return f"comment {self.pk} on v{self.version_id} {self.component}:{self.path}:{self.line}"

    @property
    def is_resolved(self) -> bool:
        return self.resolved_at is not None


class ReviewChecklistItem(models.Model):
    """One item of the review checklist (the compliance lead's list). Setting a new list retires the old items
    (``active`` False) rather than deleting them: approvals keep the text they were ticked against."""

    text = models.CharField(max_length=300)
    position = models.PositiveIntegerField(default=0)
    active = models.BooleanField(default=True, db_index=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["position", "id"]
        permissions = [("set_review_checklist", "Can set the checklist reviewers tick before approving")]

    def __str__(self) -> str:
        return self.text


class ApprovalChecklist(models.Model):
    """The checklist as ticked at an approval: ``items`` is ``[{"id", "text", "ticked"}]`` in list order."""

    version = models.OneToOneField("harness_editor.HarnessVersion", on_delete=models.CASCADE,
                                   related_name="approval_checklist")
    items = models.JSONField(default=list)
    ticked_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    ticked_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"checklist of v{self.version_id}"
