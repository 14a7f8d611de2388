"""Writes to the harness registry. Each service is one transaction and records what it did in the audit
timeline inside that transaction, so a change and its audit row land together or not at all.

Role checks happen in views/APIs (403 before any work) and again here for the rules that are about the
*particular* user and object (author-only edits, four eyes), so no caller can skip them.
"""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from console import roles
from console.errors import EditConflict, InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from harness_editor import gate
from harness_editor.models import Harness, HarnessVersion, Label
from harness_editor.schemas import MAX_MANIFEST_BYTES, Manifest, manifest_to_json
from harness_editor.schemas.loading import TOO_LARGE_MESSAGE, text_content_hash

Status = HarnessVersion.Status
SLUG_RE = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
RESERVED_SLUGS = {"new"}  # /harnesses/new/ is the create page


def _scope(harness: Harness) -> str:
    return f"harness:{harness.slug}"


def _require(user, perm: str, what: str) -> None:
    if not user.has_perm(perm):
        raise NotAllowed(f"your role does not allow you to {what}")


def harness_create(*, user, slug: str, name: str, description: str = "", manifest: Manifest,
                   change_note: str = "Initial version") -> HarnessVersion:
    """Create a harness with its first version as a draft."""
    _require(user, roles.ADD_HARNESS, "create harnesses")
    if not SLUG_RE.fullmatch(slug or ""):
        raise ValidationFailed("invalid slug", errors=[
            {"path": "slug", "message": "use 1-64 lowercase letters, digits and hyphens, starting with a letter"}])
    if slug in RESERVED_SLUGS:
        raise ValidationFailed("reserved slug", errors=[{"path": "slug", "message": f"'{slug}' is reserved"}])
    with transaction.atomic():
        if Harness.objects.filter(slug=slug).exists():
            raise ValidationFailed("a harness with this slug exists", errors=[
                {"path": "slug", "message": f"'{slug}' is already taken"}])
        try:
            harness = Harness.objects.create(slug=slug, name=name, description=description, created_by=user)
        except IntegrityError:  # lost a race with another create of the same slug
            raise ValidationFailed("a harness with this slug exists", errors=[
                {"path": "slug", "message": f"'{slug}' is already taken"}]) from None
        audit_record(actor=user, action="harness.created", scope=_scope(harness), target=f"harness:{slug}",
                     to_state="created", data={"name": name})
        return _version_insert(user=user, harness=harness, manifest=manifest, parent=None,
                               change_note=change_note)


def version_create_draft(*, user, harness: Harness, manifest: Manifest, parent: HarnessVersion | None,
                         change_note: str = "") -> HarnessVersion:
    """Start a new draft (usually from an existing version: 'edit' of an immutable version)."""
    _require(user, roles.EDIT_DRAFT, "create drafts")
    if parent is not None and parent.harness_id != harness.id:
        raise ValidationFailed("parent belongs to another harness", errors=[
            {"path": "parent", "message": "parent version must belong to the same harness"}])
    with transaction.atomic():
        return _version_insert(user=user, harness=harness, manifest=manifest, parent=parent,
                               change_note=change_note)


def _canonical(manifest: Manifest) -> tuple[str, str]:
    """(canonical JSON, content hash) of a manifest to store; one more than the size limit is refused here, so no
    way in (YAML, JSON text, a JSON object, a form, a service caller with a Manifest) stores more."""
    text = manifest_to_json(manifest)
    if len(text) > MAX_MANIFEST_BYTES or len(text.encode("utf-8")) > MAX_MANIFEST_BYTES:
        raise ValidationFailed("the manifest is too large", errors=[{"path": "", "message": TOO_LARGE_MESSAGE}])
    return text, text_content_hash(text)


def _version_insert(*, user, harness: Harness, manifest: Manifest, parent: HarnessVersion | None,
                    change_note: str) -> HarnessVersion:
    # Lock the harness row so concurrent drafts get distinct, gap-free numbers.
    Harness.objects.select_for_update().filter(pk=harness.pk).first()
    number = (harness.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    manifest_json, manifest_hash = _canonical(manifest)
    version = HarnessVersion.objects.create(
        harness=harness, number=number, parent=parent, author=user, change_note=change_note,
        manifest_json=manifest_json, content_hash=manifest_hash,
    )
    audit_record(actor=user, action="version.created", scope=_scope(harness), target=f"version:{number}",
                 to_state=Status.DRAFT, comment=change_note,
                 data={"version_id": version.id, "parent": parent.number if parent else None,
                       "content_hash": version.content_hash})
    return version


def version_save_draft(*, user, version: HarnessVersion, manifest: Manifest, lock_version: int,
                       change_note: str | None = None) -> HarnessVersion:
    """Save a draft's manifest. A save that started from a stale ``lock_version`` is a conflict, never a
    silent overwrite."""
    _require(user, roles.EDIT_DRAFT, "edit drafts")
    if version.author_id != user.id:
        raise NotAllowed("only the author edits a draft; start your own draft from this version")
    manifest_json, manifest_hash = _canonical(manifest)
    fields = {
        "manifest_json": manifest_json,
        "content_hash": manifest_hash,
        "lock_version": F("lock_version") + 1,
        "updated_at": timezone.now(),
    }
    if change_note is not None:
        fields["change_note"] = change_note
    with transaction.atomic():
        updated = HarnessVersion.objects.filter(
            pk=version.pk, status=Status.DRAFT, lock_version=lock_version).update(**fields)
        if not updated:
            current = HarnessVersion.objects.filter(pk=version.pk).values("status", "lock_version").first()
            if current is None:
                raise InvalidTransition("this draft was discarded")
            if current["status"] != Status.DRAFT:
                raise InvalidTransition(f"v{version.number} is {current['status']} and can no longer be edited")
            raise EditConflict(
                f"v{version.number} was saved elsewhere since you opened it (you had revision {lock_version}, "
                f"it is now at {current['lock_version']}); reload to see the latest, your input is kept below",
                current_lock_version=current["lock_version"],
            )
    version.refresh_from_db()
    version.__dict__.pop("manifest", None)
    return version


def version_discard_draft(*, user, version: HarnessVersion) -> None:
    _require(user, roles.EDIT_DRAFT, "discard drafts")
    if version.author_id != user.id:
        raise NotAllowed("only the author can discard a draft")
    with transaction.atomic():
        locked = HarnessVersion.objects.select_for_update().get(pk=version.pk)
        if locked.status != Status.DRAFT:
            raise InvalidTransition(f"v{locked.number} is {locked.status}; only drafts can be discarded")
        if locked.children.exists():
            raise InvalidTransition(f"v{locked.number} is the parent of other versions")
        audit_record(actor=user, action="version.discarded", scope=_scope(locked.harness),
                     target=f"version:{locked.number}", from_state=Status.DRAFT, to_state="discarded")
        locked.delete()


def _transition(*, user, version: HarnessVersion, expected: str, new: str, action: str, comment: str,
                **fields) -> HarnessVersion:
    with transaction.atomic():
        locked = HarnessVersion.objects.select_for_update().select_related("harness").get(pk=version.pk)
        if locked.status != expected:
            raise InvalidTransition(f"v{locked.number} is {locked.status}; it must be {expected} to be {new}")
        for name, value in fields.items():
            setattr(locked, name, value)
        locked.status = new
        locked.save(update_fields=["status", "updated_at", *fields])
        audit_record(actor=user, action=action, scope=_scope(locked.harness), target=f"version:{locked.number}",
                     from_state=expected, to_state=new, comment=comment,
                     data={"version_id": locked.id, "content_hash": locked.content_hash})
    return locked


def version_submit(*, user, version: HarnessVersion, comment: str = "") -> HarnessVersion:
    _require(user, roles.SUBMIT_VERSION, "submit versions")
    if version.author_id != user.id:
        raise NotAllowed("only the author can submit their draft")
    return _transition(user=user, version=version, expected=Status.DRAFT, new=Status.SUBMITTED,
                       action="version.submitted", comment=comment, submitted_at=timezone.now())


def _check_four_eyes(user, version: HarnessVersion) -> None:
    _require(user, roles.REVIEW_VERSION, "review versions")
    if version.author_id == user.id:
        raise NotAllowed("four eyes: the author of a version can never review it")


def version_approve(*, user, version: HarnessVersion, comment: str = "", override_reason: str = "",
                    review: dict | None = None) -> HarnessVersion:
    """Approve a submitted version (four eyes) when its evaluation gate passes (:mod:`harness_editor.gate`).

    A failing gate refuses (GateFailed, 409, one error per failing rule) unless ``override_reason`` is given by
    someone who may override (``roles.OVERRIDE_GATE``: compliance leads); a reason from anyone else is refused
    (NotAllowed). The gate is evaluated with the version locked, in the approval's transaction; the approval's
    audit row records the gate's verdict and the runs it rested on, and an override adds its own row with the
    reason and the rules it overrode. ``review`` (the ticked review checklist, the open comment threads:
    harness_editor.review_services) goes into the approval's audit data as it is."""
    _check_four_eyes(user, version)
    override_reason = (override_reason or "").strip()
    with transaction.atomic():
        locked = HarnessVersion.objects.select_for_update().select_related("harness").get(pk=version.pk)
        if locked.status != Status.SUBMITTED:
            raise InvalidTransition(f"v{locked.number} is {locked.status}; it must be submitted to be approved")
        evidence = gate.approval_evidence(locked)
        overridden = evidence.enabled and not evidence.passed
        if overridden:
            if not override_reason:
                hint = ("you may override it with a written reason" if user.has_perm(roles.OVERRIDE_GATE)
                        else "attach the missing evidence, or ask a compliance lead to override")
                raise gate.GateFailed(evidence, hint=hint)
            if not user.has_perm(roles.OVERRIDE_GATE):
                raise NotAllowed("only a compliance lead may override a failing evaluation gate")
            if len(override_reason) > 4000:
                raise ValidationFailed("the override reason is too long", errors=[
                    {"path": "override_reason", "message": "at most 4000 characters"}])
        gate_data = {"enabled": evidence.enabled, "passed": evidence.passed, "overridden": overridden,
                     "failing": [{"rule": r.name, "detail": r.detail} for r in evidence.failing],
                     "runs": [s.run_id for s in evidence.sets if s.run_id],
                     "baseline_runs": [s.baseline_run_id for s in evidence.sets if s.baseline_run_id]}
        if overridden:
            # the timeline page shows the comment: the reason, then the rules it overrode (both also in data)
            failing = evidence.failing
            audit_record(actor=user, action="version.gate_overridden", scope=_scope(locked.harness),
                         target=f"version:{locked.number}",
                         from_state=f"gate failed ({len(failing)} rule{'s' if len(failing) != 1 else ''})",
                         to_state="overridden",
                         comment=f"{override_reason}\n— overrode: " + "; ".join(r.name for r in failing),
                         data={"version_id": locked.id, "reason": override_reason, **gate_data})
        locked.status = Status.APPROVED
        locked.decided_at, locked.decided_by, locked.decision_comment = timezone.now(), user, comment
        locked.save(update_fields=["status", "updated_at", "decided_at", "decided_by", "decision_comment"])
        audit_record(actor=user, action="version.approved", scope=_scope(locked.harness),
                     target=f"version:{locked.number}", from_state=Status.SUBMITTED, to_state=Status.APPROVED,
                     comment=comment,
                     data={"version_id": locked.id, "content_hash": locked.content_hash, "gate": gate_data,
                           **({"review": review} if review is not None else {})})
    locked.gate_overridden = overridden
    return locked


def version_reject(*, user, version: HarnessVersion, comment: str) -> HarnessVersion:
    _check_four_eyes(user, version)
    if not comment.strip():
        raise ValidationFailed("a rejection needs a comment", errors=[
            {"path": "comment", "message": "say what must change before this can be approved"}])
    return _transition(user=user, version=version, expected=Status.SUBMITTED, new=Status.REJECTED,
                       action="version.rejected", comment=comment, decided_at=timezone.now(),
                       decided_by=user, decision_comment=comment)


def label_move(*, user, harness: Harness, name: str, version: HarnessVersion, comment: str = "",
               rollback: bool = False) -> Label:
    """Point a label at an approved version of the same harness (creating the label on first use)."""
    _require(user, roles.MOVE_LABEL, "move labels")
    return _label_move(user=user, harness=harness, name=name, version=version, comment=comment, rollback=rollback)


def label_move_for_rollback(*, user, harness: Harness, name: str, version: HarnessVersion, comment: str,
                            reason: dict) -> Label:
    """Move a label back as part of a rollback another part of the console authorised (a deployment rollback:
    operators may roll a deployment back without MOVE_LABEL). The caller has checked its own permission; the move
    is the same label move (same rules, same row on the label's history, marked ``rollback``) with ``reason``
    (e.g. ``{"deployment": name, "revision": n}``) in its audit data. The registry imports nothing from the
    caller: the reason is plain data."""
    if not reason:
        raise ValueError("a label moved on behalf of a rollback names its reason")
    return _label_move(user=user, harness=harness, name=name, version=version, comment=comment, rollback=True,
                       reason=reason)


def label_move_refusals(*, harness: Harness, name: str, version: HarnessVersion) -> None:
    """Refuse (ValidationFailed, every reason at once) moving label ``name`` of ``harness`` to ``version``: the move
    itself and the confirmation page before it (harness_editor.review_selectors) ask this one question."""
    from django.core.exceptions import ValidationError as DjangoValidationError

    errors = []
    try:
        Label._meta.get_field("name").run_validators(name)
    except DjangoValidationError as exc:
        errors.append({"path": "name", "message": "; ".join(exc.messages)})
    if version.harness_id != harness.id:
        errors.append({"path": "version", "message": "the version belongs to another harness"})
    elif version.status != Status.APPROVED:
        errors.append({"path": "version", "message": f"v{version.number} is {version.status}; "
                                                     "only approved versions can carry a label"})
    if errors:
        raise ValidationFailed("cannot move the label", errors=errors)


def _label_move(*, user, harness: Harness, name: str, version: HarnessVersion, comment: str, rollback: bool,
                reason: dict | None = None) -> Label:
    label_move_refusals(harness=harness, name=name, version=version)
    with transaction.atomic():
        label = Label.objects.select_for_update().filter(harness=harness, name=name).first()
        previous = None
        if label is None:
            label = Label.objects.create(harness=harness, name=name, version=version, moved_by=user)
        else:
            if label.version_id == version.id:
                raise ValidationFailed("nothing to move", errors=[
                    {"path": "version", "message": f"'{name}' already points at v{version.number}"}])
            previous = label.version
            label.version = version
            label.moved_by = user
            label.save(update_fields=["version", "moved_by", "moved_at"])
        audit_record(
            actor=user, action="label.moved", scope=_scope(harness), target=f"label:{name}",
            from_state=f"v{previous.number}" if previous else "", to_state=f"v{version.number}",
            comment=comment,
            data={"label": name, "from_version_id": previous.id if previous else None,
                  "to_version_id": version.id, "rollback": rollback, **({"reason": reason} if reason else {})},
        )
    return label


def label_rollback(*, user, harness: Harness, name: str, comment: str = "") -> Label:
    """Move a label back to where it pointed before its latest move."""
    from harness_editor.selectors import label_history

    last = label_history(harness=harness, name=name).first()
    if last is None:
        raise ValidationFailed("no such label", errors=[{"path": "name", "message": f"no label '{name}'"}])
    previous_id = last.data.get("from_version_id")
    if previous_id is None:
        raise ValidationFailed("nothing to roll back to", errors=[
            {"path": "name", "message": f"'{name}' has no earlier version"}])
    previous = HarnessVersion.objects.get(pk=previous_id)
    return label_move(user=user, harness=harness, name=name, version=previous,
                      comment=comment or f"rollback from {last.to_state}", rollback=True)
