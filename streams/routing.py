"""WebSocket routes of the streams app (mounted by console.asgi)."""

from django.urls import path

from streams.consumers import PreviewConsumer

websocket_urlpatterns = [
    path("ws/preview/<uuid:room_id>/", PreviewConsumer.as_asgi()),
]
