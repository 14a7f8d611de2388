"""Session replay pages and "save as evaluation set", under a live session's address (``/live/<session>/...``,
namespace "live"; routes in :mod:`streams.replay_urls`).

- the session's replays (refreshing itself while one is active);
- "Replay against…": harness version (any, drafts too), model endpoint (and optionally a loaded adapter's name),
  sampling, seed, deadline — the service's located errors on their boxes;
- a replay's page: progress over the job lifecycle (cancel, resume), the summary per side (fallbacks, judge
  problems, hook failures, mean scores), and the turns side by side — original vs new reply, each with its hook
  verdicts, the rules' judgement, tool calls and timings — flagged regressed / improved / changed / unchanged /
  skipped, filtered with ``?show=regressed`` (or any other flag);
- "Save as evaluation set": the session's answered turns become T1 cases of a new set or a new version of one.

Who: everyone who may watch live sessions (VIEW_LIVE) reads replays; starting one needs RUN_LIVE (operators) or
RUN_EVAL (ML staff) too; cancel and resume, its starter or an ML lead; saving as an eval set, SAVE_EVAL_CASE (and
IMPORT_EVAL_SET to replace a set's cases). A session or replay that does not exist is a 404; a replay is only found
under its own session's address.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from streams import replay_selectors as selectors
from streams.models import LiveSession, SessionReplay
from streams.replay_forms import SaveEvalSetForm, SessionReplayForm, add_located_errors
from streams.services import session_eval_sets, session_replays as services

POLL_S = 2
LIST_LIMIT = 100
TURNS_PER_PAGE = 100  # a long broadcast has hundreds of turns: the page (and its polling) stays bounded


def _session_or_404(session_id) -> LiveSession:
    try:
        return selectors.live_session_get(session_id=session_id)
    except LiveSession.DoesNotExist:
        raise Http404("no such live session") from None


def _replay_or_404(session_id, replay_id) -> SessionReplay:
    try:
        return selectors.session_replay_get(session_id=session_id, replay_id=replay_id)
    except SessionReplay.DoesNotExist:
        raise Http404("no such replay of this session") from None


@role_required(roles.VIEW_LIVE)
@require_GET
def replay_list(request: HttpRequest, session_id) -> HttpResponse:
    session = _session_or_404(session_id)
    replays = list(selectors.session_replay_list(session=session)[:LIST_LIMIT])
    context = {"session": session, "replays": replays, "active": any(r.is_active for r in replays),
               "poll_s": POLL_S, "can_replay": services.may_start(request.user),
               "can_save": request.user.has_perm(roles.SAVE_EVAL_CASE),
               "turns": len(selectors.session_turns(session=session))}
    template = "streams/live/replays/list.html#replays" if request.htmx else "streams/live/replays/list.html"
    return render(request, template, context)


@role_required(roles.VIEW_LIVE)
@require_http_methods(["GET", "POST"])
def replay_new(request: HttpRequest, session_id) -> HttpResponse:
    session = _session_or_404(session_id)
    if not services.may_start(request.user):
        raise PermissionDenied("your role does not allow you to replay sessions")
    form = SessionReplayForm(request.POST or None, session=session)
    error, other_errors = None, []
    if request.method == "POST" and form.is_valid():
        try:
            replay = services.session_replay_start(user=request.user, session=session, **form.request())
        except ValidationFailed as exc:
            error, other_errors = exc, add_located_errors(form, exc.errors, SessionReplayForm.FIELD_OF)
        except DomainError as exc:
            error = exc
        else:
            return redirect("live:replay_detail", session_id=session.pk, replay_id=replay.pk)
    status = (error.status_code if error is not None else 400) if request.method == "POST" else 200
    return render(request, "streams/live/replays/new.html",
                  {"session": session, "form": form, "error": error, "other_errors": other_errors}, status=status)


def _replay_page(request: HttpRequest, replay: SessionReplay, *, error=None, status: int = 200) -> HttpResponse:
    show = request.GET.get("show") or ""
    if show and show not in selectors.OUTCOMES:
        show = ""
    all_turns = selectors.replay_turn_list(replay=replay)
    counts = {o: 0 for o in selectors.OUTCOMES}
    for t in all_turns:
        counts[t.outcome] += 1
    page = Paginator([t for t in all_turns if not show or t.outcome == show], TURNS_PER_PAGE).get_page(
        request.GET.get("page"))
    context = {"replay": replay, "session": replay.session, "error": error, "poll_s": POLL_S, "show": show,
               "turns": list(page.object_list), "page": page, "counts": counts,
               "stored": len(all_turns), "summary": replay.summary or {},
               "can_manage": services.may_manage(request.user, replay)}
    template = ("streams/live/replays/detail.html#replay" if request.htmx
                else "streams/live/replays/detail.html")
    return render(request, template, context, status=status)


@role_required(roles.VIEW_LIVE)
@require_GET
def replay_detail(request: HttpRequest, session_id, replay_id) -> HttpResponse:
    return _replay_page(request, _replay_or_404(session_id, replay_id))


def _replay_action(request: HttpRequest, session_id, replay_id, service) -> HttpResponse:
    """A button on the replay's page: the service's refusal (403, 409) is shown on the page, else back to it."""
    replay = _replay_or_404(session_id, replay_id)
    try:
        service(user=request.user, replay=replay)
    except DomainError as exc:
        return _replay_page(request, replay, error=exc, status=exc.status_code)
    return redirect("live:replay_detail", session_id=replay.session_id, replay_id=replay.pk)


@role_required(roles.VIEW_LIVE)
@require_POST
def replay_cancel(request: HttpRequest, session_id, replay_id) -> HttpResponse:
    return _replay_action(request, session_id, replay_id, services.session_replay_cancel)


@role_required(roles.VIEW_LIVE)
@require_POST
def replay_resume(request: HttpRequest, session_id, replay_id) -> HttpResponse:
    return _replay_action(request, session_id, replay_id, services.session_replay_resume)


@role_required(roles.VIEW_LIVE)
@require_http_methods(["GET", "POST"])
def save_eval_set(request: HttpRequest, session_id) -> HttpResponse:
    session = _session_or_404(session_id)
    if not request.user.has_perm(roles.SAVE_EVAL_CASE):
        raise PermissionDenied("your role does not save eval cases")
    form = SaveEvalSetForm(request.POST or None,
                           initial={"set_name": session_eval_sets.default_set_name(session), "append": True})
    error, other_errors, saved = None, [], None
    if request.method == "POST" and form.is_valid():
        try:
            saved = session_eval_sets.live_session_save_as_eval_set(user=request.user, session=session,
                                                                    **form.request())
        except ValidationFailed as exc:
            error, other_errors = exc, add_located_errors(form, exc.errors, SaveEvalSetForm.FIELD_OF)
        except DomainError as exc:
            error = exc
    status = 200
    if request.method == "POST" and saved is None:
        status = error.status_code if error is not None else 400
    turns = selectors.session_turns(session=session)
    return render(request, "streams/live/replays/save_eval_set.html",
                  {"session": session, "form": form, "error": error, "other_errors": other_errors, "saved": saved,
                   "turns": turns}, status=status)
