"""REST API of the latency replays (mounted at /api/ by console.api_urls): list and start replays, one replay with
its figures per concurrency level, cancel and resume.

Thin views, HackSoft style: the input serializer checks the shape and finds the named rows (a set, harness or
endpoint that does not exist is a 400 on its field), one service does the rest; its located errors
(``concurrency[2]``, ``sampling.temperature``, ``endpoint``) come back as a 400, nothing saved.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, Pagination, paginated_response
from harness_editor.models import HarnessVersion, Label
from streams.models import ModelEndpoint
from training_jobs import latency_selectors as selectors
from training_jobs import latency_services as services
from training_jobs.eval_models import EvalSet
from training_jobs.evals.replay import MAX_CONCURRENCY, MAX_LEVELS
from training_jobs.latency_models import LatencyReplay

TAG = "latency replays"


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "levels: one entry per concurrency level played (concurrency, turns, complete, "
                                     "p50_s, p95_s, under_15s, ttft_p50_s, ttft_p95_s, decode_tps_p50, wall_s, "
                                     "turns_per_s, in_flight_max, fallbacks, errors, reasons, turn_s, histogram); "
                                     "histogram_edges (seconds, shared by the levels); reference (the report's "
                                     "p50_s / p95_s); cases, skipped_cases"})
class SummaryField(serializers.JSONField):
    pass


class LatencyReplayOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=LatencyReplay.Status.choices)
    stage = serializers.CharField()
    progress_done = serializers.IntegerField()
    progress_total = serializers.IntegerField()
    percent = serializers.IntegerField()
    eval_set = serializers.CharField(source="eval_set_version.eval_set.name")
    eval_set_version = serializers.IntegerField(source="eval_set_version.number")
    harness = serializers.CharField(source="harness_version.harness.slug")
    harness_version = serializers.IntegerField(source="harness_version.number")
    endpoint = serializers.CharField(source="endpoint.name")
    concurrency = serializers.ListField(child=serializers.IntegerField())
    turns_per_level = serializers.IntegerField()
    seed = serializers.IntegerField()
    sampling = serializers.DictField()
    deadline_s = serializers.FloatField(allow_null=True)
    summary = SummaryField()
    error = serializers.CharField()
    resumes = serializers.IntegerField()
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "LatencyReplay"


def _replay(replay_id) -> LatencyReplay:
    try:
        return selectors.latency_replay_get(replay_id=replay_id)
    except LatencyReplay.DoesNotExist:
        raise exceptions.NotFound("no such latency replay") from None


class LatencyReplayListApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS, "POST": roles.RUN_EVAL}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        eval_set = serializers.CharField(max_length=64, help_text="the set's name (T1–T3)")
        eval_set_version = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                                    help_text="default: the pinned version, else the latest")
        harness = serializers.CharField(max_length=64, help_text="the harness's slug")
        harness_version = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                                   help_text="a version number (or give label)")
        label = serializers.CharField(max_length=64, required=False, help_text="a label, e.g. production (the "
                                                                               "default when no number is given)")
        endpoint = serializers.CharField(max_length=64, help_text="a model endpoint's name")
        concurrency = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=MAX_CONCURRENCY),
                                            min_length=1, max_length=MAX_LEVELS, required=False,
                                            help_text="levels in the order they are played (default [1, 4, 8, 16])")
        turns_per_level = serializers.IntegerField(min_value=1, max_value=services.MAX_TURNS_PER_LEVEL, default=32)
        seed = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)
        deadline_s = serializers.FloatField(min_value=0.001, max_value=600, required=False, allow_null=True,
                                            help_text="seconds per turn (default: the harness's own)")
        sampling = serializers.DictField(required=False, help_text="temperature (0–2), top_p (0–1), max_tokens")
        name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "LatencyReplayStartInput"

        def validate(self, data):
            if "harness_version" in data and "label" in data:
                raise serializers.ValidationError({"label": ["give a harness version number or a label, not both"]})
            eval_set = EvalSet.objects.filter(name=data["eval_set"]).select_related("pinned").first()
            if eval_set is None:
                raise serializers.ValidationError({"eval_set": [f"no eval set {data['eval_set']!r}"]})
            if "eval_set_version" in data:
                version = eval_set.versions.filter(number=data["eval_set_version"]).first()
            else:
                version = eval_set.pinned or eval_set.versions.order_by("-number").first()
            if version is None:
                raise serializers.ValidationError({"eval_set_version": [f"{eval_set.name} has no such version"]})
            versions = HarnessVersion.objects.select_related("harness").filter(harness__slug=data["harness"])
            if "harness_version" in data:
                harness_version = versions.filter(number=data["harness_version"]).first()
                missing = {"harness_version": [f"{data['harness']} has no version {data['harness_version']}"]}
            else:
                label = Label.objects.filter(harness__slug=data["harness"],
                                             name=data.get("label", "production")).first()
                harness_version = label.version if label is not None else None
                missing = {"label": [f"{data['harness']} has no label {data.get('label', 'production')!r}"]}
            if not versions.exists():
                raise serializers.ValidationError({"harness": [f"no harness {data['harness']!r}"]})
            if harness_version is None:
                raise serializers.ValidationError(missing)
            endpoint = ModelEndpoint.objects.filter(name=data["endpoint"]).first()
            if endpoint is None:
                raise serializers.ValidationError({"endpoint": [f"no model endpoint {data['endpoint']!r}"]})
            return {**data, "eval_set_version": version, "harness_version": harness_version, "endpoint": endpoint}

    @extend_schema(tags=[TAG], operation_id="latency_replay_list",
                   responses={200: LatencyReplayOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return paginated_response(view=self, queryset=selectors.latency_replay_list(),
                                  serializer_class=LatencyReplayOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="latency_replay_start", request=InputSerializer,
                   description="Queue a latency replay on the gpu queue: the set's harness cases played through the "
                               "turn engine at each concurrency level. A bad request is a 400 naming its field "
                               "(``concurrency[1]``, ``sampling.temperature``); nothing is saved then.",
                   responses={201: LatencyReplayOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        replay = services.latency_replay_start(
            user=request.user, eval_set_version=d["eval_set_version"], harness_version=d["harness_version"],
            endpoint=d["endpoint"], concurrency=d.get("concurrency"), turns_per_level=d["turns_per_level"],
            seed=d["seed"], sampling=d.get("sampling"), deadline_s=d.get("deadline_s"), name=d["name"])
        return Response(LatencyReplayOutputSerializer(replay).data, status=status.HTTP_201_CREATED)


class LatencyReplayDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}

    @extend_schema(tags=[TAG], operation_id="latency_replay_retrieve",
                   responses={200: LatencyReplayOutputSerializer, **ERRORS_READ})
    def get(self, request, replay_id):
        return Response(LatencyReplayOutputSerializer(_replay(replay_id)).data)


class LatencyReplayCancelApi(ApiView):
    required_perms = {"POST": roles.RUN_EVAL}

    @extend_schema(tags=[TAG], operation_id="latency_replay_cancel", request=None,
                   description="Cancel a queued replay now, or ask a running one to stop between turns (resumable). "
                               "409 once finished; only the person who started it or an ML lead may (403).",
                   responses={200: LatencyReplayOutputSerializer, **ERRORS_WRITE})
    def post(self, request, replay_id):
        replay = services.latency_replay_cancel(user=request.user, replay=_replay(replay_id))
        return Response(LatencyReplayOutputSerializer(replay).data)


class LatencyReplayResumeApi(ApiView):
    required_perms = {"POST": roles.RUN_EVAL}

    @extend_schema(tags=[TAG], operation_id="latency_replay_resume", request=None,
                   description="Queue a cancelled or failed replay again: it plays the levels it did not finish. 409 "
                               "for any other status; only the person who started it or an ML lead may (403).",
                   responses={200: LatencyReplayOutputSerializer, **ERRORS_WRITE})
    def post(self, request, replay_id):
        replay = services.latency_replay_resume(user=request.user, replay=_replay(replay_id))
        return Response(LatencyReplayOutputSerializer(replay).data)
