"""The runtime's section of the home page (console.home; ``settings.HAT_HOME_SECTIONS`` names it): an operator
lands on the sessions on air."""

from __future__ import annotations

from django.urls import reverse

from console import roles
from console.home import ROWS_PER_SECTION, HomeRow, HomeSection, when
from streams.live_selectors import live_session_list
from streams.models import LiveSession


def live_sessions(user) -> HomeSection | None:
    if not user.has_perm(roles.RUN_LIVE):
        return None
    sessions = live_session_list(status=LiveSession.Status.LIVE)[:ROWS_PER_SECTION]
    rows = [HomeRow(label=s.title, url=reverse("live:session", args=[s.pk]),
                    note="(muted)" if s.muted else ("(replies wait for approval)" if s.approve_before_speak else ""),
                    cells=(s.room.title, s.deployment.name, s.started_by.get_username(), when(s.started_at)))
            for s in sessions]
    return HomeSection(role=roles.OPERATOR, title="Live sessions on air", testid="live-sessions",
                       columns=("Session", "Room", "Deployment", "Started by", "Started"), rows=rows,
                       empty="No session is live. Start one from the Live page.",
                       more=(reverse("live:list"), "All sessions →"))
