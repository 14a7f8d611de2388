"""Forms of the deployment pages: create, propose a change, decide (approve / reject / withdraw) and roll back.

The forms only shape input; the rules (which label, which endpoints, adapter of which model, four eyes) are the
service's (:mod:`streams.services.deployments`), whose located errors land on the field they name
(``endpoints[1]`` on ``endpoints``)."""

from __future__ import annotations

from django import forms

from harness_editor.models import Harness
from streams.model_artefacts import model_list
from streams.models import ModelEndpoint, ServeProfile

ENDPOINTS_HELP = "model endpoint names in failover order, comma-separated (the first is the primary)"


def _models(*, adapters: bool) -> list[tuple[str, str]]:
    models = model_list(adapters=adapters, order="name", limit=500)
    return [("", "(none)")] + [(str(m.pk), f"{m.name} ({m.kind_label})") for m in models]


class RevisionFields(forms.Form):
    """What a revision carries: label, serve profile, endpoints, model, adapter, note."""

    label = forms.CharField(max_length=64, initial="production",
                            help_text="the harness label whose version is served (production, staging, room:<id>)")
    serve_profile = forms.ChoiceField(choices=())
    endpoints = forms.CharField(max_length=600, help_text=ENDPOINTS_HELP)
    model = forms.ChoiceField(choices=(), required=False, help_text="the base model (none: whatever the "
                                                                    "endpoints serve)")
    adapter = forms.ChoiceField(choices=(), required=False, help_text="a LoRA adapter of the model")
    note = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 3}),
                           help_text="why (the reviewer reads it)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["serve_profile"].choices = [(p.name, p.name) for p in ServeProfile.objects.order_by("name")]
        self.fields["model"].choices = _models(adapters=False)
        self.fields["adapter"].choices = _models(adapters=True)
        self.endpoint_names = list(ModelEndpoint.objects.order_by("name").values_list("name", flat=True))

    def clean_endpoints(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["endpoints"].split(",") if name.strip()]

    def revision_fields(self) -> dict:
        data = self.cleaned_data
        return {"label": data["label"].strip(), "serve_profile": data["serve_profile"],
                "endpoints": data["endpoints"], "model": data["model"] or None, "adapter": data["adapter"] or None}


class DeploymentCreateForm(RevisionFields):
    name = forms.SlugField(max_length=64, help_text="lowercase letters, digits and hyphens, e.g. tiny-room-live")
    title = forms.CharField(max_length=120, required=False)
    harness = forms.ChoiceField(choices=())

    field_order = ["name", "title", "harness", "label", "serve_profile", "endpoints", "model", "adapter", "note"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["harness"].choices = [(h.slug, f"{h.name} ({h.slug})") for h in Harness.objects.order_by("name")]


class ProposeForm(RevisionFields):
    @classmethod
    def from_revision(cls, revision) -> ProposeForm:
        """Prefilled with what ``revision`` serves (the proposer edits what changes)."""
        from streams.deployment_selectors import endpoint_names

        if revision is None:
            return cls()
        return cls(initial={"label": revision.label, "serve_profile": revision.serve_profile.name,
                            "endpoints": ", ".join(endpoint_names(revision.endpoints)),
                            "model": str(revision.model_id or ""), "adapter": str(revision.adapter_id or "")})


class DecisionForm(forms.Form):
    comment = forms.CharField(max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class RollbackForm(forms.Form):
    comment = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 2}),
                              help_text="why: it is on the timeline, linked to the live sessions")
    confirm = forms.BooleanField(help_text="yes, put the previous revision back in force and move its label back")


def add_service_errors(form: forms.Form, errors: list[dict]) -> None:
    """A service's located errors on the form: ``endpoints[1]`` goes on ``endpoints`` (prefixed with its path)."""
    for err in errors:
        path = str(err.get("path") or "")
        field = path.split("[", 1)[0].split(".", 1)[0]
        message = err.get("message", "")
        if field in form.fields:
            form.add_error(field, f"{path}: {message}" if path != field else message)
        else:
            form.add_error(None, f"{path}: {message}" if path else message)
