"""Evaluation sets: versioned data, like harness versions.

An :class:`EvalSet` (T1–T4) has immutable :class:`EvalSetVersion` rows: a number, a content hash (the hash of its
cases, :func:`training_jobs.evals.cases.content_hash`; unique per set, so the same cases are never stored twice), a
parent, an author and a change note. A new version is a new row; nothing about a version or its cases changes once
written (a trigger refuses updates, migration 0009). The cases of a version are rows (:class:`EvalCase`) so the
console can browse, filter and page through them; each keeps its canonical JSON line, so an export gives back the
bytes that were imported.

``EvalSet.pinned`` is the version the approval gate compares on (DESIGN §11 "pinned eval sets"); moving the pin is
the one change a set allows, and it is recorded on the audit timeline.
"""

from __future__ import annotations

import json
from functools import cached_property

from django.conf import settings
from django.db import models

EVAL_SET_NAME_RE = r"^[a-z0-9][a-z0-9_\-]*$"


class EvalSet(models.Model):
    class Kind(models.TextChoices):
        T1 = "t1", "T1 Live-Stream QA"
        T2 = "t2", "T2 Harness-Variant QA"
        T3 = "t3", "T3 Tool and prompt robustness"
        T4 = "t4", "T4 IFEval"

    name = models.SlugField(max_length=64, unique=True, help_text="lowercase letters, digits, '-' and '_'")
    kind = models.CharField(max_length=4, choices=Kind.choices, db_index=True)
    description = models.TextField(blank=True, max_length=2000)
    pinned = models.ForeignKey("EvalSetVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
                               help_text="the version the approval gate evaluates on (None: not pinned)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "name"]
        permissions = [("pin_evalset", "Can pin an eval set version for the approval gate")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind.upper()})"


class EvalSetVersion(models.Model):
    eval_set = models.ForeignKey(EvalSet, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                               related_name="+", help_text="None: seeded from the committed data files")
    change_note = models.TextField(blank=True, max_length=2000)
    content_hash = models.CharField(max_length=64)
    case_count = models.PositiveIntegerField()
    size_bytes = models.PositiveIntegerField(default=0, help_text="bytes of the exported JSON lines")
    facet_counts = models.JSONField(default=dict, blank=True,
                                    help_text="cases per tag and per kind-specific field value: "
                                              "{'tag': {'typo': 12}, 'tool': {'catalog.stock': 40}, ...}")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["eval_set", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["eval_set", "number"], name="eval_set_version_number_unique"),
            models.UniqueConstraint(fields=["eval_set", "content_hash"], name="eval_set_version_hash_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.eval_set.name} v{self.number}"

    @property
    def short_hash(self) -> str:
        return self.content_hash[:12]


class EvalCase(models.Model):
    """One case of one version: its canonical JSON line and what the browser filters on."""

    version = models.ForeignKey(EvalSetVersion, on_delete=models.CASCADE, related_name="cases")
    position = models.PositiveIntegerField(help_text="0-based line of the case in the version's JSON lines")
    case_id = models.CharField(max_length=200)
    tags = models.JSONField(default=list, blank=True)
    # "|tag|other|": one portable "contains" filter on PostgreSQL and SQLite alike (JSON containment is not)
    tags_text = models.TextField(blank=True)
    # "|key=value|...": the kind-specific fields the case table filters on (level, fault, tool, instruction, ...)
    facets_text = models.TextField(blank=True)
    search_text = models.TextField(blank=True, help_text="lowercased text of the case, for the search box")
    case_json = models.TextField(help_text="the case as one canonical JSON line (what export writes)")

    class Meta:
        ordering = ["version", "position"]
        constraints = [
            models.UniqueConstraint(fields=["version", "position"], name="eval_case_position_unique"),
            models.UniqueConstraint(fields=["version", "case_id"], name="eval_case_id_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.version} #{self.position} {self.case_id}"

    @cached_property
    def data(self) -> dict:
        return json.loads(self.case_json)
