"""WebSocket routes of live sessions (added to streams.routing)."""

from django.urls import path

from streams.live_consumers import LiveConsumer, OverlayConsumer

websocket_urlpatterns: list = [
    path("ws/live/<uuid:session_id>/", LiveConsumer.as_asgi()),
    path("ws/live/<uuid:session_id>/overlay/", OverlayConsumer.as_asgi()),
]
