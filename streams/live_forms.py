"""Forms of the live session pages: start a session, and the operator's controls (each posted on its own)."""

from __future__ import annotations

from typing import Any

from django import forms

from streams.models import Deployment, LiveRoom, LiveSession, Scenario

# (value, label) of the replay speeds offered (recorded time / real time)
SPEED_CHOICES = [("1", "×1 (real time)"), ("2", "×2"), ("5", "×5"), ("10", "×10"), ("60", "×60 (a minute a second)")]


class LiveStartForm(forms.Form):
    """What an operator picks to go live. A replay feed plays a scenario or a recorded session; the others wait
    for comments (the ingest API or WebSocket, or a platform's signed webhook)."""

    room = forms.ModelChoiceField(queryset=LiveRoom.objects.all(), label="Live room")
    deployment = forms.ModelChoiceField(
        queryset=Deployment.objects.filter(current_revision__isnull=False).select_related("harness"),
        label="Deployment", help_text="only deployments with an approved revision in force")
    title = forms.CharField(max_length=120, help_text="what the broadcast is called on the list")
    feed = forms.ChoiceField(choices=LiveSession.Feed.choices, initial=LiveSession.Feed.API, label="Viewer feed")
    scenario = forms.ModelChoiceField(queryset=Scenario.objects.defer("yaml_text"), required=False,
                                      empty_label="(none)", label="Replay a scenario")
    recording = forms.ModelChoiceField(
        queryset=LiveSession.objects.exclude(status=LiveSession.Status.LIVE).select_related("room"),
        required=False, empty_label="(none)", label="or replay a recorded session")
    speed = forms.TypedChoiceField(choices=SPEED_CHOICES, coerce=float, initial="1", label="Replay speed")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["deployment"].label_from_instance = lambda d: f"{d.name} ({d.harness.slug})"
        self.fields["recording"].label_from_instance = (
            lambda s: f"{s.title} · {s.room.title} · {s.started_at:%Y-%m-%d %H:%M}")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("feed") == LiveSession.Feed.REPLAY:
            if bool(data.get("scenario")) == bool(data.get("recording")):
                self.add_error("scenario", "a replay plays one scenario or one recorded session: pick one")
        return data

    def feed_config(self) -> dict[str, Any]:
        data = self.cleaned_data
        if data["feed"] != LiveSession.Feed.REPLAY:
            return {}
        source = ({"scenario": data["scenario"].slug} if data.get("scenario")
                  else {"session": str(data["recording"].pk)})
        return {**source, "speed": data["speed"]}


class OnOffForm(forms.Form):
    """Mute / unmute, approve-before-speak on / off."""

    on = forms.TypedChoiceField(choices=[("1", "on"), ("0", "off")], coerce=lambda v: v == "1")


class TakeoverForm(forms.Form):
    text = forms.CharField(max_length=1000, strip=True, label="Say as the avatar")


class ReplyDecisionForm(forms.Form):
    turn_id = forms.CharField(max_length=64)
    text = forms.CharField(max_length=2000, required=False, strip=True,
                           help_text="edited text (empty: the reply as the model wrote it)")


class ToolDecisionForm(forms.Form):
    turn_id = forms.CharField(max_length=64)
    call_id = forms.CharField(max_length=128)
    approve = forms.BooleanField(required=False, help_text="checked: run the call; unchecked: refuse it")


class CommentSkipForm(forms.Form):
    comment_id = forms.IntegerField(min_value=1, max_value=2**63 - 1)


class PinForm(forms.Form):
    link_id = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1,
                                 help_text="empty: unpin")


class EndForm(forms.Form):
    confirm = forms.BooleanField(label="Yes, end this broadcast")


class EmptyForm(forms.Form):
    """A control with nothing to fill in (a new overlay link)."""


class TokenRevokeForm(forms.Form):
    token_id = forms.UUIDField()


def form_errors(form: forms.Form) -> list[dict[str, str]]:
    """A bound form's errors as the console's path-precise errors."""
    return [{"path": field if field != "__all__" else "", "message": str(m)}
            for field, messages in form.errors.items() for m in messages]
