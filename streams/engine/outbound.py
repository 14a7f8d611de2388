"""The one check every outbound request target passes: http(s) only, no user name or password in the URL, and a
host on the administrators' allow-list (``HAT_OUTBOUND_HOSTS``, read by the caller and passed in).

Model endpoints are checked when an administrator saves one (the admin form), when a user picks one (a recipe's
teacher or judge, a preview room, a scenario run) and again when the worker calls it, so a row edited behind the
form's back is still refused. HTTP tool endpoints (``HAT_TOOL_ENDPOINTS``) are checked against the same list,
at start-up and when a call is made (:mod:`streams.tool_bindings.http`).

Hosts match exactly after one normalisation applied to both sides (:func:`normalise_host`: lowercase, one
trailing dot off, IDNA for non-ASCII names). An entry ``host:port`` allows that port only. An entry without a
port allows any port for model endpoints (the console starts model servers on free loopback ports) and only the
scheme's default port (80, 443) for tool endpoints, so a loopback service such as Redis is never a tool's
upstream unless its port is listed. Nothing is resolved here: numeric spellings such as ``127.1`` or
``2130706433`` are simply not on the list.

Plain Python, no Django: the caller passes the allow-list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal
from urllib.parse import urlsplit

import idna

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_HOSTS = ("127.0.0.1", "localhost", "::1")  # loopback: the local model server and served checkpoints
MAX_URL_CHARS = 2000


class OutboundRefused(ValueError):
    """A request target (URL, endpoint, secret) that may not be used; the message says why, for people."""


def normalise_host(text: str) -> str:
    """The form a host is compared in, the same for allow-list entries and URLs: lowercase, brackets off, one
    trailing dot off (``localhost.`` is ``localhost``; ``localhost..`` is not), non-ASCII names in their IDNA
    (UTS 46) ASCII form, as the HTTP client sends them. ``""`` for a name IDNA refuses."""
    host = text.strip().lower().removeprefix("[").removesuffix("]")
    host = host[:-1] if host.endswith(".") else host
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        return ""


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
        out.add((normalise_host(host), port))
    return frozenset(out)


def check_url(url: str, allowed_hosts: Iterable[str] | None, *,
              ports: Literal["any", "default"] = "any") -> str:
    """``url`` unchanged when it may be requested, else :class:`OutboundRefused` saying why.

    ``allowed_hosts=None`` checks the form only (scheme, no credentials, a host): the plain engine's own guard,
    for callers that hold no allow-list. Every console path passes the administrators' list. ``ports``: what an
    entry without a port allows, ``any`` port (model endpoints) or only the scheme's ``default`` (tool
    endpoints)."""
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
    if not parts.hostname:
        raise OutboundRefused("the URL names no host")
    host = normalise_host(parts.hostname)
    if not host:
        raise OutboundRefused(f"{parts.hostname!r} is not a valid host name")
    if parts.query or parts.fragment or "#" in url or "?" in url:
        raise OutboundRefused("a base URL has no query string or fragment")
    if allowed_hosts is None:
        return url
    allowed = normalise_hosts(allowed_hosts)
    default_port = 443 if scheme == "https" else 80
    effective = port or default_port
    bare_ok = (host, None) in allowed and (ports == "any" or effective == default_port)
    if not bare_ok and (host, effective) not in allowed:
        shown = f"{host}:{effective}" if ports == "default" or port else host
        raise OutboundRefused(f"the host {shown} is not on the outbound allow-list (HAT_OUTBOUND_HOSTS, set by "
                              f"the administrators" + (f"; for a tool endpoint an entry without a port allows "
                                                       f"port {default_port} only)" if ports == "default" else ")"))
    return url
