"""Writes of the dataset jobs: launch a build, cancel it, and run it (in the Celery worker).

- :func:`dataset_build_start` validates the recipe and the source selection (errors carry paths such as
  ``recipe.operators[2].probability``; nothing is saved then), creates the job (and, when asked, a fixed-harness
  baseline over the same samples) and queues it on commit;
- :func:`dataset_cancel` cancels a queued job at once and asks a running one to stop;
- :func:`dataset_build_run` is the worker's one service: collect the samples, build with progress and cancel
  callbacks (progress written to the row at most every :data:`PROGRESS_EVERY_S`), write the artifact into a
  temporary folder and move it under its final name only when complete, store the statistics; a failure is
  stored with its cause (exception type and message) and leaves no artifact behind.
- a recipe's ``teacher`` / ``judge`` name model endpoint records (administrators create them): checked against
  the outbound allow-list when the build is requested, and again on the worker (:func:`recipe_endpoints`), which
  alone reads their API keys from the named secrets.

:func:`build_artifact` is the Django-free part (samples → rows → folder), shared with
``manage.py build_hsa_dataset``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.heartbeat import Heartbeat, stale_before
from console.services import audit_record
from harness_editor.models import HarnessVersion
from harness_editor.schemas import content_hash, manifest_to_json
from training_jobs import selectors
from training_jobs.hsa.dataset import (
    BuildCancelled,
    BuildResult,
    Recipe,
    build_to_disk,
    heldout_leaks,
    sample_json,
)
from training_jobs.hsa.samples import Sample
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from training_jobs.schemas import Sources, is_uuid, located_errors, parse_recipe, parse_sources

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.5  # at most this often a running build writes its progress
CANCEL_CHECK_EVERY_S = 0.25  # ... and reads its cancel flag
PROGRESS_STEPS = 100  # callbacks per build (at least), whatever the recipe's progress_every

Status = Dataset.Status


def datasets_dir() -> Path:
    return Path(settings.ENV.data_dir) / "datasets"


def _scope(dataset: Dataset) -> str:
    return f"dataset:{dataset.pk}"


# --- the build itself (no ORM) ---------------------------------------------------------------------------------


def _progress_every(recipe_every: int, total: int) -> int:
    return max(1, min(recipe_every, total // PROGRESS_STEPS or 1))


def _tuned(recipe: Recipe, total: int) -> Recipe:
    """The recipe with progress/cancel callbacks often enough for a live progress bar (output unchanged)."""
    return recipe.model_copy(update={"progress_every": _progress_every(recipe.progress_every, total)})


def _read_rows(dataset_dir: Path, batch: int = 1000):
    from datasets import load_from_disk

    ds = load_from_disk(str(dataset_dir))
    for start in range(0, len(ds), batch):
        yield from ds.select(range(start, min(start + batch, len(ds)))).to_list()


def write_originals(samples: Sequence[Sample], out: Path) -> None:
    """``samples.jsonl`` (each canonical sample before augmentation, with the hash of its harness) and
    ``base_harnesses.jsonl`` (those harnesses): what the sample browser compares a row against."""
    hashes: dict[int, str] = {}
    bases: dict[str, Any] = {}
    with (out / "samples.jsonl").open("w", encoding="utf-8") as f:
        for s in samples:
            digest = hashes.get(id(s.manifest))
            if digest is None:
                digest = hashes[id(s.manifest)] = content_hash(s.manifest)
                bases.setdefault(digest, s.manifest)
            f.write(json.dumps({**sample_json(s), "harness_hash": digest, "meta": dict(s.meta)},
                               ensure_ascii=False, default=str) + "\n")
    with (out / "base_harnesses.jsonl").open("w", encoding="utf-8") as f:
        for digest, manifest in bases.items():
            f.write(f'{{"harness_hash": "{digest}", "manifest": {manifest_to_json(manifest)}}}\n')


def build_artifact(samples: Sequence[Sample], out_dir: str | Path, *, kind: str, recipe: Recipe | None,
                   progress: Callable[[int, int], None] | None = None, cancel: Callable[[], bool] | None = None,
                   on_stage: Callable[[str], None] | None = None, check_leaks: bool = True,
                   endpoints: dict[str, Any] | None = None) -> BuildResult:
    """Build and write a dataset folder at ``out_dir`` (rows streamed to disk by
    :func:`training_jobs.hsa.dataset.build_to_disk`: memory stays flat). It is written next to ``out_dir`` under a
    temporary name and renamed when complete, so ``out_dir`` either is a whole dataset or does not exist (an
    existing folder there is replaced). A training split (names 'train') with a held-out name in it is refused
    (ValueError). Raises BuildCancelled when ``cancel()`` says so. ``endpoints``: the recipe's teacher and
    judge resolved by name (:func:`recipe_endpoints`), for ``label_mode='regenerate'``."""
    out = Path(out_dir)
    if not samples:
        raise ValueError("the selected sources gave no samples")
    fixed = kind == Dataset.Kind.FIXED_HARNESS
    if not fixed and recipe is None:
        raise ValueError("an HSA build needs a recipe")
    total = len(samples) * (1 if fixed else recipe.variants_per_sample)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
    try:
        result = build_to_disk(samples, None if fixed else _tuned(recipe, total), tmp, progress=progress,
                               cancel=cancel, progress_every=_progress_every(500, total),
                               endpoints=None if fixed else endpoints)
        if not fixed:  # the recipe as written is what is saved beside the dataset
            result.recipe = recipe
            (tmp / "recipe.json").write_text(json.dumps(recipe.model_dump(mode="json"), indent=2,
                                                        ensure_ascii=False) + "\n", encoding="utf-8")
        if on_stage is not None:
            on_stage("checking and writing")
        if result.stats.rows == 0:  # e.g. every teacher answer rejected: say why rather than store nothing
            why = {**result.stats.drop_reasons, **result.stats.reject_reasons}
            raise ValueError("no row was kept" + (f" ({', '.join(f'{k} {n}' for k, n in why.items())})" if why
                                                  else ""))
        if check_leaks and (fixed or recipe.names == "train"):
            leaks = heldout_leaks(_read_rows(tmp / "dataset"))
            if leaks:
                raise ValueError(f"held-out names in a training split: {', '.join(leaks[:10])}")
        write_originals(samples, tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        result.path = out
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def dataset_split(kind: str, recipe: Recipe | None) -> str:
    return "heldout" if kind == Dataset.Kind.HSA and recipe is not None and recipe.names == "heldout" else "train"


# --- launching and cancelling ---------------------------------------------------------------------------------


def _require(user, perm: str, what: str) -> None:
    if not user.has_perm(perm):
        raise NotAllowed(f"your role does not allow you to {what}")


# Any ML staff may watch every job and build; stopping or resuming one is for the person who started it, or an ML
# lead (roles.MANAGE_ANY_TRAINING): a colleague's week-long run is not one click away from being cancelled.
def may_manage(user, *owners) -> bool:
    """Whether ``user`` may cancel or resume work started by one of ``owners`` (users, or None when unknown)."""
    return any(o is not None and o.pk == user.pk for o in owners) or user.has_perm(roles.MANAGE_ANY_TRAINING)


def _require_manager(user, owner, what: str) -> None:
    if not may_manage(user, owner):
        who = owner.get_username() if owner is not None else "the person who started it"
        raise NotAllowed(f"only {who}, who started it, or an ML lead may {what}")


def version_manifests(refs: Sequence[str]) -> dict[str, Any]:
    """The manifests of approved versions named ``slug@number``; ValidationFailed (path ``sources.versions[i]``)
    for an unknown or unapproved one."""
    out: dict[str, Any] = {}
    errors = []
    for i, ref in enumerate(refs):
        slug, number = ref.rsplit("@", 1)
        version = (HarnessVersion.objects.select_related("harness")
                   .filter(harness__slug=slug, number=int(number)).first())
        if version is None:
            errors.append({"path": f"sources.versions[{i}]", "message": f"no harness version {ref}"})
        elif version.status != HarnessVersion.Status.APPROVED:
            errors.append({"path": f"sources.versions[{i}]",
                           "message": f"{ref} is {version.status}: only approved versions are training data"})
        else:
            out[ref] = version.manifest
    if errors:
        raise ValidationFailed("the source selection is invalid", errors=errors)
    return out


def _check_rooms(room_ids: Sequence[str], user=None) -> None:
    """ValidationFailed (path ``sources.preview_rooms[i]``) for a room that does not exist, or that ``user`` may
    not see (another's private preview room: the same answer, see streams.selectors.preview_room_access)."""
    from streams.models import PreviewRoom
    from streams.selectors import preview_room_access

    rooms = PreviewRoom.objects.filter(pk__in=list(room_ids))
    known = {str(r.pk) for r in rooms if user is None or preview_room_access(user=user, room=r) is not None}
    errors = [{"path": f"sources.preview_rooms[{i}]", "message": f"no preview room or scenario run {r}"}
              for i, r in enumerate(room_ids) if r not in known]
    if errors:
        raise ValidationFailed("the source selection is invalid", errors=errors)


def collect_samples(sources: Sources) -> tuple[list[Sample], dict[str, Any] | None]:
    """The canonical samples of a source selection (the worker's and ``build_hsa_dataset``'s one way), and what
    became of the recorded turns of its preview rooms (``{"considered", "kept", "rejected", "examples"}``;
    None without rooms)."""
    from training_jobs.hsa.recorded import recorded_samples

    recorded: list[Sample] = []
    report = None
    if sources.preview_rooms:
        turns, skipped = selectors.recorded_turns(room_ids=sources.preview_rooms)
        recorded, stats = recorded_samples(turns)
        stats.considered += sum(skipped.values())
        for reason, n in skipped.items():
            stats.rejected[reason] = stats.rejected.get(reason, 0) + n
        report = stats.to_dict()
    return sources.collect(version_manifests(sources.versions), recorded=recorded), report


def validate_build(*, kind: str, recipe: Any, sources: Any, user=None) -> tuple[Recipe | None, Sources]:
    """Parse and check a build request; ValidationFailed with every located error (``recipe.seed``,
    ``sources.scenarios``) when anything is wrong."""
    errors: list[dict[str, str]] = []
    if kind not in Dataset.Kind.values:
        errors.append({"path": "kind", "message": f"unknown kind {kind!r}; use {' or '.join(Dataset.Kind.values)}"})
    parsed_recipe = parsed_sources = None
    try:
        parsed_recipe = parse_recipe(recipe if recipe is not None else {})
    except ValidationError as exc:
        errors += located_errors(exc, "recipe")
    except TypeError as exc:
        errors.append({"path": "recipe", "message": str(exc)})
    try:
        parsed_sources = parse_sources(sources if sources is not None else {})
    except ValidationError as exc:
        errors += located_errors(exc, "sources")
    except TypeError as exc:
        errors.append({"path": "sources", "message": str(exc)})
    if errors:
        raise ValidationFailed("the dataset request is invalid", errors=errors)
    version_manifests(parsed_sources.versions)
    _check_rooms(parsed_sources.preview_rooms, user)  # user None: the command line, which sees every room
    _recipe_endpoint_records(parsed_recipe)
    return parsed_recipe, parsed_sources


def _recipe_endpoint_records(recipe: Recipe | None) -> dict[str, Any]:
    """The model endpoint records a recipe's teacher and judge name, each passing the outbound check;
    ValidationFailed located at ``recipe.teacher`` / ``recipe.judge`` otherwise. Reads no secret."""
    from streams.engine.outbound import OutboundRefused
    from streams.models import ModelEndpoint

    records: dict[str, Any] = {}
    errors: list[dict[str, str]] = []
    for field in ("teacher", "judge"):
        name = getattr(recipe, field, None) if recipe is not None else None
        if name is None:
            continue
        record = ModelEndpoint.objects.filter(name=name).first()
        if record is None:
            errors.append({"path": f"recipe.{field}", "message": f"no model endpoint is named {name!r}: pick one "
                                                                 "an administrator created"})
            continue
        try:
            record.check_usable()
        except OutboundRefused as exc:
            errors.append({"path": f"recipe.{field}", "message": str(exc)})
            continue
        records[name] = record
    if errors:
        raise ValidationFailed("the dataset request is invalid", errors=errors)
    return records


def recipe_endpoints(recipe: Recipe | None) -> dict[str, Any]:
    """The engine endpoints (``streams.engine.client.ModelEndpoint``, API keys read from their secrets here)
    that a regenerate-mode recipe names, for the build about to call them: on the worker, at call time.
    ValidationFailed when a record is gone or refused, OutboundRefused when its secret is not set here."""
    if recipe is None or recipe.label_mode != "regenerate":
        return {}
    return {name: record.as_config() for name, record in _recipe_endpoint_records(recipe).items()}


def _enqueue(dataset_id) -> None:
    from training_jobs.tasks import dataset_build

    dataset_id = str(dataset_id)
    transaction.on_commit(lambda: dataset_build.delay(dataset_id))


def dataset_build_start(*, user, kind: str = Dataset.Kind.HSA, recipe: Any = None, sources: Any = None,
                        name: str = "", with_baseline: bool = False) -> Dataset:
    """Queue a dataset build. ``recipe`` and ``sources`` are JSON data (or the parsed models); ``with_baseline``
    also queues a fixed-harness build over the same samples (``baseline_of`` the HSA one). Returns the (HSA)
    dataset; raises ValidationFailed (400, located errors) and saves nothing when the request is invalid."""
    _require(user, roles.BUILD_DATASET, "build datasets")
    parsed_recipe, parsed_sources = validate_build(kind=kind, recipe=recipe, sources=sources, user=user)
    name = (name or parsed_recipe.name).strip()[:120] or parsed_recipe.name
    recipe_json = parsed_recipe.model_dump(mode="json")
    sources_json = parsed_sources.model_dump(mode="json")
    with transaction.atomic():
        dataset = Dataset.objects.create(name=name, kind=kind, recipe=recipe_json, sources=sources_json,
                                         split=dataset_split(kind, parsed_recipe), created_by=user)
        queued = [dataset]
        if with_baseline and kind == Dataset.Kind.HSA:
            queued.append(Dataset.objects.create(
                name=f"{name} (fixed-harness baseline)"[:120], kind=Dataset.Kind.FIXED_HARNESS,
                recipe=recipe_json, sources=sources_json, split="train", baseline_of=dataset, created_by=user))
        for d in queued:
            audit_record(actor=user, action="dataset.queued", scope=_scope(d), target=f"dataset:{d.name}",
                         to_state=Status.QUEUED, data={"kind": d.kind, "recipe": d.recipe if d.kind == "hsa" else {},
                                                       "sources": d.sources})
            _enqueue(d.pk)
    return dataset


def dataset_cancel(*, user, dataset: Dataset) -> Dataset:
    """A queued build is cancelled now; a running one is asked to stop (it stops at its next progress step).
    A finished one cannot be cancelled (InvalidTransition, 409)."""
    _require(user, roles.BUILD_DATASET, "cancel dataset builds")
    _require_manager(user, dataset.created_by, "cancel this build")
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        if locked.status == Status.QUEUED:
            locked.status, locked.finished_at, locked.cancel_requested = Status.CANCELLED, timezone.now(), True
            locked.save(update_fields=["status", "finished_at", "cancel_requested"])
            to_state = Status.CANCELLED
        elif locked.status == Status.RUNNING:
            if not locked.cancel_requested:
                locked.cancel_requested = True
                locked.save(update_fields=["cancel_requested"])
            to_state = "cancel_requested"
        else:
            raise InvalidTransition(f"this build has {locked.status}: only a queued or running build can be cancelled")
        audit_record(actor=user, action="dataset.cancel", scope=_scope(locked), target=f"dataset:{locked.name}",
                     from_state=dataset.status, to_state=to_state)
    return locked


# --- running (the Celery worker) --------------------------------------------------------------------------------


class _Throttled:
    """Progress and cancel callbacks that touch the database at most every so often."""

    def __init__(self, dataset_id) -> None:
        self.dataset_id = dataset_id
        self.last_write = 0.0
        self.last_check = 0.0

    def progress(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last_write < PROGRESS_EVERY_S:
            return
        self.last_write = now
        Dataset.objects.filter(pk=self.dataset_id).update(progress_done=done, progress_total=total)

    def cancel(self) -> bool:
        now = time.monotonic()
        if now - self.last_check < CANCEL_CHECK_EVERY_S:
            return False
        self.last_check = now
        return Dataset.objects.filter(pk=self.dataset_id, cancel_requested=True).exists()

    def stage(self, stage: str) -> None:
        Dataset.objects.filter(pk=self.dataset_id).update(stage=stage)


def _finish(dataset_id, *, status: str, error: str = "", **fields: Any) -> Dataset:
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset_id)
        from_state = locked.status
        locked.status, locked.error, locked.finished_at, locked.stage = status, error[:4000], timezone.now(), ""
        for key, value in fields.items():
            setattr(locked, key, value)
        locked.save()
        audit_record(actor=None, action=f"dataset.{status}", scope=_scope(locked), target=f"dataset:{locked.name}",
                     from_state=from_state, to_state=status, comment=error[:500],
                     data={"rows": locked.row_counts} if status == Status.SUCCEEDED else {})
    return locked


def dataset_build_run(*, dataset_id) -> Dataset:
    """Run a queued build to the end (the worker's service). Does nothing to a build that is not queued (a
    cancelled one, or a redelivered task). Never raises for a failed build: the failure is stored."""
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset_id)
        if locked.status != Status.QUEUED:
            return locked
        locked.status, locked.started_at, locked.stage = Status.RUNNING, timezone.now(), "collecting samples"
        locked.save(update_fields=["status", "started_at", "stage"])
    callbacks = _Throttled(locked.pk)
    out = datasets_dir() / str(locked.pk)
    with Heartbeat(Dataset, locked.pk):
        return _build(locked, callbacks, out)


def _build(locked: Dataset, callbacks: _Throttled, out: Path) -> Dataset:
    try:
        recipe = parse_recipe(locked.recipe) if locked.kind == Dataset.Kind.HSA else None
        samples, recorded = collect_samples(parse_sources(locked.sources))
        total = len(samples) * (recipe.variants_per_sample if recipe is not None else 1)
        Dataset.objects.filter(pk=locked.pk).update(sample_count=len(samples), progress_total=total,
                                                    stage="building rows")
        if Dataset.objects.filter(pk=locked.pk, cancel_requested=True).exists():
            raise BuildCancelled(0, total)
        endpoints = recipe_endpoints(recipe)  # here, on the worker: checked again, keys read now
        result = build_artifact(samples, out, kind=locked.kind, recipe=recipe, progress=callbacks.progress,
                                cancel=callbacks.cancel, on_stage=callbacks.stage, endpoints=endpoints)
    except BuildCancelled as exc:
        return _finish(locked.pk, status=Status.CANCELLED, error="", progress_done=exc.done)
    except Exception as exc:  # stored with its cause; the task itself succeeds
        if isinstance(exc, ValidationFailed):
            detail = "; ".join(f"{e['path']}: {e['message']}" for e in exc.errors) or exc.message
            message = f"{type(exc).__name__}: {detail}"
        else:
            message = f"{type(exc).__name__}: {exc}"
        return _finish(locked.pk, status=Status.FAILED, error=message)
    stats = result.stats.to_dict()
    if recorded is not None:
        stats["recorded_turns"] = recorded
    return _finish(locked.pk, status=Status.SUCCEEDED, stats=stats, artifact_path=str(out),
                   row_counts={locked.split: result.stats.rows}, progress_done=total, progress_total=total)


def dataset_sweep_stalled(*, now=None) -> list[str]:
    """Fail the running builds whose worker died: no heartbeat for ``HEARTBEAT_STALE_S`` (a build that was
    being cancelled ends cancelled). Their half-written folders are removed. Returns their ids. Run by the
    periodic task ``training_jobs.datasets_sweep_stalled``."""
    now = now or timezone.now()
    limit = stale_before(now)
    stalled = (Dataset.objects.filter(status=Status.RUNNING)
               .filter(Q(heartbeat_at__lt=limit) | Q(heartbeat_at__isnull=True, started_at__lt=limit)))
    failed = []
    for d in stalled:
        with transaction.atomic():  # the worker may have come back and finished it meanwhile
            locked = Dataset.objects.select_for_update().get(pk=d.pk)
            last = locked.heartbeat_at or locked.started_at
            if locked.status != Status.RUNNING or last is None or last >= limit:
                continue
        for tmp in datasets_dir().glob(f".tmp-{locked.pk}-*"):
            shutil.rmtree(tmp, ignore_errors=True)
        if locked.cancel_requested:
            _finish(locked.pk, status=Status.CANCELLED)
        else:
            _finish(locked.pk, status=Status.FAILED, error=(
                f"WorkerLost: the worker running this build stopped answering (last heartbeat "
                f"{last:%Y-%m-%d %H:%M:%S} UTC, {int((now - last).total_seconds())} s before the check): it was "
                f"killed, ran out of memory or lost the database. Nothing was kept; start the build again."))
        failed.append(str(locked.pk))
    return failed


# --- training jobs (HAT stages on the gpu queue) -----------------------------------------------------------------

JobStatus = TrainingJob.Status
METRIC_POINTS_KEPT = 2000  # points stored per job (older ones thinned to every other point beyond this)
LOG_LINES_KEPT = 200
Kind = TrainingJob.Kind
TRAINING_KIND_DATASET = TrainingJob.DATASET_KINDS
JOB_PROGRESS_EVERY_S = 2.0  # a job's progress row is rewritten at most this often (the pages refresh as often)
STAGE_MODEL_KIND = {"sft": TrainedModel.Kind.SFT, "baseline_sft": TrainedModel.Kind.BASELINE_SFT,
                    "distill": TrainedModel.Kind.DISTILL, "rl": TrainedModel.Kind.RL}


def training_config_class(kind: str):
    from training_jobs.hat.config import DistillStageConfig, PipelineConfig, RLStageConfig, SFTStageConfig

    return {Kind.SFT: SFTStageConfig, Kind.BASELINE_SFT: SFTStageConfig, Kind.DISTILL: DistillStageConfig,
            Kind.RL: RLStageConfig, Kind.PIPELINE: PipelineConfig}[kind]


def _stages(kind: str, config: Any) -> list[tuple[str, Any]]:
    """The stages a job runs, in order, with their configs."""
    if kind == Kind.PIPELINE:
        return [(name, c) for name, c in (("sft", config.sft), ("distill", config.distill), ("rl", config.rl))
                if c is not None]
    return [(str(kind), config)]


def teacher_of(model: TrainedModel) -> TrainedModel:
    """The frozen teacher of on-policy distillation for a student: the base model at the root of its lineage
    (the model before any HAT stage)."""
    return model.lineage()[0]


def runs_dir() -> Path:
    return Path(settings.ENV.data_dir) / "runs"


def _job_scope(job: TrainingJob) -> str:
    return f"training:{job.pk}"


def model_register_base(*, path: str | Path, name: str, user=None) -> TrainedModel:
    """Register a model directory as a base model (idempotent by path). ValidationFailed when it is not a model
    directory (no config.json)."""
    directory = Path(path).resolve()
    if not (directory / "config.json").is_file():
        raise ValidationFailed("not a model directory", errors=[
            {"path": "path", "message": f"{directory} has no config.json"}])
    model, _ = TrainedModel.objects.get_or_create(
        path=str(directory), kind=TrainedModel.Kind.BASE,
        defaults={"name": name[:120], "created_by": user})
    return model


def demo_base_model() -> TrainedModel:
    """The project's committed tiny demo model as a base model."""
    from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

    return model_register_base(path=DEMO_MODEL_DIR, name="demo-tiny (committed demo checkpoint)")


def validate_training(*, kind: str, config: Any, dataset_id: Any, base_model_id: Any
                      ) -> tuple[Any, Dataset, TrainedModel]:
    """Parse and check a training request; ValidationFailed with every located error (``config.max_steps``,
    ``dataset``, ``base_model``) when anything is wrong."""
    errors: list[dict[str, str]] = []
    parsed = dataset = base = None
    if kind not in TRAINING_KIND_DATASET:
        errors.append({"path": "kind", "message": f"unknown kind {kind!r}; use {', '.join(TRAINING_KIND_DATASET)}"})
    else:
        config_class = training_config_class(kind)
        try:
            if not isinstance(config if config is not None else {}, (dict, config_class)):
                raise TypeError("config is a JSON object")
            parsed = config if isinstance(config, config_class) else config_class.model_validate(config or {})
        except ValidationError as exc:
            errors += located_errors(exc, "config")
        except TypeError as exc:
            errors.append({"path": "config", "message": str(exc)})
    wanted = TRAINING_KIND_DATASET.get(kind)
    if wanted is not None or dataset_id not in (None, ""):
        dataset = Dataset.objects.filter(pk=dataset_id).first() if is_uuid(dataset_id) else None
        if dataset_id in (None, ""):
            errors.append({"path": "dataset", "message": "pick the dataset to train on"})
        elif dataset is None:
            errors.append({"path": "dataset", "message": f"no dataset {dataset_id}"})
        elif not dataset.is_ready:
            errors.append({"path": "dataset", "message": f"dataset {dataset.name} is {dataset.status}, not ready"})
        elif wanted is not None and dataset.kind not in wanted:
            errors.append({"path": "dataset", "message": f"{Kind(kind).label} trains on "
                           f"{' or '.join(Dataset.Kind(k).label for k in wanted)} datasets, not "
                           f"{dataset.get_kind_display()}"})
    base = TrainedModel.objects.filter(pk=base_model_id).first() if is_uuid(base_model_id) else None
    if base_model_id in (None, ""):
        errors.append({"path": "base_model", "message": "pick the model the job starts from"})
    elif base is None:
        errors.append({"path": "base_model", "message": f"no model {base_model_id}"})
    elif not (base.directory / "config.json").is_file():
        errors.append({"path": "base_model", "message": f"{base.name}: its directory {base.path} is gone"})
    if parsed is not None and base is not None:
        errors += _context_errors(parsed, base)
    if errors:
        raise ValidationFailed("the training request is invalid", errors=errors)
    return parsed, dataset, base


def _context_errors(config: Any, base: TrainedModel) -> list[dict[str, str]]:
    """SFT samples longer than the base model's context would train positions it never had."""
    from training_jobs.hat.config import PipelineConfig, SFTStageConfig

    try:
        context = json.loads((base.directory / "config.json").read_text(encoding="utf-8")).get(
            "max_position_embeddings")
    except (OSError, ValueError):
        return []
    sft, path = (config.sft, "config.sft.max_length") if isinstance(config, PipelineConfig) else \
        (config, "config.max_length")
    if not isinstance(sft, SFTStageConfig) or not isinstance(context, int) or sft.max_length <= context:
        return []
    return [{"path": path, "message": f"{sft.max_length} is longer than {base.name}'s context ({context} tokens)"}]


def _enqueue_training(job: TrainingJob) -> None:
    """Queue the job's task on commit, under a task id stored on the job (the revoke fallback needs it)."""
    from training_jobs.tasks import training_job

    job.task_id, job.revoked_at = str(uuid.uuid4()), None
    job.save(update_fields=["task_id", "revoked_at"])
    job_id, task_id = str(job.pk), job.task_id
    transaction.on_commit(lambda: training_job.apply_async(args=(job_id,), queue="gpu", task_id=task_id))


def training_job_start(*, user, kind: str, config: Any = None, dataset_id: Any = None, base_model_id: Any = None,
                       name: str = "") -> TrainingJob:
    """Queue a training job on the gpu queue (on commit). Raises NotAllowed for roles that may not train and
    ValidationFailed (located errors) for a bad request; saves nothing then."""
    _require(user, roles.RUN_TRAINING, "launch training jobs")
    parsed, dataset, base = validate_training(kind=kind, config=config, dataset_id=dataset_id,
                                              base_model_id=base_model_id)
    label = TrainingJob.Kind(kind).label
    name = (name or "").strip()[:120] or f"{label} on {dataset.name if dataset else base.name}"[:120]
    with transaction.atomic():
        job = TrainingJob.objects.create(name=name, kind=kind, config=parsed.model_dump(mode="json"),
                                         dataset=dataset, base_model=base, created_by=user,
                                         progress_total=sum(c.max_steps for _, c in _stages(kind, parsed)))
        job.output_dir = str(runs_dir() / str(job.pk))
        job.save(update_fields=["output_dir"])
        audit_record(actor=user, action="training.queued", scope=_job_scope(job), target=f"training:{job.name}",
                     to_state=JobStatus.QUEUED, data={"kind": kind, "dataset": str(dataset.pk) if dataset else None,
                                                      "base_model": str(base.pk)})
        _enqueue_training(job)
    return job


def training_job_cancel(*, user, job: TrainingJob) -> TrainingJob:
    """A queued job is cancelled now; a running one is asked to stop: it saves a checkpoint at the end of its
    current step and ends cancelled (resumable). InvalidTransition (409) for a finished job."""
    _require(user, roles.RUN_TRAINING, "cancel training jobs")
    _require_manager(user, job.created_by, "cancel this job")
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().get(pk=job.pk)
        from_state = locked.status
        if locked.status == JobStatus.QUEUED:
            locked.status, locked.finished_at, locked.cancel_requested = JobStatus.CANCELLED, timezone.now(), True
        elif locked.status in (JobStatus.RUNNING, JobStatus.CANCELLING):
            locked.status, locked.cancel_requested = JobStatus.CANCELLING, True
        else:
            raise InvalidTransition(f"this job has {locked.status}: only a queued or running job can be cancelled")
        locked.cancel_requested_at = locked.cancel_requested_at or timezone.now()
        locked.save(update_fields=["status", "finished_at", "cancel_requested", "cancel_requested_at"])
        audit_record(actor=user, action="training.cancel", scope=_job_scope(locked), target=f"training:{locked.name}",
                     from_state=from_state, to_state=locked.status)
    return locked


def training_job_resume(*, user, job: TrainingJob) -> TrainingJob:
    """Queue a cancelled or failed job again: it continues from its latest checkpoint (or starts over when it
    had none). InvalidTransition (409) otherwise."""
    _require(user, roles.RUN_TRAINING, "resume training jobs")
    _require_manager(user, job.created_by, "resume this job")
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().get(pk=job.pk)
        if locked.status not in TrainingJob.RESUMABLE:
            raise InvalidTransition(f"this job has {locked.status}: only a cancelled or failed job can be resumed")
        from_state = locked.status
        locked.status, locked.cancel_requested, locked.error, locked.finished_at = JobStatus.QUEUED, False, "", None
        locked.cancel_requested_at = None
        locked.resumes += 1
        locked.save(update_fields=["status", "cancel_requested", "cancel_requested_at", "error", "finished_at",
                                   "resumes"])
        audit_record(actor=user, action="training.resume", scope=_job_scope(locked), target=f"training:{locked.name}",
                     from_state=from_state, to_state=JobStatus.QUEUED)
        _enqueue_training(locked)
    return locked


class _JobReporter:
    """The stage's reporter for a job: progress points and log lines go to the job's row at most every
    PROGRESS_EVERY_S (and at the end), the cancel flag is read from it."""

    def __init__(self, job_id) -> None:
        self.job_id = job_id
        self.points: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self.last_write = self.last_stop_check = 0.0
        self.stage, self.offset = "", 0  # the stage running, and the steps of the stages before it

    def report(self, point: dict[str, Any]) -> None:
        """``step`` counts across the job's stages; ``stage_step`` within the stage."""
        step = int(point.get("step", 0))
        self.points.append({**point, "stage": self.stage, "stage_step": step, "step": self.offset + step,
                            "t": round(time.time(), 3)})
        self.flush()

    def log(self, line: str) -> None:
        self.lines.append(f"{timezone.now():%H:%M:%S} {f'[{self.stage}] ' if self.stage else ''}{line}")
        self.flush(force=True)

    def should_stop(self) -> bool:
        now = time.monotonic()
        if now - self.last_stop_check < JOB_PROGRESS_EVERY_S:
            return False
        self.last_stop_check = now
        return TrainingJob.objects.filter(pk=self.job_id, cancel_requested=True).exists()

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_write < JOB_PROGRESS_EVERY_S:
            return
        self.last_write = now
        with transaction.atomic():
            job = TrainingJob.objects.select_for_update().only("metrics", "log_tail").get(pk=self.job_id)
            metrics = list(job.metrics or []) + self.points
            if len(metrics) > METRIC_POINTS_KEPT:  # thin the oldest half: the curve keeps its shape
                half = len(metrics) // 2
                metrics = metrics[:half:2] + metrics[half:]
            fields: dict[str, Any] = {"metrics": metrics, "log_tail": _log_tail(job.log_tail, self.lines)}
            if self.points:
                fields["progress_step"] = int(self.points[-1].get("step", 0))
            TrainingJob.objects.filter(pk=self.job_id).update(**fields)
            transaction.on_commit(lambda: _poke_job_watchers(self.job_id))
        self.points, self.lines = [], []


def _log_tail(tail: str, lines: Sequence[str]) -> str:
    joined = ((tail + "\n") if tail else "") + "\n".join(lines)
    return "\n".join(joined.splitlines()[-LOG_LINES_KEPT:])


def _append_log(job_id, line: str) -> None:
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().only("log_tail").get(pk=job_id)
        TrainingJob.objects.filter(pk=job_id).update(log_tail=_log_tail(job.log_tail, [line]))
    transaction.on_commit(lambda: _poke_job_watchers(job_id))


def _poke_job_watchers(job_id) -> None:
    """Tell the job page's WebSockets (training_jobs.consumers) that new progress is stored."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from training_jobs.consumers import PROGRESS_MESSAGE_TYPE, training_group

    try:
        async_to_sync(get_channel_layer().group_send)(training_group(job_id), {"type": PROGRESS_MESSAGE_TYPE})
    except Exception:  # the layer is down: the pages' polling picks the progress up from the database
        logger.warning("poking the watchers of training job %s failed", job_id, exc_info=True)


def _finish_job(job_id, *, status: str, error: str = "", **fields: Any) -> TrainingJob:
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().get(pk=job_id)
        from_state = locked.status
        locked.status, locked.error, locked.finished_at, locked.stage = status, error[:4000], timezone.now(), ""
        for key, value in fields.items():
            setattr(locked, key, value)
        locked.save()
        audit_record(actor=None, action=f"training.{status}", scope=_job_scope(locked),
                     target=f"training:{locked.name}", from_state=from_state, to_state=status, comment=error[:500])
    return locked


def training_job_run(*, job_id) -> TrainingJob:
    """Run a queued job to its end on this worker (the task's service). The job is claimed atomically: a job
    that is not queued (claimed by another worker, cancelled, a redelivered task) is left alone. Never raises for
    a failed stage: the failure is stored with its cause, and the job can be resumed."""
    import socket

    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().get(pk=job_id)
        if locked.status != JobStatus.QUEUED:
            return locked
        locked.status, locked.stage, locked.worker_host = JobStatus.RUNNING, "starting", socket.gethostname()
        locked.started_at = locked.started_at or timezone.now()
        locked.save(update_fields=["status", "stage", "worker_host", "started_at"])
    reporter = _JobReporter(locked.pk)
    with Heartbeat(TrainingJob, locked.pk):
        try:
            stopped, results, model = _run_stages(locked, reporter)
        except Exception as exc:  # stored with its cause; the task itself succeeds
            reporter.log(f"failed: {type(exc).__name__}: {exc}")
            return _finish_job(locked.pk, status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        finally:
            reporter.flush(force=True)
    if stopped:
        return _finish_job(locked.pk, status=JobStatus.CANCELLED, result={"stages": results})
    return _finish_job(locked.pk, status=JobStatus.SUCCEEDED, result={"stages": results, "model": str(model.pk)},
                       progress_step=locked.progress_total)


def _run_stages(job: TrainingJob, reporter: _JobReporter) -> tuple[bool, list[dict[str, Any]], TrainedModel]:
    """Run the job's stages in order, each from the previous stage's model, registering a model per stage. A
    stage this job already finished (before a cancel or a crash) is not run again. Returns (stopped on request,
    the stage results, the last model)."""
    config = training_config_class(job.kind).model_validate(job.config)
    stages = _stages(job.kind, config)
    start_from, results, offset = job.base_model, [], 0
    for i, (name, stage_config) in enumerate(stages, 1):
        label = TrainingJob.Kind(name).label if name in TrainingJob.Kind.values else name
        if len(stages) > 1:
            label = f"{i}/{len(stages)} {label}"
        done = TrainedModel.objects.filter(job=job, kind=STAGE_MODEL_KIND[name]).first()
        if done is not None:
            reporter.log(f"{label}: done before, continuing from {done.name}")
            start_from, offset = done, offset + stage_config.max_steps
            continue
        TrainingJob.objects.filter(pk=job.pk).update(stage=label[:40])
        reporter.stage, reporter.offset = name, offset
        result = _run_stage(name, stage_config, job, start_from, Path(job.output_dir) / name, reporter)
        results.append(result.to_dict())
        if result.stopped:
            return True, results, start_from
        start_from = TrainedModel.objects.create(
            name=f"{job.name} · {label}"[:120], kind=STAGE_MODEL_KIND[name], path=str(result.final_dir),
            parent=start_from, job=job, dataset=job.dataset, recipe=job.dataset.recipe if job.dataset else {},
            config=stage_config.model_dump(mode="json"), metrics=result.metrics, created_by=job.created_by)
        offset += stage_config.max_steps
    return False, results, start_from


def _run_stage(name: str, config: Any, job: TrainingJob, start_from: TrainedModel, out: Path,
               reporter: _JobReporter):
    """One stage with its inputs (the dataset folder, the frozen teacher, or the samples to roll out), in this
    worker process or, when its config asks for several processes, launched with ``accelerate launch``."""
    stage = "sft" if name == "baseline_sft" else name
    if stage == "sft":
        inputs: dict[str, Any] = {"dataset_dir": job.dataset.artifact_dir / "dataset"}
    elif stage == "distill":
        teacher = teacher_of(start_from)
        reporter.log(f"teacher: {teacher.name} (the base of {start_from.name}, frozen)")
        inputs = {"teacher_dir": teacher.path}
    else:
        inputs = {"samples": collect_samples(parse_sources(job.dataset.sources))[0]}
    if config.num_processes > 1:
        return _launch_stage(stage, config, start_from, out, reporter, inputs)
    if stage == "sft":
        from training_jobs.hat.sft import run_sft as run
    elif stage == "distill":
        from training_jobs.hat.distill import run_distill as run
    else:
        from training_jobs.hat.rl import run_rl as run
    return run(config, model_dir=start_from.path, out_dir=out, reporter=reporter, resume=True, **inputs)


def _launch_stage(stage: str, config: Any, start_from: TrainedModel, out: Path, reporter: _JobReporter,
                  inputs: dict[str, Any]):
    """The stage CLI under ``accelerate launch``, its inputs handed over as files, followed through its JSON
    lines."""
    from training_jobs.hat.stage import launch_command, run_launched
    from training_jobs.hsa.samples import write_samples_jsonl

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
    args = ["--config", str(out / "config.json"), "--model", start_from.path, "--out", str(out)]
    if "dataset_dir" in inputs:
        args += ["--dataset", str(inputs["dataset_dir"])]
    elif "teacher_dir" in inputs:
        args += ["--teacher", str(inputs["teacher_dir"])]
    else:
        write_samples_jsonl(inputs["samples"], out / "samples.jsonl")
        args += ["--samples", str(out / "samples.jsonl")]
    command = launch_command(stage, config, args)
    reporter.log(f"launching {config.num_processes} processes: " + " ".join(command))
    return run_launched(command, reporter)


def training_job_sweep_stalled(*, now=None) -> list[str]:
    """Fail the running jobs whose worker died (no heartbeat for ``HEARTBEAT_STALE_S``); a job being cancelled
    ends cancelled. Both can be resumed from their latest checkpoint. Returns their ids. Also the fallback of a
    cancel: a job still running ``TRAINING_CANCEL_GRACE_S`` after it was asked to stop (a step that hangs) has
    its task revoked with SIGTERM; once its heartbeat stops, this sweep ends it cancelled."""
    now = now or timezone.now()
    _revoke_overdue_cancels(now)
    limit = stale_before(now)
    ended = []
    for job in TrainingJob.objects.filter(status__in=(JobStatus.RUNNING, JobStatus.CANCELLING)).filter(
            Q(heartbeat_at__lt=limit) | Q(heartbeat_at__isnull=True, started_at__lt=limit)):
        with transaction.atomic():
            locked = TrainingJob.objects.select_for_update().get(pk=job.pk)
            last = locked.heartbeat_at or locked.started_at
            if locked.status not in (JobStatus.RUNNING, JobStatus.CANCELLING) or last is None or last >= limit:
                continue
        if locked.status == JobStatus.CANCELLING:
            _finish_job(locked.pk, status=JobStatus.CANCELLED)
        else:
            _finish_job(locked.pk, status=JobStatus.FAILED, error=(
                f"WorkerLost: the worker running this job ({locked.worker_host or 'unknown host'}) stopped answering "
                f"(last heartbeat {last:%Y-%m-%d %H:%M:%S} UTC, {int((now - last).total_seconds())} s before the "
                f"check). Resume it to continue from its latest checkpoint."))
        ended.append(str(locked.pk))
    return ended


def _revoke_overdue_cancels(now) -> None:
    from console.celery import app

    overdue = now - timedelta(seconds=settings.TRAINING_CANCEL_GRACE_S)
    for job in TrainingJob.objects.filter(status=JobStatus.CANCELLING, cancel_requested_at__lt=overdue,
                                          revoked_at__isnull=True).exclude(task_id=""):
        # terminate: the worker's pool process running the task gets SIGTERM (a launched stage goes with it)
        app.control.revoke(job.task_id, terminate=True, signal="SIGTERM")
        TrainingJob.objects.filter(pk=job.pk).update(revoked_at=now)
        waited = int((now - job.cancel_requested_at).total_seconds())
        _append_log(job.pk, f"{timezone.now():%H:%M:%S} did not stop within {waited} s of the cancel: its task "
                            f"{job.task_id} was revoked (terminated); it resumes from its latest checkpoint")


# --- serving a registered model (the preview room can pick it) -----------------------------------------------------


def model_serve_start(*, user, model: TrainedModel) -> TrainedModel:
    """Attach a registered model to a local OpenAI-compatible server: a task on the gpu queue starts it on a
    worker host and registers its endpoint, which the preview room then offers. Idempotent while served."""
    _require(user, roles.RUN_TRAINING, "serve models")
    from training_jobs.tasks import model_serve

    if not (model.directory / "config.json").is_file():
        raise InvalidTransition(f"{model.name}: its directory {model.path} is gone")
    model_id = str(model.pk)
    transaction.on_commit(lambda: model_serve.apply_async(args=(model_id,), queue="gpu"))
    audit_record(actor=user, action="model.serve", scope=f"model:{model.pk}", target=f"model:{model.name}")
    return model


def model_serve_run(*, model_id) -> TrainedModel:
    """Start the local server for a model on this host (the task's service) and register its endpoint as
    ``model-<id>`` (replacing a dead one). The server outlives the task."""
    import os
    import socket

    from streams.models import ModelEndpoint
    from training_jobs.tiny_model.serve import start_local_server

    model = TrainedModel.objects.select_related("endpoint").get(pk=model_id)
    if model.serve_pid and model.serve_host == socket.gethostname() and _alive(model.serve_pid) and model.endpoint:
        return model
    log = Path(settings.ENV.data_dir) / "serve" / f"{model.pk}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = start_local_server(model.directory, ready_timeout=180, log_path=log,
                                threads=int(os.environ.get("HAT_SERVE_THREADS", "1")))
    try:  # a loopback server: registered only when the outbound allow-list lets the console call it
        ModelEndpoint.check_url(server.openai_base_url)
    except ValueError:
        server.stop()
        raise
    endpoint, _ = ModelEndpoint.objects.update_or_create(
        name=f"model-{str(model.pk)[:8]}", defaults={"base_url": server.openai_base_url, "model": server.model,
                                                      "kind": ModelEndpoint.Kind.LOCAL, "timeout_s": 120})
    model.endpoint, model.serve_pid, model.serve_host = endpoint, server.proc.pid, socket.gethostname()
    model.save(update_fields=["endpoint", "serve_pid", "serve_host"])
    return model


def model_unserve(*, user, model: TrainedModel) -> TrainedModel:
    """Ask the worker host that serves a model to stop its server (a task on the gpu queue). Preview rooms may be
    using it: only the person who started the server, the model's owner or an ML lead may stop it."""
    _require(user, roles.RUN_TRAINING, "stop serving models")
    if not may_manage(user, selectors.model_served_by(model), model.created_by):
        raise NotAllowed("only the person who started its server, the model's owner or an ML lead may stop it")
    from training_jobs.tasks import model_serve_stop as stop_task

    model_id = str(model.pk)
    transaction.on_commit(lambda: stop_task.apply_async(args=(model_id,), queue="gpu"))
    audit_record(actor=user, action="model.unserve", scope=f"model:{model.pk}", target=f"model:{model.name}")
    return model


def model_serve_stop(*, model_id) -> TrainedModel:
    """Stop a model's server (on the host that runs it) and remove its endpoint."""
    import signal
    import socket

    model = TrainedModel.objects.select_related("endpoint").get(pk=model_id)
    if model.serve_pid and model.serve_host == socket.gethostname() and _alive(model.serve_pid):
        os.kill(model.serve_pid, signal.SIGTERM)
    if model.endpoint is not None:
        from django.db.models import ProtectedError

        try:
            model.endpoint.delete()
        except ProtectedError:  # preview rooms ran on it: it stays for their history (and now fails fast)
            pass
    model.endpoint, model.serve_pid, model.serve_host = None, None, ""
    model.save(update_fields=["endpoint", "serve_pid", "serve_host"])
    return model


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
