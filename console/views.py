"""Console pages: the home dashboard and the audit timeline.

Typed function views: authorise, call selectors, render. ``role_required`` is the one gate every page of
the console uses: anonymous → login page, a signed-in user whose role lacks the permission → 403.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from functools import wraps
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from console import home as home_sections
from console import roles, signin
from console import selectors as audit_selectors
from console.forms import TimelineFilterForm
from console.selectors import AuditFilter
from harness_editor import selectors

TIMELINE_PAGE_SIZE = 50


def role_required(perm: str) -> Callable:
    """Login first (redirect to the login page), then the role's permission (403, naming the roles that hold it)."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.has_perm(perm):
                return forbidden(request, perm)
            return view(request, *args, **kwargs)

        return login_required(wrapped)

    return decorator


def forbidden(request: HttpRequest, perm: str) -> HttpResponse:
    """The 403 page for a user whose roles lack ``perm``: it names the roles that hold it. Answered, not raised as
    PermissionDenied, which Django logs with the exception's traceback (console.log_filters drops that too)."""
    return render(request, "403.html", {"needed_roles": roles.roles_with(perm), "needed_perm": perm}, status=403)


@role_required(roles.VIEW_HARNESS)
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Each role lands on its work (console.home's sections, ordered by role), then the harnesses and activity."""
    user = request.user
    context = {
        "sections": home_sections.home_sections(user),
        "harnesses": selectors.harness_list(),
        "recent_events": audit_selectors.audit_list()[:15],
        "can_add_harness": user.has_perm(roles.ADD_HARNESS),
    }
    return render(request, "console/home.html", context)


@role_required(roles.VIEW_AUDIT)
@require_GET
def timeline(request: HttpRequest) -> HttpResponse:
    """The audit timeline, filtered by scope, user, action and a range of days; htmx asks for the events only."""
    form = TimelineFilterForm(request.GET)
    valid = form.is_valid()
    filters = form.filters() if valid else AuditFilter()
    events = audit_selectors.audit_list(filters=filters) if valid else audit_selectors.audit_list().none()
    page = Paginator(events, TIMELINE_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "form": form,
        "filters": filters,
        "scope": filters.scope,
        "query": urlencode(filters.as_query()),
        "filter_error": "" if valid else form.error_text(),
        "scopes": [(f"harness:{h.slug}", h.name) for h in selectors.harness_list()] + _deployment_scopes(),
        "actions": sorted({*audit_selectors.audit_actions(scope=filters.scope), *filter(None, [filters.action])}),
        "usernames": list(get_user_model().objects.order_by("username").values_list("username", flat=True)),
    }
    template = "console/timeline.html#events" if request.htmx else "console/timeline.html"
    return render(request, template, context, status=200 if valid else 400)


CSV_HEADER = ["id", "at", "user", "action", "scope", "target", "object", "link", "from_state", "to_state",
              "comment", "data"]


@role_required(roles.VIEW_AUDIT)
@require_GET
def timeline_export(request: HttpRequest) -> HttpResponseBase:
    """The filtered timeline as CSV, streamed a batch of rows at a time (the whole timeline may be large)."""
    form = TimelineFilterForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest(f"bad filter: {form.error_text()}\n", content_type="text/plain; charset=utf-8")
    chunks = _csv_chunks(audit_selectors.audit_list(filters=form.filters()))
    response = StreamingHttpResponse(_streamed(request, chunks), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="timeline-{stamp}.csv"'
    return response


def _csv_cell(value: str) -> str:
    # a cell a spreadsheet would read as a formula is written as text (CSV injection)
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _csv_chunks(events) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_HEADER)
    yield buffer.getvalue()
    for batch in audit_selectors.audit_rows_batched(events):
        buffer.seek(0)
        buffer.truncate()
        for e in batch:
            obj = audit_selectors.audit_object(e)
            writer.writerow([e.id, e.at.isoformat(), *(_csv_cell(v) for v in (
                e.actor.get_username() if e.actor_id else "system", e.action, e.scope, e.target, obj.label,
                obj.url or "", e.from_state, e.to_state, e.comment, json.dumps(e.data, ensure_ascii=False,
                                                                               sort_keys=True)))])
        yield buffer.getvalue()


def _streamed(request: HttpRequest, chunks: Iterator[str]):
    """Under ASGI an async iterator (each chunk read in the sync thread: the ORM is sync), else ``chunks`` as is;
    Django would otherwise read a sync iterator whole into memory before sending it under ASGI."""
    if not isinstance(request, ASGIRequest):
        return chunks
    step = sync_to_async(next, thread_sensitive=True)

    async def pull():
        while (chunk := await step(chunks, None)) is not None:
            yield chunk

    return pull()


def _deployment_scopes() -> list[tuple[str, str]]:
    # read from the timeline itself: console imports nothing from streams (the registry imports console.views)
    from console.models import AuditEvent

    scopes = (AuditEvent.objects.filter(scope__startswith="deployment:").order_by("scope")
              .values_list("scope", flat=True).distinct())
    return [(scope, scope.split(":", 1)[1]) for scope in scopes]


class SignInView(auth_views.LoginView):
    """Django's login page, refusing (429) once an address has failed too often for a username
    (console.signin); the password is not even checked then."""

    def post(self, request, *args, **kwargs):
        username = request.POST.get("username", "")
        wait = signin.signin_retry_after(username, request)
        if wait:
            form = self.get_form()
            form.errors.clear()
            response = self.render_to_response(self.get_context_data(form=form,
                                                                     throttled=signin.retry_message(wait)))
            response.status_code = 429
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        signin.signin_failed(form.data.get("username", ""), self.request)
        return super().form_invalid(form)

    def form_valid(self, form):
        signin.signin_succeeded(form.get_user().get_username(), self.request)
        return super().form_valid(form)
