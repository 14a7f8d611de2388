"""Forms of the evaluation-run pages: launch a run, filter the run list, filter a run's per-case table.

The launch form only turns inputs into :func:`training_jobs.eval_run_services.eval_run_start`'s arguments (rows
picked from lists: nobody types an id, a URL or a key); the service owns every rule, and its located errors
(``k``, ``sampling.temperature``, ``harness_version``) come back onto the boxes (:meth:`EvalRunForm.add_located_errors`).
"""

from __future__ import annotations

import re
from typing import Any

from django import forms

from harness_editor.models import HarnessVersion, Label
from streams.labels import endpoint_label
from streams.models import ModelEndpoint
from streams.sampling import MAX_TOKENS_LIMIT
from training_jobs.eval_models import EvalSet, EvalSetVersion
from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_run_services import MAX_K
from training_jobs.models import TrainedModel

SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens")


def set_version_ref(version: EvalSetVersion) -> str:
    return f"{version.eval_set.name}@{version.number}"


def harness_version_ref(version: HarnessVersion) -> str:
    return f"{version.harness.slug}@{version.number}"


def default_set_version(set_name: str | None = None) -> EvalSetVersion | None:
    """The named set's pinned version (else its latest); without a name the first pinned version of any set (else
    the latest version of the first set)."""
    sets = EvalSet.objects.select_related("pinned__eval_set").order_by("kind", "name")
    if set_name:
        sets = sets.filter(name=set_name)
    for eval_set in sets:
        if eval_set.pinned is not None:
            return eval_set.pinned
    first = sets.first()
    return first.versions.select_related("eval_set").order_by("-number").first() if first else None


def default_harness_version(slug: str | None = None) -> HarnessVersion | None:
    """What ``production`` points at (of the named harness, else of the first harness that has the label)."""
    labels = Label.objects.filter(name="production").select_related("version__harness").order_by("harness__slug")
    if slug:
        labels = labels.filter(harness__slug=slug)
    label = labels.first()
    return label.version if label else None


class EvalRunForm(forms.Form):
    eval_set_version = forms.ChoiceField(label="Eval set version",
                                         help_text="the pinned version is the one the approval gate evaluates on")
    harness_version = forms.ChoiceField(required=False, label="Harness version",
                                        help_text="the harness the cases run under (T2 and T3 cases run under their "
                                                  "held-out variant or perturbation of it); none for T4 (IFEval)")
    endpoint = forms.ChoiceField(required=False, label="Model endpoint",
                                 help_text="a model server an administrator registered")
    model = forms.ChoiceField(required=False, label="… or a registered model",
                              help_text="a model of the registry served on a local server (its endpoint is used)")
    judges = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="Judge models",
                                       help_text="optional: endpoints that also judge each reply (T1–T3); the rules "
                                                 "stay the score of record, the judges' vote and disagreements are "
                                                 "shown beside it")
    name = forms.CharField(required=False, max_length=120,
                           help_text="default: '<set> v<n> · <harness> · <endpoint>'")
    k = forms.IntegerField(initial=1, label="k samples per case", help_text=f"1 to {MAX_K}; pass^k needs all k solved")
    seed = forms.IntegerField(initial=0, help_text="sample j of every case is sent with seed + j")
    max_cases = forms.IntegerField(required=False, label="Max cases", help_text="only the first N cases (empty: all)")
    temperature = forms.FloatField(required=False, help_text="0 to 2 (empty: the endpoint's default)")
    top_p = forms.FloatField(required=False, label="top_p", help_text="0 to 1")
    max_tokens = forms.IntegerField(required=False, label="max_tokens", help_text=f"1 to {MAX_TOKENS_LIMIT}")
    deadline_s = forms.FloatField(required=False, label="Deadline per turn (s)",
                                  help_text="wall-clock budget per turn, up to 600 s (empty: the harness's own)")

    # a located error's path (its first part) → its box
    FIELD_OF = {"eval_set_version": "eval_set_version", "harness_version": "harness_version", "endpoint": "endpoint",
                "model": "model", "k": "k", "seed": "seed", "max_cases": "max_cases", "deadline_s": "deadline_s",
                "name": "name", "judges": "judges", "sampling.temperature": "temperature", "sampling.top_p": "top_p",
                "sampling.max_tokens": "max_tokens"}

    def __init__(self, *args: Any, query: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        query = query or {}
        self.set_versions = {set_version_ref(v): v for v in EvalSetVersion.objects.select_related("eval_set")
                             .order_by("eval_set__kind", "eval_set__name", "-number")}
        self.fields["eval_set_version"].choices = [
            (ref, f"{v.eval_set.name} v{v.number} · {v.eval_set.kind.upper()} · {v.case_count} cases"
                  f"{' · pinned' if v.eval_set.pinned_id == v.pk else ''}") for ref, v in self.set_versions.items()]
        self.harness_versions = {harness_version_ref(v): v for v in HarnessVersion.objects.select_related("harness")
                                 .order_by("harness__slug", "-number")}
        production = {label.version_id for label in Label.objects.filter(name="production")}
        self.fields["harness_version"].choices = [("", "— none (T4 IFEval) —")] + [
            (ref, f"{v.harness.slug} v{v.number} ({v.get_status_display().lower()})"
                  f"{' · production' if v.pk in production else ''}") for ref, v in self.harness_versions.items()]
        self.endpoints = {e.name: e for e in ModelEndpoint.objects.order_by("-is_default", "name")}
        self.fields["endpoint"].choices = [("", "—")] + [
            (name, endpoint_label(e, with_model=True, default=True)) for name, e in self.endpoints.items()]
        self.fields["judges"].choices = [(name, endpoint_label(e, with_model=True)) for name, e in self.endpoints.items()]
        self.models = {str(m.pk): m for m in TrainedModel.objects.select_related("endpoint").order_by("-created_at")}
        self.fields["model"].choices = [("", "—")] + [
            (pk, f"{m.name} · {m.get_kind_display()}" + (f" · served at {m.endpoint.name}" if m.endpoint_id
                                                          else " · not served")) for pk, m in self.models.items()]
        if not self.is_bound:
            version = self.set_versions.get(query.get("version", "")) or default_set_version(query.get("set"))
            harness = default_harness_version(query.get("harness"))
            endpoint = self.endpoints.get(query.get("endpoint", "")) or next(
                (e for e in self.endpoints.values() if e.is_default), None)
            self.initial.update({
                "eval_set_version": set_version_ref(version) if version else "",
                "harness_version": harness_version_ref(harness) if harness and not (
                    version and version.eval_set.kind == EvalSet.Kind.T4) else "",
                "endpoint": endpoint.name if endpoint and not query.get("model") else "",
                "model": query.get("model", "") if query.get("model", "") in self.models else "",
            })

    def request(self) -> dict[str, Any]:
        """The service's keyword arguments (after is_valid)."""
        d = self.cleaned_data
        model = self.models.get(d.get("model") or "")
        endpoint = self.endpoints.get(d.get("endpoint") or "")
        if endpoint is None and model is not None:
            endpoint = model.endpoint
        sampling = {key: d[key] for key in SAMPLING_FIELDS if d.get(key) is not None}
        return {"eval_set_version": self.set_versions[d["eval_set_version"]],
                "harness_version": self.harness_versions.get(d.get("harness_version") or ""),
                "endpoint": endpoint, "model": model, "sampling": sampling, "k": d["k"], "seed": d["seed"],
                "max_cases": d.get("max_cases"), "deadline_s": d.get("deadline_s"), "name": d.get("name") or "",
                "judges": list(d.get("judges") or [])}

    def clean(self):
        data = super().clean()
        model = self.models.get(data.get("model") or "")
        if not data.get("endpoint") and model is None and "endpoint" not in self.errors and "model" not in self.errors:
            self.add_error("endpoint", "pick a model endpoint or a registered model that is served")
        elif not data.get("endpoint") and model is not None and model.endpoint_id is None:
            self.add_error("model", "this model is not served: start its local server from its page, or pick the "
                                    "endpoint that serves it")
        return data

    def add_located_errors(self, errors: list[dict[str, str]]) -> list[dict[str, str]]:
        """Each ``{"path", "message"}`` onto its box; returns those that belong to none (listed on the page)."""
        rest = []
        for e in errors:
            path = e.get("path", "")
            field = self.FIELD_OF.get(path) or self.FIELD_OF.get(re.split(r"[.\[]", path, maxsplit=1)[0])
            if field and field in self.fields:
                self.add_error(field, e["message"] if path == field or path.startswith("sampling.")
                               else f"{path}: {e['message']}")
            else:
                rest.append(e)
        return rest


class RunFilterForm(forms.Form):
    """The run list's filters (GET): an unknown value is dropped, never a 500."""

    eval_set = forms.ChoiceField(required=False, label="Eval set")
    harness = forms.ChoiceField(required=False)
    endpoint = forms.ChoiceField(required=False)
    model = forms.ChoiceField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "(any)")] + list(EvalRun.Status.choices))

    def __init__(self, *args: Any, choices: dict[str, list], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for key in ("eval_set", "harness", "endpoint"):
            self.fields[key].choices = [("", "(any)")] + [(v, v) for v in choices[key]]
        self.fields["model"].choices = [("", "(any)")] + list(choices["model"])

    def filters(self) -> dict[str, str | None]:
        self.is_valid()
        return {key: self.cleaned_data.get(key) or None for key in self.fields}


class CaseFilterForm(forms.Form):
    """The run page's per-case table: failed cases only, a problem rule, a tag."""

    failed = forms.BooleanField(required=False, label="Failed only", help_text="not solved in every sample")
    rule = forms.ChoiceField(required=False, label="Problem rule")
    tag = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, rules: list[tuple[str, int]], tags: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["rule"].choices = [("", "(any)")] + [(r, f"{r} ({n})") for r, n in rules]
        self.fields["tag"].choices = [("", "(any)")] + [(t, t) for t in tags]

    def filters(self) -> dict[str, Any]:
        self.is_valid()
        d = self.cleaned_data
        return {"failed_only": bool(d.get("failed")), "rule": d.get("rule") or None, "tag": d.get("tag") or None}
