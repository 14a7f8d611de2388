"""Logging filters (wired in settings.LOGGING).

An ordinary refusal is not an error: Django logs every ``PermissionDenied`` a view raises as a warning *with the
exception's traceback* (``django.utils.log.log_response(..., exception=exc)``), so each 403 printed a stack trace in
the server's log. :class:`RefusalWithoutTraceback` keeps the warning line ("Forbidden (Permission denied): /path")
and drops the traceback; other records pass unchanged.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class RefusalWithoutTraceback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
