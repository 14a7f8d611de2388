"""The models serving and deployments work with, as the runtime sees them, and who tells it about them.

A model directory the console knows — a base model, a training stage's output, a LoRA adapter of one — is registered
by training (``training_jobs.models.TrainedModel``), the layer above the runtime, which must not import it (DESIGN
§3; ``.importlinter``). What a server launch, an adapter load or a deployment needs to know of one is a
:class:`ModelArtefact`: its name and directory, whether it is a LoRA adapter, of which base, at which rank. They come
from one provider the project wires up by name — ``settings.HAT_MODEL_ARTEFACTS`` (the console's settings name
``training_jobs.model_artefacts.PROVIDER``) — an object with the methods of :class:`ModelArtefactProvider`, which
also hears where a model is served now (the model pages show it, the preview room offers its endpoint). No setting
(or an empty one): no registered models — servers can still be registered by endpoint.

Rows of the runtime refer to a registered model by a foreign key named as a string (``"training_jobs.TrainedModel"``:
``ServerInstance.model``, ``DeploymentRevision.model`` / ``adapter``): a relation in the database, not an import.
Code here sets those keys by id (``model_id=artefact.id``) and reads them through this module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

NO_PROVIDER = "No model registry is configured for this console (settings.HAT_MODEL_ARTEFACTS)."


@dataclass(frozen=True)
class ModelArtefact:
    """A registered model directory. ``base``: an adapter's base model (None for a full model, or when unknown);
    ``lineage``: the ids from the oldest ancestor down to this model; ``lora_rank``: an adapter's rank r (a server
    loads adapters only up to its ``--max-lora-rank``); ``kind_label``: what made it, in words (``HSA-SFT``)."""

    id: uuid.UUID
    name: str
    path: str
    kind_label: str = ""
    is_adapter: bool = False
    base: ModelArtefact | None = None
    lineage: tuple[uuid.UUID, ...] = ()
    lora_rank: int | None = None

    @property
    def pk(self) -> uuid.UUID:  # pages and forms read ``m.pk`` of rows and artefacts alike
        return self.id

    def descends_from(self, model_id: Any) -> bool:
        """Whether ``model_id`` is an ancestor of this model (an adapter of it, or of a model trained from it)."""
        return any(str(a) == str(model_id) for a in self.lineage[:-1])


@dataclass(frozen=True)
class TrainedHarnesses:
    """What a model was trained on, as training recorded it (its whole lineage): harness slugs (versions named
    ``slug@number`` in its datasets), manifests by content hash (demo manifests, those versions, recorded rooms'
    versions), and the same in words for a page (``tiny_room (harness_editor/demo/tiny_room.yaml)``). Empty sets:
    training recorded no harness for it (a base model). ``measured``: what was measured of this very model in a
    room, in words (``answered 2 of 9 …``), for a page to say before anyone tries it."""

    model_name: str
    slugs: frozenset[str] = frozenset()
    manifest_hashes: frozenset[str] = frozenset()
    described: tuple[str, ...] = ()
    measured: tuple[str, ...] = ()


class ModelArtefactProvider(Protocol):
    """What the runtime asks of the model registry (implemented by training: ``training_jobs.model_artefacts``).
    Ids are UUIDs or their text; an id that is not a UUID, or names no model, is simply not found."""

    def get(self, model_id: Any) -> ModelArtefact | None: ...

    def by_ids(self, model_ids: Iterable[Any]) -> dict[str, ModelArtefact]: ...

    def listing(self, *, adapters: bool, base_id: Any = None, base_path: str | None = None,
                order: Literal["newest", "name"] = "newest", limit: int = 200) -> list[ModelArtefact]: ...

    def served(self, model_id: Any, *, endpoint_id: int, pid: int | None, host: str) -> None: ...

    def unserved(self, model_id: Any, *, endpoint_id: int) -> None: ...

    def trained_harnesses(self, *, endpoint_id: int, served_model: str) -> TrainedHarnesses | None: ...


def _provider() -> ModelArtefactProvider | None:
    name = getattr(settings, "HAT_MODEL_ARTEFACTS", "") or ""
    return import_string(name) if name else None  # named but not importable: a configuration error, raised


def model_get(model_id: Any) -> ModelArtefact | None:
    """The registered model ``model_id`` (an id, its text, or anything with a ``pk``: a row of the registry), or
    None when there is none."""
    if isinstance(model_id, ModelArtefact):
        return model_id
    if model_id is None or model_id == "":
        return None
    provider = _provider()
    return provider.get(getattr(model_id, "pk", model_id)) if provider is not None else None


def models_by_id(model_ids: Iterable[Any]) -> dict[str, ModelArtefact]:
    """The registered models among ``model_ids``, by their id as text."""
    provider = _provider()
    ids = [i for i in model_ids if i not in (None, "")]
    return provider.by_ids(ids) if provider is not None and ids else {}


def model_list(*, adapters: bool = False, base_id: Any = None, base_path: str | None = None,
               order: Literal["newest", "name"] = "newest", limit: int = 200) -> Sequence[ModelArtefact]:
    """Full models (``adapters=False``: what a server launches) or LoRA adapters (of the model ``base_id``, or of
    the model whose directory is ``base_path``, when given), newest first or by name, at most ``limit``."""
    provider = _provider()
    if provider is None:
        return []
    return provider.listing(adapters=adapters, base_id=base_id, base_path=base_path, order=order, limit=limit)


def model_served(model_id: Any, *, endpoint_id: int, pid: int | None, host: str) -> None:
    """Tell the registry that ``model_id`` is served behind the endpoint ``endpoint_id`` now (by ``pid`` on
    ``host``)."""
    provider = _provider()
    if provider is not None and model_id is not None:
        provider.served(model_id, endpoint_id=endpoint_id, pid=pid, host=host)


def model_unserved(model_id: Any, *, endpoint_id: int) -> None:
    """Tell the registry that ``model_id`` is no longer served behind ``endpoint_id`` (its server stopped)."""
    provider = _provider()
    if provider is not None and model_id is not None:
        provider.unserved(model_id, endpoint_id=endpoint_id)


def model_trained_harnesses(*, endpoint_id: int, served_model: str) -> TrainedHarnesses | None:
    """What the model behind endpoint ``endpoint_id`` (serving ``served_model``) was trained on; None when the
    registry does not know that model (or has no such question: a provider without ``trained_harnesses``)."""
    ask = getattr(_provider(), "trained_harnesses", None)
    return ask(endpoint_id=endpoint_id, served_model=served_model) if ask is not None else None
