"""WebSocket routes of the training jobs (mounted by console.asgi)."""

from django.urls import path

from training_jobs.consumers import TrainingJobConsumer

websocket_urlpatterns = [
    path("ws/training/<uuid:job_id>/", TrainingJobConsumer.as_asgi()),
]
