"""Reads of tags and notes: which kinds of things carry them (and who may see and edit each), the tags and note of
one thing, and of a page of things in two queries."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Model, QuerySet

from console import roles
from training_jobs.models import Dataset, EvalRun, TrainedModel, TrainingJob
from training_jobs.tag_models import ObjectNote, ObjectTag, Subject


@dataclass(frozen=True)
class SubjectKind:
    """A kind of thing that carries tags and a note: who may see them (whoever may see the thing) and who may edit
    them (whoever may launch such a thing), its page and its list."""

    subject: str
    model: type[Model]
    view_perm: str
    edit_perm: str
    namespace: str  # the URL namespace of its pages: "<namespace>:detail", "<namespace>:list", "<namespace>:tags"
    noun: str

    def detail_url(self, obj) -> str:
        from django.urls import reverse

        return reverse(f"{self.namespace}:detail", args=[obj.pk])

    def audit_scope(self, obj) -> str:
        return obj.audit_scope() if hasattr(obj, "audit_scope") else f"{self.subject}:{obj.pk}"

    def audit_target(self, obj) -> str:
        return obj.audit_target() if hasattr(obj, "audit_target") else f"{self.subject}:{obj.name}"


SUBJECTS: dict[str, SubjectKind] = {k.subject: k for k in (
    SubjectKind(Subject.DATASET, Dataset, roles.VIEW_DATASETS, roles.BUILD_DATASET, "training_jobs", "dataset"),
    SubjectKind(Subject.TRAINING_JOB, TrainingJob, roles.VIEW_TRAINING, roles.RUN_TRAINING, "training",
                "training job"),
    # models come out of training jobs: whoever may launch those may tag them
    SubjectKind(Subject.MODEL, TrainedModel, roles.VIEW_MODELS, roles.RUN_TRAINING, "models", "model"),
    SubjectKind(Subject.EVAL_RUN, EvalRun, roles.VIEW_EVAL_RUNS, roles.RUN_EVAL, "eval_runs", "evaluation run"),
)}


def subject_of(obj) -> SubjectKind:
    for kind in SUBJECTS.values():
        if isinstance(obj, kind.model):
            return kind
    raise LookupError(f"{type(obj).__name__} carries no tags")


def object_tags(subject: str, object_id) -> list[str]:
    return list(ObjectTag.objects.filter(subject=subject, object_id=object_id).values_list("slug", flat=True))


def object_note(subject: str, object_id) -> ObjectNote | None:
    return ObjectNote.objects.select_related("updated_by").filter(subject=subject, object_id=object_id).first()


def tags_and_notes(subject: str, objects: Sequence[Any]) -> None:
    """Give each of ``objects`` (one page of a list) its ``tag_slugs`` and ``note_text``: two queries in all."""
    ids = [o.pk for o in objects]
    tags: dict[Any, list[str]] = defaultdict(list)
    for object_id, slug in ObjectTag.objects.filter(subject=subject, object_id__in=ids).values_list("object_id",
                                                                                                 "slug"):
        tags[object_id].append(slug)
    notes = dict(ObjectNote.objects.filter(subject=subject, object_id__in=ids).exclude(text="")
                 .values_list("object_id", "text"))
    for o in objects:
        o.tag_slugs = tags.get(o.pk, [])
        o.note_text = notes.get(o.pk, "")


def known_tags(subject: str, limit: int = 200) -> list[str]:
    """The tags in use on things of ``subject`` (offered as you type a tag)."""
    return list(ObjectTag.objects.filter(subject=subject).order_by("slug").values_list("slug", flat=True)
                .distinct()[:limit])


def tagged_ids(subject: str, slug: str) -> QuerySet:
    """The ids of the things of ``subject`` carrying tag ``slug`` (a sub-select)."""
    return ObjectTag.objects.filter(subject=subject, slug=slug).values("object_id")


def noted_ids(subject: str, text: str) -> QuerySet:
    """The ids of the things of ``subject`` whose note contains ``text`` (any case; a sub-select)."""
    return ObjectNote.objects.filter(subject=subject, text__icontains=text).values("object_id")
