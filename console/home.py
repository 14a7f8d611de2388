"""The home page's sections: each role lands on its work.

A section belongs to a role and shows when the user holds that role's permission for the work, so a user with
several roles sees several sections, ordered by role (the order of :data:`console.roles.ROLES`). The registry's
sections (the review queue, a manager's drafts) are console's own; the runtime's (live sessions) and training's
(running jobs, builds, evaluations) come from the providers ``settings.HAT_HOME_SECTIONS`` names, as the registry
reaches its gate's evidence: console imports neither app, so harness_editor (which imports console.views) does not
reach them through it.

A provider is ``f(user) -> HomeSection | None`` (None: not this user's work).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from console import roles
from harness_editor import selectors

ROWS_PER_SECTION = 50


@dataclass(frozen=True)
class HomeRow:
    label: str  # the link's text
    url: str
    cells: tuple[str, ...] = ()  # the other columns, as text
    note: str = ""  # a short muted remark after the link


@dataclass(frozen=True)
class HomeSection:
    role: str  # whose work this is: orders the sections
    title: str
    testid: str  # data-testid of the section
    columns: tuple[str, ...]  # headings: the link's column, then one per cell
    rows: Sequence[HomeRow]
    empty: str  # what the section says when it has no rows
    more: tuple[str, str] | None = None  # (url, text) of the page with all of them


Provider = Callable[[object], "HomeSection | None"]


def when(moment: datetime | None) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else ""


def review_queue(user) -> HomeSection | None:
    if not user.has_perm(roles.REVIEW_VERSION):
        return None
    rows = [HomeRow(label=f"{v.harness.slug} v{v.number}",
                    url=reverse("harness_editor:version", args=[v.harness.slug, v.number]),
                    note="(you: another reviewer decides)" if v.author_id == user.pk else "",
                    cells=(v.author.get_username(), when(v.submitted_at), v.change_note[:80]))
            for v in selectors.review_queue()[:ROWS_PER_SECTION]]
    return HomeSection(role=roles.COMPLIANCE_REVIEWER, title="Review queue", testid="review-queue",
                       columns=("Version", "Author", "Submitted", "Note"), rows=rows,
                       empty="Nothing is waiting for review.")


def my_drafts(user) -> HomeSection | None:
    if not user.has_perm(roles.EDIT_DRAFT):
        return None
    rows = [HomeRow(label=f"{v.harness.slug} v{v.number}",
                    url=reverse("harness_editor:edit", args=[v.harness.slug, v.number]),
                    cells=(when(v.updated_at), v.change_note[:80]))
            for v in selectors.draft_list(author=user)[:ROWS_PER_SECTION]]
    return HomeSection(role=roles.CAMPAIGN_MANAGER, title="My drafts", testid="my-drafts",
                       columns=("Draft", "Updated", "Note"), rows=rows,
                       empty="No drafts. Open a version and choose “New draft from this version”.")


CONSOLE_SECTIONS: tuple[Provider, ...] = (review_queue, my_drafts)


def providers() -> list[Provider]:
    names = getattr(settings, "HAT_HOME_SECTIONS", ()) or ()
    return [*CONSOLE_SECTIONS, *(import_string(name) for name in names)]


def home_sections(user) -> list[HomeSection]:
    """The sections of ``user``'s home page, ordered by role (stable: a provider's order within one role)."""
    sections = [section for section in (provider(user) for provider in providers()) if section is not None]
    order = {role: index for index, role in enumerate(roles.ROLES)}
    return sorted(sections, key=lambda section: order.get(section.role, len(order)))
