"""ASGI entry point: HTTP through Django, WebSockets through Channels with session auth in the stack."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
if not settings.configured:  # this process serves web requests (not a test importing the routing)
    os.environ["HAT_WEB_PROCESS"] = "1"  # console.settings: PostgreSQL lock and statement timeouts
django_asgi_app = get_asgi_application()

from console.log_filters import redact_server_log_tokens  # noqa: E402

redact_server_log_tokens()  # overlay and ingest ?token= values stay out of uvicorn's access log

from console.latency_tuning import (  # noqa: E402
    freeze_startup_heap,
    log_gc_pauses,
    prefer_latency,
    space_full_collections,
)

# The event loop hands work to database threads and back on every WebSocket frame: a GIL switch interval under a
# millisecond keeps the loop from waiting 5 ms behind a busy thread (console.config gil_switch_s).
prefer_latency(gil_switch_s=settings.ENV.gil_switch_s)
if os.environ.get("HAT_GC_PAUSE_LOG"):  # benchmarks: bench/live_bench.py reports the pauses
    log_gc_pauses(os.environ["HAT_GC_PAUSE_LOG"])

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

# Everything the web process serves with is imported now (the apps, their consumers and routing): keep that heap out
# of later full collections, which otherwise paused every socket for 125-158 ms (console.config gc_freeze).
if settings.ENV.gc_freeze:
    freeze_startup_heap()
space_full_collections(settings.ENV.gc_full_every)
