"""WebSocket routes of live sessions (added to streams.routing)."""

from django.urls import path  # noqa: F401

websocket_urlpatterns: list = []
