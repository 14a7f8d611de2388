"""Writes for reviews: comments on diff lines (with replies, resolve and reopen), the review checklist, and an
approval that carries the ticked checklist. Each is one transaction with its audit row, like
:mod:`harness_editor.services`."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from harness_editor import services
from harness_editor.models import ApprovalChecklist, HarnessVersion, ReviewChecklistItem, ReviewComment
from harness_editor.review_selectors import checklist_items, may_comment, unresolved_count

MAX_BODY = 4000
MAX_ITEMS = 30
MAX_ITEM_CHARS = 300


def _scope(version: HarnessVersion) -> str:
    return f"harness:{version.harness.slug}"


def _body(body: str) -> str:
    body = (body or "").replace("\r\n", "\n").strip()
    if not body:
        raise ValidationFailed("the comment is empty", errors=[{"path": "body", "message": "write a comment"}])
    if len(body) > MAX_BODY:
        raise ValidationFailed("the comment is too long", errors=[
            {"path": "body", "message": f"at most {MAX_BODY} characters"}])
    return body


def _require_commenter(user, version: HarnessVersion) -> None:
    if not may_comment(user, version):
        raise NotAllowed("only reviewers and the version's author comment on its changes")


def review_comment_create(*, user, version: HarnessVersion, base_number: int, component: str, path: str, line: str,
                          line_text: str, body: str) -> ReviewComment:
    """Open a thread on one line of the diff base → version. The caller has found the line in that diff
    (``line_text`` is what it says now)."""
    _require_commenter(user, version)
    body = _body(body)
    if len(path) > 300 or len(component) > 32 or len(line) > 16:
        raise ValidationFailed("no such line", errors=[{"path": "line", "message": "this line cannot take comments"}])
    with transaction.atomic():
        comment = ReviewComment.objects.create(version=version, base_number=base_number, component=component,
                                               path=path, line=line, line_text=line_text[:2000], author=user,
                                               body=body)
        audit_record(actor=user, action="review.commented", scope=_scope(version),
                     target=f"version:{version.number}", comment=body,
                     data={"comment_id": comment.id, "version_id": version.id, "base": base_number,
                           "component": component, "path": path, "line": line})
    return comment


def review_comment_reply(*, user, thread: ReviewComment, body: str) -> ReviewComment:
    version = thread.version
    _require_commenter(user, version)
    body = _body(body)
    root = thread.thread or thread
    with transaction.atomic():
        reply = ReviewComment.objects.create(version=version, base_number=root.base_number, component=root.component,
                                             path=root.path, line=root.line, line_text=root.line_text, thread=root,
                                             author=user, body=body)
        audit_record(actor=user, action="review.replied", scope=_scope(version), target=f"version:{version.number}",
                     comment=body, data={"comment_id": reply.id, "thread_id": root.id, "version_id": version.id,
                                         "component": root.component, "path": root.path, "line": root.line})
    return reply


def review_comment_resolve(*, user, thread: ReviewComment, resolved: bool) -> ReviewComment:
    """Resolve (or reopen) a thread: reviewers and the version's author may."""
    version = thread.version
    _require_commenter(user, version)
    if thread.thread_id is not None:
        raise ValidationFailed("resolve the thread, not a reply", errors=[
            {"path": "comment", "message": "a reply is resolved with its thread"}])
    with transaction.atomic():
        locked = ReviewComment.objects.select_for_update().get(pk=thread.pk)
        if locked.is_resolved == resolved:
            raise InvalidTransition("this thread is already " + ("resolved" if resolved else "open"))
        locked.resolved_at, locked.resolved_by = (timezone.now(), user) if resolved else (None, None)
        locked.save(update_fields=["resolved_at", "resolved_by"])
        audit_record(actor=user, action="review.resolved" if resolved else "review.reopened", scope=_scope(version),
                     target=f"version:{version.number}", from_state="open" if resolved else "resolved",
                     to_state="resolved" if resolved else "open",
                     data={"comment_id": locked.id, "version_id": version.id, "component": locked.component,
                           "path": locked.path, "line": locked.line})
    return locked


def review_checklist_set(*, user, texts: list[str]) -> list[ReviewChecklistItem]:
    """Replace the review checklist (compliance leads). The old items are retired, not deleted."""
    if not user.has_perm(roles.SET_REVIEW_CHECKLIST):
        raise NotAllowed("only a compliance lead sets the review checklist")
    items = [t.strip() for t in texts if t.strip()]
    errors = [{"path": f"items[{i}]", "message": f"item {i + 1} is longer than {MAX_ITEM_CHARS} characters"}
              for i, t in enumerate(items) if len(t) > MAX_ITEM_CHARS]
    if len(items) > MAX_ITEMS:
        errors.append({"path": "items", "message": f"at most {MAX_ITEMS} items"})
    if len(set(items)) != len(items):
        errors.append({"path": "items", "message": "an item is listed twice"})
    if errors:
        raise ValidationFailed("the checklist was not saved", errors=errors)
    with transaction.atomic():
        before = [i.text for i in checklist_items()]
        ReviewChecklistItem.objects.filter(active=True).update(active=False)
        created = [ReviewChecklistItem.objects.create(text=t, position=n, created_by=user)
                   for n, t in enumerate(items)]
        audit_record(actor=user, action="review.checklist_set", scope="review", target="review:checklist",
                     comment="\n".join(items), data={"items": items, "before": before})
    return created


def version_approve_reviewed(*, user, version: HarnessVersion, comment: str = "", override_reason: str = "",
                             ticked: Iterable[int] | None = None) -> HarnessVersion:
    """Approve (harness_editor.services.version_approve) once every item of the review checklist is ticked; the
    ticks are kept with the approval (ApprovalChecklist) and in the approval's audit data, with the number of
    unresolved comment threads (a warning, not a refusal). The page and the API both approve through here.

    A ticked id that is not on the current checklist is refused (path ``checklist[<index in ticked>]``): the
    reviewer ticked a list that has changed since, or sent a wrong id."""
    ticked = list(ticked or ())
    # who may approve and whether it can be approved come before the checklist: an author or a version that is not
    # submitted gets the same refusal as without a checklist
    services._check_four_eyes(user, version)
    if version.status != HarnessVersion.Status.SUBMITTED:
        raise InvalidTransition(f"v{version.number} is {version.status}; it must be submitted to be approved")
    with transaction.atomic():
        items = checklist_items()
        current = {i.id for i in items}
        errors = [{"path": f"checklist[{n}]", "message": f"{t} is not an item of the current review checklist"}
                  for n, t in enumerate(ticked) if t not in current]
        errors += [{"path": "checklist", "message": f"not ticked: {i.text}"} for i in items if i.id not in ticked]
        if errors:
            raise ValidationFailed("tick every item of the review checklist before approving", errors=errors)
        record = [{"id": i.id, "text": i.text, "ticked": True} for i in items]
        unresolved = unresolved_count(version=version)
        approved = services.version_approve(user=user, version=version, comment=comment,
                                            override_reason=override_reason,
                                            review={"checklist": record, "unresolved_comments": unresolved})
        if record:
            ApprovalChecklist.objects.create(version=approved, items=record, ticked_by=user)
    approved.unresolved_comments = unresolved
    return approved
