"""Tags and the note on a dataset, training job, model or evaluation run page: add tags, remove one, save the note.

Each is a plain form POST (answered by a redirect to the page, or, when refused, by a small page with the form and
the reason), and the same POST from htmx is answered by the panel alone (templates/training_jobs/_tags_notes.html
#panel), refusals included, with their 4xx status. The panel on each page comes from the ``tags_notes`` template
tag, so the detail views need nothing for it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.errors import DomainError
from training_jobs import tag_selectors, tag_services
from training_jobs.tag_selectors import SUBJECTS, SubjectKind
from training_jobs.tags import MAX_TAGS, NOTE_MAX_CHARS, TAG_MAX_CHARS

PANEL = "training_jobs/_tags_notes.html#panel"


def panel_context(user, obj, **extra: Any) -> dict[str, Any]:
    kind = tag_selectors.subject_of(obj)
    note = tag_selectors.object_note(kind.subject, obj.pk)
    return {
        "subject": kind, "obj": obj, "tags": tag_selectors.object_tags(kind.subject, obj.pk),
        "note": note if note and note.text else None, "note_revision": note.revision if note else 0,
        "can_edit": user.has_perm(kind.edit_perm),
        "known_tags": tag_selectors.known_tags(kind.subject) if user.has_perm(kind.edit_perm) else [],
        "list_url": reverse(f"{kind.namespace}:list"),
        "tags_url": reverse(f"{kind.namespace}:tags", args=[obj.pk]),
        "untag_url": reverse(f"{kind.namespace}:untag", args=[obj.pk]),
        "note_url": reverse(f"{kind.namespace}:note", args=[obj.pk]),
        "max_tags": MAX_TAGS, "tag_max_chars": TAG_MAX_CHARS, "note_max_chars": NOTE_MAX_CHARS,
        **extra,
    }


def _subject_or_404(request: HttpRequest, subject: str, object_id) -> tuple[SubjectKind, Any]:
    kind = SUBJECTS[subject]
    # the role first (403 whether or not the thing exists), as role_required does
    if not request.user.has_perm(kind.edit_perm):
        raise PermissionDenied(f"your role may not tag or annotate a {kind.noun}")
    try:
        return kind, kind.model.objects.get(pk=object_id)
    except kind.model.DoesNotExist:
        raise Http404(f"no such {kind.noun}") from None


def _answer(request: HttpRequest, kind: SubjectKind, obj, service, **kwargs: Any) -> HttpResponse:
    try:
        service(user=request.user, obj=obj, **kwargs)
    except DomainError as exc:
        extra = {"error": exc.message, "draft": request.POST.get("note") if "note" in request.POST else None,
                 "tags_draft": request.POST.get("tags", "")}
        context = panel_context(request.user, obj, **extra)
        template = PANEL if request.htmx else "training_jobs/tags_notes_refused.html"
        return render(request, template, context, status=exc.status_code)
    if request.htmx:
        return render(request, PANEL, panel_context(request.user, obj, saved=True))
    return redirect(kind.detail_url(obj) + "#tags-notes")


@login_required
@require_POST
def tags_add(request: HttpRequest, subject: str, object_id) -> HttpResponse:
    kind, obj = _subject_or_404(request, subject, object_id)
    return _answer(request, kind, obj, tag_services.tags_add, text=request.POST.get("tags", ""))


@login_required
@require_POST
def tag_remove(request: HttpRequest, subject: str, object_id) -> HttpResponse:
    kind, obj = _subject_or_404(request, subject, object_id)
    return _answer(request, kind, obj, tag_services.tag_remove, tag=request.POST.get("tag", ""))


@login_required
@require_POST
def note_save(request: HttpRequest, subject: str, object_id) -> HttpResponse:
    kind, obj = _subject_or_404(request, subject, object_id)
    if "note" not in request.POST:
        return _refused(request, kind, obj, "Nothing to save: the form sent no note.")
    try:
        revision = int(request.POST.get("revision", ""))
    except ValueError:
        return _refused(request, kind, obj, "The form sent no edit number (revision): reload the page and save again.")
    return _answer(request, kind, obj, tag_services.note_save, text=request.POST["note"], revision=revision)


def _refused(request: HttpRequest, kind: SubjectKind, obj, message: str) -> HttpResponse:
    context = panel_context(request.user, obj, error=message, draft=request.POST.get("note"))
    template = PANEL if request.htmx else "training_jobs/tags_notes_refused.html"
    return render(request, template, context, status=400)
