"""Logging filters (wired in settings.LOGGING, and on uvicorn's loggers by console.asgi).

An ordinary refusal is not an error: Django logs every ``PermissionDenied`` a view raises as a warning *with the
exception's traceback* (``django.utils.log.log_response(..., exception=exc)``), so each 403 printed a stack trace in
the server's log. :class:`RefusalWithoutTraceback` keeps the warning line ("Forbidden (Permission denied): /path")
and drops the traceback; other records pass unchanged.

A secret in a query string is not for the log: the subtitle overlay (``/live/<id>/overlay/?token=``, a URL is all
an OBS browser source can carry) and the sockets (``ws/live/<id>/overlay/``, ``…/ingest/?token=``) take a token
there, and uvicorn writes each request's path with its query (``uvicorn.access``; WebSocket handshakes on
``uvicorn.error``). :class:`QueryTokenRedacted` replaces the value of every query parameter whose name ends in
``token`` with ``[redacted]`` in those lines, on any path (the name is never used for anything but a secret here);
:func:`redact_server_log_tokens` puts it on uvicorn's loggers in the web process.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

from django.core.exceptions import PermissionDenied


class RefusalWithoutTraceback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True


_QUERY_PARAM = re.compile(r"([?&;])([^=&;?#\s\"']*)=([^&;#\s\"']*)")
REDACTED = "[redacted]"
SERVER_LOGGERS = ("uvicorn.access", "uvicorn.error")


def _redact(m: re.Match) -> str:
    # the name as the server reads it (``%74oken`` is ``token`` to parse_qs)
    if unquote_plus(m.group(2)).lower().endswith("token"):
        return f"{m.group(1)}{m.group(2)}={REDACTED}"
    return m.group(0)


def redact_query_tokens(text: str) -> str:
    """``/live/x/overlay/?token=hat_abc&v=1`` → ``/live/x/overlay/?token=[redacted]&v=1``."""
    return _QUERY_PARAM.sub(_redact, text) if "=" in text else text


class QueryTokenRedacted(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_query_tokens(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query_tokens(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact_query_tokens(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


def redact_server_log_tokens() -> None:
    """Put :class:`QueryTokenRedacted` on uvicorn's loggers (once; uvicorn configured them before it imported the
    app, and Django's LOGGING leaves loggers it does not name alone)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QueryTokenRedacted) for f in logger.filters):
            logger.addFilter(QueryTokenRedacted())
