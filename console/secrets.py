"""The administrators' secrets: API keys that outbound requests (model endpoints) send, referenced by name.

The set is the deployment's environment variables named ``HAT_ENDPOINT_SECRET_<NAME>``; nothing else in the
environment can be referenced (``HAT_SECRET_KEY``, ``DATABASE_URL`` and the rest are out of reach by
construction: a name is always looked up under the prefix). Administrators add one by setting the variable on
the web and worker hosts and restarting them; a model endpoint names it (``api_key_secret = "<NAME>"``), and the
worker reads the value when it calls the endpoint. Values are never stored in the database, recipes, configs,
logs or pages; only names are, and only administrators see them.

Plain Python, no Django. Read at call time, so tests and restarts see the environment as it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

PREFIX = "HAT_ENDPOINT_SECRET_"
NAME_RE = re.compile(r"^[A-Z0-9][A-Z0-9_]{0,47}$")


class SecretMissing(LookupError):
    """The named secret is not set (or empty) in this process's environment."""


def valid_name(name: str) -> bool:
    return isinstance(name, str) and bool(NAME_RE.match(name))


def secret_names(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names administrators may reference (sorted): ``OPENAI`` for ``HAT_ENDPOINT_SECRET_OPENAI``."""
    env = os.environ if environ is None else environ
    return sorted(k[len(PREFIX):] for k, v in env.items()
                  if k.startswith(PREFIX) and v and valid_name(k[len(PREFIX):]))


def secret_value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the secret ``name``; :class:`SecretMissing` when it is not set here."""
    if not valid_name(name):
        raise SecretMissing(f"{name!r} is not a secret name (capital letters, digits and _)")
    env = os.environ if environ is None else environ
    value = env.get(PREFIX + name, "")
    if not value:
        raise SecretMissing(f"the secret {name} is not set on this host ({PREFIX}{name})")
    return value
