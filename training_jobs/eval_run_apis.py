"""REST API of the evaluation runs (mounted at /api/ by console.api_urls): list runs (filters) and start one, read
one with its aggregates, cancel and resume it, page through its per-sample results (filters), read one case with
the run's samples of it (the full turn events), and compare runs (the same numbers as the compare page).

Thin views, HackSoft style: the input serializer checks the shape, names are resolved to rows (an unknown one is a
400 naming its field), :func:`training_jobs.eval_run_services.eval_run_start` owns every rule (400 with located
errors: ``k``, ``sampling.temperature``, ``harness_version``; nothing saved), one selector does each read.
"""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import (
    ERRORS_READ,
    ERRORS_WRITE,
    ApiView,
    Pagination,
    paginated_response,
)
from console.errors import ValidationFailed
from harness_editor.models import HarnessVersion
from harness_editor.selectors import harness_version_by_ref
from streams.engine.outbound import OutboundRefused
from streams.models import ModelEndpoint
from training_jobs import eval_run_compare as compare
from training_jobs import eval_run_selectors as selectors
from training_jobs import eval_run_services as services
from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.models import TrainedModel

TAG = "eval runs"


# --- fields and output ---------------------------------------------------------------------------------------------


@extend_schema_field(serializers.ChoiceField(choices=EvalRun.Status.choices), component_name="EvalRunStatus")
class EvalRunStatusField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=EvalRun.Status.choices, **kwargs)


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "the run's aggregates (training_jobs.evals.runner.aggregate): cases, samples, k, "
                                     "complete, accuracy / effectiveness / pass_k / pass_1 as {mean, ci_low, ci_high, "
                                     "n} (fractions, 95 % bootstrap intervals over cases), fallbacks, errors, problems "
                                     "{rule: samples}, latency {turns, p50_s, p95_s, under_15s, ttft_p50_s, "
                                     "ttft_p95_s, decode_tps_p50}; T4 also ifeval {sample: {prompt_strict, "
                                     "instruction_strict, prompt_loose, instruction_loose (percent), prompts, "
                                     "by_category}}. Empty while the run is active."})
class SummaryField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "temperature (0–2), top_p (0–1), max_tokens (1–4096); omitted: the endpoint's "
                                     "defaults"})
class SamplingField(serializers.JSONField):
    pass


class EvalRunOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    eval_set = serializers.CharField(source="eval_set_version.eval_set.name")
    kind = serializers.CharField(source="eval_set_version.eval_set.kind", help_text="t1, t2, t3 or t4")
    set_version = serializers.IntegerField(source="eval_set_version.number")
    harness = serializers.CharField(source="harness_version.harness.slug", allow_null=True, default=None)
    harness_version = serializers.IntegerField(source="harness_version.number", allow_null=True, default=None)
    endpoint = serializers.CharField(source="endpoint.name")
    model = serializers.UUIDField(source="model_id", allow_null=True, help_text="the registered model it evaluated")
    sampling = SamplingField()
    k = serializers.IntegerField()
    seed = serializers.IntegerField()
    max_cases = serializers.IntegerField(allow_null=True)
    deadline_s = serializers.FloatField(allow_null=True)
    judges = serializers.ListField(child=serializers.CharField(), help_text="judge model endpoints, by name")
    status = EvalRunStatusField()
    stage = serializers.CharField()
    progress_done = serializers.IntegerField(help_text="samples judged")
    progress_total = serializers.IntegerField(help_text="cases × k")
    percent = serializers.IntegerField()
    cancel_requested = serializers.BooleanField()
    can_resume = serializers.BooleanField(help_text="cancelled or failed: POST …/resume/ plays the samples not "
                                                    "stored yet")
    resumes = serializers.IntegerField()
    error = serializers.CharField()
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    summary = SummaryField()

    class Meta:
        ref_name = "EvalRun"


class EvalRunDetailSerializer(EvalRunOutputSerializer):
    summary = serializers.SerializerMethodField()

    class Meta:
        ref_name = "EvalRunDetail"

    @extend_schema_field(SummaryField())
    def get_summary(self, run: EvalRun) -> dict[str, Any]:
        return selectors.run_summary(run)


class ProblemSerializer(serializers.Serializer):
    rule = serializers.CharField(required=False)
    message = serializers.CharField(required=False)
    span = serializers.CharField(required=False, allow_null=True)
    hint = serializers.CharField(required=False, allow_null=True)

    class Meta:
        ref_name = "EvalProblem"


class EvalResultSerializer(serializers.Serializer):
    case_id = serializers.CharField()
    position = serializers.IntegerField(help_text="the case's line in its set version (0-based)")
    sample = serializers.IntegerField(help_text="sent with seed + sample")
    accuracy = serializers.FloatField()
    effectiveness = serializers.FloatField()
    solved = serializers.BooleanField()
    reply = serializers.CharField()
    reason = serializers.CharField(help_text="how the turn ended (ok, blocked:<hook>, ...)")
    fallback = serializers.BooleanField()
    problems = serializers.ListField(child=serializers.DictField(), help_text="what the rules found: rule, message, "
                                                                               "span, hint")
    detail = serializers.DictField(help_text="T4: the per-instruction results, strict and loose")
    turn_s = serializers.FloatField()
    ttft_s = serializers.FloatField(allow_null=True)
    decode_tps = serializers.FloatField(allow_null=True)
    error = serializers.CharField()

    class Meta:
        ref_name = "EvalResult"


class EvalSampleSerializer(EvalResultSerializer):
    events = serializers.ListField(child=serializers.DictField(), help_text="the turn's engine events, in order "
                                                                             "(streams.engine.events)")

    class Meta:
        ref_name = "EvalSample"


# --- helpers -------------------------------------------------------------------------------------------------------


def _run(run_id) -> EvalRun:
    try:
        return selectors.eval_run_get(run_id=run_id)
    except EvalRun.DoesNotExist:
        raise exceptions.NotFound(f"no evaluation run {run_id}") from None


def _bad(path: str, message: str) -> ValidationFailed:
    return ValidationFailed("the evaluation run is not valid", errors=[{"path": path, "message": message}])


def resolve_set_version(name: str, number: int | None) -> EvalSetVersion:
    eval_set = EvalSet.objects.select_related("pinned__eval_set").filter(name=name).first()
    if eval_set is None:
        raise _bad("eval_set", f"no eval set {name!r} (GET /api/eval-sets/)")
    if number is not None:
        version = eval_set.versions.select_related("eval_set").filter(number=number).first()
        if version is None:
            raise _bad("set_version", f"{name} has no version {number}")
        return version
    version = eval_set.pinned or eval_set.versions.select_related("eval_set").order_by("-number").first()
    if version is None:
        raise _bad("eval_set", f"{name} has no version yet")
    return version


def resolve_harness_version(spec: str) -> HarnessVersion:
    """``slug@number`` or ``slug@label`` (e.g. glow-gadget@production)."""
    if "@" not in spec or spec.startswith("@") or spec.endswith("@"):
        raise _bad("harness_version", "write slug@number or slug@label, e.g. glow-gadget@production")
    version = harness_version_by_ref(spec)
    if version is None:
        raise _bad("harness_version", f"no harness version {spec}")
    return version


# --- runs ----------------------------------------------------------------------------------------------------------


class EvalRunListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS, "POST": roles.RUN_EVAL}
    pagination_class = Pagination

    class FilterSerializer(serializers.Serializer):
        status = EvalRunStatusField(required=False)
        kind = serializers.ChoiceField(choices=EvalSet.Kind.choices, required=False)
        eval_set = serializers.CharField(required=False, max_length=64)
        harness = serializers.CharField(required=False, max_length=100)
        endpoint = serializers.CharField(required=False, max_length=64)
        model = serializers.UUIDField(required=False)

        class Meta:
            ref_name = "EvalRunFilter"

    class InputSerializer(serializers.Serializer):
        eval_set = serializers.CharField(max_length=64, help_text="the eval set's name (GET /api/eval-sets/)")
        set_version = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                               max_value=2**31 - 1,
                                               help_text="default: the set's pinned version, else its latest")
        harness_version = serializers.CharField(required=False, allow_blank=True, default="", max_length=120,
                                                help_text="slug@number or slug@label (T1–T3; empty for T4 IFEval)")
        endpoint = serializers.CharField(required=False, allow_blank=True, default="", max_length=64,
                                         help_text="a model endpoint's name (GET /api/model-endpoints/)")
        model = serializers.UUIDField(required=False, allow_null=True, default=None,
                                      help_text="a registered model; without endpoint, the endpoint serving it")
        k = serializers.IntegerField(required=False, default=1, help_text="samples per case, 1–16")
        seed = serializers.IntegerField(required=False, default=0, help_text="sample j is sent with seed + j")
        max_cases = serializers.IntegerField(required=False, allow_null=True, default=None,
                                             help_text="only the first N cases")
        deadline_s = serializers.FloatField(required=False, allow_null=True, default=None,
                                            help_text="seconds per turn, up to 600 (default: the harness's own)")
        sampling = SamplingField(required=False, default=dict)
        name = serializers.CharField(required=False, allow_blank=True, default="", max_length=120)
        judges = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list,
                                       max_length=20, help_text="names of model endpoints that also judge each reply "
                                                                "(T1–T3, at most 5); the rules stay the score of record")

        class Meta:
            ref_name = "EvalRunCreateInput"

    @extend_schema(tags=[TAG], operation_id="eval_run_list",
                   parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=EvalRun.Status.values),
                               OpenApiParameter("kind", OpenApiTypes.STR, enum=EvalSet.Kind.values),
                               OpenApiParameter("eval_set", OpenApiTypes.STR, description="eval set name"),
                               OpenApiParameter("harness", OpenApiTypes.STR, description="harness slug"),
                               OpenApiParameter("endpoint", OpenApiTypes.STR, description="endpoint name"),
                               OpenApiParameter("model", OpenApiTypes.UUID, description="registered model id")],
                   responses={200: EvalRunOutputSerializer(many=True), 400: ERRORS_WRITE[400], **ERRORS_READ})
    def get(self, request):
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        qs = selectors.eval_run_list(**filters.validated_data)
        return paginated_response(view=self, queryset=qs, serializer_class=EvalRunOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="eval_run_create", request=InputSerializer,
                   description="Queue an evaluation run on the gpu queue. A bad request is a 400 naming each "
                               "problem's path (eval_set, set_version, harness_version, endpoint, model, k, seed, "
                               "max_cases, deadline_s, sampling.<key>); nothing is saved then.",
                   responses={201: EvalRunDetailSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        version = resolve_set_version(d["eval_set"], d["set_version"])
        harness_version = resolve_harness_version(d["harness_version"]) if d["harness_version"] else None
        model = None
        if d["model"] is not None:
            model = TrainedModel.objects.select_related("endpoint").filter(pk=d["model"]).first()
            if model is None:
                raise _bad("model", f"no registered model {d['model']}")
        if d["endpoint"]:
            endpoint = ModelEndpoint.objects.filter(name=d["endpoint"]).first()
            if endpoint is None:
                raise _bad("endpoint", f"no model endpoint {d['endpoint']!r} (GET /api/model-endpoints/)")
        elif model is not None and model.endpoint is not None:
            endpoint = model.endpoint
        elif model is not None:
            raise _bad("model", "this model is not served: start its local server, or name the endpoint serving it")
        else:
            raise _bad("endpoint", "name a model endpoint or a served registered model")
        try:
            run = services.eval_run_start(user=request.user, eval_set_version=version, endpoint=endpoint,
                                          harness_version=harness_version, model=model, sampling=d["sampling"],
                                          k=d["k"], seed=d["seed"], max_cases=d["max_cases"],
                                          deadline_s=d["deadline_s"], name=d["name"], judges=d["judges"])
        except OutboundRefused as exc:
            raise _bad("endpoint", str(exc)) from None
        return Response(EvalRunDetailSerializer(run).data, status=status.HTTP_201_CREATED)


class EvalRunDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}

    @extend_schema(tags=[TAG], operation_id="eval_run_retrieve",
                   responses={200: EvalRunDetailSerializer, **ERRORS_READ})
    def get(self, request, run_id):
        return Response(EvalRunDetailSerializer(_run(run_id)).data)


class EvalRunCancelApi(ApiView):
    required_perms = {"POST": roles.RUN_EVAL}

    @extend_schema(tags=[TAG], operation_id="eval_run_cancel", request=None,
                   description="Cancel a queued run now, or ask a running one to stop after its current sample "
                               "(resumable). 409 once finished. Only the person who started it or an ML lead may "
                               "(403 otherwise).",
                   responses={200: EvalRunDetailSerializer, **ERRORS_WRITE})
    def post(self, request, run_id):
        run = services.eval_run_cancel(user=request.user, run=_run(run_id))
        return Response(EvalRunDetailSerializer(run).data)


class EvalRunResumeApi(ApiView):
    required_perms = {"POST": roles.RUN_EVAL}

    @extend_schema(tags=[TAG], operation_id="eval_run_resume", request=None,
                   description="Queue a cancelled or failed run again: it plays only the samples not stored yet. 409 "
                               "for any other status. Only the person who started it or an ML lead may (403 "
                               "otherwise).",
                   responses={200: EvalRunDetailSerializer, **ERRORS_WRITE})
    def post(self, request, run_id):
        run = services.eval_run_resume(user=request.user, run=_run(run_id))
        return Response(EvalRunDetailSerializer(run).data)


class EvalResultListApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}
    pagination_class = Pagination

    class FilterSerializer(serializers.Serializer):
        case_id = serializers.CharField(required=False, max_length=200)
        sample = serializers.IntegerField(required=False, min_value=0, max_value=services.MAX_K)
        solved = serializers.BooleanField(required=False, allow_null=True, default=None)
        rule = serializers.CharField(required=False, max_length=100)

        class Meta:
            ref_name = "EvalResultFilter"

    @extend_schema(tags=[TAG], operation_id="eval_run_results",
                   description="The run's judged samples in the set's order (without their turn events: GET "
                               "…/cases/<case_id>/ has them).",
                   parameters=[OpenApiParameter("case_id", OpenApiTypes.STR),
                               OpenApiParameter("sample", OpenApiTypes.INT),
                               OpenApiParameter("solved", OpenApiTypes.BOOL, description="false: failed samples only"),
                               OpenApiParameter("rule", OpenApiTypes.STR,
                                                description="samples with a problem of this rule")],
                   responses={200: EvalResultSerializer(many=True), 400: ERRORS_WRITE[400], **ERRORS_READ})
    def get(self, request, run_id):
        run = _run(run_id)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        qs = EvalResult.objects.filter(run=run).defer("events").order_by("position", "sample")
        if f.get("case_id"):
            qs = qs.filter(case_id=f["case_id"])
        if f.get("sample") is not None:
            qs = qs.filter(sample=f["sample"])
        if f.get("solved") is not None:
            qs = qs.filter(solved=f["solved"])
        if f.get("rule"):  # JSON containment is not portable (SQLite): the ids of the samples that match
            ids = [pk for pk, problems in qs.exclude(problems=[]).values_list("pk", "problems")
                   if any(str(p.get("rule") or p.get("id") or "other") == f["rule"] for p in problems or [])]
            qs = qs.filter(pk__in=ids)
        return paginated_response(view=self, queryset=qs, serializer_class=EvalResultSerializer)


class EvalRunCaseApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}

    class OutputSerializer(serializers.Serializer):
        case_id = serializers.CharField()
        position = serializers.IntegerField()
        case = serializers.DictField(help_text="the case as its set stores it (training_jobs.evals.cases.EvalCase)")
        samples = EvalSampleSerializer(many=True, help_text="the run's samples of it (none yet: empty)")

        class Meta:
            ref_name = "EvalRunCase"

    @extend_schema(tags=[TAG], operation_id="eval_run_case",
                   description="One case of the run's eval set version and the run's samples of it, each with its "
                               "verdict, problems and full turn events (the drill-down).",
                   responses={200: OutputSerializer, **ERRORS_READ})
    def get(self, request, run_id, case_id):
        run = _run(run_id)
        try:
            case, results = selectors.run_case(run, case_id)
        except EvalCase.DoesNotExist:
            raise exceptions.NotFound(f"no case {case_id!r} in {run.eval_set_version}") from None
        return Response(self.OutputSerializer({"case_id": case.case_id, "position": case.position, "case": case.data,
                                               "samples": results}).data)


# --- compare -------------------------------------------------------------------------------------------------------


class _CellSerializer(serializers.Serializer):
    run = serializers.UUIDField()
    mean = serializers.FloatField(allow_null=True, help_text="a fraction (scores) or the latency figure")
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)
    n = serializers.IntegerField(allow_null=True)
    delta = serializers.FloatField(allow_null=True, help_text="against the baseline: percentage points (scores, "
                                                              "share under 15 s), else the latency unit")
    better = serializers.BooleanField(allow_null=True)
    apart = serializers.BooleanField(help_text="the 95 % intervals of this run and the baseline do not overlap")

    class Meta:
        ref_name = "EvalCompareCell"


class _MetricSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    kind = serializers.ChoiceField(choices=["score", "ifeval", "latency"])
    unit = serializers.CharField(allow_null=True)
    cells = _CellSerializer(many=True)

    class Meta:
        ref_name = "EvalCompareMetric"


class _FlipSerializer(serializers.Serializer):
    case_id = serializers.CharField()
    baseline_solved = serializers.FloatField(help_text="share of the baseline's samples solved")
    run_solved = serializers.FloatField()

    class Meta:
        ref_name = "EvalFlippedCase"


class _FlippedSerializer(serializers.Serializer):
    baseline = serializers.UUIDField()
    run = serializers.UUIDField()
    common = serializers.IntegerField(help_text="cases both ran")
    regressions = _FlipSerializer(many=True, help_text="solved in the baseline, not in this run")
    fixes = _FlipSerializer(many=True)

    class Meta:
        ref_name = "EvalFlipped"


class _HeatCellSerializer(serializers.Serializer):
    column = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    n = serializers.IntegerField()

    class Meta:
        ref_name = "EvalRobustnessCell"


class _HeatRowSerializer(serializers.Serializer):
    run = serializers.UUIDField()
    label = serializers.CharField()
    cells = _HeatCellSerializer(many=True)

    class Meta:
        ref_name = "EvalRobustnessRow"


class _RobustnessSerializer(serializers.Serializer):
    metric = serializers.CharField()
    columns = serializers.ListField(child=serializers.CharField(), help_text="all, perturbation levels, fault:<kind>")
    rows = _HeatRowSerializer(many=True)

    class Meta:
        ref_name = "EvalRobustness"


class _StepSerializer(serializers.Serializer):
    model = serializers.UUIDField()
    name = serializers.CharField()
    kind = serializers.CharField()
    run = serializers.UUIDField(allow_null=True, help_text="its latest succeeded run on this set and harness")
    metric = serializers.CharField(allow_null=True)
    mean = serializers.FloatField(allow_null=True)
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "EvalLineageStep"


class _LineageSerializer(serializers.Serializer):
    eval_set = serializers.CharField()
    set_version = serializers.IntegerField()
    harness = serializers.CharField(allow_null=True)
    harness_version = serializers.IntegerField(allow_null=True)
    steps = _StepSerializer(many=True, help_text="base → HSA-SFT → distillation → RL")
    baselines = _StepSerializer(many=True, help_text="fixed-harness SFT baselines of the same base")

    class Meta:
        ref_name = "EvalLineage"


class EvalCompareOutputSerializer(serializers.Serializer):
    baseline = serializers.UUIDField()
    runs = EvalRunOutputSerializer(many=True)
    metrics = _MetricSerializer(many=True)
    flipped = _FlippedSerializer(many=True)
    robustness = _RobustnessSerializer()
    lineage = _LineageSerializer(many=True)

    class Meta:
        ref_name = "EvalCompare"


def comparison_data(result: dict[str, Any]) -> dict[str, Any]:
    """The compare page's numbers as JSON."""
    runs = result["runs"]

    def step(s):
        f = s["figure"] or {}
        return {"model": s["model"].pk, "name": s["model"].name, "kind": s["model"].kind,
                "run": s["run"].pk if s["run"] else None, "metric": f.get("metric"), "mean": f.get("mean"),
                "ci_low": f.get("ci_low"), "ci_high": f.get("ci_high")}

    robustness = result["robustness"]
    return {
        "baseline": runs[0].pk, "runs": runs,
        "metrics": [{"key": row["key"], "label": row["label"], "kind": row["kind"], "unit": row.get("unit"),
                     "cells": [{"run": run.pk, "mean": c.get("mean"), "ci_low": c.get("ci_low"),
                                "ci_high": c.get("ci_high"), "n": c.get("n"), "delta": c.get("delta"),
                                "better": c.get("better"), "apart": bool(c.get("apart"))}
                               for run, c in zip(runs, row["cells"])]} for row in result["rows"]],
        "flipped": [{"baseline": f["baseline"].pk, "run": f["run"].pk, "common": f["common"],
                     "regressions": [{"case_id": c["case_id"], "baseline_solved": c["a"], "run_solved": c["b"]}
                                     for c in f["regressions"]],
                     "fixes": [{"case_id": c["case_id"], "baseline_solved": c["a"], "run_solved": c["b"]}
                               for c in f["fixes"]]} for f in result["flipped"]],
        "robustness": {"metric": robustness["metric"], "columns": robustness["columns"],
                       "rows": [{"run": run.pk, "label": label,
                                 "cells": [{"column": col, "value": cell["value"] if cell else None,
                                            "n": cell["n"] if cell else 0}
                                           for col, cell in zip(robustness["columns"], cells)]}
                                for run, label, cells in zip(runs, robustness["rows"], robustness["cells"])]},
        "lineage": [{"eval_set": g["set_version"].eval_set.name, "set_version": g["set_version"].number,
                     "harness": g["harness_version"].harness.slug if g["harness_version"] else None,
                     "harness_version": g["harness_version"].number if g["harness_version"] else None,
                     "steps": [step(s) for s in g["steps"]], "baselines": [step(s) for s in g["baselines"]]}
                    for g in result["lineage"]],
    }


class EvalCompareApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}

    class QuerySerializer(serializers.Serializer):
        runs = serializers.CharField(max_length=40 * compare.COMPARE_MAX,
                                     help_text="run ids separated by commas, the baseline first")
        metric = serializers.ChoiceField(choices=compare.HEAT_METRICS, required=False, default="accuracy")

        class Meta:
            ref_name = "EvalCompareQuery"

        def validate_runs(self, value: str) -> list[str]:
            ids = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
            if not 2 <= len(ids) <= compare.COMPARE_MAX:
                raise serializers.ValidationError(f"2 to {compare.COMPARE_MAX} run ids")
            for i in ids:
                try:
                    uuid.UUID(i)
                except ValueError:
                    raise serializers.ValidationError(f"{i[:40]!r} is not a run id") from None
            return ids

    @extend_schema(tags=[TAG], operation_id="eval_run_compare",
                   description="Runs side by side, as the compare page shows them: scores with 95 % intervals and "
                               "deltas against the first (baseline) run, flipped cases (regressions first), the "
                               "robustness grid (eval set × perturbation level × model) and the lineage of their "
                               "registered models.",
                   parameters=[OpenApiParameter("runs", OpenApiTypes.STR, required=True,
                                                description="2 to 8 run ids separated by commas, the baseline first"),
                               OpenApiParameter("metric", OpenApiTypes.STR, enum=list(compare.HEAT_METRICS),
                                                description="what the robustness grid shows")],
                   responses={200: EvalCompareOutputSerializer, 400: ERRORS_WRITE[400], **ERRORS_READ})
    def get(self, request):
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            runs = compare.compared_runs(query.validated_data["runs"])
        except EvalRun.DoesNotExist as exc:
            raise exceptions.NotFound(str(exc)) from None
        result = compare.comparison(runs, metric=query.validated_data["metric"])
        return Response(EvalCompareOutputSerializer(comparison_data(result)).data)
