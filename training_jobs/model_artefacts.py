"""The model registry as the runtime asks for it (:mod:`streams.model_artefacts`): the provider
``settings.HAT_MODEL_ARTEFACTS`` names is :data:`PROVIDER`.

Training registers model directories (:class:`~training_jobs.models.TrainedModel`); serving and deployments, a layer
below, read them as :class:`~streams.model_artefacts.ModelArtefact` through this provider and tell it where a model
is served, which the model pages show.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Literal

from streams.model_artefacts import ModelArtefact
from training_jobs.models import TrainedModel


def _uuid(value: Any) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (ValueError, AttributeError, TypeError):
        return None


def _parents() -> dict[uuid.UUID, uuid.UUID | None]:
    """Every registered model's parent, in one query (lineages of a whole list without a query per model)."""
    return dict(TrainedModel.objects.values_list("pk", "parent_id"))


def _lineage(pk: uuid.UUID, parents: dict[uuid.UUID, uuid.UUID | None]) -> tuple[uuid.UUID, ...]:
    chain, node = [], pk
    while node is not None and node not in chain:
        chain.append(node)
        node = parents.get(node)
    return tuple(reversed(chain))


def artefact(row: TrainedModel, parents: dict[uuid.UUID, uuid.UUID | None] | None = None) -> ModelArtefact:
    """``row`` as the runtime sees it (its parent as the base of an adapter); ``parents``: :func:`_parents`, read
    once for a list."""
    parents = _parents() if parents is None else parents
    base = artefact(row.parent, parents) if row.is_adapter and row.parent is not None else None
    return ModelArtefact(id=row.pk, name=row.name, path=row.path, kind_label=row.get_kind_display(),
                         is_adapter=row.is_adapter, base=base, lineage=_lineage(row.pk, parents),
                         lora_rank=row.lora_rank)


class TrainedModels:
    """:class:`streams.model_artefacts.ModelArtefactProvider` over :class:`TrainedModel`."""

    def get(self, model_id: Any) -> ModelArtefact | None:
        pk = _uuid(model_id)
        row = TrainedModel.objects.select_related("parent").filter(pk=pk).first() if pk is not None else None
        return artefact(row) if row is not None else None

    def by_ids(self, model_ids: Iterable[Any]) -> dict[str, ModelArtefact]:
        pks = [pk for pk in (_uuid(i) for i in model_ids) if pk is not None]
        rows = list(TrainedModel.objects.select_related("parent").filter(pk__in=pks))
        parents = _parents() if rows else {}
        return {str(row.pk): artefact(row, parents) for row in rows}

    def listing(self, *, adapters: bool, base_id: Any = None, base_path: str | None = None,
                order: Literal["newest", "name"] = "newest", limit: int = 200) -> list[ModelArtefact]:
        qs = TrainedModel.objects.select_related("parent").filter(is_adapter=adapters)
        if base_id is not None:
            qs = qs.filter(parent_id=_uuid(base_id))
        elif base_path is not None:
            qs = qs.filter(parent__path=base_path)
        qs = qs.order_by("name") if order == "name" else qs.order_by("-created_at")
        rows = list(qs[:limit])
        parents = _parents() if rows else {}
        return [artefact(row, parents) for row in rows]

    def served(self, model_id: Any, *, endpoint_id: int, pid: int | None, host: str) -> None:
        TrainedModel.objects.filter(pk=_uuid(model_id)).update(endpoint_id=endpoint_id, serve_pid=pid, serve_host=host)

    def unserved(self, model_id: Any, *, endpoint_id: int) -> None:
        # only when it is still attached to this server's endpoint (a later server of it may have taken over)
        TrainedModel.objects.filter(pk=_uuid(model_id), endpoint_id=endpoint_id).update(
            endpoint=None, serve_pid=None, serve_host="")


PROVIDER = TrainedModels()
