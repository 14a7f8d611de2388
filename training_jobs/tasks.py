"""Celery tasks of the training jobs: take ids, call one service."""

from __future__ import annotations

from celery import shared_task

from training_jobs import services

# An HSA build is CPU work (no GPU) but batch work: it runs on the gpu queue with training and evaluations, so an
# interactive turn never waits behind it. At most once: a build that a crashed worker left running is not started
# again by a redelivery (dataset_build_run only runs a queued build).
BUILD_SOFT_TIME_LIMIT_S = 6 * 3600


# Jobs (console.jobs) are claimed with the task's id: a message of an earlier run of the job does nothing.
@shared_task(name="training_jobs.dataset_build", bind=True, acks_late=False, soft_time_limit=BUILD_SOFT_TIME_LIMIT_S)
def dataset_build(self, dataset_id: str) -> dict:
    dataset = services.dataset_build_run(dataset_id=dataset_id, task_id=self.request.id)
    return {"dataset_id": str(dataset.pk), "status": dataset.status}


# A training stage is long GPU (or CPU) work: the gpu queue, at most once (acks_late off: a redelivered task
# would find the job claimed anyway, see training_job_run), a generous soft limit that ends it as failed.
TRAINING_SOFT_TIME_LIMIT_S = 48 * 3600


@shared_task(name="training_jobs.training_job", bind=True, acks_late=False,
             soft_time_limit=TRAINING_SOFT_TIME_LIMIT_S)
def training_job(self, job_id: str) -> dict:
    job = services.training_job_run(job_id=job_id, task_id=self.request.id)
    return {"job_id": str(job.pk), "status": job.status}


@shared_task(name="training_jobs.model_serve", acks_late=False, time_limit=300)
def model_serve(model_id: str) -> dict:
    model = services.model_serve_run(model_id=model_id)
    return {"model_id": str(model.pk), "endpoint": model.endpoint.name if model.endpoint else None}


@shared_task(name="training_jobs.model_serve_stop", acks_late=False, time_limit=60)
def model_serve_stop(model_id: str) -> dict:
    model = services.model_serve_stop(model_id=model_id)
    return {"model_id": str(model.pk), "served": model.endpoint is not None}


# An evaluation run plays every case through the turn engine against a model server: the gpu queue (batch work,
# never in front of preview turns), at most once (a redelivery finds the run claimed), resumable.
EVAL_SOFT_TIME_LIMIT_S = 24 * 3600


@shared_task(name="training_jobs.eval_run", bind=True, acks_late=False, soft_time_limit=EVAL_SOFT_TIME_LIMIT_S)
def eval_run(self, run_id: str) -> dict:
    from training_jobs import eval_run_services

    run = eval_run_services.eval_run_execute(run_id=run_id, task_id=self.request.id)
    return {"run_id": str(run.pk), "status": run.status}


# A latency replay measures an endpoint under load: the gpu queue (never beside preview turns it would slow, or
# that would skew it), at most once, resumable by level. Its turns run in threads of the task's process.
@shared_task(name="training_jobs.latency_replay", bind=True, acks_late=False, soft_time_limit=EVAL_SOFT_TIME_LIMIT_S)
def latency_replay(self, replay_id: str) -> dict:
    from training_jobs import latency_services

    replay = latency_services.latency_replay_execute(replay_id=replay_id, task_id=self.request.id)
    return {"replay_id": str(replay.pk), "status": replay.status}


# A reproduction run trains four arms and evaluates five models (manage.py reproduce_hat): hours of batch work on
# the gpu queue with training jobs, at most once (a redelivery finds the run claimed), not resumable.
@shared_task(name="training_jobs.reproduction_run", bind=True, acks_late=False,
             soft_time_limit=TRAINING_SOFT_TIME_LIMIT_S)
def reproduction_run(self, run_id: str) -> dict:
    from training_jobs import reproduce_services

    run = reproduce_services.reproduction_execute(run_id=run_id, task_id=self.request.id)
    return {"run_id": str(run.pk), "status": run.status}
