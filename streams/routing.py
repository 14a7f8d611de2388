"""WebSocket routes of the streams app (mounted by console.asgi)."""

from django.urls import path

from streams.consumers import PreviewConsumer
from streams.live_routing import websocket_urlpatterns as live_ws

websocket_urlpatterns = [
    path("ws/preview/<uuid:room_id>/", PreviewConsumer.as_asgi()),
    *live_ws,
]
