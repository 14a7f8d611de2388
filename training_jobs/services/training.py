"""Writes of the training jobs: HAT stages (or the pipeline of stages) on the gpu queue.

A training job is a job (:mod:`console.jobs`): :func:`training_job_start` validates and queues it,
:func:`training_job_cancel` and :func:`training_job_resume` are the one cancel and resume (a cancelled or failed job
continues from its latest checkpoint), :func:`training_job_run` is the worker's one service: it runs the stages in
order, each from the previous stage's model, registering a model per stage, with progress points, a log tail and the
cancel flag through :class:`JobReporter`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from console import roles
from console.errors import ValidationFailed
from console.jobs import JobCancelled, job_cancel, job_enqueue, job_resume, job_run
from console.jobs import JobReporter as BaseReporter
from console.services import audit_record
from training_jobs.models import Dataset, TrainedModel, TrainingJob
from training_jobs.schemas import is_uuid, located_errors, parse_sources
from training_jobs.services.access import require, require_manager
from training_jobs.services.datasets import collect_samples

logger = logging.getLogger(__name__)

JobStatus = TrainingJob.Status
METRIC_POINTS_KEPT = 2000  # points stored per job (older ones thinned to every other point beyond this)
LOG_LINES_KEPT = 200
Kind = TrainingJob.Kind
TRAINING_KIND_DATASET = TrainingJob.DATASET_KINDS
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
    elif base.is_adapter:
        errors.append({"path": "base_model", "message": f"{base.name} is a LoRA adapter, not a model: train from "
                                                        f"its base{f' ({base.parent.name})' if base.parent else ''}"})
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


def training_job_start(*, user, kind: str, config: Any = None, dataset_id: Any = None, base_model_id: Any = None,
                       name: str = "", evaluate: Any = None) -> TrainingJob:
    """Queue a training job on the gpu queue (on commit). ``evaluate``: evaluations of the last model it registers,
    queued when it succeeds (training_jobs.eval_run_services.validate_auto_evaluations). Raises NotAllowed for roles
    that may not train and ValidationFailed (located errors) for a bad request; saves nothing then."""
    from training_jobs.eval_run_services import validate_auto_evaluations

    require(user, roles.RUN_TRAINING, "launch training jobs")
    if evaluate:
        require(user, roles.RUN_EVAL, "evaluate models")
    errors: list[dict[str, Any]] = []
    try:
        parsed, dataset, base = validate_training(kind=kind, config=config, dataset_id=dataset_id,
                                                  base_model_id=base_model_id)
    except ValidationFailed as exc:
        errors += exc.errors
    try:
        evaluations = validate_auto_evaluations(evaluate)
    except ValidationFailed as exc:
        errors += exc.errors
    if errors:
        raise ValidationFailed("the training request is invalid", errors=errors)
    label = TrainingJob.Kind(kind).label
    name = (name or "").strip()[:120] or f"{label} on {dataset.name if dataset else base.name}"[:120]
    with transaction.atomic():
        job = TrainingJob.objects.create(name=name, kind=kind, config=parsed.model_dump(mode="json"),
                                         dataset=dataset, base_model=base, created_by=user, evaluate=evaluations,
                                         progress_total=sum(c.max_steps for _, c in _stages(kind, parsed)))
        job.output_dir = str(runs_dir() / str(job.pk))
        job.save(update_fields=["output_dir"])
        audit_record(actor=user, action="training.queued", scope=job.audit_scope(), target=job.audit_target(),
                     to_state=JobStatus.QUEUED, data={"kind": kind, "dataset": str(dataset.pk) if dataset else None,
                                                      "base_model": str(base.pk)})
        job_enqueue(job)
    return job


def training_job_cancel(*, user, job: TrainingJob) -> TrainingJob:
    """A queued job is cancelled now; a running one is asked to stop: it saves a checkpoint at the end of its
    current step and ends cancelled (resumable); revoked if it does not stop within JOB_CANCEL_GRACE_S.
    InvalidTransition (409) for a finished job."""
    require(user, roles.RUN_TRAINING, "cancel training jobs")
    require_manager(user, job.created_by, "cancel this job")
    return job_cancel(job, user=user)


def training_job_resume(*, user, job: TrainingJob) -> TrainingJob:
    """Queue a cancelled or failed job again: it continues from its latest checkpoint (or starts over when it
    had none). InvalidTransition (409) otherwise."""
    require(user, roles.RUN_TRAINING, "resume training jobs")
    require_manager(user, job.created_by, "resume this job")
    return job_resume(job, user=user)


class JobReporter(BaseReporter):
    """The stage's reporter for a job: progress points and log lines go to the job's row at most every
    ``TrainingJob.job_progress_every_s`` (and at the end), the cancel flag is read from it."""

    def __init__(self, job: TrainingJob) -> None:
        super().__init__(job)
        self.job_id = job.pk
        self.points: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self.stage_name, self.offset = "", 0  # the stage running, and the steps of the stages before it

    def report(self, point: dict[str, Any]) -> None:
        """``step`` counts across the job's stages; ``stage_step`` within the stage."""
        step = int(point.get("step", 0))
        self.points.append({**point, "stage": self.stage_name, "stage_step": step, "step": self.offset + step,
                            "t": round(time.time(), 3)})
        self.flush()

    def log(self, line: str) -> None:
        self.lines.append(f"{timezone.now():%H:%M:%S} {f'[{self.stage_name}] ' if self.stage_name else ''}{line}")
        self.flush(force=True)

    def should_stop(self) -> bool:
        """What the stages ask (training_jobs.hat): the job's cancel flag, read at most every
        ``job_progress_every_s``."""
        return self.cancel_requested()

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_write < TrainingJob.job_progress_every_s:
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
                fields["progress_done"] = int(self.points[-1].get("step", 0))
            TrainingJob.objects.filter(pk=self.job_id).update(**fields)
            transaction.on_commit(lambda: _poke_job_watchers(self.job_id))
        self.points, self.lines = [], []


def _log_tail(tail: str, lines: Sequence[str]) -> str:
    joined = ((tail + "\n") if tail else "") + "\n".join(lines)
    return "\n".join(joined.splitlines()[-LOG_LINES_KEPT:])


def job_log_append(job_id, line: str) -> None:
    """One line at the end of a job's log tail (stamped with the time)."""
    line = f"{timezone.now():%H:%M:%S} {line}"
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


def training_job_run(*, job_id, task_id: str | None = None) -> TrainingJob:
    """Run a queued job to its end on this worker (the task's service). The job is claimed atomically: a job
    that is not queued (claimed by another worker, cancelled, a redelivered task) is left alone. Never raises for
    a failed stage: the failure is stored with its cause, and the job can be resumed."""
    return job_run(TrainingJob, job_id, _train, task_id=task_id)


def _train(job: TrainingJob) -> dict[str, Any]:
    reporter = JobReporter(job)
    try:
        stopped, results, model = _run_stages(job, reporter)
    except Exception as exc:
        reporter.log(f"failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        reporter.flush(force=True)
    if stopped:
        raise JobCancelled(result={"stages": results})
    result: dict[str, Any] = {"stages": results, "model": str(model.pk)}
    if job.evaluate:
        from training_jobs.eval_run_services import eval_runs_after_training

        runs = eval_runs_after_training(job=job, model=model, log=reporter.log)
        reporter.flush(force=True)
        result["eval_runs"] = [str(r.pk) for r in runs]
    return {"result": result, "progress_done": job.progress_total}


def _run_stages(job: TrainingJob, reporter: JobReporter) -> tuple[bool, list[dict[str, Any]], TrainedModel]:
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
        reporter.stage_name, reporter.offset = name, offset
        result = _run_stage(name, stage_config, job, start_from, Path(job.output_dir) / name, reporter)
        results.append(result.to_dict())
        if result.stopped:
            return True, results, start_from
        start_from = TrainedModel.objects.create(
            name=f"{job.name} · {label}"[:120], kind=STAGE_MODEL_KIND[name], path=str(result.final_dir),
            parent=start_from, job=job, dataset=job.dataset, recipe=job.dataset.recipe if job.dataset else {},
            config=stage_config.model_dump(mode="json"), metrics=result.metrics, created_by=job.created_by,
            is_adapter=stage_config.lora is not None and not stage_config.lora.merge)
        offset += stage_config.max_steps
    return False, results, start_from


def _run_stage(name: str, config: Any, job: TrainingJob, start_from: TrainedModel, out: Path,
               reporter: JobReporter):
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


def _launch_stage(stage: str, config: Any, start_from: TrainedModel, out: Path, reporter: JobReporter,
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
