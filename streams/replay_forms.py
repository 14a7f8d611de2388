"""The forms of session replays and of saving a session as an eval set: rows picked from lists (nobody types an id or
a URL). They only turn inputs into the services' arguments; the services own every rule, and their located errors
(``sampling.temperature``, ``harness_version``, ``set_name``) come back onto the boxes (:func:`add_located_errors`)."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from harness_editor.models import HarnessVersion, Label
from streams.models import LiveSession, ModelEndpoint


def _harness_ref(version: HarnessVersion) -> str:
    return f"{version.harness.slug}@{version.number}"


def add_located_errors(form: forms.Form, errors: list[dict[str, str]], field_of: dict[str, str]
                       ) -> list[dict[str, str]]:
    """Each ``{"path", "message"}`` onto its box; returns those that belong to none (listed on the page)."""
    rest = []
    for e in errors:
        path = e.get("path", "")
        head = re.split(r"[.\[]", path, maxsplit=1)[0]
        field = field_of.get(path) or field_of.get(head)
        if field and field in form.fields:
            form.add_error(field, f"{path}: {e['message']}" if path != head else e["message"])
        else:
            rest.append(e)
    return rest


class SessionReplayForm(forms.Form):
    harness_version = forms.ChoiceField(label="Harness version",
                                        help_text="any version, drafts too: nothing is spoken, the turns run offline")
    endpoint = forms.ChoiceField(label="Model endpoint", help_text="the model server the turns are sent to")
    request_model = forms.CharField(required=False, max_length=200, label="Model name (optional)",
                                    help_text="a LoRA adapter loaded on that server; empty: the endpoint's model")
    temperature = forms.FloatField(required=False, help_text="0 to 2 (empty: the endpoint's default)")
    max_tokens = forms.IntegerField(required=False, label="max_tokens", help_text="1 to 4096")
    seed = forms.IntegerField(initial=0, min_value=0, help_text="sent with every turn's requests")
    deadline_s = forms.FloatField(required=False, label="Deadline per turn (s)",
                                  help_text="up to 600 s (empty: the harness's own; a CPU server may need more)")
    name = forms.CharField(required=False, max_length=120, help_text="default: '<session> · <harness> · <endpoint>'")

    FIELD_OF = {"harness_version": "harness_version", "endpoint": "endpoint", "request_model": "request_model",
                "sampling.temperature": "temperature", "sampling.max_tokens": "max_tokens", "sampling": "temperature",
                "seed": "seed", "deadline_s": "deadline_s", "name": "name"}

    def __init__(self, *args: Any, session: LiveSession, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the session's harness first (what an operator compares against), then every other harness
        own = session.deployment.harness_id
        versions = sorted(HarnessVersion.objects.select_related("harness"),
                          key=lambda v: (v.harness_id != own, v.harness.slug, -v.number))
        self.harness_versions = {_harness_ref(v): v for v in versions}
        labels: dict[int, list[str]] = {}
        for version_id, name in Label.objects.values_list("version_id", "name"):
            labels.setdefault(version_id, []).append(name)
        self.fields["harness_version"].choices = [
            (ref, f"{v.harness.slug} v{v.number} ({v.get_status_display().lower()})"
                  + "".join(f" · {name}" for name in sorted(labels.get(v.pk, []))))
            for ref, v in self.harness_versions.items()]
        self.endpoints = {e.name: e for e in ModelEndpoint.objects.order_by("-is_default", "name")}
        # endpoint names only: an endpoint's model is often a directory's absolute path
        self.fields["endpoint"].choices = [(name, f"{name}{' · default' if e.is_default else ''}")
                                           for name, e in self.endpoints.items()]
        if not self.is_bound:
            self.initial.update(self._defaults(session, versions))

    @staticmethod
    def _defaults(session: LiveSession, versions: list[HarnessVersion]) -> dict[str, Any]:
        """The newest version of the session's harness that is not the one in force (what an operator compares
        against), and the deployment's primary endpoint with the model name its requests carry now (a loaded
        adapter's)."""
        from console.errors import DomainError
        from streams.deployment_selectors import deployment_in_force

        try:
            in_force = deployment_in_force(session.deployment)
        except DomainError:  # nothing approved, or its label is gone: no defaults from it
            in_force = None
        revision = session.deployment.current_revision
        if in_force is not None:
            current, endpoints, models = in_force.version, in_force.endpoints, in_force.request_models
        else:
            current = session.version_in_force or (revision.harness_version if revision is not None else None)
            ids = (revision.endpoints or [])[:1] if revision is not None else []
            endpoints, models = list(ModelEndpoint.objects.filter(pk__in=ids)), {}
        own = session.deployment.harness_id
        newest = next((v for v in versions if v.harness_id == own and (current is None or v.pk != current.pk)), None)
        out: dict[str, Any] = {"harness_version": _harness_ref(newest) if newest else ""}
        if endpoints:
            out["endpoint"] = endpoints[0].name
            model = models.get(endpoints[0].name, endpoints[0].model)
            if model != endpoints[0].model:
                out["request_model"] = model
        return out

    def request(self) -> dict[str, Any]:
        """The service's keyword arguments (after is_valid)."""
        d = self.cleaned_data
        sampling = {key: d[key] for key in ("temperature", "max_tokens") if d.get(key) is not None}
        return {"harness_version": self.harness_versions[d["harness_version"]],
                "endpoint": self.endpoints[d["endpoint"]],
                "request_model": d.get("request_model") or "", "sampling": sampling, "seed": d["seed"],
                "deadline_s": d.get("deadline_s"), "name": d.get("name") or ""}


class SaveEvalSetForm(forms.Form):
    set_name = forms.CharField(max_length=64, label="Eval set",
                               help_text="a new set's name, or an existing T1 set (lowercase letters, digits, - and _)")
    append = forms.BooleanField(required=False, initial=True, label="Append to the set's cases",
                                help_text="unticked: the new version holds only this session's cases (an import: "
                                          "needs the right to import eval sets)")
    tags = forms.CharField(required=False, max_length=500, help_text="comma-separated, added to every case")
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="the version's change note")

    FIELD_OF = {"set_name": "set_name", "tags": "tags", "note": "note", "description": "note"}

    def request(self) -> dict[str, Any]:
        d = self.cleaned_data
        tags = [t.strip() for t in (d.get("tags") or "").split(",") if t.strip()]
        return {"set_name": d["set_name"].strip(), "append": bool(d.get("append")), "tags": tags,
                "note": d.get("note") or ""}
