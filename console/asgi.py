"""ASGI entry point: HTTP through Django, WebSockets through Channels with session auth in the stack."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from streams.live_routing import with_token_ingest  # noqa: E402
from streams.routing import websocket_urlpatterns as streams_ws  # noqa: E402
from training_jobs.routing import websocket_urlpatterns as training_ws  # noqa: E402

websocket_urlpatterns: list = [*streams_ws, *training_ws]  # the preview room, training progress

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # a live session's ingest socket authenticates by its token (streams.live_routing), the rest by sign-in
        "websocket": with_token_ingest(
            AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
    }
)
