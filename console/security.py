"""Response headers every page and API answer carries: the Content-Security-Policy.

Django 5.2 has no CSP of its own (6.0 adds one). The console needs no inline script: pages load their scripts
from static files (htmx, preview.js, live.js) and the API docs use drf-spectacular's split Swagger view, so
``script-src 'self'`` holds. Inline ``style`` attributes remain in a few templates and Redoc styles itself
inline, hence ``'unsafe-inline'`` for styles only. WebSockets (preview rooms, training progress) connect to the
same host.
"""

from __future__ import annotations

from django.conf import settings

DEFAULT_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self' ws: wss:",
    "worker-src 'self' blob:",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = getattr(settings, "HAT_CONTENT_SECURITY_POLICY", "") or DEFAULT_POLICY

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
