"""Writes of deployments: (harness version through a label, model or adapter, serve profile) + endpoints, changed
only through revisions a second person approves (four eyes, as harness versions), rolled back as one.

- :func:`deployment_create` makes a deployment with revision 1 proposed; :func:`deployment_propose` proposes a
  change (fields left out are taken from the revision in force). **One proposal at a time**: a second one while a
  revision waits is refused (409) rather than superseding it silently, so what a reviewer read is what they
  approve; the proposer withdraws it (:func:`deployment_withdraw`) or a reviewer decides it first.
- :func:`deployment_approve` (someone other than the proposer, ``REVIEW_DEPLOYMENT``) records where the label
  points now in ``revision.harness_version`` and makes the revision current; :func:`deployment_reject` needs a
  comment.
- :func:`deployment_rollback` makes the revision that was in force before the current one was approved current
  again (a stack: rolling back twice goes two approvals back, never forward) and moves the label back to that
  revision's version with it: label, model and profile move together. The label move is an ordinary move on the
  label's history (``harness_editor.services.label_move_for_rollback``), so operators may roll back without
  ``MOVE_LABEL``; note that a label is the harness's, so other deployments on the same label follow it.

Every change is one transaction with its row on the one audit timeline (scope ``deployment:<name>``, target
``revision:<n>``); its data names the live sessions that were live on the deployment at that moment.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.models import AuditEvent
from console.services import audit_record
from harness_editor.models import Harness, HarnessVersion, Label
from streams.engine.outbound import OutboundRefused
from streams.model_artefacts import ModelArtefact, model_get
from streams.models import Deployment, DeploymentRevision, LiveSession, ModelEndpoint, ServeProfile

Status = DeploymentRevision.Status
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
RESERVED_NAMES = {"new"}  # /deployments/new/ is the create page
MAX_ENDPOINTS = 8
FIELDS = ("label", "serve_profile", "endpoints", "model", "adapter")  # what a revision carries (besides the note)


def scope_of(deployment: Deployment | str) -> str:
    return f"deployment:{deployment if isinstance(deployment, str) else deployment.name}"


def _require(user, perm: str, what: str) -> None:
    if not user.has_perm(perm):
        raise NotAllowed(f"your role does not allow you to {what}")


def live_sessions_on(deployment: Deployment) -> list[dict[str, str]]:
    """The sessions live on ``deployment`` now, as the audit data names them (the timeline links them)."""
    return [{"id": str(pk), "title": title} for pk, title in
            LiveSession.objects.filter(deployment=deployment, status=LiveSession.Status.LIVE)
            .order_by("started_at").values_list("pk", "title")]


def revision_describe(revision: DeploymentRevision) -> dict[str, Any]:
    """A revision's triple in plain words (audit data, events)."""
    names = dict(ModelEndpoint.objects.filter(pk__in=[int(i) for i in revision.endpoints or []])
                 .values_list("pk", "name"))
    return {"revision": revision.number, "label": revision.label,
            "harness_version": revision.harness_version.number if revision.harness_version_id else None,
            "model": revision.model.name if revision.model_id else None,
            "adapter": revision.adapter.name if revision.adapter_id else None,
            "serve_profile": revision.serve_profile.name,
            "endpoints": [names.get(int(i), f"#{i}") for i in revision.endpoints or []]}


# --- input: names or rows -> rows, every problem located -----------------------------------------------------------


def _trained_model(value, path: str, errors: list[dict]) -> ModelArtefact | None:
    """A registered model from an artefact, its id or a row (a revision's foreign key)."""
    if value is None or value == "":
        return None
    found = model_get(value)
    if found is None:
        errors.append({"path": path, "message": f"no model {getattr(value, 'pk', value)!s:.80}"})
    return found


def _resolve(*, harness: Harness, label, serve_profile, endpoints, model, adapter, errors: list[dict]
             ) -> dict[str, Any]:
    """Rows for a revision's fields from rows or names (serve profile and endpoints by name, models by id)."""
    out: dict[str, Any] = {}
    # label: a valid name that exists on the harness and points at an approved version (its version now)
    label = (label or "").strip() if isinstance(label, str) else label
    try:
        if not isinstance(label, str) or not label:
            raise DjangoValidationError("a label name is required, e.g. production")
        Label._meta.get_field("name").run_validators(label)
    except DjangoValidationError as exc:
        errors.append({"path": "label", "message": "; ".join(exc.messages)})
    else:
        row = Label.objects.select_related("version").filter(harness=harness, name=label).first()
        if row is None:
            errors.append({"path": "label", "message": f"harness {harness.slug!r} has no label {label!r}; move it to "
                                                       "an approved version first"})
        elif row.version.status != HarnessVersion.Status.APPROVED:
            errors.append({"path": "label", "message": f"{label!r} points at v{row.version.number}, which is "
                                                       f"{row.version.status}"})
        else:
            out["label"], out["harness_version"] = label, row.version
    # serve profile, by name
    if isinstance(serve_profile, ServeProfile):
        out["serve_profile"] = serve_profile
    else:
        profile = ServeProfile.objects.filter(name=str(serve_profile or "")[:64]).first() if serve_profile else None
        if profile is None:
            errors.append({"path": "serve_profile", "message": f"no serve profile {serve_profile!s:.80}"
                           if serve_profile else "a serve profile is required"})
        out["serve_profile"] = profile
    # endpoints, in failover order: each exists once and may be used
    if not isinstance(endpoints, (list, tuple)) or not endpoints:
        errors.append({"path": "endpoints", "message": "name at least one model endpoint (the first is the primary)"})
        endpoints = []
    elif len(endpoints) > MAX_ENDPOINTS:
        errors.append({"path": "endpoints", "message": f"at most {MAX_ENDPOINTS} endpoints"})
        endpoints = []
    rows: list[ModelEndpoint] = []
    for index, value in enumerate(endpoints):
        path = f"endpoints[{index}]"
        if isinstance(value, ModelEndpoint):
            endpoint = value
        elif isinstance(value, int) and not isinstance(value, bool):  # a stored revision's ids
            endpoint = ModelEndpoint.objects.filter(pk=value).first()
        else:
            endpoint = ModelEndpoint.objects.filter(name=value[:64]).first() if isinstance(value, str) else None
        if endpoint is None:
            errors.append({"path": path, "message": f"no model endpoint {value!s:.80}"})
            continue
        if any(e.pk == endpoint.pk for e in rows):
            errors.append({"path": path, "message": f"{endpoint.name!r} is listed twice"})
            continue
        try:
            endpoint.check_usable()
        except OutboundRefused as exc:
            errors.append({"path": path, "message": str(exc)})
            continue
        rows.append(endpoint)
    out["endpoints"] = [e.pk for e in rows]
    out["endpoint_rows"] = rows
    # model and adapter: the adapter is a LoRA adapter of the model, served by a profile that enables LoRA
    base = _trained_model(model, "model", errors)
    lora = _trained_model(adapter, "adapter", errors)
    if base is not None and base.is_adapter:
        errors.append({"path": "model", "message": f"{base.name!r} is a LoRA adapter: give it as the adapter and "
                                                   "its base as the model"})
    if lora is not None:
        if not lora.is_adapter:
            errors.append({"path": "adapter", "message": f"{lora.name!r} is a full model, not a LoRA adapter"})
        elif base is not None and not lora.descends_from(base.id):
            errors.append({"path": "adapter", "message": f"{lora.name!r} is not an adapter of {base.name!r}"})
        profile = out.get("serve_profile")
        if profile is not None and not (profile.spec or {}).get("enable_lora"):
            errors.append({"path": "adapter", "message": f"serve profile {profile.name!r} does not enable LoRA"})
    out["model"], out["adapter"] = base, lora
    return out


def _check_note(note: str, errors: list[dict]) -> str:
    note = (note or "").strip()
    if len(note) > 2000:
        errors.append({"path": "note", "message": "at most 2000 characters"})
    return note


def _insert_revision(*, user, deployment: Deployment, fields: dict[str, Any], note: str) -> DeploymentRevision:
    number = (deployment.revisions.aggregate(n=Max("number"))["n"] or 0) + 1
    return DeploymentRevision.objects.create(
        deployment=deployment, number=number, label=fields["label"], harness_version=fields["harness_version"],
        model_id=fields["model"].id if fields["model"] else None,
        adapter_id=fields["adapter"].id if fields["adapter"] else None, serve_profile=fields["serve_profile"],
        endpoints=fields["endpoints"], note=note, proposed_by=user)


def _audit(*, user, deployment: Deployment, action: str, revision: DeploymentRevision, from_state: str = "",
           to_state: str = "", comment: str = "", **data) -> None:
    audit_record(actor=user, action=f"deployment.{action}", scope=scope_of(deployment),
                 target=f"revision:{revision.number}", from_state=from_state, to_state=to_state, comment=comment,
                 data={"deployment": deployment.name, "revision_id": str(revision.pk),
                       "triple": revision_describe(revision), **data, "sessions": live_sessions_on(deployment)})


# --- create and propose --------------------------------------------------------------------------------------------


def deployment_create(*, user, name: str, title: str = "", harness: Harness | str, label: str,
                      serve_profile: ServeProfile | str, endpoints: list, model=None, adapter=None,
                      note: str = "") -> Deployment:
    """A new deployment with revision 1 proposed (nothing is served until someone else approves it)."""
    _require(user, roles.PROPOSE_DEPLOYMENT, "propose deployments")
    errors: list[dict] = []
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        errors.append({"path": "name", "message": "use 1-64 lowercase letters, digits and hyphens, starting with a "
                                                  "letter"})
    elif name in RESERVED_NAMES or Deployment.objects.filter(name=name).exists():
        errors.append({"path": "name", "message": f"{name!r} is already taken"})
    title = (title or "").strip()
    if len(title) > 120:
        errors.append({"path": "title", "message": "at most 120 characters"})
    if not isinstance(harness, Harness):
        found = Harness.objects.filter(slug=str(harness or "")[:64]).first() if harness else None
        if found is None:
            errors.append({"path": "harness", "message": f"no harness {harness!s:.80}" if harness
                           else "a harness is required"})
        harness = found
    fields = (_resolve(harness=harness, label=label, serve_profile=serve_profile, endpoints=endpoints, model=model,
                       adapter=adapter, errors=errors) if harness is not None else {})
    note = _check_note(note, errors)
    if errors:
        raise ValidationFailed("the deployment is invalid", errors=errors)
    try:
        with transaction.atomic():
            deployment = Deployment.objects.create(name=name, title=title, harness=harness, created_by=user)
            revision = _insert_revision(user=user, deployment=deployment, fields=fields, note=note)
            _audit(user=user, deployment=deployment, action="create", revision=revision, to_state=Status.PROPOSED,
                   comment=note, harness=harness.slug, title=title)
    except IntegrityError:  # lost a race with another create of the same name
        raise ValidationFailed("the deployment is invalid", errors=[
            {"path": "name", "message": f"{name!r} is already taken"}]) from None
    return deployment


def _base_revision(deployment: Deployment) -> DeploymentRevision | None:
    """What a proposal starts from: the revision in force, else the newest one."""
    if deployment.current_revision_id:
        return DeploymentRevision.objects.get(pk=deployment.current_revision_id)
    return deployment.revisions.order_by("-number").first()


def _same(fields: dict[str, Any], revision: DeploymentRevision) -> bool:
    return (fields["label"] == revision.label and fields["serve_profile"].pk == revision.serve_profile_id
            and [int(i) for i in fields["endpoints"]] == [int(i) for i in revision.endpoints or []]
            and (fields["model"].pk if fields["model"] else None) == revision.model_id
            and (fields["adapter"].pk if fields["adapter"] else None) == revision.adapter_id)


def deployment_propose(*, user, deployment: Deployment, note: str = "", **changes) -> DeploymentRevision:
    """Propose a change: ``changes`` may name ``label``, ``serve_profile``, ``endpoints``, ``model``, ``adapter``
    (None clears a model or adapter); the rest is taken from the revision in force. 409 while another revision
    waits for review; 400 when it changes nothing or is invalid (located errors)."""
    _require(user, roles.PROPOSE_DEPLOYMENT, "propose deployment changes")
    unknown = sorted(set(changes) - set(FIELDS))
    if unknown:
        raise ValidationFailed("unknown fields", errors=[{"path": k, "message": "not a field of a deployment "
                                                                               "revision"} for k in unknown])
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().select_related("harness").get(pk=deployment.pk)
        waiting = deployment.revisions.filter(status=Status.PROPOSED).first()
        if waiting is not None:
            raise InvalidTransition(f"r{waiting.number} is waiting for review; withdraw it or have it decided before "
                                    "proposing another change")
        base = _base_revision(deployment)
        current = {"label": base.label, "serve_profile": base.serve_profile,
                   "endpoints": list(base.endpoints or []), "model": base.model, "adapter": base.adapter}
        wanted = {**current, **changes}
        errors: list[dict] = []
        fields = _resolve(harness=deployment.harness, errors=errors, **wanted)
        note = _check_note(note, errors)
        if errors:
            raise ValidationFailed("the proposed change is invalid", errors=errors)
        in_force = deployment.current_revision
        if in_force is not None and _same(fields, in_force):
            raise ValidationFailed("nothing changes", errors=[
                {"path": "", "message": f"nothing changes: this is what r{in_force.number} already serves"}])
        revision = _insert_revision(user=user, deployment=deployment, fields=fields, note=note)
        _audit(user=user, deployment=deployment, action="propose", revision=revision, to_state=Status.PROPOSED,
               comment=note, base_revision=base.number if base else None)
    return revision


# --- review -------------------------------------------------------------------------------------------------------


def _check_four_eyes(user, revision: DeploymentRevision) -> None:
    _require(user, roles.REVIEW_DEPLOYMENT, "review deployment changes")
    if revision.proposed_by_id == user.id:
        raise NotAllowed("four eyes: whoever proposed a deployment change can never review it")


def _locked(revision: DeploymentRevision) -> tuple[Deployment, DeploymentRevision]:
    deployment = Deployment.objects.select_for_update().select_related("harness").get(pk=revision.deployment_id)
    locked = (DeploymentRevision.objects.select_for_update(of=("self",))
              .select_related("serve_profile", "model", "adapter", "harness_version").get(pk=revision.pk))
    return deployment, locked


def deployment_approve(*, user, revision: DeploymentRevision, comment: str = "") -> DeploymentRevision:
    """Approve a proposed revision (four eyes) and put it in force: the label must point at an approved version
    now (recorded in ``harness_version``: the version a rollback returns to) and the endpoints must still be
    usable."""
    _check_four_eyes(user, revision)
    comment = (comment or "").strip()
    if len(comment) > 4000:
        raise ValidationFailed("the comment is too long", errors=[{"path": "comment", "message": "at most 4000 "
                                                                                                 "characters"}])
    with transaction.atomic():
        deployment, locked = _locked(revision)
        if locked.status != Status.PROPOSED:
            raise InvalidTransition(f"r{locked.number} is {locked.status}; only a proposed revision can be approved")
        errors: list[dict] = []
        fields = _resolve(harness=deployment.harness, label=locked.label, serve_profile=locked.serve_profile,
                          endpoints=[int(i) for i in locked.endpoints or []], model=locked.model,
                          adapter=locked.adapter, errors=errors)
        if errors:
            raise ValidationFailed("this revision cannot be approved now", errors=errors)
        previous = deployment.current_revision
        locked.harness_version = fields["harness_version"]
        locked.status, locked.decided_by, locked.decided_at = Status.APPROVED, user, timezone.now()
        locked.decision_comment = comment
        locked.save(update_fields=["harness_version", "status", "decided_by", "decided_at", "decision_comment"])
        deployment.current_revision = locked
        deployment.save(update_fields=["current_revision"])
        _audit(user=user, deployment=deployment, action="approve", revision=locked,
               from_state=f"r{previous.number}" if previous else "", to_state=f"r{locked.number} in force",
               comment=comment, from_revision=previous.number if previous else None,
               from_revision_id=str(previous.pk) if previous else None)
    return locked


def deployment_reject(*, user, revision: DeploymentRevision, comment: str) -> DeploymentRevision:
    """Reject a proposed revision (four eyes); the comment says what must change."""
    _check_four_eyes(user, revision)
    comment = (comment or "").strip()
    if not comment:
        raise ValidationFailed("a rejection needs a comment", errors=[
            {"path": "comment", "message": "say what must change before this can be approved"}])
    if len(comment) > 4000:
        raise ValidationFailed("the comment is too long", errors=[{"path": "comment", "message": "at most 4000 "
                                                                                                 "characters"}])
    return _decide(user=user, revision=revision, new=Status.REJECTED, action="reject", comment=comment)


def deployment_withdraw(*, user, revision: DeploymentRevision, comment: str = "") -> DeploymentRevision:
    """The proposer takes back a revision still waiting for review."""
    _require(user, roles.PROPOSE_DEPLOYMENT, "withdraw deployment changes")
    if revision.proposed_by_id != user.id:
        raise NotAllowed("only whoever proposed a change can withdraw it")
    return _decide(user=user, revision=revision, new=Status.WITHDRAWN, action="withdraw",
                   comment=(comment or "").strip()[:4000])


def _decide(*, user, revision: DeploymentRevision, new: str, action: str, comment: str) -> DeploymentRevision:
    with transaction.atomic():
        deployment, locked = _locked(revision)
        if locked.status != Status.PROPOSED:
            raise InvalidTransition(f"r{locked.number} is {locked.status}; only a proposed revision can be {new}")
        locked.status, locked.decided_by, locked.decided_at = new, user, timezone.now()
        locked.decision_comment = comment
        locked.save(update_fields=["status", "decided_by", "decided_at", "decision_comment"])
        _audit(user=user, deployment=deployment, action=action, revision=locked, from_state=Status.PROPOSED,
               to_state=new, comment=comment)
    return locked


# --- rollback ------------------------------------------------------------------------------------------------------


def rollback_target(deployment: Deployment) -> DeploymentRevision | None:
    """The revision that was in force before the current one was approved (None: nothing to go back to)."""
    if not deployment.current_revision_id:
        return None
    approval = (AuditEvent.objects.filter(scope=scope_of(deployment), action="deployment.approve",
                                          data__revision_id=str(deployment.current_revision_id))
                .order_by("-id").first())
    previous_id = (approval.data or {}).get("from_revision_id") if approval else None
    if not previous_id:
        return None
    return (DeploymentRevision.objects.select_related("serve_profile", "model", "adapter", "harness_version")
            .filter(pk=previous_id, deployment=deployment, status=Status.APPROVED).first())


def deployment_rollback(*, user, deployment: Deployment, comment: str) -> Deployment:
    """Put the previous approved revision back in force and move its label back to the version recorded when it
    was approved: label, model and profile move together. The reason (``comment``) is required."""
    from harness_editor.services import label_move_for_rollback

    _require(user, roles.ROLLBACK_DEPLOYMENT, "roll deployments back")
    comment = (comment or "").strip()
    if not comment:
        raise ValidationFailed("a rollback needs a reason", errors=[
            {"path": "comment", "message": "say why (it is on the timeline, linked to the live sessions)"}])
    if len(comment) > 4000:
        raise ValidationFailed("the reason is too long", errors=[{"path": "comment", "message": "at most 4000 "
                                                                                                "characters"}])
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().select_related("harness").get(pk=deployment.pk)
        current = (DeploymentRevision.objects.select_related("harness_version")
                   .filter(pk=deployment.current_revision_id).first())
        if current is None:
            raise InvalidTransition(f"{deployment.name} has no approved revision in force")
        target = rollback_target(deployment)
        if target is None:
            raise InvalidTransition(f"r{current.number} is the first approved revision of {deployment.name}: there "
                                    "is nothing to roll back to")
        label_row = Label.objects.select_related("version").filter(harness=deployment.harness,
                                                                    name=target.label).first()
        label_from = label_row.version.number if label_row else None
        if label_row is None or label_row.version_id != target.harness_version_id:
            label_move_for_rollback(
                user=user, harness=deployment.harness, name=target.label, version=target.harness_version,
                comment=f"deployment {deployment.name} rolled back r{current.number} → r{target.number}: {comment}",
                reason={"deployment": deployment.name, "from_revision": current.number,
                        "to_revision": target.number})
        deployment.current_revision = target
        deployment.save(update_fields=["current_revision"])
        _audit(user=user, deployment=deployment, action="rollback", revision=target,
               from_state=f"r{current.number}", to_state=f"r{target.number} in force", comment=comment,
               from_revision=current.number, from_revision_id=str(current.pk),
               label={"name": target.label, "from_version": label_from,
                      "to_version": target.harness_version.number})
    return deployment
