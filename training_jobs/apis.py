"""REST API of the dataset jobs (mounted at /api/ by console.api_urls): list and launch builds, read one,
cancel it, and page through a finished dataset's rows. Training jobs: list and launch, read one with its
progress points, cancel and resume (409 when the status does not allow it). The model registry: list, and one
model with its lineage.

Thin views, HackSoft style: the input serializer checks the shape, :func:`training_jobs.services.validate_build`
the recipe and the sources (400 with located errors: ``recipe.operators[2].probability``), and
:func:`training_jobs.services.validate_training` a training request (``config.max_steps``, ``dataset``), one
service or selector does the rest.
"""

from __future__ import annotations

import json

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, Pagination, paginated_response
from training_jobs import selectors, services
from training_jobs.models import Dataset, TrainedModel, TrainingJob

TAG = "datasets"


def _dataset(dataset_id) -> Dataset:
    try:
        return selectors.dataset_get(dataset_id=dataset_id)
    except Dataset.DoesNotExist:
        raise exceptions.NotFound(f"no dataset {dataset_id}") from None


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "an HSA recipe (training_jobs.hsa.dataset.Recipe): name, seed, "
                                     "variants_per_sample, operators [{name, probability, settings}], names, "
                                     "harness_pool_size, progress_every, label_mode ('mechanical' or "
                                     "'regenerate'), teacher and judge (names of model endpoints, "
                                     "GET /api/model-endpoints/; never a URL or a key), regenerate"})
class RecipeField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "where the samples come from (training_jobs.schemas.Sources): scenarios, "
                                     "demo_manifests, versions ['slug@number'], tiny_gold, tiny_gold_seed, "
                                     "max_samples"})
class SourcesField(serializers.JSONField):
    pass


class DatasetOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Dataset.Kind.choices)
    status = serializers.ChoiceField(choices=Dataset.Status.choices)
    stage = serializers.CharField()
    progress_done = serializers.IntegerField()
    progress_total = serializers.IntegerField()
    cancel_requested = serializers.BooleanField()
    error = serializers.CharField()
    split = serializers.CharField()
    recipe = RecipeField()
    sources = SourcesField()
    baseline_of = serializers.UUIDField(source="baseline_of_id", allow_null=True)
    stats = serializers.JSONField(help_text="rows, dropped, drop_reasons, harness_variants, mean_prompt_tokens, "
                                            "seconds, operators {name: {applied, skipped, dropped, kept, mean_prompt_tokens}}")
    sample_count = serializers.IntegerField()
    row_counts = serializers.DictField(child=serializers.IntegerField(), help_text="rows per split")
    artifact_path = serializers.CharField(help_text="the dataset folder (datasets.load_from_disk(<path>/dataset))")
    ready = serializers.BooleanField(source="is_ready", help_text="succeeded and on disk: usable for training")
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "Dataset"


class DatasetListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_DATASETS, "POST": roles.BUILD_DATASET}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(required=False, allow_blank=True, default="", max_length=120)
        kind = serializers.ChoiceField(choices=Dataset.Kind.choices, default=Dataset.Kind.HSA)
        recipe = RecipeField(required=False, default=dict)
        sources = SourcesField(required=False, default=dict)
        with_baseline = serializers.BooleanField(required=False, default=False,
                                                 help_text="also build the fixed-harness baseline from the same "
                                                           "samples")

        class Meta:
            ref_name = "DatasetCreateInput"

    @extend_schema(tags=[TAG], operation_id="dataset_list",
                   parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=Dataset.Status.values),
                               OpenApiParameter("kind", OpenApiTypes.STR, enum=Dataset.Kind.values)],
                   responses={200: DatasetOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        qs = selectors.dataset_list(status=request.query_params.get("status") or None,
                                    kind=request.query_params.get("kind") or None)
        return paginated_response(view=self, queryset=qs, serializer_class=DatasetOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="dataset_create", request=InputSerializer,
                   description="Queue a dataset build (and, with with_baseline, its fixed-harness baseline). "
                               "An invalid recipe or source selection is a 400 naming each field's path; nothing "
                               "is saved then.",
                   responses={201: DatasetOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        dataset = services.dataset_build_start(user=request.user, kind=d["kind"], recipe=d["recipe"],
                                               sources=d["sources"], name=d["name"],
                                               with_baseline=d["with_baseline"])
        return Response(DatasetOutputSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_DATASETS}

    @extend_schema(tags=[TAG], operation_id="dataset_retrieve", responses={200: DatasetOutputSerializer,
                                                                           **ERRORS_READ})
    def get(self, request, dataset_id):
        return Response(DatasetOutputSerializer(_dataset(dataset_id)).data)


class ModelEndpointOutputSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="what a recipe's teacher / judge names")
    model = serializers.CharField()
    kind = serializers.CharField()
    base_url = serializers.CharField()
    is_default = serializers.BooleanField()
    usable = serializers.BooleanField(help_text="passes the outbound check (HAT_OUTBOUND_HOSTS) now")

    class Meta:
        ref_name = "ModelEndpoint"


class ModelEndpointListApi(ApiView):
    """The model endpoints administrators created, by name: what a recipe's teacher and judge may name. Their
    secrets (names and values) are never shown here."""

    required_perms = {"GET": roles.VIEW_DATASETS}

    @extend_schema(tags=[TAG], operation_id="model_endpoint_list",
                   responses={200: ModelEndpointOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return Response(ModelEndpointOutputSerializer(selectors.model_endpoints(), many=True).data)


class DatasetCancelApi(ApiView):
    required_perms = {"POST": roles.BUILD_DATASET}

    @extend_schema(tags=[TAG], operation_id="dataset_cancel", request=None,
                   description="Cancel a queued build now, or ask a running one to stop (409 once finished). Only the "
                               "person who started it or an ML lead may (403 otherwise).",
                   responses={200: DatasetOutputSerializer, **ERRORS_WRITE})
    def post(self, request, dataset_id):
        dataset = services.dataset_cancel(user=request.user, dataset=_dataset(dataset_id))
        return Response(DatasetOutputSerializer(dataset).data)


class SamplePagination(LimitOffsetPagination):
    default_limit = 20
    max_limit = 200


class DatasetSampleListApi(ApiView):
    required_perms = {"GET": roles.VIEW_DATASETS}
    pagination_class = SamplePagination

    class OutputSerializer(serializers.Serializer):
        index = serializers.IntegerField()
        sample_id = serializers.CharField()
        variant = serializers.IntegerField()
        operators = serializers.ListField(child=serializers.CharField())
        harness_hash = serializers.CharField()
        source = serializers.CharField()
        messages = serializers.ListField(child=serializers.DictField(), help_text="TRL conversational messages "
                                         "(tool-call arguments are JSON strings)")
        tools = serializers.SerializerMethodField()

        class Meta:
            ref_name = "DatasetSample"

        @extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": True}})
        def get_tools(self, row) -> list:
            tools = row.get("tools")
            return json.loads(tools) if isinstance(tools, str) else (tools or [])

    @extend_schema(tags=[TAG], operation_id="dataset_sample_list",
                   description="The rows of a dataset (empty until it succeeded).",
                   responses={200: OutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, dataset_id):
        dataset = _dataset(dataset_id)
        paginator = SamplePagination()
        page = paginator.paginate_queryset(selectors.dataset_rows(dataset=dataset), request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)


# --- training jobs --------------------------------------------------------------------------------------------

TRAINING_TAG = "training"
MODELS_TAG = "models"


def _training_job(job_id) -> TrainingJob:
    try:
        return selectors.training_job_get(job_id=job_id)
    except TrainingJob.DoesNotExist:
        raise exceptions.NotFound(f"no training job {job_id}") from None


def _trained_model(model_id) -> TrainedModel:
    try:
        return selectors.model_get(model_id=model_id)
    except TrainedModel.DoesNotExist:
        raise exceptions.NotFound(f"no model {model_id}") from None


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "the config of the job's kind (training_jobs.hat.config): SFTStageConfig for "
                                     "sft and baseline_sft (max_steps, per_device_batch_size, learning_rate, "
                                     "lr_scheduler, warmup_ratio, save_steps, max_length, device, bf16, threads, "
                                     "seed, lora {r, alpha, dropout, target_modules}, …), DistillStageConfig, "
                                     "RLStageConfig, PipelineConfig {sft, distill, rl}; omitted fields take their "
                                     "defaults"})
class StageConfigField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "a progress point: step, max_steps, loss, learning_rate, grad_norm, num_tokens, "
                                     "tokens_per_s, samples_per_s, eta_s, t (unix time), and whatever else the "
                                     "trainer logged"})
class ProgressPointField(serializers.JSONField):
    pass


# Named enum components: the schema's enum hook would otherwise find several "kind" and "status" fields with
# different values (datasets, harness versions) and warn about the names it had to make up.
@extend_schema_field(serializers.ChoiceField(choices=TrainingJob.Kind.choices), component_name="TrainingJobKind")
class TrainingJobKindField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=TrainingJob.Kind.choices, **kwargs)


@extend_schema_field(serializers.ChoiceField(choices=TrainingJob.Status.choices), component_name="TrainingJobStatus")
class TrainingJobStatusField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=TrainingJob.Status.choices, **kwargs)


@extend_schema_field(serializers.ChoiceField(choices=TrainedModel.Kind.choices), component_name="TrainedModelKind")
class TrainedModelKindField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=TrainedModel.Kind.choices, **kwargs)


class TrainingJobOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    kind = TrainingJobKindField()
    status = TrainingJobStatusField()
    stage = serializers.CharField(help_text="what a running job is doing now")
    progress_done = serializers.IntegerField(help_text="steps done, across the stages")
    progress_total = serializers.IntegerField()
    percent = serializers.IntegerField()
    cancel_requested = serializers.BooleanField()
    can_resume = serializers.BooleanField(help_text="cancelled or failed: POST …/resume/ continues from the latest "
                                                    "checkpoint")
    resumes = serializers.IntegerField(help_text="times the job was resumed")
    config = StageConfigField()
    dataset = serializers.UUIDField(source="dataset_id", allow_null=True)
    base_model = serializers.UUIDField(source="base_model_id")
    model = serializers.SerializerMethodField(help_text="the model the job registered (once succeeded)")
    latest = ProgressPointField(help_text="the latest progress point")
    worker_host = serializers.CharField()
    error = serializers.CharField()
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "TrainingJob"

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_model(self, job: TrainingJob) -> str | None:
        return (job.result or {}).get("model")


class TrainingJobDetailSerializer(TrainingJobOutputSerializer):
    metrics = serializers.ListField(child=ProgressPointField(), help_text="every progress point, oldest first "
                                                                          "(thinned beyond 2,000)")
    log_tail = serializers.CharField(help_text="the last lines of the job's log")
    result = serializers.JSONField(help_text="the stage result: steps, metrics, directories, model")
    output_dir = serializers.CharField(help_text="where its checkpoints are")

    class Meta:
        ref_name = "TrainingJobDetail"


class TrainingJobListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_TRAINING, "POST": roles.RUN_TRAINING}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(required=False, allow_blank=True, default="", max_length=120,
                                     help_text="default: '<kind> on <dataset>'")
        kind = TrainingJobKindField(default=TrainingJob.Kind.SFT,
                                    help_text="sft trains on an HSA dataset, baseline_sft on a fixed-harness one")
        dataset = serializers.UUIDField(required=False, allow_null=True, default=None,
                                        help_text="a ready dataset of the matching kind (sft: HSA, baseline_sft: "
                                                  "fixed-harness)")
        base_model = serializers.UUIDField(help_text="the registry model the job starts from")
        config = StageConfigField(required=False, default=dict)
        evaluate = serializers.JSONField(
            required=False, default=list,
            help_text="evaluations of the job's last model, queued when it succeeds: [{\"eval_set\": NAME, "
                      "\"harness\": \"SLUG@LABEL\" (not for T4), \"max_cases\": N, \"k\": K}]")

        class Meta:
            ref_name = "TrainingJobCreateInput"

    @extend_schema(tags=[TRAINING_TAG], operation_id="training_job_list",
                   parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=TrainingJob.Status.values),
                               OpenApiParameter("kind", OpenApiTypes.STR, enum=TrainingJob.Kind.values)],
                   responses={200: TrainingJobOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        qs = selectors.training_job_list(status=request.query_params.get("status") or None,
                                         kind=request.query_params.get("kind") or None)
        return paginated_response(view=self, queryset=qs, serializer_class=TrainingJobOutputSerializer)

    @extend_schema(tags=[TRAINING_TAG], operation_id="training_job_create", request=InputSerializer,
                   description="Queue a training job on the gpu queue. An invalid config, dataset or base model is a "
                               "400 naming each problem's path (config.max_steps, dataset, base_model); nothing is "
                               "saved then.",
                   responses={201: TrainingJobDetailSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        job = services.training_job_start(user=request.user, kind=d["kind"], config=d["config"],
                                          dataset_id=d["dataset"], base_model_id=d["base_model"], name=d["name"],
                                          evaluate=d["evaluate"])
        return Response(TrainingJobDetailSerializer(job).data, status=status.HTTP_201_CREATED)


class TrainingJobDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_TRAINING}

    @extend_schema(tags=[TRAINING_TAG], operation_id="training_job_retrieve",
                   responses={200: TrainingJobDetailSerializer, **ERRORS_READ})
    def get(self, request, job_id):
        return Response(TrainingJobDetailSerializer(_training_job(job_id)).data)


class TrainingJobCancelApi(ApiView):
    required_perms = {"POST": roles.RUN_TRAINING}

    @extend_schema(tags=[TRAINING_TAG], operation_id="training_job_cancel", request=None,
                   description="Cancel a queued job now, or ask a running one to stop: it saves a checkpoint and ends "
                               "cancelled (resumable). 409 once finished. Only the person who started it or an ML "
                               "lead may (403 otherwise).",
                   responses={200: TrainingJobDetailSerializer, **ERRORS_WRITE})
    def post(self, request, job_id):
        job = services.training_job_cancel(user=request.user, job=_training_job(job_id))
        return Response(TrainingJobDetailSerializer(job).data)


class TrainingJobResumeApi(ApiView):
    required_perms = {"POST": roles.RUN_TRAINING}

    @extend_schema(tags=[TRAINING_TAG], operation_id="training_job_resume", request=None,
                   description="Queue a cancelled or failed job again; it continues from its latest checkpoint. 409 "
                               "for any other status. Only the person who started it or an ML lead may (403 "
                               "otherwise).",
                   responses={200: TrainingJobDetailSerializer, **ERRORS_WRITE})
    def post(self, request, job_id):
        job = services.training_job_resume(user=request.user, job=_training_job(job_id))
        return Response(TrainingJobDetailSerializer(job).data)


# --- the model registry ------------------------------------------------------------------------------------------


class ModelRefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    kind = TrainedModelKindField()
    is_adapter = serializers.BooleanField()

    class Meta:
        ref_name = "ModelRef"


class TrainedModelOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    kind = TrainedModelKindField()
    path = serializers.CharField(help_text="the model directory (what a server loads)")
    parent = serializers.UUIDField(source="parent_id", allow_null=True, help_text="the model it was trained from")
    is_adapter = serializers.BooleanField(help_text="a LoRA adapter of its parent (not merged), loaded into a vLLM "
                                                    "server that serves the parent")
    job = serializers.UUIDField(source="job_id", allow_null=True, help_text="the training job that made it")
    dataset = serializers.UUIDField(source="dataset_id", allow_null=True)
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()

    class Meta:
        ref_name = "TrainedModel"


class TrainedModelDetailSerializer(TrainedModelOutputSerializer):
    lineage = ModelRefSerializer(many=True, help_text="base first, this model last")
    config = StageConfigField(help_text="the stage config (snapshot)")
    metrics = serializers.JSONField(help_text="final metrics of the stage")
    recipe = RecipeField(help_text="the dataset's recipe (snapshot)")
    vllm_command = serializers.CharField(help_text="how to serve this model with vLLM on a GPU host")
    endpoint = serializers.CharField(source="endpoint.name", allow_null=True, default=None,
                                     help_text="the model endpoint of its local server, while one serves it")

    class Meta:
        ref_name = "TrainedModelDetail"


class TrainedModelListApi(ApiView):
    required_perms = {"GET": roles.VIEW_MODELS}
    pagination_class = Pagination

    @extend_schema(tags=[MODELS_TAG], operation_id="model_list",
                   parameters=[OpenApiParameter("kind", OpenApiTypes.STR, enum=TrainedModel.Kind.values)],
                   responses={200: TrainedModelOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        qs = selectors.model_list(kind=request.query_params.get("kind") or None)
        return paginated_response(view=self, queryset=qs, serializer_class=TrainedModelOutputSerializer)


class TrainedModelDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_MODELS}

    @extend_schema(tags=[MODELS_TAG], operation_id="model_retrieve",
                   responses={200: TrainedModelDetailSerializer, **ERRORS_READ})
    def get(self, request, model_id):
        return Response(TrainedModelDetailSerializer(_trained_model(model_id)).data)
