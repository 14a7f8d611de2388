"""Writes of the training_jobs app, one module per seam: :mod:`.datasets` (dataset builds), :mod:`.training`
(HAT training jobs), :mod:`.serving` (local servers for registered models), :mod:`.access` (who may manage whose
jobs). Builds and training jobs are jobs of :mod:`console.jobs` (one lifecycle, one sweep). The public names are
re-exported here: ``from training_jobs import services; services.dataset_build_start(...)``."""

from training_jobs.services import access, datasets, serving, training
from training_jobs.services.access import may_manage
from training_jobs.services.datasets import (
    build_artifact,
    collect_samples,
    dataset_build_run,
    dataset_build_start,
    dataset_cancel,
    dataset_split,
    datasets_dir,
    recipe_endpoints,
    validate_build,
    version_manifests,
    write_originals,
)
from training_jobs.services.serving import model_serve_run, model_serve_start, model_serve_stop, model_unserve
from training_jobs.services.training import (
    STAGE_MODEL_KIND,
    TRAINING_KIND_DATASET,
    JobReporter,
    demo_base_model,
    job_log_append,
    model_register_base,
    runs_dir,
    teacher_of,
    training_config_class,
    training_job_cancel,
    training_job_resume,
    training_job_run,
    training_job_start,
    validate_training,
)

__all__ = [
    "access", "datasets", "serving", "training", "may_manage", "build_artifact", "collect_samples",
    "dataset_build_run", "dataset_build_start", "dataset_cancel", "dataset_split", "datasets_dir",
    "recipe_endpoints", "validate_build", "version_manifests", "write_originals", "model_serve_run",
    "model_serve_start", "model_serve_stop", "model_unserve", "STAGE_MODEL_KIND", "TRAINING_KIND_DATASET",
    "JobReporter", "demo_base_model", "job_log_append", "model_register_base", "runs_dir", "teacher_of",
    "training_config_class", "training_job_cancel", "training_job_resume", "training_job_run",
    "training_job_start", "validate_training",
]
