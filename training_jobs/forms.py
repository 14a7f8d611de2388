"""The compose-recipe form: a recipe (operators with their probabilities, K variants, seed, name pool, harness
pool size), the samples it starts from, and what to build (HSA, the fixed-harness baseline, or both).

The form only turns inputs into the JSON a recipe and a source selection are (:meth:`RecipeForm.request`);
:func:`training_jobs.services.validate_build` owns every rule, and its located errors come back onto the fields
(:meth:`RecipeForm.add_located_errors`: ``recipe.operators[3].probability`` → that operator's probability box).
An optional recipe JSON box takes a whole recipe (operator settings too) instead of the fields.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms

from harness_editor.models import HarnessVersion
from training_jobs.hsa.dataset import Recipe, default_operators
from training_jobs.hsa.operators import OPERATORS
from training_jobs.hsa.samples import DEMO_MANIFESTS
from training_jobs.schemas import demo_scenarios
from training_jobs.selectors import recordable_rooms

BUILD_CHOICES = [("both", "HSA dataset + fixed-harness baseline from the same samples"),
                 ("hsa", "HSA dataset only"), ("fixed_harness", "Fixed-harness baseline only")]
_DEFAULT = Recipe()
_DEFAULT_P = {o.name: o.probability for o in default_operators()}


def _version_choices() -> list[tuple[str, str]]:
    versions = (HarnessVersion.objects.filter(status=HarnessVersion.Status.APPROVED)
                .select_related("harness").order_by("harness__slug", "-number"))
    return [(f"{v.harness.slug}@{v.number}", f"{v.harness.slug} v{v.number}") for v in versions]


class RecipeForm(forms.Form):
    name = forms.CharField(max_length=120, initial="hsa-demo")
    build = forms.ChoiceField(choices=BUILD_CHOICES, initial="both", widget=forms.RadioSelect, label="Build")
    seed = forms.IntegerField(initial=_DEFAULT.seed)
    variants_per_sample = forms.IntegerField(initial=_DEFAULT.variants_per_sample, label="K variants per sample")
    names = forms.ChoiceField(choices=[("train", "train (training names)"),
                                       ("heldout", "heldout (Harness-Variant evaluation set)")],
                              initial=_DEFAULT.names, label="Name pool")
    harness_pool_size = forms.IntegerField(initial=_DEFAULT.harness_pool_size,
                                           help_text="harness variants per base harness, shared by rows; 0 = a "
                                                     "fresh one per row")
    # sources
    scenarios = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                          help_text="every comment of these demo scenarios becomes a sample")
    demo_manifests = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                               choices=[(m, m) for m in DEMO_MANIFESTS],
                                               initial=["skincare_v1", "skincare_v2", "skincare_v3"],
                                               label="Answered under demo manifests")
    versions = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                         label="... and approved harness versions")
    tiny_gold = forms.IntegerField(initial=0, label="Tiny gold samples",
                                   help_text="samples from the tiny model's seeded gold generator")
    tiny_gold_seed = forms.IntegerField(initial=0, label="Tiny gold seed")
    preview_rooms = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Recorded turns of",
        help_text="preview rooms and scenario runs under approved versions: each turn is replayed and kept only "
                  "when the reference policy agrees with it")
    max_samples = forms.IntegerField(required=False, help_text="keep at most this many samples (evenly spaced)")
    recipe_json = forms.CharField(required=False, label="Recipe JSON (optional, replaces the recipe fields)",
                                  widget=forms.Textarea(attrs={"rows": 6, "class": "code"}))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        scenario_ids = sorted(demo_scenarios())
        self.fields["scenarios"].choices = [(s, s) for s in scenario_ids]
        self.fields["scenarios"].initial = scenario_ids
        self.fields["versions"].choices = _version_choices()
        self.fields["preview_rooms"].choices = [(r["id"], r["label"]) for r in recordable_rooms()]
        for name, op in OPERATORS.items():
            self.fields[f"op_{name}"] = forms.BooleanField(required=False, initial=True, label=name)
            self.fields[f"p_{name}"] = forms.FloatField(required=False, initial=_DEFAULT_P[name],
                                                        label=f"{name} probability")

    def recipe_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in ("name", "build", "seed", "variants_per_sample", "names", "harness_pool_size")]

    def source_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in ("scenarios", "demo_manifests", "versions", "tiny_gold", "tiny_gold_seed",
                                  "preview_rooms", "max_samples")]

    def operator_rows(self) -> list[dict[str, Any]]:
        return [{"name": name, "dimension": op.dimension, "description": op.description,
                 "enabled": self[f"op_{name}"], "probability": self[f"p_{name}"]} for name, op in OPERATORS.items()]

    def clean_recipe_json(self) -> Any:
        text = self.cleaned_data.get("recipe_json", "").strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None

    def request(self) -> dict[str, Any]:
        """``{"kind", "with_baseline", "name", "recipe", "sources"}`` from the cleaned data."""
        d = self.cleaned_data
        recipe = d.get("recipe_json")
        if recipe is None:
            operators = []
            for name in OPERATORS:
                if d.get(f"op_{name}"):
                    p = d.get(f"p_{name}")
                    operators.append({"name": name, "probability": _DEFAULT_P[name] if p is None else p})
            recipe = {"name": d["name"], "seed": d["seed"], "variants_per_sample": d["variants_per_sample"],
                      "names": d["names"], "harness_pool_size": d["harness_pool_size"], "operators": operators}
        sources: dict[str, Any] = {"scenarios": d["scenarios"], "demo_manifests": d["demo_manifests"],
                                   "versions": d["versions"], "tiny_gold": d["tiny_gold"],
                                   "tiny_gold_seed": d["tiny_gold_seed"], "preview_rooms": d["preview_rooms"]}
        if d.get("max_samples") is not None:
            sources["max_samples"] = d["max_samples"]
        build = d["build"]
        return {"kind": "fixed_harness" if build == "fixed_harness" else "hsa", "with_baseline": build == "both",
                "name": d["name"], "recipe": recipe, "sources": sources}

    def add_located_errors(self, errors: list[dict[str, str]]) -> None:
        """Put each ``{"path", "message"}`` on the field it is about (the rest on the form)."""
        from_json = bool(self.cleaned_data.get("recipe_json"))
        enabled = [n for n in OPERATORS if self.cleaned_data.get(f"op_{n}")]
        for e in errors:
            field = None
            path, message = e["path"], e["message"]
            m = re.match(r"^recipe\.([a-z_]+)", path)
            if from_json and path.startswith("recipe"):
                field = "recipe_json"
                message = f"{path}: {message}"
            elif m and m.group(1) == "operators":
                op = re.match(r"^recipe\.operators\[(\d+)\](?:\.(\w+))?", path)
                if op and int(op.group(1)) < len(enabled):
                    name = enabled[int(op.group(1))]
                    field = f"p_{name}" if op.group(2) == "probability" else f"op_{name}"
            elif m and m.group(1) in self.fields:
                field = m.group(1)
            else:
                s = re.match(r"^sources\.([a-z_]+)", path)
                if s and s.group(1) in self.fields:
                    field = s.group(1)
            if field is None:
                message = f"{path}: {message}" if path else message
            self.add_error(field, message)
