"""Console pages: the home dashboard and the audit timeline.

Typed function views: authorise, call selectors, render. ``role_required`` is the one gate every page of
the console uses: anonymous → login page, a signed-in user whose role lacks the permission → 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import home as home_sections
from console import roles, signin
from console import selectors as audit_selectors
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
    scope = request.GET.get("scope", "").strip()
    page = Paginator(audit_selectors.audit_list(scope=scope or None), TIMELINE_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "scope": scope,
        "scopes": [(f"harness:{h.slug}", h.name) for h in selectors.harness_list()] + _deployment_scopes(),
    }
    template = "console/timeline.html#events" if request.htmx else "console/timeline.html"
    return render(request, template, context)


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
