"""Writes of the dataset builds: launch a build, cancel it, and run it (in the Celery worker). A build is a job
(:mod:`console.jobs`): queued, claimed, heartbeat, cancelled and swept like every other kind.

- :func:`dataset_build_start` validates the recipe and the source selection (errors carry paths such as
  ``recipe.operators[2].probability``; nothing is saved then), creates the job (and, when asked, a fixed-harness
  baseline over the same samples) and queues it on commit;
- :func:`dataset_cancel` cancels a queued job at once and asks a running one to stop (the one cancel of
  :func:`console.jobs.job_cancel`: revoked when it does not stop within the grace period);
- :func:`dataset_build_run` is the worker's one service: collect the samples, build with progress and cancel
  callbacks (:class:`console.jobs.JobReporter`: progress written at most every ``Dataset.job_progress_every_s``),
  write the artifact into a
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
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from pydantic import ValidationError

from console import roles
from console.errors import ValidationFailed
from console.jobs import JobCancelled, JobReporter, job_cancel, job_enqueue, job_run
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
from training_jobs.models import Dataset
from training_jobs.schemas import Sources, located_errors, parse_recipe, parse_sources
from training_jobs.services.access import require, require_manager

logger = logging.getLogger(__name__)

PROGRESS_STEPS = 100  # callbacks per build (at least), whatever the recipe's progress_every

Status = Dataset.Status


def datasets_dir() -> Path:
    return Path(settings.ENV.data_dir) / "datasets"


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
            leaks = heldout_leaks(_read_rows(tmp / "dataset"), samples=samples)
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


def version_manifests(refs: Sequence[str], *, paths: Sequence[str] | None = None) -> dict[str, Any]:
    """The manifests of approved versions named ``slug@number``; ValidationFailed (path ``sources.versions[i]``,
    or ``paths[i]``) for an unknown or unapproved one."""
    out: dict[str, Any] = {}
    errors = []
    for i, ref in enumerate(refs):
        at = paths[i] if paths is not None else f"sources.versions[{i}]"
        slug, number = ref.rsplit("@", 1)
        version = (HarnessVersion.objects.select_related("harness")
                   .filter(harness__slug=slug, number=int(number)).first())
        if version is None:
            errors.append({"path": at, "message": f"no harness version {ref}"})
        elif version.status != HarnessVersion.Status.APPROVED:
            errors.append({"path": at,
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


def written_source_samples(sources: Sources, *, remote: bool = True) -> list[Sample]:
    """The samples of the ``written`` turns, each call answered by its recorded result or through its tool's binding
    on this host where that cannot act (fixtures, read-only endpoints: :func:`.written.written_sample`);
    ValidationFailed locating every turn the harness does not accept (``sources.written[0].turns[3].calls[1].tool``)
    or a version that is not approved. ``remote=False`` (a web request) calls no HTTP or MCP tool: turns that need
    one are checked up to their calls and left for the build job."""
    from streams.services.tool_runtime import tool_runtime_for
    from training_jobs.hsa.written import WrittenTurnError, written_sample

    manifests = version_manifests([w.version for w in sources.written],
                                  paths=[f"sources.written[{i}].version" for i in range(len(sources.written))])
    runtime = tool_runtime_for()
    samples: list[Sample] = []
    errors: list[dict[str, str]] = []
    for i, entry in enumerate(sources.written):
        slug = entry.version.replace("@", "-v")
        for j, turn in enumerate(entry.turns):
            try:
                sample = written_sample(manifests[entry.version], turn, index=j, source=f"written:{slug}",
                                        runtime=runtime, remote=remote)
                if sample is not None:
                    samples.append(sample)
            except WrittenTurnError as exc:
                errors.append({"path": f"sources.written[{i}].{exc.path}", "message": exc.reason})
            except (KeyError, TypeError, AttributeError) as exc:  # a turn of the wrong shape
                errors.append({"path": f"sources.written[{i}].turns[{j}]", "message": f"not a written turn: {exc}"})
    if errors:
        raise ValidationFailed("some written turns are not accepted by their harness", errors=errors[:200])
    return samples


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
    written = written_source_samples(sources) if sources.written else []
    return sources.collect(version_manifests(sources.versions), recorded=recorded, written=written), report


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
    if parsed_sources.written:
        # every turn checked before the build is queued, as far as it can be without calling out: a request never
        # waits on an upstream, and the job answers read-only remote calls once
        written_source_samples(parsed_sources, remote=False)
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


def dataset_build_start(*, user, kind: str = Dataset.Kind.HSA, recipe: Any = None, sources: Any = None,
                        name: str = "", with_baseline: bool = False) -> Dataset:
    """Queue a dataset build. ``recipe`` and ``sources`` are JSON data (or the parsed models); ``with_baseline``
    also queues a fixed-harness build over the same samples (``baseline_of`` the HSA one). Returns the (HSA)
    dataset; raises ValidationFailed (400, located errors) and saves nothing when the request is invalid."""
    require(user, roles.BUILD_DATASET, "build datasets")
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
            audit_record(actor=user, action="dataset.queued", scope=d.audit_scope(), target=d.audit_target(),
                         to_state=Status.QUEUED, data={"kind": d.kind, "recipe": d.recipe if d.kind == "hsa" else {},
                                                       "sources": d.sources})
            job_enqueue(d)
    return dataset


def dataset_cancel(*, user, dataset: Dataset) -> Dataset:
    """A queued build is cancelled now; a running one is asked to stop (it stops at its next progress step; its
    task is revoked if it does not within JOB_CANCEL_GRACE_S). A finished one cannot be cancelled
    (InvalidTransition, 409)."""
    require(user, roles.BUILD_DATASET, "cancel dataset builds")
    require_manager(user, dataset.created_by, "cancel this build")
    return job_cancel(dataset, user=user)


# --- running (the Celery worker) --------------------------------------------------------------------------------


def dataset_build_run(*, dataset_id, task_id: str | None = None) -> Dataset:
    """Run a queued build to the end (the worker's service). Does nothing to a build that is not queued (a
    cancelled one, or a redelivered task). Never raises for a failed build: the failure is stored."""
    return job_run(Dataset, dataset_id, _build, task_id=task_id, stage="collecting samples")


def _build(dataset: Dataset) -> dict[str, Any]:
    reporter = JobReporter(dataset)
    out = datasets_dir() / str(dataset.pk)
    recipe = parse_recipe(dataset.recipe) if dataset.kind == Dataset.Kind.HSA else None
    samples, recorded = collect_samples(parse_sources(dataset.sources))
    total = len(samples) * (recipe.variants_per_sample if recipe is not None else 1)
    Dataset.objects.filter(pk=dataset.pk).update(sample_count=len(samples), progress_total=total,
                                                 stage="building rows")
    if reporter.cancel_requested(force=True):
        raise JobCancelled(progress_done=0)
    endpoints = recipe_endpoints(recipe)  # here, on the worker: checked again, keys read now
    try:
        result = build_artifact(samples, out, kind=dataset.kind, recipe=recipe, progress=reporter.progress,
                                cancel=reporter.cancel_requested, on_stage=reporter.stage, endpoints=endpoints)
    except BuildCancelled as exc:
        raise JobCancelled(progress_done=exc.done) from None
    stats = result.stats.to_dict()
    if recorded is not None:
        stats["recorded_turns"] = recorded
    return {"stats": stats, "artifact_path": str(out), "row_counts": {dataset.split: result.stats.rows},
            "progress_done": total, "progress_total": total}
