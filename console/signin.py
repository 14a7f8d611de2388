"""Brute-force protection for signing in (the login page and the API token endpoint share it).

Failed attempts are counted in the cache per (username, client address) and per client address; past
``HAT_SIGNIN_MAX_FAILURES`` (per pair; ten times that per address) within ``HAT_SIGNIN_WINDOW_S`` further
attempts are refused with 429 before the password is even checked, until the window has passed. Counting per
pair, not per username alone, keeps a stranger from locking a colleague out. A successful sign-in clears the
pair's count. If the cache is unreachable (a Redis blip) signing in still works: the guard fails open and says
so in the log.
"""

from __future__ import annotations

import hashlib
import logging
import time

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)


def _client(request) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


def _keys(username: str, request) -> tuple[str, str]:
    pair = hashlib.sha256(f"{username.strip().lower()}\0{_client(request)}".encode()).hexdigest()[:32]
    return f"signin:pair:{pair}", f"signin:addr:{_client(request)}"


def signin_retry_after(username: str, request) -> int:
    """Seconds until this user may try again from this address (0: now)."""
    pair_key, addr_key = _keys(username, request)
    limit = settings.HAT_SIGNIN_MAX_FAILURES
    try:
        got = cache.get_many([pair_key, addr_key, f"{pair_key}:t", f"{addr_key}:t"])
    except Exception:  # noqa: BLE001 — never lock everyone out because the cache is down
        log.warning("sign-in throttle: cache unavailable, not limiting", exc_info=True)
        return 0
    blocked = [key for key, cap in ((pair_key, limit), (addr_key, 10 * limit)) if got.get(key, 0) >= cap]
    if not blocked:
        return 0
    started = min(got.get(f"{key}:t", time.time()) for key in blocked)
    return max(1, int(started + settings.HAT_SIGNIN_WINDOW_S - time.time()))


def signin_failed(username: str, request) -> None:
    window = int(settings.HAT_SIGNIN_WINDOW_S)
    try:
        for key in _keys(username, request):
            # add() only creates: the window starts at the first failure; incr() is atomic in Redis
            cache.add(f"{key}:t", time.time(), timeout=window)
            cache.add(key, 0, timeout=window)
            cache.incr(key)
    except Exception:  # noqa: BLE001
        log.warning("sign-in throttle: cache unavailable, failure not counted", exc_info=True)


def signin_succeeded(username: str, request) -> None:
    try:
        pair_key = _keys(username, request)[0]
        cache.delete_many([pair_key, f"{pair_key}:t"])
    except Exception:  # noqa: BLE001
        log.warning("sign-in throttle: cache unavailable", exc_info=True)


def retry_message(seconds: int) -> str:
    minutes = max(1, round(seconds / 60))
    return f"Too many failed sign-ins. Try again in about {minutes} minute{'s' if minutes != 1 else ''}."
