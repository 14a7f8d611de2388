"""Reads of deployments: what a deployment serves now (the revision in force, resolved through its label)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.errors import InvalidTransition
from streams.models import Deployment, DeploymentRevision, ModelEndpoint, ServerInstance


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
