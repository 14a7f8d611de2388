"""REST API of the HAT reproduction runs (mounted at /api/ by console.api_urls): list and start runs, one run with
its table and claims, cancel, and the committed result.

Thin views, HackSoft style: the input serializer checks the shape (an unknown base or budget, a seed out of range
is a 400 on its field), the service does the rest (a base that is not built: a 400 on ``base`` naming its folder);
nothing is saved then.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, Pagination, paginated_response
from training_jobs import reproduce_selectors as selectors
from training_jobs import reproduce_services as services
from training_jobs.hat.config import MAX_SEED
from training_jobs.reproduce.budgets import BASE_NAMES, BUDGET_NAMES
from training_jobs.reproduce_models import ReproductionRun

TAG = "reproductions"


@extend_schema_field({"type": "object", "additionalProperties": True, "nullable": True,
                      "description": "the run's folder as results.json holds it: present, table (columns, rows "
                                     "with every cell and its interval, reference rows, sources), claims, plots, "
                                     "results (budget, k, serving, sets), files, problems; null while it runs"})
class ReportField(serializers.JSONField):
    pass


class ReproductionOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    base = serializers.ChoiceField(choices=BASE_NAMES)
    budget = serializers.ChoiceField(choices=BUDGET_NAMES)
    seed = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ReproductionRun.Status.choices)
    stage = serializers.CharField()
    progress_done = serializers.IntegerField()
    progress_total = serializers.IntegerField()
    percent = serializers.IntegerField()
    out_dir = serializers.CharField()
    git_commit = serializers.CharField()
    wall_s = serializers.DictField()
    claims = serializers.ListField(child=serializers.DictField())
    provenance = serializers.DictField()
    error = serializers.CharField()
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "ReproductionRun"


class ReproductionDetailSerializer(ReproductionOutputSerializer):
    report = ReportField(help_text="null while the run is active")

    class Meta:
        ref_name = "ReproductionRunDetail"


def _run(run_id) -> ReproductionRun:
    try:
        return selectors.reproduction_get(run_id=run_id)
    except ReproductionRun.DoesNotExist:
        raise exceptions.NotFound("no such reproduction run") from None


def _detail(run: ReproductionRun) -> dict:
    run.report = None if run.is_active else selectors.folder_report(run.out_dir)
    return ReproductionDetailSerializer(run).data


class ReproductionListApi(ApiView):
    required_perms = {"GET": roles.VIEW_TRAINING, "POST": roles.RUN_TRAINING}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        base = serializers.ChoiceField(choices=BASE_NAMES, help_text="tiny: models/demo-tiny; smol: "
                                                                     "models/smollm2-135m")
        budget = serializers.ChoiceField(choices=BUDGET_NAMES, help_text="smoke, cpu or gpu")
        seed = serializers.IntegerField(min_value=0, max_value=MAX_SEED, default=0)

        class Meta:
            ref_name = "ReproductionStartInput"

    @extend_schema(tags=[TAG], operation_id="reproduction_list",
                   responses={200: ReproductionOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return paginated_response(view=self, queryset=selectors.reproduction_list(),
                                  serializer_class=ReproductionOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="reproduction_start", request=InputSerializer,
                   description="Queue a reproduction run (manage.py reproduce_hat) on the gpu queue. A bad request is "
                               "a 400 naming its field (``base`` also when the base is not built); nothing is saved.",
                   responses={201: ReproductionOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        run = services.reproduction_start(user=request.user, base=d["base"], budget=d["budget"], seed=d["seed"])
        return Response(ReproductionOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class ReproductionDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_TRAINING}

    @extend_schema(tags=[TAG], operation_id="reproduction_retrieve",
                   responses={200: ReproductionDetailSerializer, **ERRORS_READ})
    def get(self, request, run_id):
        return Response(_detail(_run(run_id)))


class ReproductionCancelApi(ApiView):
    required_perms = {"POST": roles.RUN_TRAINING}

    @extend_schema(tags=[TAG], operation_id="reproduction_cancel", request=None,
                   description="Cancel a queued run now, or ask a running one to stop at its next log line. 409 once "
                               "finished; only the person who started it or an ML lead may (403).",
                   responses={200: ReproductionOutputSerializer, **ERRORS_WRITE})
    def post(self, request, run_id):
        run = services.reproduction_cancel(user=request.user, run=_run(run_id))
        return Response(ReproductionOutputSerializer(run).data)


class ReproductionCommittedApi(ApiView):
    required_perms = {"GET": roles.VIEW_TRAINING}

    @extend_schema(tags=[TAG], operation_id="reproduction_committed", request=None,
                   description="The committed result (results/hat-miniature): its table, claims, plots and run.json; "
                               "404 until it is committed.",
                   responses={200: OpenApiTypes.OBJECT, **ERRORS_READ})
    def get(self, request):
        folder = selectors.committed_dir()
        if folder is None:
            raise exceptions.NotFound("no committed reproduction result (results/hat-miniature/results.json)")
        report = selectors.folder_report(folder)
        report["folder"] = "results/hat-miniature"
        return Response(report)
