"""The one check every outbound request target passes: http(s) only, no user name or password in the URL, and a
host on the administrators' allow-list (``HAT_OUTBOUND_HOSTS``, read by the caller and passed in).

Model endpoints are checked when an administrator saves one (the admin form), when a user picks one (a recipe's
teacher or judge, a preview room, a scenario run) and again when the worker calls it, so a row edited behind the
form's back is still refused. Hosts match exactly (case-insensitive, a trailing dot ignored); an entry
``host:port`` allows that port only. Nothing is resolved here: numeric spellings such as ``127.1`` or
``2130706433`` are simply not on the list.

Plain Python, no Django: the caller passes the allow-list.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_HOSTS = ("127.0.0.1", "localhost", "::1")  # loopback: the local model server and served checkpoints
MAX_URL_CHARS = 2000


class OutboundRefused(ValueError):
    """A request target (URL, endpoint, secret) that may not be used; the message says why, for people."""


def _host(text: str) -> str:
    return text.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")


def normalise_hosts(entries: Iterable[str]) -> frozenset[tuple[str, int | None]]:
    """``(host, port or None)`` pairs from allow-list entries: ``example.com``, ``example.com:8443``,
    ``127.0.0.1``, ``::1``, ``[::1]:8011``."""
    out: set[tuple[str, int | None]] = set()
    for raw in entries:
        entry = str(raw).strip()
        if not entry:
            continue
        port: int | None = None
        if entry.startswith("["):  # [v6] or [v6]:port
            host, _, rest = entry[1:].partition("]")
            if rest.startswith(":") and rest[1:].isdigit():
                port = int(rest[1:])
        elif entry.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
            host, _, p = entry.partition(":")
            if p.isdigit():
                port = int(p)
            else:
                host = entry
        else:
            host = entry
        out.add((_host(host), port))
    return frozenset(out)


def check_url(url: str, allowed_hosts: Iterable[str] | None) -> str:
    """``url`` unchanged when it may be requested, else :class:`OutboundRefused` saying why.

    ``allowed_hosts=None`` checks the form only (scheme, no credentials, a host): the plain engine's own guard,
    for callers that hold no allow-list. Every console path passes the administrators' list."""
    if not isinstance(url, str) or not url:
        raise OutboundRefused("no URL given")
    if len(url) > MAX_URL_CHARS:
        raise OutboundRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 or c == "\\" for c in url):
        raise OutboundRefused("the URL contains spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundRefused(f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise OutboundRefused(f"only http and https URLs may be requested, not {scheme + ':' if scheme else url!r}")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise OutboundRefused("a URL may not carry a user name or password (keys are secrets, referenced by name)")
    host = _host(parts.hostname or "")
    if not host:
        raise OutboundRefused("the URL names no host")
    if parts.query or parts.fragment or "#" in url or "?" in url:
        raise OutboundRefused("a base URL has no query string or fragment")
    if allowed_hosts is None:
        return url
    allowed = normalise_hosts(allowed_hosts)
    if (host, None) not in allowed and (host, port or (443 if scheme == "https" else 80)) not in allowed:
        shown = f"{host}:{port}" if port else host
        raise OutboundRefused(f"the host {shown} is not on the outbound allow-list (HAT_OUTBOUND_HOSTS, set by "
                              f"the administrators)")
    return url
