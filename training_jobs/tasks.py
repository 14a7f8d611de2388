"""Celery tasks of the training jobs: take ids, call one service."""

from __future__ import annotations

from celery import shared_task

from training_jobs import services

# An HSA build is CPU work (no GPU): it runs on the default queue. At most once: a build that a crashed worker
# left running is not started again by a redelivery (dataset_build_run only runs a queued build).
BUILD_SOFT_TIME_LIMIT_S = 6 * 3600


@shared_task(name="training_jobs.dataset_build", acks_late=False, soft_time_limit=BUILD_SOFT_TIME_LIMIT_S)
def dataset_build(dataset_id: str) -> dict:
    dataset = services.dataset_build_run(dataset_id=dataset_id)
    return {"dataset_id": str(dataset.pk), "status": dataset.status}


@shared_task(name="training_jobs.datasets_sweep_stalled", ignore_result=True, time_limit=60)
def datasets_sweep_stalled() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): fail the builds whose worker died."""
    return services.dataset_sweep_stalled()


# A training stage is long GPU (or CPU) work: the gpu queue, at most once (acks_late off: a redelivered task
# would find the job claimed anyway, see training_job_run), a generous soft limit that ends it as failed.
TRAINING_SOFT_TIME_LIMIT_S = 48 * 3600


@shared_task(name="training_jobs.training_job", acks_late=False, soft_time_limit=TRAINING_SOFT_TIME_LIMIT_S)
def training_job(job_id: str) -> dict:
    job = services.training_job_run(job_id=job_id)
    return {"job_id": str(job.pk), "status": job.status}


@shared_task(name="training_jobs.training_jobs_sweep_stalled", ignore_result=True, time_limit=60)
def training_jobs_sweep_stalled() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): fail the training jobs whose worker died."""
    return services.training_job_sweep_stalled()


@shared_task(name="training_jobs.model_serve", acks_late=False, time_limit=300)
def model_serve(model_id: str) -> dict:
    model = services.model_serve_run(model_id=model_id)
    return {"model_id": str(model.pk), "endpoint": model.endpoint.name if model.endpoint else None}


@shared_task(name="training_jobs.model_serve_stop", acks_late=False, time_limit=60)
def model_serve_stop(model_id: str) -> dict:
    model = services.model_serve_stop(model_id=model_id)
    return {"model_id": str(model.pk), "served": model.endpoint is not None}
