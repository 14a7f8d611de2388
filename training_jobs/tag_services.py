"""Writes of tags and notes (training_jobs.tag_models): add tags, remove one, save the note. Each checks the rules
(training_jobs.tags), changes nothing when any part of the input breaks one, and records what changed on the
audit timeline in the same transaction. Who may call them is the view's question (tag_selectors.SUBJECTS)."""

from __future__ import annotations

from django.db import transaction

from console.errors import DomainError, EditConflict, ValidationFailed
from console.services import audit_record
from training_jobs.tag_models import ObjectNote, ObjectTag
from training_jobs.tag_selectors import subject_of
from training_jobs.tags import (
    TagError,
    check_tag,
    check_tag_count,
    clean_note,
    parse_tags,
)


class TagMissing(DomainError):
    status_code = 404
    code = "not_found"


def _locked(obj):
    """The thing's row, locked: two people adding tags at once cannot pass the limit together."""
    return type(obj).objects.select_for_update().only("pk").get(pk=obj.pk)


def tags_add(*, user, obj, text: str) -> list[str]:
    """Add the tags typed in ``text`` (commas or blanks between them) to ``obj``; the ones it has already are kept
    as they are. Returns the tags added."""
    kind = subject_of(obj)
    try:
        wanted = parse_tags(text)
    except TagError as exc:
        raise ValidationFailed(str(exc), errors=[{"path": "tags", "message": str(exc)}]) from None
    with transaction.atomic():
        _locked(obj)
        have = set(ObjectTag.objects.filter(subject=kind.subject, object_id=obj.pk).values_list("slug", flat=True))
        new = [t for t in wanted if t not in have]
        if not new:
            return []
        try:
            check_tag_count(len(have), len(new), kind.noun)
        except TagError as exc:
            raise ValidationFailed(str(exc), errors=[{"path": "tags", "message": str(exc)}]) from None
        ObjectTag.objects.bulk_create([ObjectTag(subject=kind.subject, object_id=obj.pk, slug=t, created_by=user)
                                       for t in new])
        audit_record(actor=user, action="tags.added", scope=kind.audit_scope(obj), target=kind.audit_target(obj),
                     to_state=" ".join(sorted(have | set(new))), data={"added": new})
    return new


def tag_remove(*, user, obj, tag: str) -> None:
    kind = subject_of(obj)
    try:
        tag = check_tag(tag)
    except TagError as exc:
        raise ValidationFailed(str(exc), errors=[{"path": "tag", "message": str(exc)}]) from None
    with transaction.atomic():
        _locked(obj)
        deleted, _ = ObjectTag.objects.filter(subject=kind.subject, object_id=obj.pk, slug=tag).delete()
        if not deleted:
            raise TagMissing(f"This {kind.noun} has no tag “{tag}” (removed meanwhile?).")
        left = ObjectTag.objects.filter(subject=kind.subject, object_id=obj.pk).values_list("slug", flat=True)
        audit_record(actor=user, action="tags.removed", scope=kind.audit_scope(obj), target=kind.audit_target(obj),
                     to_state=" ".join(left), data={"removed": tag})


def note_save(*, user, obj, text: str, revision: int) -> ObjectNote:
    """Save the note of ``obj`` (empty text: no note). ``revision`` is the one the editor started from: when the note
    was saved since, EditConflict (409) and nothing changes. Saving the same text changes nothing either."""
    kind = subject_of(obj)
    try:
        text = clean_note(text)
    except TagError as exc:
        raise ValidationFailed(str(exc), errors=[{"path": "note", "message": str(exc)}]) from None
    with transaction.atomic():
        _locked(obj)
        note, _ = ObjectNote.objects.select_for_update().get_or_create(subject=kind.subject, object_id=obj.pk)
        if note.revision != revision:
            raise EditConflict(f"Someone saved this note meanwhile (edit {note.revision}, yours started from edit "
                               f"{revision}): read theirs, then save again.", current_lock_version=note.revision)
        if note.text == text:
            return note
        before = note.text
        note.text, note.revision, note.updated_by = text, note.revision + 1, user
        note.save()
        audit_record(actor=user, action="note.edited", scope=kind.audit_scope(obj), target=kind.audit_target(obj),
                     from_state=f"{len(before)} characters", to_state=f"{len(text)} characters",
                     data={"revision": note.revision, "note": text})
    return note
