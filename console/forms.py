"""Input of the console's own pages: the timeline's filter (page and CSV export alike)."""

from __future__ import annotations

from django import forms

from console.selectors import AuditFilter


class TimelineFilterForm(forms.Form):
    scope = forms.CharField(required=False, max_length=128)
    user = forms.CharField(required=False, max_length=150, help_text='a username, or "system"')
    action = forms.CharField(required=False, max_length=64)
    since = forms.DateField(required=False, input_formats=["%Y-%m-%d"], help_text="YYYY-MM-DD, included")
    until = forms.DateField(required=False, input_formats=["%Y-%m-%d"], help_text="YYYY-MM-DD, included")

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            self.add_error("until", "the range ends before it starts")
        return data

    def filters(self) -> AuditFilter:
        """The parsed filter (call after is_valid())."""
        d = self.cleaned_data
        return AuditFilter(scope=d["scope"].strip(), user=d["user"].strip(), action=d["action"].strip(),
                           since=d["since"], until=d["until"])

    def error_text(self) -> str:
        return "; ".join(f"{name}: {' '.join(errors)}" for name, errors in self.errors.items())
