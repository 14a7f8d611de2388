"""REST API routes, mounted at /api/ by console.urls (schema at /api/schema/, Swagger UI at /api/docs/)."""

from django.urls import path, re_path
from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from console import signin
from console.apis import AuditListApi, ErrorSerializer, api_not_found
from console.parsing import SafeJSONParser
from harness_editor import apis as harness_apis
from harness_editor import contract_apis
from harness_editor import import_apis as harness_import_apis
from streams import deployment_api_urls, live_api_urls, serving_api_urls
from training_jobs import apis as training_apis
from training_jobs import eval_apis, eval_run_apis


@extend_schema_view(post=extend_schema(
    tags=["auth"], operation_id="auth_token_create",
    description="Exchange a username and password for an API token; send it as 'Authorization: Token <key>'.",
    request=AuthTokenSerializer,
    responses={200: inline_serializer("AuthTokenResponse", {"token": serializers.CharField()}),
               400: ErrorSerializer, 413: ErrorSerializer, 429: ErrorSerializer},
))
class TokenApi(ObtainAuthToken):
    # No authentication to get a token (a stale session or token header must not turn this into a 401/403);
    # bodies through the same safe JSON parser as every other API view.
    authentication_classes: list = []
    parser_classes = [SafeJSONParser, FormParser, MultiPartParser]

    def post(self, request, *args, **kwargs):
        """Password guessing waits like on the login page (console.signin): 429 with Retry-After."""
        username = str(request.data.get("username", "")) if hasattr(request.data, "get") else ""
        wait = signin.signin_retry_after(username, request)
        if wait:
            raise exceptions.Throttled(wait=wait, detail=signin.retry_message(wait))
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():
            signin.signin_failed(username, request)
            raise exceptions.ValidationError(serializer.errors)
        user = serializer.validated_data["user"]
        signin.signin_succeeded(username, request)
        token, _created = Token.objects.get_or_create(user=user)
        return Response({"token": token.key})


H = "harnesses/<slug:slug>/"
V = H + "versions/<int:number>/"
L = H + "labels/<str:name>/"

urlpatterns = [
    path("auth/token/", TokenApi.as_view(), name="api-token"),
    path("harnesses/", harness_apis.HarnessListCreateApi.as_view(), name="api-harness-list"),
    path(H, harness_apis.HarnessDetailApi.as_view(), name="api-harness-detail"),
    path(H + "versions/", harness_apis.VersionListCreateApi.as_view(), name="api-version-list"),
    path(V, harness_apis.VersionDetailApi.as_view(), name="api-version-detail"),
    path(V + "export/", harness_apis.VersionExportApi.as_view(), name="api-version-export"),
    path(V + "submit", harness_apis.VersionSubmitApi.as_view(), name="api-version-submit"),
    path(V + "approve", harness_apis.VersionApproveApi.as_view(), name="api-version-approve"),
    path(V + "gate", harness_apis.VersionGateApi.as_view(), name="api-version-gate"),
    path(V + "reject", harness_apis.VersionRejectApi.as_view(), name="api-version-reject"),
    path(V + "render", harness_apis.VersionRenderApi.as_view(), name="api-version-render"),
    path(H + "diff/", harness_apis.HarnessDiffApi.as_view(), name="api-harness-diff"),
    path(H + "import-tools", harness_import_apis.HarnessImportToolsApi.as_view(), name="api-harness-import-tools"),
    path(H + "labels/", harness_apis.LabelListApi.as_view(), name="api-label-list"),
    path(L, harness_apis.LabelDetailApi.as_view(), name="api-label-detail"),
    path(L + "rollback", harness_apis.LabelRollbackApi.as_view(), name="api-label-rollback"),
    path(L + "history", harness_apis.LabelHistoryApi.as_view(), name="api-label-history"),
    path("audit/", AuditListApi.as_view(), name="api-audit"),
    path("validate", harness_apis.ValidateApi.as_view(), name="api-validate"),
    path("review-checklist", harness_apis.ReviewChecklistApi.as_view(), name="api-review-checklist"),
    path("manifest-schema", contract_apis.ManifestSchemaApi.as_view(), name="api-manifest-schema"),
    path("bindings", contract_apis.BindingListApi.as_view(), name="api-binding-list"),
    path("datasets/", training_apis.DatasetListCreateApi.as_view(), name="api-dataset-list"),
    path("model-endpoints/", training_apis.ModelEndpointListApi.as_view(), name="api-model-endpoint-list"),
    path("datasets/<uuid:dataset_id>/", training_apis.DatasetDetailApi.as_view(), name="api-dataset-detail"),
    path("datasets/<uuid:dataset_id>/cancel", training_apis.DatasetCancelApi.as_view(), name="api-dataset-cancel"),
    path("datasets/<uuid:dataset_id>/samples/", training_apis.DatasetSampleListApi.as_view(),
         name="api-dataset-samples"),
    path("training-jobs/", training_apis.TrainingJobListCreateApi.as_view(), name="api-training-job-list"),
    path("training-jobs/<uuid:job_id>/", training_apis.TrainingJobDetailApi.as_view(), name="api-training-job-detail"),
    path("training-jobs/<uuid:job_id>/cancel/", training_apis.TrainingJobCancelApi.as_view(),
         name="api-training-job-cancel"),
    path("training-jobs/<uuid:job_id>/resume/", training_apis.TrainingJobResumeApi.as_view(),
         name="api-training-job-resume"),
    path("models/", training_apis.TrainedModelListApi.as_view(), name="api-model-list"),
    path("models/<uuid:model_id>/", training_apis.TrainedModelDetailApi.as_view(), name="api-model-detail"),
]
ES = "eval-sets/<slug:eval_set>/"
ESV = ES + "versions/<int:number>/"
urlpatterns += [
    path("eval-sets/", eval_apis.EvalSetListApi.as_view(), name="api-eval-set-list"),
    path(ES, eval_apis.EvalSetDetailApi.as_view(), name="api-eval-set-detail"),
    path(ES + "pin", eval_apis.EvalSetPinApi.as_view(), name="api-eval-set-pin"),
    path(ESV, eval_apis.EvalSetVersionDetailApi.as_view(), name="api-eval-set-version-detail"),
    path(ESV + "export", eval_apis.EvalSetExportApi.as_view(), name="api-eval-set-version-export"),
    path(ESV + "cases/", eval_apis.EvalCaseListApi.as_view(), name="api-eval-case-list"),
    path(ESV + "cases/<str:case_id>/", eval_apis.EvalCaseDetailApi.as_view(), name="api-eval-case-detail"),
    path("eval-cases/from-turn", eval_apis.EvalCaseFromTurnApi.as_view(), name="api-eval-case-from-turn"),
]
from training_jobs import latency_apis  # noqa: E402

LR = "latency-replays/<uuid:replay_id>/"
urlpatterns += [
    path("latency-replays/", latency_apis.LatencyReplayListApi.as_view(), name="api-latency-replay-list"),
    path(LR, latency_apis.LatencyReplayDetailApi.as_view(), name="api-latency-replay-detail"),
    path(LR + "cancel/", latency_apis.LatencyReplayCancelApi.as_view(), name="api-latency-replay-cancel"),
    path(LR + "resume/", latency_apis.LatencyReplayResumeApi.as_view(), name="api-latency-replay-resume"),
]
ER = "eval-runs/<uuid:run_id>/"
urlpatterns += [
    path("eval-runs/", eval_run_apis.EvalRunListCreateApi.as_view(), name="api-eval-run-list"),
    path("eval-runs/compare/", eval_run_apis.EvalCompareApi.as_view(), name="api-eval-run-compare"),
    path(ER, eval_run_apis.EvalRunDetailApi.as_view(), name="api-eval-run-detail"),
    path(ER + "cancel/", eval_run_apis.EvalRunCancelApi.as_view(), name="api-eval-run-cancel"),
    path(ER + "resume/", eval_run_apis.EvalRunResumeApi.as_view(), name="api-eval-run-resume"),
    path(ER + "results/", eval_run_apis.EvalResultListApi.as_view(), name="api-eval-run-results"),
    path(ER + "cases/<str:case_id>/", eval_run_apis.EvalRunCaseApi.as_view(), name="api-eval-run-case"),
]
from training_jobs import label_apis  # noqa: E402

urlpatterns += [
    path(ER + "labels/", label_apis.LabelListCreateApi.as_view(), name="api-eval-run-labels"),
    path(ER + "labels/sample/", label_apis.LabelSampleApi.as_view(), name="api-eval-run-label-sample"),
    path(ER + "agreement/", label_apis.RunAgreementApi.as_view(), name="api-eval-run-agreement"),
    path(ES + "agreement/", label_apis.SetAgreementApi.as_view(), name="api-eval-set-agreement"),
]
from streams import mcp_import_apis  # noqa: E402

urlpatterns += [
    path("mcp-servers/", mcp_import_apis.McpServerListApi.as_view(), name="api-mcp-server-list"),
    path(V + "mcp-import", mcp_import_apis.McpImportApi.as_view(), name="api-version-mcp-import"),
]
# live sessions, deployments and serving: their own route modules
urlpatterns += [*live_api_urls.urlpatterns, *deployment_api_urls.urlpatterns, *serving_api_urls.urlpatterns]

from training_jobs import reproduce_apis  # noqa: E402

RP = "reproductions/<uuid:run_id>/"
urlpatterns += [
    path("reproductions/", reproduce_apis.ReproductionListApi.as_view(), name="api-reproduction-list"),
    path("reproductions/committed/", reproduce_apis.ReproductionCommittedApi.as_view(),
         name="api-reproduction-committed"),
    path(RP, reproduce_apis.ReproductionDetailApi.as_view(), name="api-reproduction-detail"),
    path(RP + "cancel/", reproduce_apis.ReproductionCancelApi.as_view(), name="api-reproduction-cancel"),
]

# Last: every other /api/ address answers the API's JSON 404, never the HTML page.
urlpatterns.append(re_path(r"", api_not_found, name="api-not-found"))

