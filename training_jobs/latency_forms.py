"""The launch form of a latency replay: rows picked from lists (nobody types an id or a URL), the levels as
"1,4,8,16". It only turns inputs into :func:`training_jobs.latency_services.latency_replay_start`'s arguments;
the service owns every rule, and its located errors (``concurrency[2]``, ``turns_per_level``) come back onto the
boxes (:meth:`LatencyReplayForm.add_located_errors`)."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from harness_editor.models import HarnessVersion, Label
from streams.labels import endpoint_label
from streams.models import ModelEndpoint
from streams.sampling import MAX_TOKENS_LIMIT
from training_jobs.eval_models import EvalSet, EvalSetVersion
from training_jobs.latency_services import MAX_TURNS_PER_LEVEL


def _set_ref(version: EvalSetVersion) -> str:
    return f"{version.eval_set.name}@{version.number}"


def _harness_ref(version: HarnessVersion) -> str:
    return f"{version.harness.slug}@{version.number}"


class LatencyReplayForm(forms.Form):
    eval_set_version = forms.ChoiceField(label="Eval set version", help_text="its harness cases are the turns (T1–T3)")
    harness_version = forms.ChoiceField(label="Harness version", help_text="the harness the turns run under")
    endpoint = forms.ChoiceField(label="Model endpoint", help_text="the model server measured")
    concurrency = forms.CharField(initial="1,4,8,16", max_length=200, label="Concurrency levels",
                                  help_text="turns in flight at once, one level after another, e.g. 1,4,8,16")
    turns_per_level = forms.IntegerField(initial=32, label="Turns per level",
                                         help_text=f"1 to {MAX_TURNS_PER_LEVEL}; the same turns at every level")
    seed = forms.IntegerField(initial=0, help_text="shuffles the cases; turn i is sent with seed + i")
    deadline_s = forms.FloatField(required=False, label="Deadline per turn (s)",
                                  help_text="up to 600 s (empty: the harness's own)")
    temperature = forms.FloatField(required=False, help_text="0 to 2 (empty: the endpoint's default)")
    max_tokens = forms.IntegerField(required=False, label="max_tokens", help_text=f"1 to {MAX_TOKENS_LIMIT}")
    name = forms.CharField(required=False, max_length=120, help_text="default: '<set> · <harness> · <endpoint> · c=…'")

    FIELD_OF = {"eval_set_version": "eval_set_version", "harness_version": "harness_version", "endpoint": "endpoint",
                "concurrency": "concurrency", "turns_per_level": "turns_per_level", "seed": "seed",
                "deadline_s": "deadline_s", "sampling": "temperature", "name": "name"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_versions = {_set_ref(v): v for v in EvalSetVersion.objects.select_related("eval_set")
                             .exclude(eval_set__kind=EvalSet.Kind.T4).order_by("eval_set__kind", "eval_set__name",
                                                                              "-number")}
        self.fields["eval_set_version"].choices = [
            (ref, f"{v.eval_set.name} v{v.number} · {v.eval_set.kind.upper()} · {v.case_count} cases"
                  f"{' · pinned' if v.eval_set.pinned_id == v.pk else ''}") for ref, v in self.set_versions.items()]
        self.harness_versions = {_harness_ref(v): v for v in HarnessVersion.objects.select_related("harness")
                                 .order_by("harness__slug", "-number")}
        production = set(Label.objects.filter(name="production").values_list("version_id", flat=True))
        self.fields["harness_version"].choices = [
            (ref, f"{v.harness.slug} v{v.number} ({v.get_status_display().lower()})"
                  f"{' · production' if v.pk in production else ''}") for ref, v in self.harness_versions.items()]
        self.endpoints = {e.name: e for e in ModelEndpoint.objects.order_by("-is_default", "name")}
        self.fields["endpoint"].choices = [(name, endpoint_label(e, with_model=True, default=True))
                                           for name, e in self.endpoints.items()]
        if not self.is_bound:
            pinned = next((v for v in self.set_versions.values() if v.eval_set.pinned_id == v.pk), None)
            prod = next((ref for ref, v in self.harness_versions.items() if v.pk in production), None)
            default = next((e for e in self.endpoints.values() if e.is_default), None)
            self.initial.update({"eval_set_version": _set_ref(pinned) if pinned else "",
                                 "harness_version": prod or "", "endpoint": default.name if default else ""})

    def request(self) -> dict[str, Any]:
        """The service's keyword arguments (after is_valid)."""
        d = self.cleaned_data
        sampling = {key: d[key] for key in ("temperature", "max_tokens") if d.get(key) is not None}
        return {"eval_set_version": self.set_versions[d["eval_set_version"]],
                "harness_version": self.harness_versions[d["harness_version"]],
                "endpoint": self.endpoints[d["endpoint"]], "concurrency": d["concurrency"],
                "turns_per_level": d["turns_per_level"], "seed": d["seed"], "deadline_s": d.get("deadline_s"),
                "sampling": sampling, "name": d.get("name") or ""}

    def add_located_errors(self, errors: list[dict[str, str]]) -> list[dict[str, str]]:
        """Each ``{"path", "message"}`` onto its box; returns those that belong to none (listed on the page)."""
        rest = []
        for e in errors:
            head = re.split(r"[.\[]", e.get("path", ""), maxsplit=1)[0]
            field = self.FIELD_OF.get(head)
            if e.get("path") == "sampling.max_tokens":
                field = "max_tokens"
            if field and field in self.fields:
                self.add_error(field, f"{e['path']}: {e['message']}" if e["path"] != head else e["message"])
            else:
                rest.append(e)
        return rest
