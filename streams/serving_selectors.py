"""Reads of serving: profiles, the servers they launched (which profile served which model when, where)."""

from __future__ import annotations

from django.db.models import QuerySet

from streams.model_artefacts import ModelArtefact, model_list
from streams.models import ServeProfile, ServerInstance


def serve_profile_list() -> QuerySet[ServeProfile]:
    return ServeProfile.objects.select_related("created_by").order_by("name")


def serve_profile_get(name: str) -> ServeProfile:
    return ServeProfile.objects.get(name=name)


def server_list(*, status: str | None = None, profile: str | None = None) -> QuerySet[ServerInstance]:
    """Newest first, with what the pages show."""
    qs = ServerInstance.objects.select_related("profile", "model", "endpoint", "started_by").order_by("-created_at")
    if status:
        qs = qs.filter(status=status)
    if profile:
        qs = qs.filter(profile__name=profile)
    return qs


def server_get(instance_id) -> ServerInstance:
    return server_list().get(pk=instance_id)


def launchable_models(limit: int = 200) -> list[ModelArtefact]:
    """Full models (not adapters: those are loaded into a running server) whose directory a worker can serve,
    newest first."""
    return list(model_list(adapters=False, limit=limit))


def log_tail(instance: ServerInstance, max_bytes: int = 8000) -> str:
    """The end of a launched server's log (on this host's disk when the web process shares it)."""
    from pathlib import Path

    path = Path(instance.log_path) if instance.log_path else None
    if path is None or not path.is_file():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - max_bytes))
        return fh.read().decode("utf-8", "replace")
