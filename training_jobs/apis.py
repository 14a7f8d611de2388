"""REST API of the dataset jobs (mounted at /api/ by console.api_urls): list and launch builds, read one,
cancel it, and page through a finished dataset's rows.

Thin views, HackSoft style: the input serializer checks the shape, :func:`training_jobs.services.validate_build`
the recipe and the sources (400 with located errors: ``recipe.operators[2].probability``), one service or
selector does the rest.
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
from training_jobs.models import Dataset

TAG = "datasets"


def _dataset(dataset_id) -> Dataset:
    try:
        return selectors.dataset_get(dataset_id=dataset_id)
    except Dataset.DoesNotExist:
        raise exceptions.NotFound(f"no dataset {dataset_id}") from None


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "an HSA recipe (training_jobs.hsa.dataset.Recipe): name, seed, "
                                     "variants_per_sample, operators [{name, probability, settings}], names, "
                                     "harness_pool_size, progress_every"})
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
                                            "seconds, operators {name: {applied, dropped, mean_prompt_tokens}}")
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


class DatasetCancelApi(ApiView):
    required_perms = {"POST": roles.BUILD_DATASET}

    @extend_schema(tags=[TAG], operation_id="dataset_cancel", request=None,
                   description="Cancel a queued build now, or ask a running one to stop (409 once finished).",
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
