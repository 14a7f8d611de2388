"""The model registry as the runtime asks for it (:mod:`streams.model_artefacts`): the provider
``settings.HAT_MODEL_ARTEFACTS`` names is :data:`PROVIDER`.

Training registers model directories (:class:`~training_jobs.models.TrainedModel`); serving and deployments, a layer
below, read them as :class:`~streams.model_artefacts.ModelArtefact` through this provider and tell it where a model
is served, which the model pages show.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Literal

from streams.model_artefacts import ModelArtefact, TrainedHarnesses
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

    def trained_harnesses(self, *, endpoint_id: int, served_model: str) -> TrainedHarnesses | None:
        row = _served_row(endpoint_id, served_model)
        if row is not None:
            return trained_harnesses(row)
        if _same_dir(served_model, _demo_dir()):  # the committed checkpoint, served before anyone registered it
            return _harnesses("demo-tiny (committed demo checkpoint)", [_demo_checkpoint_record()])
        return None


# --- what a model was trained on ------------------------------------------------------------------------------
# Recorded by training: a stage's dataset names its sources (training_jobs.schemas.Sources: demo manifests, tiny gold
# turns, approved versions 'slug@number', recorded preview rooms, written turns); a model carries what its whole
# lineage saw. The committed demo checkpoint has no dataset row: its pipeline records the demo manifests its stages
# trained on in its metrics.json (trained_manifests; a checkpoint from before that record: tiny_room; MODEL_CARD.md).

Record = tuple[set[str], set[str], list[str]]  # slugs, manifest hashes, in words


def _demo_dir():
    from streams.serve_profiles import DEMO_MODEL_DIR

    return DEMO_MODEL_DIR


def _same_dir(a: str | None, b) -> bool:
    from pathlib import Path

    try:
        return bool(a) and Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError):
        return False


def _served_row(endpoint_id: int, served_model: str) -> TrainedModel | None:
    """The registered model an endpoint serves: by the served name a launch gives it (``hat-<id>``), by its
    directory (a local server's model name is its path), else the model attached to the endpoint."""
    from pathlib import Path

    name = (served_model or "").strip()
    pk = _uuid(name[4:]) if name.startswith("hat-") else None
    row = TrainedModel.objects.filter(pk=pk).first() if pk is not None else None
    if row is None and name.startswith("/"):
        try:
            path = str(Path(name).resolve())
        except (OSError, ValueError):
            path = name
        row = TrainedModel.objects.filter(path__in={name, path}).order_by("is_adapter", "-created_at").first()
    if row is None and endpoint_id is not None:
        row = TrainedModel.objects.filter(endpoint_id=endpoint_id).order_by("-created_at").first()
    return row


def _manifest_hash(path) -> str | None:
    from harness_editor.schemas import ManifestError, content_hash, manifest_from_yaml

    try:
        return content_hash(manifest_from_yaml(path.read_text(encoding="utf-8")))
    except (OSError, ManifestError, ValueError):
        return None


@functools.lru_cache(maxsize=16)
def _demo_manifest_hash(name: str) -> str | None:
    from pathlib import Path

    import harness_editor

    return _manifest_hash(Path(harness_editor.__file__).resolve().parent / "demo" / f"{name}.yaml")


def _demo_manifest_record(name: str) -> Record:
    digest = _demo_manifest_hash(name)
    return set(), {digest} if digest else set(), [f"the demo manifest {name} (harness_editor/demo/{name}.yaml)"]


def committed_manifests(model_dir) -> list[str] | None:
    """The demo manifests a committed model directory's recipe recorded in its ``metrics.json``
    (``trained_manifests``); None when it records none."""
    import json
    from pathlib import Path

    try:
        names = json.loads((Path(model_dir) / "metrics.json").read_text(encoding="utf-8")).get("trained_manifests")
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    return names


def committed_measured(model_dir) -> list[str]:
    """What a committed model directory's ``metrics.json`` records of the model in the demo room
    (``demo_room``: the questions it answered of how many, its known limits), in words; [] when none."""
    import json
    from pathlib import Path

    try:
        room = json.loads((Path(model_dir) / "metrics.json").read_text(encoding="utf-8")).get("demo_room")
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    if not isinstance(room, dict) or not room.get("of"):
        return []
    answered = [str(q) for q in room.get("answered") or []]
    out = [f"In the demo room it answered {len(answered)} of {room['of']} typical viewer questions"
           + (f" ({'; '.join(answered)})" if answered else "") + "; the others fell back."]
    if room.get("limits"):
        out.append(f"Known limits: {str(room['limits']).split(';', 1)[0]}.")
    return out


def demo_checkpoint_manifests() -> list[str]:
    """The demo manifests the committed checkpoint's lineage trained on, as its pipeline recorded them in
    ``metrics.json`` (``trained_manifests``); the tiny room for a checkpoint from before that record."""
    return committed_manifests(_demo_dir()) or ["tiny_room"]


def _manifests_record(names: list[str]) -> Record:
    slugs: set[str] = set()
    hashes: set[str] = set()
    words: list[str] = []
    for name in names:
        rec = _demo_manifest_record(name)
        slugs |= rec[0]
        hashes |= rec[1]
        words += rec[2]
    return slugs, hashes, words


def _demo_checkpoint_record() -> Record:
    return _manifests_record(demo_checkpoint_manifests())


def _version_record(ref: str) -> Record:
    from harness_editor.selectors import harness_version_by_ref

    version = harness_version_by_ref(ref)
    slug = ref.split("@", 1)[0]
    return {slug}, {version.content_hash} if version is not None else set(), [ref.replace("@", " v")]


def _dataset_record(sources: Any) -> Record:
    slugs: set[str] = set()
    hashes: set[str] = set()
    words: list[str] = []

    def add(rec: Record) -> None:
        slugs.update(rec[0])
        hashes.update(rec[1])
        words.extend(w for w in rec[2] if w not in words)

    from training_jobs.schemas import Sources

    sources = sources if isinstance(sources, dict) else {}
    if sources.get("scenarios") != []:  # a missing key is the default (every demo scenario)
        default = Sources.model_fields["demo_manifests"].default_factory()
        for name in sources.get("demo_manifests", default) or []:
            add(_demo_manifest_record(str(name)))
    if sources.get("tiny_gold"):
        add(_demo_manifest_record("tiny_room"))
    for ref in sources.get("versions") or []:
        add(_version_record(str(ref)))
    for written in sources.get("written") or []:
        if isinstance(written, dict) and written.get("version"):
            add(_version_record(str(written["version"])))
    room_ids = [r for r in (_uuid(x) for x in sources.get("preview_rooms") or []) if r is not None]
    if room_ids:
        from streams.models import PreviewRoom

        for slug, number, digest in (PreviewRoom.objects.filter(pk__in=room_ids)
                                     .values_list("harness_version__harness__slug", "harness_version__number",
                                                  "harness_version__content_hash").distinct()):
            add(({slug}, {digest}, [f"{slug} v{number} (recorded preview turns)"]))
    return slugs, hashes, words


def _harnesses(name: str, records: list[Record]) -> TrainedHarnesses:
    words: list[str] = []
    for rec in records:
        words.extend(w for w in rec[2] if w not in words)
    return TrainedHarnesses(model_name=name, slugs=frozenset().union(*(r[0] for r in records)),
                            manifest_hashes=frozenset().union(*(r[1] for r in records)), described=tuple(words))


def trained_harnesses(row: TrainedModel) -> TrainedHarnesses:
    """What ``row`` and its ancestors were trained on (the datasets of their stages; a committed model's own
    recipe: the demo checkpoint, the glow-gadget demo adapter)."""
    records: list[Record] = []
    for node in row.lineage():
        if node.dataset_id is not None:
            records.append(_dataset_record(node.dataset.sources))
        elif node.kind == TrainedModel.Kind.BASE and _same_dir(node.path, _demo_dir()):
            records.append(_demo_checkpoint_record())
        elif (names := committed_manifests(node.path)) is not None:
            records.append(_manifests_record(names))
    # what was measured of this very model (an ancestor's figures say nothing of a model trained further)
    return replace(_harnesses(row.name, records), measured=tuple(committed_measured(row.path)))


PROVIDER = TrainedModels()
