"""When the database cannot take a request now, the client is told to try again, never given a 500.

Busy means: every connection of this process's pool stayed in use past ``HAT_DB_POOL_TIMEOUT_S``
(``psycopg_pool.PoolTimeout``, which Django wraps in its ``OperationalError``), or a web request's statement waited
on a lock past ``HAT_DB_LOCK_TIMEOUT_S`` or ran past ``HAT_DB_STATEMENT_TIMEOUT_S`` (PostgreSQL's ``lock_timeout``
and ``statement_timeout``: :func:`web_session_options`, set on the web process's sessions only, so that eight
requests queued on one row lock give their connections back instead of starving every other request).

:class:`DatabaseBusyMiddleware` answers such a request 503 with ``Retry-After``: the API's error body under
``/api/`` (code ``database_busy``; the comment ingest and the webhook are there: a write that failed this way
rolled back, so the platform sends the comments again and none is lost), a short page elsewhere.
"""

from __future__ import annotations

import logging
import math

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.utils.html import format_html
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

logger = logging.getLogger(__name__)

BUSY_CODE = "database_busy"
_BUSY = (PoolTimeout, pg_errors.LockNotAvailable, pg_errors.QueryCanceled)


def web_session_options(lock_timeout_s: float, statement_timeout_s: float) -> str:
    """libpq ``options`` setting PostgreSQL's lock and statement timeouts on every session (0: no limit)."""
    parts = [f"-c {name}={round(seconds * 1000)}" for name, seconds in
             (("lock_timeout", lock_timeout_s), ("statement_timeout", statement_timeout_s)) if seconds > 0]
    return " ".join(parts)


def database_busy(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from) says the database is busy rather than broken."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, _BUSY):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def retry_after_s() -> int:
    """What a client should wait: about the time a lock may be waited for, which is what filled the pool."""
    env = settings.ENV
    return max(1, math.ceil(env.db_lock_timeout_s or env.db_pool_timeout_s / 2))


def busy_response(request: HttpRequest) -> HttpResponse:
    wait = retry_after_s()
    message = f"the database is busy; nothing was saved: try again in {wait} s"
    if request.path_info.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message, "code": BUSY_CODE, "errors": []}, status=503)
    else:
        response = HttpResponse(format_html(
            '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Busy</title></head><body>'
            "<h1>The console is busy</h1><p>{}.</p><p><a href=\"\">Try again</a></p></body></html>",
            message.capitalize()), status=503)
    response["Retry-After"] = str(wait)
    return response


class DatabaseBusyMiddleware(MiddlewareMixin):
    """A busy database becomes a 503 with Retry-After (views, DRF views and template rendering raise through
    ``process_exception``)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_busy(exception):
            return None
        logger.warning("database busy on %s %s: %s", request.method, request.path, type(exception).__name__)
        return busy_response(request)
