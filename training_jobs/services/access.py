"""Who may do what with the ML team's jobs (shared by datasets, training and serving)."""

from __future__ import annotations

from console import roles
from console.errors import NotAllowed


def require(user, perm: str, what: str) -> None:
    if not user.has_perm(perm):
        raise NotAllowed(f"your role does not allow you to {what}")


# Any ML staff may watch every job and build; stopping or resuming one is for the person who started it, or an ML
# lead (roles.MANAGE_ANY_TRAINING): a colleague's week-long run is not one click away from being cancelled.
def may_manage(user, *owners) -> bool:
    """Whether ``user`` may cancel or resume work started by one of ``owners`` (users, or None when unknown)."""
    return any(o is not None and o.pk == user.pk for o in owners) or user.has_perm(roles.MANAGE_ANY_TRAINING)


def require_manager(user, owner, what: str) -> None:
    if not may_manage(user, owner):
        who = owner.get_username() if owner is not None else "the person who started it"
        raise NotAllowed(f"only {who}, who started it, or an ML lead may {what}")
