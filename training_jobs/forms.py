"""The compose-recipe form: a recipe (operators with their probabilities, K variants, seed, name pool, harness
pool size), the samples it starts from, and what to build (HSA, the fixed-harness baseline, or both).

The form only turns inputs into the JSON a recipe and a source selection are (:meth:`RecipeForm.request`);
:func:`training_jobs.services.validate_build` owns every rule, and its located errors come back onto the fields
(:meth:`RecipeForm.add_located_errors`: ``recipe.operators[3].probability`` → that operator's probability box).
An optional recipe JSON box takes a whole recipe (operator settings too) instead of the fields. Labels by
regeneration pick their teacher and judge from the model endpoints administrators created, by name: nobody types
a URL or a key here.

The launch form of a training job (:class:`TrainingJobForm`) follows the same pattern: its config boxes are made
from ``SFTStageConfig``'s fields (type, default, description as help text).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, get_args, get_origin

from django import forms
from pydantic import BaseModel

from harness_editor.models import HarnessVersion
from streams.labels import endpoint_label
from streams.selectors import model_endpoint_list
from training_jobs.hat.config import LoraSettings, SFTStageConfig, StageConfig
from training_jobs.hsa.dataset import Recipe, default_operators
from training_jobs.hsa.operators import OPERATORS
from training_jobs.hsa.samples import DEMO_MANIFESTS
from training_jobs.models import TrainingJob
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
    written_version = forms.ChoiceField(required=False, label="Written turns for",
                                        help_text="an approved harness version the turns below are written for")
    written_turns = forms.CharField(
        required=False, label="Written gold turns (YAML or JSON list)",
        widget=forms.Textarea(attrs={"rows": 6, "class": "code"}),
        help_text="for a harness the reference policy does not know: each turn a comment, the skill to load, the "
                  "tool calls (answered by the tools' own bindings) and the reply; every turn is checked against "
                  "the harness before the build is queued")
    max_samples = forms.IntegerField(required=False, help_text="keep at most this many samples (evenly spaced)")
    # labels
    label_mode = forms.ChoiceField(required=False, choices=[("mechanical", "mechanical (relabel the gold turn)"),
                                            ("regenerate", "regenerate (a teacher re-answers, a judge keeps)")],
                                   initial=_DEFAULT.label_mode, label="Labels")
    teacher = forms.ChoiceField(required=False, label="Teacher endpoint",
                                help_text="label_mode regenerate: a model endpoint an administrator created")
    judge = forms.ChoiceField(required=False, label="Judge endpoint",
                              help_text="optional: an LLM judge on top of the rule checks")
    recipe_json = forms.CharField(required=False, label="Recipe JSON (optional, replaces the recipe fields)",
                                  widget=forms.Textarea(attrs={"rows": 6, "class": "code"}))

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        scenario_ids = sorted(demo_scenarios())
        self.fields["scenarios"].choices = [(s, s) for s in scenario_ids]
        self.fields["scenarios"].initial = scenario_ids
        self.fields["versions"].choices = _version_choices()
        self.fields["written_version"].choices = [("", "— none —"), *_version_choices()]
        # only rooms the user may see: another's private preview room is not theirs to train on
        self.fields["preview_rooms"].choices = [(r["id"], r["label"]) for r in recordable_rooms(user=user)]
        endpoints = [(e.name, endpoint_label(e, with_model=True)) for e in model_endpoint_list()]
        self.fields["teacher"].choices = [("", "— none —")] + endpoints
        self.fields["judge"].choices = [("", "— none —")] + endpoints
        for name, op in OPERATORS.items():
            self.fields[f"op_{name}"] = forms.BooleanField(required=False, initial=True, label=name)
            self.fields[f"p_{name}"] = forms.FloatField(required=False, initial=_DEFAULT_P[name],
                                                        label=f"{name} probability")

    def recipe_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in ("name", "build", "seed", "variants_per_sample", "names", "harness_pool_size")]

    def label_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in ("label_mode", "teacher", "judge")]

    def source_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in ("scenarios", "demo_manifests", "versions", "tiny_gold", "tiny_gold_seed",
                                  "preview_rooms", "written_version", "written_turns", "max_samples")]

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

    def clean_written_turns(self) -> Any:
        import yaml

        text = self.cleaned_data.get("written_turns", "").strip()
        if not text:
            return None
        try:
            turns = yaml.safe_load(text)  # JSON is YAML too
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise forms.ValidationError(f"not YAML or JSON{where}: {getattr(exc, 'problem', exc)}") from None
        if not isinstance(turns, list) or not turns:
            raise forms.ValidationError("a list of turns (each with a comment, calls and a reply)")
        return turns

    def clean(self) -> dict[str, Any]:
        d = super().clean()
        if d.get("written_turns") and not d.get("written_version"):
            self.add_error("written_version", "pick the approved harness version the turns are written for")
        return d

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
                      "names": d["names"], "harness_pool_size": d["harness_pool_size"], "operators": operators,
                      "label_mode": d.get("label_mode") or "mechanical"}
            for key in ("teacher", "judge"):
                if d.get(key):
                    recipe[key] = d[key]
        sources: dict[str, Any] = {"scenarios": d["scenarios"], "demo_manifests": d["demo_manifests"],
                                   "versions": d["versions"], "tiny_gold": d["tiny_gold"],
                                   "tiny_gold_seed": d["tiny_gold_seed"], "preview_rooms": d["preview_rooms"]}
        if d.get("written_turns"):
            sources["written"] = [{"version": d["written_version"], "turns": d["written_turns"]}]
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
            elif path.startswith("sources.written"):
                field = "written_version" if path.endswith(".version") else "written_turns"
                message = f"{path.removeprefix('sources.written[0].')}: {message}" if field == "written_turns" \
                    else message
            else:
                s = re.match(r"^sources\.([a-z_]+)", path)
                if s and s.group(1) in self.fields:
                    field = s.group(1)
            if field is None:
                message = f"{path}: {message}" if path else message
            self.add_error(field, message)


# --- launching a training job -------------------------------------------------------------------------------------

# The stage settings the launch form shows as boxes (the rest keep their defaults or come from the JSON box).
CONFIG_FIELDS = ("max_steps", "per_device_batch_size", "learning_rate", "lr_scheduler", "warmup_ratio",
                 "save_steps", "max_length", "device", "bf16", "threads", "seed")
LORA_FIELDS = ("r", "alpha", "dropout")
# Every kind launches here. The two SFT kinds get a box per SFTStageConfig field; distillation, RL and the
# pipeline (whose configs nest stages) get their whole config as JSON, prefilled with its documented defaults.
LAUNCH_KINDS = tuple(TrainingJob.Kind.values)
SFT_KINDS = (TrainingJob.Kind.SFT, TrainingJob.Kind.BASELINE_SFT)
CONFIG_LABELS = {"per_device_batch_size": "Batch size per device", "lr_scheduler": "LR scheduler",
                 "bf16": "bf16 mixed precision", "max_length": "Max length (tokens)"}


def _config_field(model: type[BaseModel], name: str, *, label: str | None = None) -> forms.Field:
    """A form field for one pydantic field: its type, default and description (the help text). No bounds: the
    service validates the config and its errors come back onto the field."""
    info = model.model_fields[name]
    kw = {"label": label or CONFIG_LABELS.get(name) or name.replace("_", " ").capitalize(),
          "help_text": info.description or "", "initial": info.default}
    annotation = info.annotation
    if get_origin(annotation) is Literal:
        return forms.ChoiceField(choices=[(v, v) for v in get_args(annotation)], **kw)
    if annotation is bool:
        return forms.BooleanField(required=False, **kw)
    if annotation is int:
        return forms.IntegerField(**kw)
    if annotation is float:
        return forms.FloatField(**kw)
    raise TypeError(f"no form field for {model.__name__}.{name}: {annotation}")


def _model_choices() -> list[tuple[str, str]]:
    from training_jobs.selectors import model_list

    return [("", "— pick a model —")] + [(str(m.pk), f"{m.name} · {m.get_kind_display()}") for m in model_list()[:200]]


class TrainingJobForm(forms.Form):
    """What to train (the stage, the dataset, the model it starts from) and the stage config. The dataset list
    and the config boxes follow the chosen stage (``TrainingJob.DATASET_KINDS``; boxes for the SFT kinds, JSON
    for the others). Like
    :class:`RecipeForm`, the form only gathers inputs: :func:`training_jobs.services.validate_training` owns the
    rules and its located errors land on the boxes (:meth:`add_located_errors`)."""

    kind = forms.ChoiceField(choices=[(k, TrainingJob.Kind(k).label) for k in LAUNCH_KINDS],
                             initial=TrainingJob.Kind.SFT, widget=forms.RadioSelect, label="Stage")
    # plain text values behind select widgets: an id the lists do not offer reaches the service, which says why
    dataset = forms.CharField(required=False, widget=forms.Select, help_text="ready datasets for this stage")
    base_model = forms.CharField(required=False, widget=forms.Select, label="Base model",
                                 help_text="the registry model the job starts from (its parent in the lineage)")
    name = forms.CharField(max_length=120, required=False, help_text="default: '<stage> on <dataset>'")
    lora = forms.BooleanField(required=False, label="Train LoRA adapters",
                              help_text=StageConfig.model_fields["lora"].description)
    lora_keep_adapter = forms.BooleanField(
        required=False, label="Keep the adapter apart (not merged): load it into a running vLLM",
        help_text=LoraSettings.model_fields["merge"].description)
    config_json = forms.CharField(required=False, label="More settings (JSON, optional)",
                                  widget=forms.Textarea(attrs={"rows": 4, "class": "code"}),
                                  help_text="other SFTStageConfig fields, e.g. {\"gradient_accumulation_steps\": 4}; "
                                            "a key here replaces the box of the same name")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound:  # an unknown ?kind= falls back to HSA-SFT, with its radio checked
            self.initial["kind"] = self.chosen_kind()
        for name in CONFIG_FIELDS:
            self.fields[name] = _config_field(SFTStageConfig, name)
        for name in LORA_FIELDS:
            self.fields[f"lora_{name}"] = _config_field(LoraSettings, name, label=f"LoRA {name}")
        if not self.sft_kind:  # the whole config comes from the JSON box
            for name in (*CONFIG_FIELDS, *(f"lora_{n}" for n in LORA_FIELDS)):
                self.fields[name].required = False
            from training_jobs.services import training_config_class

            self.fields["config_json"].label = "Stage config (JSON)"
            self.fields["config_json"].widget.attrs["rows"] = 18
            self.fields["config_json"].help_text = (f"the {TrainingJob.Kind(self.chosen_kind()).label} config; "
                                                    f"fields you leave out keep their defaults")
            if not self.is_bound:
                self.initial["config_json"] = training_config_class(self.chosen_kind())().model_dump_json(indent=2)
        from training_jobs.selectors import model_list, training_datasets

        datasets = training_datasets(kind=self.chosen_kind())
        self.fields["dataset"].widget.choices = self.dataset_choices(datasets)
        self.fields["base_model"].widget.choices = _model_choices()
        if not self.is_bound:  # the newest ready dataset and base model, until the user picks others
            self.initial.setdefault("dataset", str(datasets[0].pk) if datasets else "")
            newest_base = model_list(kind="base").order_by("-created_at").first()
            self.initial.setdefault("base_model", str(newest_base.pk) if newest_base else "")

    @property
    def sft_kind(self) -> bool:
        return self.chosen_kind() in SFT_KINDS

    def chosen_kind(self) -> str:
        kind = self.data.get("kind") if self.is_bound else self.initial.get("kind")
        return kind if kind in LAUNCH_KINDS else TrainingJob.Kind.SFT

    @staticmethod
    def dataset_choices(datasets: list[Any]) -> list[tuple[str, str]]:
        if not datasets:
            return [("", "— no ready dataset for this stage: build one first —")]
        return [("", "— pick a ready dataset —")] + [
            (str(d.pk), f"{d.name} · {d.rows} rows · {d.created_at:%Y-%m-%d %H:%M}") for d in datasets]

    def start_fields(self) -> list[forms.BoundField]:
        return [self["base_model"], self["name"]]

    def config_fields(self) -> list[forms.BoundField]:
        return [self[n] for n in CONFIG_FIELDS]

    def lora_fields(self) -> list[forms.BoundField]:
        return [self[f"lora_{n}"] for n in LORA_FIELDS]

    def clean_config_json(self) -> dict[str, Any]:
        text = self.cleaned_data.get("config_json", "").strip()
        if not text:
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
        if not isinstance(data, dict):
            raise forms.ValidationError("a JSON object of config fields, e.g. {\"weight_decay\": 0.01}")
        return data

    def request(self) -> dict[str, Any]:
        """``{"kind", "dataset_id", "base_model_id", "name", "config"}`` for ``services.training_job_start``."""
        d = self.cleaned_data
        if d["kind"] in SFT_KINDS:
            config: dict[str, Any] = {name: d[name] for name in CONFIG_FIELDS}
            if d.get("lora"):
                config["lora"] = {name: d[f"lora_{name}"] for name in LORA_FIELDS}
                config["lora"]["merge"] = not d.get("lora_keep_adapter")
            config.update(d.get("config_json") or {})
        else:
            config = d.get("config_json") or {}
        return {"kind": d["kind"], "dataset_id": d.get("dataset") or None, "base_model_id": d.get("base_model") or None,
                "name": d.get("name", ""), "config": config}

    def add_located_errors(self, errors: list[dict[str, str]]) -> None:
        """Put each ``{"path", "message"}`` on its box: ``config.max_steps`` → max_steps, ``config.lora.r`` →
        lora_r, ``dataset`` → the dataset select; a key set in the JSON box → the JSON box; the rest on the form."""
        from_json = set(self.cleaned_data.get("config_json") or {})
        if not self.sft_kind:  # every config error is about the JSON box
            from_json |= {"lora", *CONFIG_FIELDS}
        for e in errors:
            path, message = e["path"], e["message"]
            field = None
            m = re.match(r"^config\.([a-z_0-9]+)(?:\.([a-z_0-9]+))?", path)
            if path in ("kind", "dataset", "base_model"):
                field = path
            elif m and m.group(1) in from_json:
                field, message = "config_json", f"{path}: {message}"
            elif m and m.group(1) == "lora":
                field = f"lora_{m.group(2)}" if m.group(2) in LORA_FIELDS else \
                    "lora_keep_adapter" if m.group(2) == "merge" else "lora"
            elif m and m.group(1) in CONFIG_FIELDS:
                field = m.group(1)
            if field is None:
                message = f"{path}: {message}" if path else message
            self.add_error(field, message)
