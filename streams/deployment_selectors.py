"""Reads of deployments: what a deployment serves now (the revision in force, resolved through its label)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.errors import InvalidTransition
from streams.models import Deployment, DeploymentRevision, LiveSession, ModelEndpoint, ServeProfile, ServerInstance


@dataclass
class InForce:
    """What a turn of a deployment uses, resolved now: the label's version at this moment (a label moved
    mid-session takes effect at the next turn), the endpoints in failover order and the model name requests carry
    (a LoRA adapter's name when the revision serves an adapter loaded on the endpoint)."""

    deployment: Deployment
    revision: DeploymentRevision
    label: str
    version: Any  # harness_editor.HarnessVersion
    endpoints: list[ModelEndpoint] = field(default_factory=list)
    request_models: dict[str, str] = field(default_factory=dict)  # endpoint name -> model name in requests

    @property
    def model(self):
        return self.revision.model

    @property
    def adapter(self):
        return self.revision.adapter

    @property
    def profile(self) -> ServeProfile:
        return self.revision.serve_profile

    @property
    def request_model(self) -> str | None:
        """The model name requests to the primary endpoint carry (the adapter's name where it is loaded)."""
        return self.request_models.get(self.endpoints[0].name) if self.endpoints else None

    def describe(self) -> dict[str, Any]:
        """For events and the audit timeline."""
        return {"deployment": self.deployment.name, "revision": self.revision.number, "label": self.label,
                "version": {"id": self.version.pk, "slug": self.version.harness.slug, "number": self.version.number},
                "endpoints": [e.name for e in self.endpoints],
                "model": self.revision.model.name if self.revision.model_id else None,
                "adapter": self.revision.adapter.name if self.revision.adapter_id else None,
                "profile": self.revision.serve_profile.name}


def deployment_get(*, name: str) -> Deployment:
    return Deployment.objects.select_related("harness", "current_revision").get(name=name)


def adapter_request_name(instance: ServerInstance, adapter_id) -> str | None:
    """The name an adapter is loaded under on a server (None: not loaded there)."""
    for loaded in instance.adapters or []:
        if str(loaded.get("model_id")) == str(adapter_id):
            return loaded.get("name")
    return None


def deployment_in_force(deployment: Deployment) -> InForce:
    """The deployment's approved revision with its label resolved now. InvalidTransition (a clear 409) when
    nothing is approved yet or the label does not exist."""
    from harness_editor.models import Label

    revision = (DeploymentRevision.objects.select_related("serve_profile", "model", "adapter")
                .filter(pk=deployment.current_revision_id).first())
    if revision is None:
        raise InvalidTransition(f"deployment {deployment.name!r} has no approved revision yet")
    label = (Label.objects.select_related("version__harness")
             .filter(harness_id=deployment.harness_id, name=revision.label).first())
    if label is None:
        raise InvalidTransition(f"deployment {deployment.name!r}: harness {deployment.harness.slug!r} has no label "
                                f"{revision.label!r}")
    by_id = {str(e.pk): e for e in ModelEndpoint.objects.filter(pk__in=[int(i) for i in revision.endpoints or []])}
    endpoints = [by_id[str(i)] for i in revision.endpoints or [] if str(i) in by_id]
    request_models: dict[str, str] = {e.name: e.model for e in endpoints}
    if revision.adapter_id:
        # an adapter is served by the servers (instances) behind the endpoints that have it loaded
        for instance in ServerInstance.objects.filter(endpoint__in=endpoints, status=ServerInstance.Status.READY):
            name = adapter_request_name(instance, revision.adapter_id)
            if name:
                request_models[instance.endpoint.name] = name
        missing = [e.name for e in endpoints if request_models.get(e.name) == e.model]
        endpoints = [e for e in endpoints if e.name not in missing]
    return InForce(deployment=deployment, revision=revision, label=revision.label, version=label.version,
                   endpoints=endpoints, request_models=request_models)


# --- pages and the API ---------------------------------------------------------------------------------------------

REVISION_RELATED = ("serve_profile", "model", "adapter", "harness_version", "proposed_by", "decided_by")


def deployment_list():
    return Deployment.objects.select_related("harness", "current_revision", *(
        f"current_revision__{name}" for name in REVISION_RELATED[:4]))


def revision_list(deployment: Deployment):
    """Newest first."""
    return deployment.revisions.select_related(*REVISION_RELATED).order_by("-number")


def revision_get(deployment: Deployment, number: int) -> DeploymentRevision:
    return deployment.revisions.select_related(*REVISION_RELATED).get(number=number)


def revision_pending(deployment: Deployment) -> DeploymentRevision | None:
    """The revision waiting for review (at most one: streams.services.deployments)."""
    return revision_list(deployment).filter(status=DeploymentRevision.Status.PROPOSED).first()


def endpoint_names(ids) -> list[str]:
    names = dict(ModelEndpoint.objects.filter(pk__in=[int(i) for i in ids or []]).values_list("pk", "name"))
    return [names.get(int(i), f"(deleted #{i})") for i in ids or []]


def live_sessions(deployment: Deployment):
    return LiveSession.objects.filter(deployment=deployment, status=LiveSession.Status.LIVE).order_by("started_at")


def label_versions(harness_ids) -> dict[tuple[int, str], Any]:
    """(harness id, label name) -> the version the label points at now."""
    from harness_editor.models import Label

    return {(label.harness_id, label.name): label.version for label in
            Label.objects.filter(harness_id__in=set(harness_ids)).select_related("version").defer(
                "version__manifest_json")}


def deployment_summary(deployment: Deployment, *, labels: dict | None = None) -> dict[str, Any]:
    """What a deployment serves now (list and detail pages, the API): the revision in force with its label resolved
    now, model, adapter, profile, endpoints and the sessions live on it."""
    revision = deployment.current_revision
    labels = labels if labels is not None else label_versions([deployment.harness_id])
    version = labels.get((deployment.harness_id, revision.label)) if revision else None
    return {
        "deployment": deployment,
        "revision": revision,
        "label": revision.label if revision else None,
        "version": version,  # where the label points now
        "recorded_version": revision.harness_version if revision else None,  # where it pointed at approval
        "model": revision.model if revision else None,
        "adapter": revision.adapter if revision else None,
        "profile": revision.serve_profile if revision else None,
        "endpoints": endpoint_names(revision.endpoints) if revision else [],
        "sessions": list(live_sessions(deployment)),
        "pending": revision_pending(deployment),
    }


def deployment_summaries() -> list[dict[str, Any]]:
    deployments = list(deployment_list())
    labels = label_versions([d.harness_id for d in deployments])
    return [deployment_summary(d, labels=labels) for d in deployments]


def _named(row) -> str | None:
    return getattr(row, "name", None) if row is not None else None


def revision_diff(*, in_force: DeploymentRevision | None, proposed: DeploymentRevision) -> list[dict[str, Any]]:
    """Field by field, what approving ``proposed`` changes against what is in force: the label, the version it
    would record (where the label points now) against the version in force, the model, the adapter, the profile and
    the endpoints (in failover order). Each row: field, before, after, changed."""
    labels = label_versions([proposed.deployment.harness_id])
    now = labels.get((proposed.deployment.harness_id, proposed.label))
    if proposed.status == DeploymentRevision.Status.APPROVED:
        now = proposed.harness_version  # decided: the version it recorded
    before_version = None
    if in_force is not None:
        before_version = labels.get((proposed.deployment.harness_id, in_force.label)) or in_force.harness_version
    rows = [
        ("label", in_force.label if in_force else None, proposed.label),
        ("harness version", f"v{before_version.number}" if before_version else None,
         f"v{now.number}" if now else "(label missing)"),
        ("model", _named(in_force.model) if in_force else None, _named(proposed.model)),
        ("adapter", _named(in_force.adapter) if in_force else None, _named(proposed.adapter)),
        ("serve profile", _named(in_force.serve_profile) if in_force else None, _named(proposed.serve_profile)),
        ("endpoints", ", ".join(endpoint_names(in_force.endpoints)) if in_force else None,
         ", ".join(endpoint_names(proposed.endpoints))),
    ]
    return [{"field": name, "before": before, "after": after, "changed": before != after}
            for name, before, after in rows]


def deployment_timeline(deployment: Deployment):
    from console.selectors import audit_list

    return audit_list(scope=f"deployment:{deployment.name}")
