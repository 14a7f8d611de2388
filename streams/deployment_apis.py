"""REST API of deployments (mounted at /api/ by console.api_urls): list and create, read one (in force, the
proposal waiting with its field-by-field diff, revisions), propose a change, approve / reject / withdraw a revision
and roll back.

Thin views, HackSoft style: the input serializer checks the shape; :mod:`streams.services.deployments` resolves
names (harness, serve profile, endpoints) and owns every rule, answering 400 with located errors (``endpoints[1]``,
``adapter``), 403 for four eyes, 409 for a revision that is not proposed or a second proposal. Nothing is half-saved.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView
from streams import deployment_selectors as selectors
from streams.models import Deployment, DeploymentRevision
from streams.services import deployments as services

TAG = "deployments"


def _deployment(name: str) -> Deployment:
    try:
        return selectors.deployment_get(name=name)
    except Deployment.DoesNotExist:
        raise exceptions.NotFound(f"no deployment '{name}'") from None


def _revision(deployment: Deployment, number: int) -> DeploymentRevision:
    try:
        return selectors.revision_get(deployment, number)
    except DeploymentRevision.DoesNotExist:
        raise exceptions.NotFound(f"{deployment.name} has no revision {number}") from None


# --- output --------------------------------------------------------------------------------------------------------


@extend_schema_field(serializers.ChoiceField(choices=DeploymentRevision.Status.choices),
                     component_name="DeploymentRevisionStatus")
class RevisionStatusField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=DeploymentRevision.Status.choices, **kwargs)


class RevisionOutputSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    status = RevisionStatusField()
    label = serializers.CharField()
    harness_version = serializers.IntegerField(source="harness_version.number",
                                               help_text="where the label pointed when approved (proposed: when "
                                                         "proposed; approval records it again)")
    model = serializers.UUIDField(source="model_id", allow_null=True)
    model_name = serializers.CharField(source="model.name", allow_null=True, default=None)
    adapter = serializers.UUIDField(source="adapter_id", allow_null=True)
    adapter_name = serializers.CharField(source="adapter.name", allow_null=True, default=None)
    serve_profile = serializers.CharField(source="serve_profile.name")
    endpoints = serializers.SerializerMethodField()
    note = serializers.CharField()
    proposed_by = serializers.CharField(source="proposed_by.username")
    proposed_at = serializers.DateTimeField()
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True, default=None)
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_comment = serializers.CharField()

    class Meta:
        ref_name = "DeploymentRevision"

    @extend_schema_field(serializers.ListField(child=serializers.CharField(),
                                               help_text="endpoint names in failover order"))
    def get_endpoints(self, revision: DeploymentRevision) -> list[str]:
        return selectors.endpoint_names(revision.endpoints)


class DiffRowSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="label, harness version, model, adapter, serve profile, endpoints")
    before = serializers.CharField(allow_null=True)
    after = serializers.CharField(allow_null=True)
    changed = serializers.BooleanField()

    class Meta:
        ref_name = "DeploymentDiffRow"


class LiveSessionRefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()

    class Meta:
        ref_name = "LiveSessionRef"


class InForceSerializer(serializers.Serializer):
    revision = serializers.IntegerField(source="revision.number")
    label = serializers.CharField()
    version = serializers.IntegerField(source="version.number", allow_null=True, default=None,
                                       help_text="where the label points now (the next turn's version)")
    recorded_version = serializers.IntegerField(source="recorded_version.number",
                                                help_text="where it pointed when the revision was approved")
    model = serializers.CharField(source="model.name", allow_null=True, default=None)
    adapter = serializers.CharField(source="adapter.name", allow_null=True, default=None)
    serve_profile = serializers.CharField(source="profile.name")
    endpoints = serializers.ListField(child=serializers.CharField())

    class Meta:
        ref_name = "DeploymentInForce"


class DeploymentOutputSerializer(serializers.Serializer):
    name = serializers.SlugField(source="deployment.name")
    title = serializers.CharField(source="deployment.title")
    harness = serializers.SlugField(source="deployment.harness.slug")
    created_by = serializers.CharField(source="deployment.created_by.username")
    created_at = serializers.DateTimeField(source="deployment.created_at")
    in_force = serializers.SerializerMethodField()
    pending = serializers.IntegerField(source="pending.number", allow_null=True, default=None,
                                       help_text="the revision waiting for review")
    live_sessions = LiveSessionRefSerializer(many=True, source="sessions")

    class Meta:
        ref_name = "Deployment"

    @extend_schema_field(InForceSerializer(allow_null=True))
    def get_in_force(self, summary: dict) -> dict | None:
        return InForceSerializer(summary).data if summary["revision"] else None


class DeploymentDetailSerializer(DeploymentOutputSerializer):
    pending_diff = DiffRowSerializer(many=True, allow_null=True,
                                     help_text="what approving the pending revision changes, field by field")
    rollback_to = serializers.IntegerField(allow_null=True, help_text="the revision a rollback puts back in force")
    revisions = RevisionOutputSerializer(many=True)

    class Meta:
        ref_name = "DeploymentDetail"


class RevisionDetailSerializer(RevisionOutputSerializer):
    diff = DiffRowSerializer(many=True, help_text="against the revision in force")

    class Meta:
        ref_name = "DeploymentRevisionDetail"


def _detail(deployment: Deployment, status_code: int = status.HTTP_200_OK) -> Response:
    deployment = selectors.deployment_get(name=deployment.name)
    summary = selectors.deployment_summary(deployment)
    target = services.rollback_target(deployment)
    data: dict[str, Any] = {
        **summary,
        "pending_diff": (selectors.revision_diff(in_force=summary["revision"], proposed=summary["pending"])
                         if summary["pending"] else None),
        "rollback_to": target.number if target else None,
        "revisions": list(selectors.revision_list(deployment)[:100]),
    }
    return Response(DeploymentDetailSerializer(data).data, status=status_code)


def _revision_response(revision: DeploymentRevision, status_code: int = status.HTTP_200_OK) -> Response:
    revision = selectors.revision_get(revision.deployment, revision.number)
    revision.diff = selectors.revision_diff(in_force=revision.deployment.current_revision, proposed=revision)
    return Response(RevisionDetailSerializer(revision).data, status=status_code)


# --- input ---------------------------------------------------------------------------------------------------------


class RevisionInputSerializer(serializers.Serializer):
    label = serializers.CharField(max_length=64, help_text="the harness label whose version is served")
    serve_profile = serializers.CharField(max_length=64, help_text="a serve profile's name")
    endpoints = serializers.ListField(child=serializers.CharField(max_length=64), max_length=8,
                                      help_text="model endpoint names in failover order (the first is the primary)")
    model = serializers.UUIDField(required=False, allow_null=True, default=None, help_text="a registered model")
    adapter = serializers.UUIDField(required=False, allow_null=True, default=None,
                                    help_text="a LoRA adapter of the model (the profile must enable LoRA)")
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)

    class Meta:
        ref_name = "DeploymentRevisionInput"


class DeploymentCreateInputSerializer(RevisionInputSerializer):
    name = serializers.SlugField(max_length=64)
    title = serializers.CharField(required=False, allow_blank=True, default="", max_length=120)
    harness = serializers.SlugField(max_length=64, help_text="the harness's slug")

    class Meta:
        ref_name = "DeploymentCreateInput"


class ProposeInputSerializer(serializers.Serializer):
    """Only what changes; the rest is taken from the revision in force."""

    label = serializers.CharField(required=False, max_length=64)
    serve_profile = serializers.CharField(required=False, max_length=64)
    endpoints = serializers.ListField(required=False, child=serializers.CharField(max_length=64), max_length=8)
    model = serializers.UUIDField(required=False, allow_null=True, help_text="null: no model named")
    adapter = serializers.UUIDField(required=False, allow_null=True, help_text="null: no adapter")
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)

    class Meta:
        ref_name = "DeploymentProposeInput"


class CommentInputSerializer(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)

    class Meta:
        ref_name = "DeploymentCommentInput"


class ReasonInputSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=4000, help_text="why (required): on the timeline with the live "
                                                               "sessions it affected")

    class Meta:
        ref_name = "DeploymentRollbackInput"


def _valid(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- views ---------------------------------------------------------------------------------------------------------


class DeploymentListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_DEPLOYMENTS, "POST": roles.PROPOSE_DEPLOYMENT}

    @extend_schema(tags=[TAG], operation_id="deployment_list",
                   description="Every deployment with what it serves now (the label resolved now).",
                   responses={200: DeploymentOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return Response(DeploymentOutputSerializer(selectors.deployment_summaries(), many=True).data)

    @extend_schema(tags=[TAG], operation_id="deployment_create", request=DeploymentCreateInputSerializer,
                   description="Create a deployment with revision 1 proposed (someone else approves it).",
                   responses={201: DeploymentDetailSerializer, **ERRORS_WRITE})
    def post(self, request):
        data = _valid(DeploymentCreateInputSerializer, request)
        deployment = services.deployment_create(user=request.user, **data)
        return _detail(deployment, status.HTTP_201_CREATED)


class DeploymentDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_DEPLOYMENTS}

    @extend_schema(tags=[TAG], operation_id="deployment_retrieve",
                   responses={200: DeploymentDetailSerializer, **ERRORS_READ})
    def get(self, request, deployment: str):
        return _detail(_deployment(deployment))


class DeploymentProposeApi(ApiView):
    required_perms = {"POST": roles.PROPOSE_DEPLOYMENT}

    @extend_schema(tags=[TAG], operation_id="deployment_propose", request=ProposeInputSerializer,
                   description="Propose a change (one waits at a time: 409 while another does; 400 when it changes "
                               "nothing).",
                   responses={201: RevisionDetailSerializer, **ERRORS_WRITE})
    def post(self, request, deployment: str):
        data = _valid(ProposeInputSerializer, request)
        target = _deployment(deployment)
        note = data.pop("note", "")
        revision = services.deployment_propose(user=request.user, deployment=target, note=note, **data)
        return _revision_response(revision, status.HTTP_201_CREATED)


class RevisionDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_DEPLOYMENTS}

    @extend_schema(tags=[TAG], operation_id="deployment_revision_retrieve",
                   responses={200: RevisionDetailSerializer, **ERRORS_READ})
    def get(self, request, deployment: str, number: int):
        return _revision_response(_revision(_deployment(deployment), number))


class _RevisionDecisionApi(ApiView):
    """POST {comment}: one decision on a revision (approve, reject, withdraw), by the service ``decide`` names."""

    decide: str = ""

    def post(self, request, deployment: str, number: int):
        data = _valid(CommentInputSerializer, request)
        revision = _revision(_deployment(deployment), number)
        return _revision_response(getattr(services, self.decide)(user=request.user, revision=revision, **data))


def _decision_schema(operation: str, description: str):
    return extend_schema_view(post=extend_schema(
        tags=[TAG], operation_id=f"deployment_revision_{operation}", request=CommentInputSerializer,
        description=description, responses={200: RevisionDetailSerializer, **ERRORS_WRITE}))


@_decision_schema("approve", "Approve (four eyes: not the proposer) and put the revision in force; records where the "
                             "label points now.")
class RevisionApproveApi(_RevisionDecisionApi):
    required_perms = {"POST": roles.REVIEW_DEPLOYMENT}
    decide = "deployment_approve"


@_decision_schema("reject", "Reject (four eyes); the comment is required.")
class RevisionRejectApi(_RevisionDecisionApi):
    required_perms = {"POST": roles.REVIEW_DEPLOYMENT}
    decide = "deployment_reject"


@_decision_schema("withdraw", "The proposer withdraws a revision waiting for review.")
class RevisionWithdrawApi(_RevisionDecisionApi):
    required_perms = {"POST": roles.PROPOSE_DEPLOYMENT}
    decide = "deployment_withdraw"


class DeploymentRollbackApi(ApiView):
    required_perms = {"POST": roles.ROLLBACK_DEPLOYMENT}

    @extend_schema(tags=[TAG], operation_id="deployment_rollback", request=ReasonInputSerializer,
                   description="Put the revision in force before the current one's approval back in force and move "
                               "its label back (label, model and profile together). 409 when there is none.",
                   responses={200: DeploymentDetailSerializer, **ERRORS_WRITE})
    def post(self, request, deployment: str):
        data = _valid(ReasonInputSerializer, request)
        target = _deployment(deployment)
        return _detail(services.deployment_rollback(user=request.user, deployment=target, **data))
