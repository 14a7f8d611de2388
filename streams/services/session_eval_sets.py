"""A recorded live session saved as an evaluation set — the runtime's side: the default set name and the one call
the session pages and API make.

The saving itself joins a recorded session (here) with training's eval sets (the layer above, which the runtime must
not import: DESIGN §3, ``.importlinter``), so it lives in training
(:func:`training_jobs.session_eval_set_services.live_session_save_as_eval_set`) and is reached through the function
``settings.HAT_SAVE_SESSION_AS_EVAL_SET`` names, as the registry reaches its gate's evidence. No setting (or an empty
one): the console offers no eval sets, and saving answers 409.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from console.errors import DomainError

DEFAULT_SET_PREFIX = "live-"


class EvalSetsUnavailable(DomainError):
    """This console has nothing to save eval sets into (no ``HAT_SAVE_SESSION_AS_EVAL_SET``)."""

    status_code = 409
    code = "not_configured"


def default_set_name(session) -> str:
    """``live-<room slug>-<first 8 of the session id>``, within the eval-set name rules."""
    slug = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in session.room.slug.lower())[:40]
    return f"{DEFAULT_SET_PREFIX}{slug}-{str(session.pk)[:8]}"


def live_session_save_as_eval_set(*, user, session, **options: Any) -> dict[str, Any]:
    """Save the session's answered turns as T1 cases of an eval set (``options``: ``set_name``, ``append``,
    ``turn_ids``, ``tags``, ``note``, ``description``); returns ``{"version", "created", "cases", "left_out"}``. The
    rules — permissions, located errors, nothing half-saved — are the provider's (module docstring)."""
    name = getattr(settings, "HAT_SAVE_SESSION_AS_EVAL_SET", "") or ""
    if not name:
        raise EvalSetsUnavailable("this console has no evaluation sets to save a session into")
    return import_string(name)(user=user, session=session, **options)  # named but not importable: raised
