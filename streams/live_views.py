"""Live session pages: the list with the start form, the operator's page, its controls, the recorded transcript
and the subtitle overlay.

Roles: everyone with VIEW_LIVE watches (the page, the transcript, the socket); RUN_LIVE starts, steers and ends
sessions. The controls are plain forms posted with htmx (one service call each, :mod:`streams.services.
live_controls`); the page's WebSocket (:mod:`streams.live_consumers`) only streams events. An htmx post answers
with the control's result (the same status codes as without htmx: 400 bad input, 403, 404, 409 an ended session)
and the page's panels (state, pending replies, queue) redraw from the database when events say they changed.
Without the script the forms post and come back to the page.

The overlay needs no login: an overlay-scope token of the session in the query string, checked here (403 page)
and by its socket.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, InvalidTransition, ValidationFailed
from console.views import role_required
from streams import live_forms as lf
from streams import live_page_selectors as pages
from streams.live_selectors import live_comment_counts
from streams.models import LiveSession, LiveToken

TRANSCRIPT_PER_PAGE = 50
PANELS = ("state", "pending", "tool_calls", "queue", "log", "tokens", "deployment")


def _session_or_404(session_id) -> LiveSession:
    session = (LiveSession.objects.select_related("room", "deployment__harness", "started_by", "ended_by",
                                                  "version_in_force__harness", "revision_in_force")
               .filter(pk=session_id).first())
    if session is None:
        raise Http404("no such live session")
    return session


def _in_force(session: LiveSession) -> dict[str, Any] | None:
    """The deployment in force now (label resolved now), with a link per endpoint to its health and metrics."""
    from streams.deployment_selectors import deployment_in_force

    try:
        in_force = deployment_in_force(session.deployment)
    except DomainError as exc:
        return {"error": exc.message}
    return {"revision": in_force.revision, "label": in_force.label, "version": in_force.version,
            "endpoints": [{"endpoint": e, "link": _endpoint_link(e)} for e in in_force.endpoints],
            "describe": in_force.describe()}


def _endpoint_link(endpoint) -> str | None:
    """Where an endpoint's health and metrics are shown: the page of the server behind it (status, /metrics), else
    the serving metrics of every endpoint."""
    from streams.models import ServerInstance

    instance = (ServerInstance.objects.filter(endpoint=endpoint, status__in=ServerInstance.LIVE)
                .order_by("-created_at").values_list("pk", flat=True).first())
    for name, args in ((("serving:server", [instance]),) if instance else ()) + (("serving:metrics", []),):
        try:
            return reverse(name, args=args)
        except NoReverseMatch:
            continue
    return None


def _duration(session: LiveSession) -> str:
    """``1 h 02 min``, ``3 min 05 s``: how long it ran (runs, while live)."""
    seconds = int(((session.ended_at or timezone.now()) - session.started_at).total_seconds())
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


def _panels(session: LiveSession) -> dict[str, Any]:
    return {"queue": pages.live_queue(session_id=session.pk),
            # what never got an answer: expired in the queue, refused by the ingest limits (never stored)
            "comment_counts": {**live_comment_counts(session_id=session.pk), "refused": session.comments_refused},
            "pending": pages.live_pending_replies(session_id=session.pk),
            "tool_calls": _tool_approval().pending_tool_calls(session_id=session.pk),
            "overlay_tokens": list(pages.live_overlay_tokens(session_id=session.pk)[:20]),
            "log": pages.live_session_log(session_id=session.pk)}


def _page(request: HttpRequest, session: LiveSession, *, result: dict[str, Any] | None = None,
          status: int = 200, panel: str | None = None) -> HttpResponse:
    can_run = request.user.has_perm(roles.RUN_LIVE) and session.status == LiveSession.Status.LIVE
    context: dict[str, Any] = {"session": session, "can_run": can_run, "result": result,
                               "pinned": (session.room_state or {}).get("pinned") or None, **_panels(session)}
    if panel is not None:  # one panel redrawn (htmx): only what it shows
        if panel == "deployment":
            context["in_force"] = _in_force(session)
        return render(request, f"streams/live/session.html#{panel}", context, status=status)
    context.update(duration=_duration(session), in_force=_in_force(session),
                   products=[p for p in (session.room_state or {}).get("products") or [] if isinstance(p, dict)])
    if session.status == LiveSession.Status.LIVE:
        start = pages.live_stream_start(session_id=session.pk)
        context.update(ws_path=f"/ws/live/{session.pk}/", stream_after=start, earlier=start > 0)
    else:
        context.update(_transcript_context(request, session))
    return render(request, "streams/live/session.html", context, status=status)


def _transcript_context(request: HttpRequest, session: LiveSession) -> dict[str, Any]:
    page = Paginator(pages.live_transcript(session_id=session.pk), TRANSCRIPT_PER_PAGE).get_page(
        request.GET.get("page"))
    return {"items": page.object_list, "page": page}


@role_required(roles.VIEW_LIVE)
@require_http_methods(["GET", "POST"])
def live_list(request: HttpRequest) -> HttpResponse:
    """Sessions live and ended; the start form for operators. The ingest token, the overlay link and the webhook
    secret are shown once, on the page the start answers with."""
    can_run = request.user.has_perm(roles.RUN_LIVE)
    if request.method == "POST" and not can_run:
        return HttpResponse("your role may watch live sessions, not start them", status=403)
    form = lf.LiveStartForm(request.POST or None) if can_run else None
    error = None
    if request.method == "POST" and form.is_valid():
        try:
            started = _start(request, form)
        except DomainError as exc:
            error = exc
        else:
            return render(request, "streams/live/started.html", started, status=201)
    elif request.method == "POST":
        error = ValidationFailed("the session was not started: see the fields marked below",
                                 errors=lf.form_errors(form))
    status = error.status_code if error is not None else 200
    return render(request, "streams/live/list.html", {
        "live": list(pages.live_session_overview(status=LiveSession.Status.LIVE)[:100]),
        "ended": list(pages.live_session_overview().exclude(status=LiveSession.Status.LIVE)[:100]),
        "form": form, "error": error}, status=status)


def _start(request: HttpRequest, form: lf.LiveStartForm) -> dict[str, Any]:
    from django.db import transaction

    from streams.services import live_sessions

    data = form.cleaned_data
    with transaction.atomic():  # the session and its tokens, or nothing
        session = live_sessions.live_session_start(
            user=request.user, room=data["room"], deployment=data["deployment"], title=data["title"],
            feed=data["feed"], feed_config=form.feed_config())
        _token, ingest = live_sessions.live_token_create(user=request.user, session=session,
                                                         scope=LiveToken.Scope.INGEST)
        _token, overlay = live_sessions.live_token_create(user=request.user, session=session,
                                                          scope=LiveToken.Scope.OVERLAY)
    return {"session": session, "ingest_token": ingest, "overlay_url": _overlay_url(request, session, overlay),
            "webhook_secret": session.webhook_secret if session.feed == LiveSession.Feed.WEBHOOK else "",
            "ingest_url": _url_or_none(request, "api-live-comments", session),
            "webhook_url": _url_or_none(request, "api-live-webhook", session),
            "ingest_ws": f"/ws/live/{session.pk}/ingest/"}


def _url_or_none(request: HttpRequest, name: str, session: LiveSession) -> str | None:
    try:
        return request.build_absolute_uri(reverse(name, kwargs={"session_id": session.pk}))
    except NoReverseMatch:
        return None


def _overlay_url(request: HttpRequest, session: LiveSession, secret: str) -> str:
    return request.build_absolute_uri(reverse("live:overlay", args=[session.pk])) + f"?token={secret}"


@role_required(roles.VIEW_LIVE)
@require_GET
def live_session(request: HttpRequest, session_id) -> HttpResponse:
    """The operator's page (a watcher's without the controls); the recorded session once it ended. An htmx GET
    with a panel name redraws that panel only."""
    session = _session_or_404(session_id)
    panel = request.GET.get("panel")
    if request.htmx and panel in PANELS:
        if panel == "tokens" and not request.user.has_perm(roles.RUN_LIVE):
            return HttpResponse("overlay links are for operators", status=403)
        return _page(request, session, panel=panel)
    return _page(request, session)


@role_required(roles.VIEW_LIVE)
@require_GET
def live_transcript(request: HttpRequest, session_id) -> HttpResponse:
    """The whole recorded transcript, live or ended (the operator's page streams only the latest turns)."""
    session = _session_or_404(session_id)
    return render(request, "streams/live/transcript.html",
                  {"session": session, "log": pages.live_session_log(session_id=session.pk),
                   **_transcript_context(request, session)})


# --- controls -----------------------------------------------------------------------------------------------


def _control(request: HttpRequest, session_id, form_class, act) -> HttpResponse:
    """One control: validate the form, call one service, answer with the result (htmx: the result partial; else
    back to the page). Errors keep their status: 400 bad input, 403 a rule, 409 an ended session."""
    session = _session_or_404(session_id)
    form = form_class(request.POST)
    try:
        if session.status != LiveSession.Status.LIVE:
            raise InvalidTransition("the session has ended: its controls are read-only")
        if not form.is_valid():
            raise ValidationFailed("check the control's input", errors=lf.form_errors(form))
        result = act(session, form.cleaned_data) or {}
    except DomainError as exc:
        result, status = {"ok": False, "message": exc.message, "errors": exc.errors, "code": exc.code}, exc.status_code
    except ObjectDoesNotExist as exc:  # no such comment, no such pending reply: as the services say
        result, status = {"ok": False, "message": str(exc), "errors": [], "code": "not_found"}, 404
    else:
        result, status = {"ok": True, **result}, 200
    if request.htmx:
        response = render(request, "streams/live/session.html#result", {"result": result, "session": session},
                          status=status)
        if result.get("ended"):
            response["HX-Refresh"] = "true"  # the page becomes the recording
        return response
    if status != 200:
        session.refresh_from_db()
        return _page(request, session, result=result, status=status)
    return redirect("live:session", session_id=session.pk)


def _controls():
    from streams.services import live_controls

    return live_controls


def _tool_approval():
    from streams.services import live_tool_approval

    return live_tool_approval


@role_required(roles.RUN_LIVE)
@require_POST
def live_mute(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        _controls().live_session_mute(user=request.user, session=session, muted=data["on"])
        return {"message": "muted: no turns run, comments keep queueing" if data["on"] else "unmuted"}

    return _control(request, session_id, lf.OnOffForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_approval(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        _controls().live_approval_mode(user=request.user, session=session, on=data["on"])
        return {"message": "approve-before-speak is on: replies wait for you" if data["on"]
                else "approve-before-speak is off: replies are spoken as they come"}

    return _control(request, session_id, lf.OnOffForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_reply_approve(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        _controls().live_reply_approve(user=request.user, session=session, turn_id=data["turn_id"],
                                       text=data["text"] or None)
        return {"message": "approved" + (" (edited)" if data["text"] else "")}

    return _control(request, session_id, lf.ReplyDecisionForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_reply_reject(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        _controls().live_reply_reject(user=request.user, session=session, turn_id=data["turn_id"])
        return {"message": "rejected: nothing is said for this turn"}

    return _control(request, session_id, lf.ReplyDecisionForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_tool_decide(request: HttpRequest, session_id) -> HttpResponse:
    """A destructive tool's call held by a turn (destructive_tools_need_approval): run it or refuse it."""
    def act(session, data):
        out = _controls().live_tool_decide(user=request.user, session=session, turn_id=data["turn_id"],
                                           call_id=data["call_id"], approve=data["approve"])
        return {"message": f"{out['tool']}: " + ("approved, it runs now" if out["approved"]
                                                 else "refused, it does not run (the model is told)")}

    return _control(request, session_id, lf.ToolDecisionForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_takeover(request: HttpRequest, session_id) -> HttpResponse:
    """The operator's text passes the same output hooks; refused, the verdicts are shown."""
    def act(session, data):
        out = _controls().live_takeover_say(user=request.user, session=session, text=data["text"])
        return {"message": "said as the avatar (marked human)", "hooks": out.get("verdicts") or []}

    return _control(request, session_id, lf.TakeoverForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_comment_skip(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        _controls().live_comment_skip(user=request.user, session=session, comment_id=data["comment_id"])
        return {"message": f"comment {data['comment_id']} skipped"}

    return _control(request, session_id, lf.CommentSkipForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_pin(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        link_id = data["link_id"]
        _controls().live_product_pin(user=request.user, session=session, link_id=link_id)
        return {"message": f"#{link_id} pinned" if link_id is not None else "unpinned"}

    return _control(request, session_id, lf.PinForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_end(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        from streams.services import live_sessions

        live_sessions.live_session_end(user=request.user, session=session)
        return {"message": "the session has ended", "ended": True}

    return _control(request, session_id, lf.EndForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_overlay_token_create(request: HttpRequest, session_id) -> HttpResponse:
    """A new overlay link (its token shown once, in the answer)."""
    def act(session, data):
        from streams.services import live_sessions

        _token, secret = live_sessions.live_token_create(user=request.user, session=session,
                                                         scope=LiveToken.Scope.OVERLAY)
        return {"message": "a new overlay link (shown once: copy it into the browser source now)",
                "overlay_url": _overlay_url(request, session, secret)}

    return _control(request, session_id, lf.EmptyForm, act)


@role_required(roles.RUN_LIVE)
@require_POST
def live_overlay_token_revoke(request: HttpRequest, session_id) -> HttpResponse:
    def act(session, data):
        from streams.services import live_sessions

        token = LiveToken.objects.filter(pk=data["token_id"], session=session).first()
        if token is None:
            raise ValidationFailed("no such token of this session",
                                   errors=[{"path": "token_id", "message": "not a token of this session"}])
        live_sessions.live_token_revoke(user=request.user, token=token)
        return {"message": f"overlay token {token.prefix}… revoked: its overlay goes blank"}

    return _control(request, session_id, lf.TokenRevokeForm, act)


# --- the overlay ---------------------------------------------------------------------------------------------


@require_GET
def live_overlay(request: HttpRequest, session_id) -> HttpResponse:
    """The subtitle overlay for streaming software: no login, an overlay token of this session."""
    session = LiveSession.objects.filter(pk=session_id).only("pk", "title").first()
    if session is None:
        raise Http404("no such live session")
    secret = request.GET.get("token", "")
    if pages.live_overlay_token(session_id=session.pk, secret=secret) is None:
        return render(request, "streams/live/overlay_refused.html", {}, status=403)
    try:
        clear_s = min(max(float(request.GET.get("clear", "8")), 1.0), 120.0)
    except ValueError:
        clear_s = 8.0
    return render(request, "streams/live/overlay.html", {
        "session": session, "ws_path": f"/ws/live/{session.pk}/overlay/", "clear_s": clear_s})
