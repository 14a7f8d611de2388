"""The Try page of a harness version (mounted at /harnesses/<slug>/v<n>/try/ by console.urls: the registry's own URL
module imports nothing from streams).

GET: one comment box, what the comment will run on (the demo live room, the default endpoint, the version and what
``production`` points at), whether the model was trained on this harness (:mod:`streams.model_fit`) and why the
version does not validate, if it does not. POST: :func:`streams.services.try_draft.try_draft_start` opens a preview
room per side and posts the comment to each, then back to the page with ``?draft=<room>&production=<room>``, whose
columns stream each room's turn over its WebSocket (static/streams/try_draft.js, turns drawn by turns.js).

Who: whoever may use preview rooms and view the harness. The rooms are ordinary preview rooms of the user: a room
named in the address that the user may not see is a 404, as on the preview room page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from console import roles
from console.errors import DomainError
from console.views import role_required
from harness_editor.lookups import version_or_404
from harness_editor.models import HarnessVersion
from streams import selectors
from streams.model_fit import endpoint_model, model_fit
from streams.models import PreviewRoom
from streams.services import try_draft as services
from streams.services.catalog import DEMO_ROOM_SLUG
from streams.services.preview import MAX_VIEWER_COMMENT_CHARS
from streams.services.tool_runtime import tool_bindings_available

TEMPLATE = "streams/try_draft.html"


def _room_or_404(request: HttpRequest, room_id: str, version: HarnessVersion) -> PreviewRoom:
    """A room of this harness the user may see; a 404 otherwise (a hidden room and a missing one look the same)."""
    try:
        room = selectors.preview_room_get_for(user=request.user, room_id=room_id)
    except (PreviewRoom.DoesNotExist, ValueError, ValidationError):  # not a room id at all: the same answer
        raise Http404("no such preview room") from None
    if room.harness_version.harness_id != version.harness_id:
        raise Http404("that preview room plays another harness")
    return room


def _columns(request: HttpRequest, version: HarnessVersion) -> list[dict[str, Any]]:
    columns = []
    for side in (services.DRAFT, services.PRODUCTION):
        room_id = request.GET.get(side, "").strip()
        if room_id:
            room = _room_or_404(request, room_id, version)
            columns.append({"side": side, "room": room, "version": room.harness_version,
                            "ws_path": f"/ws/preview/{room.pk}/"})
    return columns


def _page(request: HttpRequest, version: HarnessVersion, *, status: int = 200, error: DomainError | None = None,
          text: str = "") -> HttpResponse:
    endpoint = services.try_draft_endpoint(version)
    production = services.try_draft_production(version)
    columns = _columns(request, version) if request.method == "GET" else []
    return render(request, TEMPLATE, {
        "harness": version.harness, "version": version, "production": production,
        "same_as_production": production is not None and production.pk == version.pk,
        "endpoint": endpoint, "room_name": DEMO_ROOM_SLUG,
        "problems": services.try_draft_problems(version),
        "fit": model_fit(endpoint=endpoint, version=version),
        "endpoint_model": endpoint_model(endpoint),  # what was measured of it in a room
        "tool_warnings": tool_bindings_available(version.manifest),
        "columns": columns, "error": error, "text": text, "max_chars": MAX_VIEWER_COMMENT_CHARS,
    }, status=status)


@role_required(roles.USE_PREVIEW)
@require_http_methods(["GET", "POST"])
def try_draft(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    if not request.user.has_perm(roles.VIEW_HARNESS):
        raise PermissionDenied("your role does not allow you to view harnesses")
    version = version_or_404(slug, number)
    if request.method == "GET":
        return _page(request, version)
    text = request.POST.get("text", "")
    try:
        sides = services.try_draft_start(user=request.user, version=version, text=text)
    except DomainError as exc:
        return _page(request, version, status=exc.status_code, error=exc, text=text)
    query = urlencode({s.side: str(s.room.pk) for s in sides})
    return redirect(f"{reverse('try_draft', args=[version.harness.slug, version.number])}?{query}")
