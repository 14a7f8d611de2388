"""WebSocket routes of live sessions (added to streams.routing), and the ingest socket's own route.

The ingest socket (``ws/live/<uuid>/ingest/``) is for a platform, authenticated by a live token, not by a console
sign-in: it needs neither the session-cookie stack nor the browser origin check (a platform's client sends no
Origin; the token is the credential, so no other site can ride on a viewer's cookies).
:func:`with_token_ingest` routes it around them (console.asgi wraps its WebSocket stack with it)."""

from __future__ import annotations

import re

from channels.routing import URLRouter
from django.urls import path

from streams.live_consumers import LiveConsumer, OverlayConsumer
from streams.live_ingest_consumers import LiveIngestConsumer

websocket_urlpatterns: list = [
    path("ws/live/<uuid:session_id>/", LiveConsumer.as_asgi()),  # operators and watchers (sign-in)
    path("ws/live/<uuid:session_id>/overlay/", OverlayConsumer.as_asgi()),  # the subtitle overlay (its token)
]

ingest_websocket_urlpatterns = [
    path("ws/live/<uuid:session_id>/ingest/", LiveIngestConsumer.as_asgi()),
]
_INGEST_PATH = re.compile(r"^/?ws/live/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/ingest/$")


def with_token_ingest(app):
    """An ASGI WebSocket app sending the ingest socket's path to its consumer and everything else to ``app``."""
    ingest = URLRouter(ingest_websocket_urlpatterns)

    async def route(scope, receive, send):
        if _INGEST_PATH.match(scope.get("path", "")):
            return await ingest(scope, receive, send)
        return await app(scope, receive, send)

    return route
