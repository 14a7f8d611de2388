"""Preview room pages: the list of my rooms with the open form, one room (live over a WebSocket, see
static/streams/preview.js) and its transcript.

Each view: authorise (``role_required``) → call one service or selector → render. The room page is filled by
the script from the WebSocket (stored events first, then live ones); the transcript is rendered here.
"""

from __future__ import annotations

from django import forms
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from console import roles
from console.errors import DomainError
from console.views import role_required
from harness_editor.models import HarnessVersion
from streams import selectors, services
from streams.models import ModelEndpoint, PreviewRoom, Scenario


class PreviewOpenForm(forms.Form):
    version = forms.ModelChoiceField(
        queryset=HarnessVersion.objects.select_related("harness").order_by("harness__slug", "-number"),
        label="Harness version")
    scenario = forms.ModelChoiceField(queryset=Scenario.objects.defer("yaml_text"), required=False,
                                      empty_label="(no scenario: the demo live room)")
    endpoint = forms.ModelChoiceField(queryset=ModelEndpoint.objects.all(), required=False,
                                      empty_label="(the default endpoint)", label="Model endpoint")
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1,
                              help_text="empty: the scenario's own seed")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].label_from_instance = (
            lambda v: f"{v.harness.slug} v{v.number} ({v.get_status_display().lower()})")


def _room_or_404(room_id) -> PreviewRoom:
    try:
        return selectors.preview_room_get(room_id=room_id)
    except PreviewRoom.DoesNotExist:
        raise Http404("no such preview room") from None


@role_required(roles.USE_PREVIEW)
@require_http_methods(["GET", "POST"])
def preview_list(request: HttpRequest) -> HttpResponse:
    if not ModelEndpoint.objects.exists():
        services.model_endpoint_ensure_default()  # the endpoint picker is never empty
    initial = {}
    if request.GET.get("version"):
        initial["version"] = request.GET["version"]
    form = PreviewOpenForm(request.POST or None, initial=initial)
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
    return render(request, "streams/preview_list.html", {"form": form, "rooms": rooms, "error": error},
                  status=status)


@role_required(roles.USE_PREVIEW)
@require_GET
def preview_room(request: HttpRequest, room_id) -> HttpResponse:
    room = _room_or_404(room_id)
    versions = (HarnessVersion.objects.filter(harness_id=room.harness_version.harness_id)
                .order_by("-number").only("id", "number", "status", "harness_id"))
    return render(request, "streams/preview_room.html", {
        "room": room, "versions": versions, "ws_path": f"/ws/preview/{room.pk}/",
    })


@role_required(roles.USE_PREVIEW)
@require_GET
def preview_transcript(request: HttpRequest, room_id) -> HttpResponse:
    room = _room_or_404(room_id)
    return render(request, "streams/preview_transcript.html", {
        "room": room, "turns": selectors.preview_transcript(room_id=room.pk),
        "room_events": [e for e in selectors.preview_event_list(room_id=room.pk) if not e["turn_id"]],
    })
