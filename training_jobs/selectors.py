"""Reads of the dataset jobs: the job list, one job, and the rows of a finished dataset with what the sample
browser shows beside each (the canonical sample before augmentation, both harnesses, their semantic diff).
Reads of the training jobs and the model registry (lineage of a page of models in a few queries); the pure
functions that turn a job's progress points into curves and numbers are in training_jobs.curve_selectors.

Rows are read from the artifact (Hugging Face ``datasets`` on disk, memory-mapped); the JSON-lines files beside
it are indexed once per folder (line offsets), so a page reads one line of each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.db.models import QuerySet

from harness_editor.diff import diff_manifests
from harness_editor.schemas import Manifest, manifest_from_json
from training_jobs.curve_selectors import (  # noqa: F401  (the pages and tests read them from here too)
    LATEST_NUMBERS,
    REWARD_CURVES,
    Curve,
    _finite,
    chart,
    duration_text,
    latest_numbers,
    metric_curve,
    model_metric_rows,
    model_metric_tables,
    overlaid_curves,
    resumed_at,
    reward_curves,
    run_points,
    run_segments,
    stage_points,
)
from training_jobs.models import Dataset, TrainedModel, TrainingJob


def dataset_list(*, status: str | None = None, kind: str | None = None) -> QuerySet[Dataset]:
    qs = Dataset.objects.select_related("created_by", "baseline_of")
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    return qs


def dataset_get(*, dataset_id) -> Dataset:
    return Dataset.objects.select_related("created_by", "baseline_of").get(pk=dataset_id)


def dataset_ready_list() -> QuerySet[Dataset]:
    """Succeeded datasets: what a training job may pick."""
    return dataset_list(status=Dataset.Status.SUCCEEDED)


def dataset_stats_rows(dataset: Dataset) -> list[dict[str, Any]]:
    """The per-operator statistics as table rows, in the recipe's order."""
    ops = (dataset.stats or {}).get("operators") or {}
    order = [o.get("name") for o in (dataset.recipe or {}).get("operators", [])]
    names = [n for n in order if n in ops] + [n for n in ops if n not in order]
    probs = {o.get("name"): o.get("probability") for o in (dataset.recipe or {}).get("operators", [])}
    return [{"name": n, "probability": probs.get(n), **ops[n]} for n in names]


def _endpoint_row(e) -> dict[str, Any]:
    from streams.engine.outbound import OutboundRefused

    try:
        e.check_usable()
        usable = True
    except OutboundRefused:
        usable = False
    # what staff may see of an endpoint: never its secret's name (administrators only), never a key
    return {"name": e.name, "model": e.model, "kind": e.kind, "base_url": e.base_url, "is_default": e.is_default,
            "usable": usable}


def model_endpoints() -> list[dict[str, Any]]:
    """The model endpoints administrators created, as a recipe's teacher / judge may name them."""
    from streams.models import ModelEndpoint

    return [_endpoint_row(e) for e in ModelEndpoint.objects.all()]


def recipe_endpoints(recipe: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A stored recipe's teacher and judge for its page: ``{"role", "name", ...endpoint row}`` for a name
    (``found`` False when the record is gone); an old recipe that wrote an endpoint out (before endpoints were
    records) is read leniently as ``{"role", "legacy": True, "model", "base_url"}``."""
    from streams.models import ModelEndpoint

    out = []
    for role in ("teacher", "judge"):
        value = (recipe or {}).get(role) if isinstance(recipe, Mapping) else None
        if isinstance(value, str):
            record = ModelEndpoint.objects.filter(name=value).first()
            out.append({"role": role, "name": value, "found": record is not None,
                        **({k: v for k, v in _endpoint_row(record).items() if k != "name"} if record else {})})
        elif isinstance(value, Mapping):
            out.append({"role": role, "legacy": True, "model": str(value.get("model", "")),
                        "base_url": str(value.get("base_url", ""))})
    return out


# --- the artifact ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _load_rows(path: str, mtime: float):
    from datasets import load_from_disk

    return load_from_disk(path)


class DatasetRows(Sequence):
    """The rows of a dataset folder as a lazy sequence (slicing reads only those rows): DRF's paginator and
    Django's Paginator both work on it."""

    def __init__(self, artifact_dir: Path):
        path = artifact_dir / "dataset"
        self._ds = _load_rows(str(path), path.stat().st_mtime) if path.is_dir() else None

    def __len__(self) -> int:
        return 0 if self._ds is None else len(self._ds)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1 or start >= stop:
                return [self[i] for i in range(start, stop, step)]
            batch = self._ds.select(range(start, stop)).to_list()
            return [_row_out(start + i, r) for i, r in enumerate(batch)]
        if key < 0:
            key += len(self)
        if not 0 <= key < len(self):
            raise IndexError(key)
        return _row_out(key, self._ds[int(key)])

    def count(self, *args) -> int:  # DRF's LimitOffsetPagination asks queryset.count()
        return len(self)


def _row_out(index: int, row: dict[str, Any]) -> dict[str, Any]:
    return {"index": index, **row}


def dataset_rows(*, dataset: Dataset) -> DatasetRows:
    if not dataset.artifact_path:
        return DatasetRows(Path("/nonexistent"))
    return DatasetRows(dataset.artifact_dir)


@lru_cache(maxsize=32)
def _jsonl_index(path: str, mtime: float, key: str) -> dict[str, int]:
    """``{value of key: byte offset of its line}`` for a JSON-lines file whose lines start with that key."""
    index: dict[str, int] = {}
    with open(path, "rb") as f:
        offset = 0
        for line in f:
            head = line[:200].decode("utf-8", errors="ignore")
            marker = f'"{key}": "'
            at = head.find(marker)
            if at >= 0:
                value = head[at + len(marker):].split('"', 1)[0]
            else:
                value = str(json.loads(line).get(key))
            index.setdefault(value, offset)
            offset += len(line)
    return index


def _jsonl_get(path: Path, key: str, value: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    offset = _jsonl_index(str(path), path.stat().st_mtime, key).get(value)
    if offset is None:
        return None
    with path.open("rb") as f:
        f.seek(offset)
        return json.loads(f.readline())


def _manifest(artifact: Path, files: Sequence[str], digest: str) -> Manifest | None:
    for name in files:
        hit = _jsonl_get(artifact / name, "harness_hash", digest)
        if hit is not None:
            return manifest_from_json(json.dumps(hit["manifest"]))
    return None


def target_steps(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The target turn of a row's messages as steps (the shape of ``target_json``): load_skill ids, tool calls
    with their arguments, retried replies with the hook feedback, the final reply."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    steps: list[dict[str, Any]] = []
    rest = messages[first:]
    for i, m in enumerate(rest):
        if m.get("role") != "assistant":
            if steps and "retry" in steps[-1] and m.get("role") != "tool":
                steps[-1]["feedback"] = m.get("content", "")
            continue
        calls = m.get("tool_calls") or []
        for call in calls:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = fn.get("arguments")
            if fn.get("name") == "load_skill" and isinstance(args, dict):
                steps.append({"load_skill": args.get("skill_id")})
            else:
                steps.append({"tool": fn.get("name"), "arguments": args})
        if not calls:
            last = not any(x.get("role") == "assistant" for x in rest[i + 1:])
            steps.append({"reply": m.get("content", "")} if last else {"retry": m.get("content", "")})
    return steps


def dataset_sample(*, dataset: Dataset, index: int) -> dict[str, Any]:
    """Row ``index`` with its canonical sample, the original and augmented harness and their semantic diff.
    Raises IndexError for a row that does not exist."""
    rows = dataset_rows(dataset=dataset)
    row = rows[index]
    artifact = dataset.artifact_dir
    original = _jsonl_get(artifact / "samples.jsonl", "id", row["sample_id"])
    augmented = _manifest(artifact, ("harnesses.jsonl", "base_harnesses.jsonl"), row["harness_hash"])
    base = None
    if original is not None:
        base = _manifest(artifact, ("base_harnesses.jsonl", "harnesses.jsonl"), original["harness_hash"])
    diff = diff_manifests(base, augmented) if base is not None and augmented is not None else None
    return {
        "row": row,
        "tools": json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools"),
        "original": original,
        "before": (original or {}).get("target") or [],
        "after": target_steps(row["messages"]),
        "base_manifest": base,
        "augmented_manifest": augmented,
        "diff": diff,
        "count": len(rows),
    }


# --- recorded turns (a sample source) -----------------------------------------------------------------------------


def recordable_rooms(*, user=None, limit: int = 50) -> list[dict[str, Any]]:
    """The latest preview rooms and scenario runs with answered turns, for the recipe form: ``{"id", "label"}``.
    With ``user``: only those they may see (scenario runs, their own rooms and those they were invited to)."""
    from django.db.models import Count, Q

    from streams.models import PreviewRoom

    rooms = PreviewRoom.objects.select_related("harness_version__harness", "scenario")
    if user is not None:
        rooms = rooms.filter(Q(kind=PreviewRoom.Kind.RUN) | Q(created_by=user) | Q(pk__in=PreviewRoom.members.through
                                                                                   .objects.filter(user_id=user.pk)
                                                                                   .values("previewroom_id")))
    rooms = (rooms.annotate(replies=Count("events", filter=Q(events__type="reply")))
             .filter(replies__gt=0).order_by("-created_at")[:limit])
    out = []
    for r in rooms:
        what = "scenario run" if r.is_run else "preview"
        scenario = f" · {r.scenario.slug}" if r.scenario_id else ""
        version = r.harness_version
        out.append({"id": str(r.pk), "label": f"{what}{scenario} · {version.harness.slug} v{version.number} · "
                                              f"{r.replies} turn{'s' if r.replies != 1 else ''} · "
                                              f"{r.created_at:%Y-%m-%d %H:%M}"})
    return out


def recorded_turns(*, room_ids: Sequence[str]) -> tuple[list[Any], dict[str, int]]:
    """The answered turns of these rooms as :class:`training_jobs.hsa.recorded.RecordedTurn` (oldest first per
    room), and the turns left out before judging, by reason: ``unapproved_version`` (a draft or a rejected
    version: no training data from a harness compliance has not approved), ``no_room_state`` (recorded before
    turns stored the room they started from)."""
    from harness_editor.models import HarnessVersion
    from streams.engine.events import EVENT_TYPES
    from streams.models import PreviewEvent, PreviewRoom
    from training_jobs.hsa.recorded import RecordedTurn

    engine_types = set(EVENT_TYPES)
    turns: list[RecordedTurn] = []
    skipped: dict[str, int] = {}
    manifests: dict[int, Manifest | None] = {}
    for room in PreviewRoom.objects.filter(pk__in=list(room_ids)).order_by("created_at"):
        by_turn: dict[str, dict[str, Any]] = {}
        for turn_id, kind, payload in (PreviewEvent.objects.filter(room=room).exclude(turn_id="").order_by("seq")
                                       .values_list("turn_id", "type", "payload").iterator(chunk_size=2000)):
            t = by_turn.setdefault(turn_id, {"comments": [], "started": None, "events": []})
            if kind == "viewer_comment":
                t["comments"].append(payload)
            elif kind == "turn_started":
                t["started"] = payload
            elif kind in engine_types:
                t["events"].append({**payload, "type": kind} if "type" not in payload else payload)
        for turn_id, t in by_turn.items():
            started = t["started"]
            if started is None or not any(e.get("type") == "reply" for e in t["events"]):
                continue  # queued, running or failed: nothing answered
            version_id = (started.get("version") or {}).get("id")
            if version_id not in manifests:
                v = HarnessVersion.objects.filter(pk=version_id).first()
                manifests[version_id] = v.manifest if v is not None and v.status == HarnessVersion.Status.APPROVED \
                    else None
            manifest = manifests[version_id]
            if manifest is None:
                skipped["unapproved_version"] = skipped.get("unapproved_version", 0) + 1
                continue
            if not isinstance(started.get("room"), dict):
                skipped["no_room_state"] = skipped.get("no_room_state", 0) + 1
                continue
            kind = "run" if room.is_run else "preview"
            turns.append(RecordedTurn(
                id=f"{room.pk}:{turn_id}", manifest=manifest, room=started["room"], comments=t["comments"],
                events=t["events"], source=f"{kind}:{room.pk}", faults=started.get("faults") or {},
                meta={"room": str(room.pk), "turn": turn_id, "version": started.get("version"),
                      "minute": started.get("minute")}))
    return turns, skipped


# --- training jobs and the model registry -----------------------------------------------------------------------


def training_job_list(*, status: str | None = None, kind: str | None = None) -> QuerySet[TrainingJob]:
    qs = TrainingJob.objects.select_related("created_by", "dataset", "base_model")
    if status:
        qs = qs.filter(status=status)
    if kind:
        qs = qs.filter(kind=kind)
    return qs


def training_job_get(*, job_id) -> TrainingJob:
    return TrainingJob.objects.select_related("created_by", "dataset", "base_model").get(pk=job_id)


def training_job_models(job: TrainingJob) -> list[TrainedModel]:
    """The models a job registered, in the order its stages finished (one per stage; the last is the job's
    result)."""
    return list(TrainedModel.objects.filter(job=job).order_by("created_at"))


def training_datasets(*, kind: str) -> list[Dataset]:
    """The datasets a job of this kind may train on: ready (succeeded, artifact on disk) and of a kind
    ``TrainingJob.DATASET_KINDS`` allows (the service checks the same)."""
    dataset_kinds = TrainingJob.DATASET_KINDS.get(kind)
    if not dataset_kinds:
        return []
    return [d for d in dataset_ready_list().filter(kind__in=dataset_kinds)[:200] if d.is_ready]


def model_list(*, kind: str | None = None) -> QuerySet[TrainedModel]:
    qs = TrainedModel.objects.select_related("created_by", "dataset", "parent", "job")
    if kind:
        qs = qs.filter(kind=kind)
    return qs


def model_get(*, model_id) -> TrainedModel:
    return TrainedModel.objects.select_related("created_by", "dataset", "parent", "job", "endpoint").get(pk=model_id)


def model_served_by(model: TrainedModel):
    """Who last asked for the model's local server (its latest ``model.serve`` audit event), or None."""
    from console.models import AuditEvent

    event = (AuditEvent.objects.filter(action="model.serve", scope=f"model:{model.pk}").select_related("actor")
             .order_by("-id").first())
    return event.actor if event is not None else None


def model_lineages(models: Sequence[TrainedModel]) -> dict[Any, list[TrainedModel]]:
    """``{model id: [base, ..., model]}`` for a page of models, with one query per generation instead of one
    per ancestor of every model (what ``TrainedModel.lineage()`` would cost on a list)."""
    known: dict[Any, TrainedModel] = {m.pk: m for m in models}
    missing = {m.parent_id for m in models if m.parent_id and m.parent_id not in known}
    while missing:
        fetched = list(TrainedModel.objects.filter(pk__in=missing).only("id", "name", "kind", "parent_id"))
        known.update((m.pk, m) for m in fetched)
        missing = {m.parent_id for m in fetched if m.parent_id and m.parent_id not in known}
    out: dict[Any, list[TrainedModel]] = {}
    for m in models:
        chain, seen, node = [], set(), m
        while node is not None and node.pk not in seen:  # a cycle cannot be written, but never loop on one
            chain.append(node)
            seen.add(node.pk)
            node = known.get(node.parent_id) if node.parent_id else None
        out[m.pk] = list(reversed(chain))
    return out


# --- curves and numbers of progress points: training_jobs.curve_selectors (pure); read here by the pages ---------


def compared_jobs(job_ids: Sequence[str]) -> list[TrainingJob]:
    """The jobs to compare, in the order asked; TrainingJob.DoesNotExist names the first unknown id."""
    jobs = {str(j.pk): j for j in training_job_list().filter(pk__in=job_ids)}
    missing = [i for i in job_ids if i not in jobs]
    if missing:
        raise TrainingJob.DoesNotExist(f"no training job {missing[0]}")
    return [jobs[i] for i in job_ids]


def final_numbers(job: TrainingJob) -> dict[str, Any]:
    """What a comparison lists of a job: its last loss and reward, its speed, the trainer time of the stages its
    latest run trained (a resumed job's earlier runs are not in its result), the runs its points came from (1 + the
    resumes that logged), and the model it registered last. The points are the whole run's (:func:`run_points`)."""
    points = run_points(job.metrics or [])
    last_points = {key: next((p for p in reversed(points) if _finite(p.get(key))), None)
                   for key in ("loss", "reward", "samples_per_s")}
    last = {key: p[key] if p else None for key, p in last_points.items()}
    # a pipeline's last loss is its last stage's (RL's policy loss is not comparable with an SFT loss)
    last["loss_stage"] = (last_points["loss"] or {}).get("stage", "")
    stages = (job.result or {}).get("stages") or []
    wall = sum(s.get("metrics", {}).get("wall_s") or 0 for s in stages)
    return {**last, "train_loss": next((s["metrics"].get("train_loss") for s in reversed(stages)
                                        if s.get("metrics", {}).get("train_loss") is not None), None),
            "wall": duration_text(wall) if wall else "", "runs": len(run_segments(job.metrics or [])),
            "resumed_at": resumed_at(points), "model": (training_job_models(job) or [None])[-1]}


MODEL_CHARTS = (("loss", "Training loss"), ("reward", "Reward (combined)"))


def model_training(model: TrainedModel, *, with_curves: bool) -> dict[str, Any]:
    """What a model's page shows of the training that made it: its final metrics as labelled rows (with the whole
    run's figures when the stage was resumed) and, ``with_curves`` (who may see training jobs), the stage's loss
    and reward charts, stepped within the stage (a pipeline's points count across its stages). A base model, or
    one whose job is gone, has only its stored metrics."""
    job = model.job if model.job_id else None
    points = [{**p, "step": p.get("stage_step", p.get("step"))}
              for p in stage_points(job.metrics or [], model.kind)] if job is not None else []
    charts = []
    if with_curves and points:
        run = run_points(points)
        steps = (model.config or {}).get("max_steps")
        for key, title in MODEL_CHARTS:
            c = chart(key, title, [(model.name, run)], x_max=steps if isinstance(steps, int) else 0,
                      testid=f"model-{key}")
            if c is not None:
                charts.append(c)
    return {"metric_rows": model_metric_rows(model.metrics, points),
            "metric_tables": model_metric_tables(model.metrics), "charts": charts}
