"""WebSocket routes of the training jobs and evaluation runs (mounted by console.asgi)."""

from django.urls import path

from training_jobs.consumers import TrainingJobConsumer
from training_jobs.eval_run_consumers import EvalRunConsumer

websocket_urlpatterns = [
    path("ws/training/<uuid:job_id>/", TrainingJobConsumer.as_asgi()),
    path("ws/evals/<uuid:run_id>/", EvalRunConsumer.as_asgi()),
]
