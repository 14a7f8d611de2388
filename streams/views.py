"""Preview room pages: the list of my rooms with the open form, one room (live over a WebSocket, see
static/streams/preview.js) with its clock controls and its members, its transcript, and the scenario runs.

Who sees what is :func:`streams.selectors.preview_room_access`: a room is visible to its owner and the people they
invited (a scenario run to every preview user); to anyone else it is a 404, as if it did not exist.

Each view: authorise (``role_required``) → call one service or selector → render. The room page is filled by
the script from the WebSocket (stored events first, then live ones); the clock controls are plain forms, so
they work without the script too. Transcripts are rendered here.
"""

from __future__ import annotations

from django import forms
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from harness_editor.models import HarnessVersion, Label
from streams import selectors, services
from streams.labels import endpoint_label
from streams.model_fit import endpoint_model, endpoint_models, model_fit
from streams.models import ModelEndpoint, PreviewRoom, Scenario
from streams.services.tool_runtime import tool_bindings_available, tool_runtime_for

# (value, label) of the play speeds offered: simulated/real time; 0 = as fast as turns finish
SPEED_CHOICES = [("1", "×1 (real time)"), ("10", "×10"), ("60", "×60 (a minute a second)"),
                 ("0", "as fast as turns finish")]
TURNS_PER_PAGE = 50


def _versions():
    return HarnessVersion.objects.select_related("harness").order_by("harness__slug", "-number")


def _version_label(v: HarnessVersion) -> str:
    return f"{v.harness.slug} v{v.number} ({v.get_status_display().lower()})"


def _production_version() -> HarnessVersion | None:
    """The version ``production`` points at (the most recently moved, when several harnesses have one)."""
    label = (Label.objects.filter(name="production").select_related("version__harness").order_by("-moved_at")
             .first())
    return label.version if label else None


class PreviewOpenForm(forms.Form):
    version = forms.ModelChoiceField(queryset=_versions(), label="Harness version")
    scenario = forms.ModelChoiceField(queryset=Scenario.objects.defer("yaml_text"), required=False,
                                      empty_label="(no scenario: the demo live room)")
    endpoint = forms.ModelChoiceField(queryset=ModelEndpoint.objects.all(), required=False,
                                      empty_label="(the default endpoint)", label="Model endpoint")
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1,
                              help_text="empty: the scenario's own seed")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].label_from_instance = _version_label
        self.fields["endpoint"].label_from_instance = endpoint_label  # the name, never a model directory's path
        production = _production_version()
        if production is not None:
            # what is served is what people most often try first; ?version= (a version page's link) still wins
            self.fields["version"].initial = production.pk
            self.fields["version"].help_text = f"production is {_version_label(production)}"


class RunStartForm(PreviewOpenForm):
    """A run always plays a scenario."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["scenario"].required = True
        self.fields["scenario"].empty_label = None


class RunFilterForm(forms.Form):
    scenario = forms.ModelChoiceField(queryset=Scenario.objects.defer("yaml_text"), required=False,
                                      empty_label="(every scenario)")
    version = forms.ModelChoiceField(queryset=_versions(), required=False, empty_label="(every version)",
                                     label="Harness version")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].label_from_instance = _version_label


class TranscriptFilterForm(forms.Form):
    """Which turns a transcript shows: all, those that fell back, those where a hook failed (before retries)."""

    SHOW = {"": "All turns", "fallbacks": "Fallbacks only", "hook-failures": "Hook failures only"}
    show = forms.ChoiceField(choices=list(SHOW.items()), required=False)

    def keep(self, turn: dict) -> bool:
        show = self.cleaned_data.get("show") or ""
        if show == "fallbacks":
            return bool(turn["reply"] and turn["reply"].get("fallback"))
        if show == "hook-failures":
            return bool(turn["hook_failures"])
        return True


class PlayForm(forms.Form):
    speed = forms.TypedChoiceField(choices=SPEED_CHOICES, coerce=float, initial="10")


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Invite a colleague (username)")


def _room_or_404(request: HttpRequest, room_id) -> PreviewRoom:
    """The room if the user may see it (its owner, an invited member; anyone with the preview role for a scenario
    run); a 404 otherwise, the same as for a room that does not exist."""
    try:
        return selectors.preview_room_get_for(user=request.user, room_id=room_id)
    except PreviewRoom.DoesNotExist:
        raise Http404("no such preview room") from None


def _ensure_endpoint() -> None:
    if not ModelEndpoint.objects.exists():
        services.model_endpoint_ensure_default()  # the endpoint picker is never empty


@role_required(roles.USE_PREVIEW)
@require_http_methods(["GET", "POST"])
def preview_list(request: HttpRequest) -> HttpResponse:
    _ensure_endpoint()
    initial = {}
    for key in ("version", "endpoint"):  # links prefill the form (a version page; the model-fit notice)
        if request.GET.get(key):
            initial[key] = request.GET[key]
    form = PreviewOpenForm(request.POST or None, initial=initial)  # else the version production points at
    error = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            room = services.preview_open(user=request.user, version=data["version"], scenario=data["scenario"],
                                         endpoint=data["endpoint"], seed=data["seed"])
        except DomainError as exc:
            error = exc
        else:
            return redirect("streams:preview_room", room_id=room.pk)
    rooms = selectors.preview_room_list(user=request.user)[:50]
    status = 400 if request.method == "POST" else 200
    return render(request, "streams/preview_list.html", {"form": form, "rooms": rooms, "error": error,
                                                         "endpoint_models": endpoint_models()}, status=status)


def _room_page(request: HttpRequest, room: PreviewRoom, *, error=None, status: int = 200,
               member_form: MemberForm | None = None) -> HttpResponse:
    versions = (HarnessVersion.objects.filter(harness_id=room.harness_version.harness_id)
                .order_by("-number").only("id", "number", "status", "harness_id"))
    speed = next((v for v, _ in SPEED_CHOICES if float(v) == room.play_speed), "10")
    is_owner = room.access == selectors.OWNER
    # tools a call would answer with a fault here (unbound, endpoint or MCP server not on this host's allow-list):
    # said before anyone sends a comment, not discovered in a turn
    runtime = tool_runtime_for(room.scenario if room.scenario_id is not None else None)
    return render(request, "streams/preview_room.html", {
        "room": room, "versions": versions, "ws_path": f"/ws/preview/{room.pk}/", "error": error,
        "play_form": PlayForm(initial={"speed": speed}),
        "can_drive": room.access in (selectors.OWNER, selectors.MEMBER), "is_owner": is_owner,
        "members": selectors.preview_room_members(room=room),
        "member_form": member_form or (MemberForm() if is_owner and not room.is_run else None),
        "tool_warnings": tool_bindings_available(room.harness_version.manifest, runtime),
        "fit": model_fit(endpoint=room.endpoint, version=room.harness_version),  # trained on this harness?
        "endpoint_model": endpoint_model(room.endpoint),  # what was measured of it in a room
    }, status=status)


@role_required(roles.USE_PREVIEW)
@require_GET
def preview_room(request: HttpRequest, room_id) -> HttpResponse:
    return _room_page(request, _room_or_404(request, room_id))


def _clock_action(request: HttpRequest, room_id, act) -> HttpResponse:
    """POST forms of the room page: one service call, then back to the room (the error on the page, with the
    status it maps to: 400, 403 for a member closing the room, 409)."""
    room = _room_or_404(request, room_id)
    try:
        act(room)
    except DomainError as exc:
        return _room_page(request, room, error=exc, status=exc.status_code)
    return redirect("streams:preview_room", room_id=room.pk)


@role_required(roles.USE_PREVIEW)
@require_POST
def preview_play(request: HttpRequest, room_id) -> HttpResponse:
    form = PlayForm(request.POST)

    def act(room):
        if not form.is_valid():
            raise ValidationFailed("pick a speed", errors=[{"path": "speed", "message": "not an offered speed"}])
        services.preview_play(user=request.user, room=room, speed=form.cleaned_data["speed"])

    return _clock_action(request, room_id, act)


@role_required(roles.USE_PREVIEW)
@require_POST
def preview_pause(request: HttpRequest, room_id) -> HttpResponse:
    return _clock_action(request, room_id, lambda room: services.preview_pause(user=request.user, room=room))


@role_required(roles.USE_PREVIEW)
@require_POST
def preview_resume(request: HttpRequest, room_id) -> HttpResponse:
    return _clock_action(request, room_id, lambda room: services.preview_resume(user=request.user, room=room))


@role_required(roles.USE_PREVIEW)
@require_POST
def preview_close(request: HttpRequest, room_id) -> HttpResponse:
    return _clock_action(request, room_id, lambda room: services.preview_close(user=request.user, room=room))


@role_required(roles.USE_PREVIEW)
@require_POST
def run_cancel(request: HttpRequest, room_id) -> HttpResponse:
    """Cancel a scenario run (its owner; the one cancel of every job), back to its page."""
    room = _room_or_404(request, room_id)
    try:
        services.scenario_run_cancel(user=request.user, room=room)
    except DomainError as exc:
        return _room_page(request, room, error=exc, status=exc.status_code)
    return redirect("streams:preview_transcript", room_id=room.pk)


def _member_action(request: HttpRequest, room_id, service) -> HttpResponse:
    """The owner's invite and remove forms: back to the room, or the room page with the form's error."""
    room = _room_or_404(request, room_id)
    form = MemberForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationFailed("type a username", errors=[{"path": "username", "message": "required"}])
        service(user=request.user, room=room, username=form.cleaned_data["username"])
    except DomainError as exc:
        if room.access == selectors.OWNER:
            for e in exc.errors:
                if e.get("path") == "username":
                    form.add_error("username", e["message"])
        return _room_page(request, room, error=exc, status=exc.status_code,
                          member_form=form if room.access == selectors.OWNER else None)
    return redirect("streams:preview_room", room_id=room.pk)


@role_required(roles.USE_PREVIEW)
@require_POST
def preview_member_add(request: HttpRequest, room_id) -> HttpResponse:
    return _member_action(request, room_id, services.preview_member_add)


@role_required(roles.USE_PREVIEW)
@require_POST
def preview_member_remove(request: HttpRequest, room_id) -> HttpResponse:
    return _member_action(request, room_id, services.preview_member_remove)


@role_required(roles.USE_PREVIEW)
@require_GET
def preview_transcript(request: HttpRequest, room_id) -> HttpResponse:
    room = _room_or_404(request, room_id)
    shown = TranscriptFilterForm(request.GET)
    valid = shown.is_valid()  # an unknown ?show= is a 400 that says so, with every turn
    turns = selectors.preview_transcript(room_id=room.pk)
    counts = {"all": len(turns), "fallbacks": sum(1 for t in turns if t["reply"] and t["reply"].get("fallback")),
              "hook_failures": sum(1 for t in turns if t["hook_failures"])}
    if valid:
        turns = [t for t in turns if shown.keep(t)]
    page = Paginator(turns, TURNS_PER_PAGE).get_page(request.GET.get("page"))
    run = room.job if room.is_run else None
    live = run is not None and run.is_active
    show = shown.cleaned_data.get("show", "") if valid else ""
    return render(request, "streams/preview_transcript.html", {
        "room": room, "run": run, "turns": page.object_list, "page": page,
        "show": show, "show_query": f"show={show}&" if show else "", "counts": counts,
        "filter_error": "" if valid else "unknown filter: show all turns, fallbacks or hook-failures",
        "room_events": [e for e in selectors.preview_event_list(room_id=room.pk) if not e["turn_id"]],
        # a finished run shows what it stored; a running one is counted now (and the page refreshes)
        "summary": selectors.scenario_run_summary(room_id=room.pk) if live else ((run.summary or None) if run
                                                                                  else None),
        "refresh": live, "can_cancel": live and room.created_by_id == request.user.pk,
    }, status=200 if valid else 400)


@role_required(roles.USE_PREVIEW)
@require_http_methods(["GET", "POST"])
def run_list(request: HttpRequest) -> HttpResponse:
    """Scenario runs (filter by scenario and harness version) and the form that starts one."""
    _ensure_endpoint()
    filters = RunFilterForm(request.GET or None, auto_id="filter_%s")  # its own ids: the start form has the same fields
    scenario_id = version_id = None
    if filters.is_valid():
        scenario_id = getattr(filters.cleaned_data["scenario"], "pk", None)
        version_id = getattr(filters.cleaned_data["version"], "pk", None)
    form = RunStartForm(request.POST or None)
    error = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = services.scenario_run_start(user=request.user, version=data["version"], scenario=data["scenario"],
                                              endpoint=data["endpoint"], seed=data["seed"])
        except DomainError as exc:
            error = exc
        else:
            return redirect("streams:preview_transcript", room_id=run.pk)
    runs = selectors.scenario_run_list(scenario_id=scenario_id, version_id=version_id)[:100]
    status = 400 if request.method == "POST" else 200
    return render(request, "streams/run_list.html", {"filters": filters, "form": form, "runs": runs,
                                                     "error": error}, status=status)
