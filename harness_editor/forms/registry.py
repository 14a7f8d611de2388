"""The registry's small Django forms: new harness, label move, review decision."""

from __future__ import annotations

from django import forms

from harness_editor.schemas import (
    FieldError,
    Manifest,
    ManifestError,
    manifest_from_json,
    manifest_from_yaml,
)


class HarnessCreateForm(forms.Form):
    SOURCES = [("demo", "Start from the demo manifest"), ("paste", "Paste YAML or JSON"),
               ("upload", "Upload a .yaml / .json file")]

    slug = forms.SlugField(max_length=64, help_text="lowercase, used in URLs, e.g. glow-gadget")
    name = forms.CharField(max_length=120)
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    source = forms.ChoiceField(choices=SOURCES, initial="demo", widget=forms.RadioSelect)
    manifest_text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 12, "class": "code"}))
    manifest_file = forms.FileField(required=False)
    change_note = forms.CharField(max_length=2000, required=False, initial="Initial version")

    def manifest_text_for(self, demo_path) -> tuple[str, str]:
        """(text, "yaml" | "json") of the chosen source; call after is_valid()."""
        source = self.cleaned_data["source"]
        if source == "demo":
            return demo_path.read_text(encoding="utf-8"), "yaml"
        if source == "upload":
            upload = self.cleaned_data.get("manifest_file")
            if upload is None:
                raise ManifestError([FieldError(path="", message="choose a file to upload")])
            raw = upload.read(2_000_000)
            name = (upload.name or "").lower()
            text = raw.decode("utf-8", errors="replace")
            return text, "json" if name.endswith(".json") else _guess_format(text)
        text = self.cleaned_data.get("manifest_text") or ""
        if not text.strip():
            raise ManifestError([FieldError(path="", message="paste a manifest (YAML or JSON)")])
        return text, _guess_format(text)


def _guess_format(text: str) -> str:
    return "json" if text.lstrip().startswith("{") else "yaml"


def parse_manifest_text(text: str, fmt: str) -> Manifest:
    """Raises ManifestError with path-precise errors."""
    return manifest_from_json(text) if fmt == "json" else manifest_from_yaml(text)


class LabelMoveForm(forms.Form):
    name = forms.CharField(max_length=64, label="Label", help_text="production, staging or room:<id>")
    # A number with suggestions (the latest approved versions), not a <select> of the whole history:
    # the page must stay the same size whether the harness has 10 versions or 10,000.
    version = forms.IntegerField(min_value=1, label="Approved version",
                                 widget=forms.NumberInput(attrs={"list": "approved-versions", "class": "narrow"}))
    comment = forms.CharField(max_length=2000, required=False)


class DecisionForm(forms.Form):
    comment = forms.CharField(max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 3}))
    # only when the evaluation gate fails and the reviewer may override it (harness_editor.gate)
    override_reason = forms.CharField(max_length=4000, required=False, widget=forms.Textarea(attrs={"rows": 3}))


def add_domain_errors(form: forms.Form, errors: list[dict]) -> None:
    """Put a service's ``[{path, message}]`` errors on the matching form fields (or the form itself)."""
    for err in errors:
        path = err.get("path") or None
        form.add_error(path if path in form.fields else None, err.get("message", ""))
