"""Reads for the harness registry. List queries never load manifest text and use a constant number of
queries whatever the number of versions (see bench/registry_bench.py)."""

from __future__ import annotations

from django.db.models import Count, Max, Prefetch, QuerySet

from console.models import AuditEvent
from harness_editor.diff import ManifestDiff, diff_manifests
from harness_editor.models import Harness, HarnessVersion, Label

LIST_FIELDS = ("id", "harness_id", "number", "parent__number", "author__username", "change_note",
               "content_hash", "status", "lock_version", "created_at", "updated_at", "submitted_at",
               "decided_at", "decided_by__username", "decision_comment")


def harness_list() -> QuerySet[Harness]:
    return (
        Harness.objects.annotate(version_count=Count("versions"), latest_number=Max("versions__number"))
        .select_related("created_by")
        .prefetch_related(Prefetch("labels", queryset=Label.objects.select_related("version").only(
            "id", "name", "harness_id", "version__id", "version__number")))
    )


def harness_get(*, slug: str) -> Harness:
    return Harness.objects.get(slug=slug)


def version_history(*, harness: Harness) -> QuerySet[HarnessVersion]:
    """Newest first, without manifest text. Paginate the result."""
    return (
        HarnessVersion.objects.filter(harness=harness)
        .select_related("author", "parent", "decided_by")
        .defer("manifest_json", "parent__manifest_json")
        .order_by("-number")
    )


def version_get(*, harness: Harness, number: int) -> HarnessVersion:
    return HarnessVersion.objects.select_related("harness", "author", "parent", "decided_by").get(
        harness=harness, number=number)


def version_labels(*, version: HarnessVersion) -> list[str]:
    return list(version.labels.values_list("name", flat=True))


def label_list(*, harness: Harness) -> QuerySet[Label]:
    return harness.labels.select_related("version", "moved_by").defer("version__manifest_json")


def label_history(*, harness: Harness, name: str) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(
        scope=f"harness:{harness.slug}", target=f"label:{name}", action="label.moved"
    ).select_related("actor").order_by("-id")


def version_diff(*, old: HarnessVersion, new: HarnessVersion) -> ManifestDiff:
    return diff_manifests(old.manifest, new.manifest)


def review_queue() -> QuerySet[HarnessVersion]:
    return (
        HarnessVersion.objects.filter(status=HarnessVersion.Status.SUBMITTED)
        .select_related("harness", "author").defer("manifest_json").order_by("submitted_at")
    )


def draft_list(*, author) -> QuerySet[HarnessVersion]:
    """The drafts ``author`` is working on, newest first, without manifest text."""
    return (
        HarnessVersion.objects.filter(status=HarnessVersion.Status.DRAFT, author=author)
        .select_related("harness").defer("manifest_json").order_by("-updated_at")
    )


def harness_version_by_ref(ref: str) -> HarnessVersion | None:
    """``slug@number`` or ``slug@label`` (e.g. ``glow-gadget@production``) → that harness version, or None when it
    does not resolve (the APIs, the CLIs and a training job's evaluations all read references this way)."""
    slug, sep, tail = str(ref).rpartition("@")
    if not sep or not slug or not tail:
        return None
    if tail.isdigit():
        if len(tail) >= 10:
            return None
        return HarnessVersion.objects.select_related("harness").filter(harness__slug=slug, number=int(tail)).first()
    label = Label.objects.select_related("version__harness").filter(harness__slug=slug, name=tail).first()
    return label.version if label is not None else None
