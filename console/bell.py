"""The notification bell in every page's header (templates/console/_bell.html): its unread count, read lazily."""

from __future__ import annotations

from functools import cached_property

from console import roles, selectors


class Bell:
    """Counts only when a template asks (``bell.unread``), once per request: one small query on a partial index."""

    def __init__(self, user) -> None:
        self.user = user

    @cached_property
    def shown(self) -> bool:
        # people without a console role get a 403 page with the header: no bell there
        return self.user.is_authenticated and self.user.has_perm(roles.VIEW_HARNESS)

    @cached_property
    def unread(self) -> int:
        return selectors.notification_unread_count(user=self.user) if self.shown else 0

    @property
    def unread_label(self) -> str:
        return f"{selectors.UNREAD_CAP}+" if self.unread > selectors.UNREAD_CAP else str(self.unread)


def bell(request) -> dict:
    """Context processor (settings.TEMPLATES): ``bell`` on every page, counting nothing until it is used."""
    user = getattr(request, "user", None)
    if user is None:
        return {}
    return {"bell": Bell(user)}
