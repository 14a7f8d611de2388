"""Notification pages: the list (newest first), the header's bell (polled by htmx), marking read, the e-mail choice.

Everyone with a console role has notifications; each person sees and changes only their own (someone else's id
is a 404, the same as one that does not exist).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.template.loader import get_template
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from console import roles, selectors, services
from console.bell import Bell
from console.models import Notification
from console.views import role_required

PAGE_SIZE = 50
HTMX_STOP_POLLING = 286  # htmx stops an "every 30s" trigger on this status


@role_required(roles.VIEW_HARNESS)
@require_GET
def notification_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.notification_list(user=request.user), PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "email_enabled": selectors.notification_email_enabled(user=request.user),
        "has_email": bool(request.user.email),
    }
    return render(request, "console/notifications.html", context)


@require_GET
def notification_bell(request: HttpRequest) -> HttpResponse:
    """The bell alone, for htmx's polling. Signed out (the session ended under an open page): stop polling rather
    than swap the login page into the header."""
    if not request.user.is_authenticated and request.htmx:
        return HttpResponse(status=HTMX_STOP_POLLING)
    return _bell_fragment(request)


@role_required(roles.VIEW_HARNESS)
def _bell_fragment(request: HttpRequest) -> HttpResponse:
    # rendered without the context processors: a poll costs the session, the user and one count, nothing more
    return HttpResponse(get_template("console/_bell.html#bell").render({"bell": Bell(request.user)}))


def _own(request: HttpRequest, notification_id: int) -> Notification:
    try:
        return services.notification_mark_read(user=request.user, notification_id=notification_id)
    except Notification.DoesNotExist:
        raise Http404("no such notification") from None


def _back(request: HttpRequest) -> HttpResponse:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        target = reverse("notifications")
    return redirect(target)


@role_required(roles.VIEW_HARNESS)
@require_POST
def notification_read(request: HttpRequest, notification_id: int) -> HttpResponse:
    _own(request, notification_id)
    return _back(request)


@role_required(roles.VIEW_HARNESS)
@require_POST
def notification_open(request: HttpRequest, notification_id: int) -> HttpResponse:
    """Mark read and go to what it is about (the list when it has no page)."""
    notification = _own(request, notification_id)
    return redirect(notification.url or reverse("notifications"))


@role_required(roles.VIEW_HARNESS)
@require_POST
def notification_read_all(request: HttpRequest) -> HttpResponse:
    count = services.notification_mark_all_read(user=request.user)
    messages.success(request, f"{count} notification{'s' if count != 1 else ''} marked read.")
    return _back(request)


@role_required(roles.VIEW_HARNESS)
@require_POST
def notification_email(request: HttpRequest) -> HttpResponse:
    choice = request.POST.get("email", "")
    if choice not in ("on", "off"):
        return HttpResponseBadRequest('choose e-mail "on" or "off"', content_type="text/plain; charset=utf-8")
    services.notification_preference_set(user=request.user, email=choice == "on")
    messages.success(request, "Notifications will be e-mailed to you." if choice == "on"
                     else "Notifications will no longer be e-mailed to you; they stay here.")
    return redirect("notifications")

