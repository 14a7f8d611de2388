"""The review of a version: submit, the approval gate's evidence, approve (with the review checklist) and
reject."""

from __future__ import annotations

from drf_spectacular.utils import (
    extend_schema,
)
from rest_framework import serializers
from rest_framework.response import Response

from console import roles
from console.apis import (
    ERRORS_READ,
    ERRORS_WRITE,
    ApiView,
)
from harness_editor import gate, review_selectors, review_services, services
from harness_editor.apis.common import (
    VERSION_TAG,
    CommentInputSerializer,
    VersionDetailOutputSerializer,
    _harness,
    _version,
    _version_response,
)

MAX_INT = 2**31 - 1  # item ids are PostgreSQL integers


class _TransitionApi(ApiView):
    service = None  # set by subclasses

    def post(self, request, slug: str, number: int):
        serializer = CommentInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = _version(_harness(slug), number)
        version = type(self).service(user=request.user, version=version,
                                     comment=serializer.validated_data["comment"])
        return _version_response(version)


_TRANSITION_SCHEMA = {"request": CommentInputSerializer,
                      "responses": {200: VersionDetailOutputSerializer, **ERRORS_WRITE}}


class VersionSubmitApi(_TransitionApi):
    required_perms = {"POST": roles.SUBMIT_VERSION}
    service = staticmethod(services.version_submit)

    @extend_schema(tags=[VERSION_TAG], operation_id="version_submit",
                   description="Submit a draft for review (author only): draft -> submitted.", **_TRANSITION_SCHEMA)
    def post(self, request, slug: str, number: int):
        return super().post(request, slug, number)


class ApproveInputSerializer(CommentInputSerializer):
    override_reason = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=4000,
        help_text="only when the evaluation gate fails: why approve anyway (compliance leads only; audited)")
    checklist = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_INT), required=False, default=list,
        max_length=review_services.MAX_ITEMS,
        help_text="ids of the review checklist items ticked (GET /api/review-checklist). When a checklist is set, "
                  "every current item must be ticked: otherwise 400 with one error per item not ticked (path "
                  "'checklist') and one per id not on the current list (path 'checklist[<index>]'). The ticks are "
                  "kept with the approval and in its audit data.")

    class Meta:
        ref_name = "ApproveInput"


class VersionApproveApi(ApiView):
    required_perms = {"POST": roles.REVIEW_VERSION}

    @extend_schema(tags=[VERSION_TAG], operation_id="version_approve", request=ApproveInputSerializer,
                   description="Approve a submitted version (never by its author): submitted -> approved. When a "
                               "review checklist is set (GET /api/review-checklist), every item must be ticked "
                               "(checklist: their ids), else 400 naming the items not ticked; the author (four "
                               "eyes, 403) and the status (409) are checked first. When the version's evaluation "
                               "gate fails (GET .../gate) the answer is 409 'gate_failed' with one error per "
                               "failing rule (path 'gate.<rule>'), unless a compliance lead gives override_reason; "
                               "a reason from anyone else is 403. Overrides are audited.",
                   responses={200: VersionDetailOutputSerializer, **ERRORS_WRITE})
    def post(self, request, slug: str, number: int):
        serializer = ApproveInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        # the same service as the page's approve button: one place checks the checklist and keeps the ticks
        version = review_services.version_approve_reviewed(
            user=request.user, version=_version(_harness(slug), number), comment=data["comment"],
            override_reason=data["override_reason"], ticked=data["checklist"])
        return _version_response(version)


class ChecklistItemSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="what approve's checklist lists when this item is ticked")
    text = serializers.CharField()
    position = serializers.IntegerField()

    class Meta:
        ref_name = "ReviewChecklistItem"


class ReviewChecklistApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(tags=[VERSION_TAG], operation_id="review_checklist",
                   description="The review checklist a compliance lead set (in order; empty when none is set): "
                               "every item must be ticked to approve a version (POST .../approve, checklist).",
                   responses={200: ChecklistItemSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return Response(ChecklistItemSerializer(review_selectors.checklist_items(), many=True).data)


class GateRuleSerializer(serializers.Serializer):
    name = serializers.CharField()
    passed = serializers.BooleanField()
    detail = serializers.CharField()
    link = serializers.CharField(help_text="a page to look at (a run, an eval set), or ''")

    class Meta:
        ref_name = "GateRule"


class GateScoreSerializer(serializers.Serializer):
    mean = serializers.FloatField(allow_null=True)
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)
    n = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "GateScore"


class GateMetricSerializer(serializers.Serializer):
    metric = serializers.CharField()
    label = serializers.CharField()
    candidate = GateScoreSerializer(allow_null=True, help_text="this version's run, in percent")
    baseline = GateScoreSerializer(allow_null=True, help_text="the production version's run, in percent")
    delta = serializers.FloatField(allow_null=True, help_text="mean per-case change in points")
    delta_ci_low = serializers.FloatField(allow_null=True)
    delta_ci_high = serializers.FloatField(allow_null=True)

    class Meta:
        ref_name = "GateMetric"


class FlippedCaseSerializer(serializers.Serializer):
    case_id = serializers.CharField()
    candidate_link = serializers.CharField()
    baseline_link = serializers.CharField()

    class Meta:
        ref_name = "GateFlippedCase"


class GateSetSerializer(serializers.Serializer):
    eval_set = serializers.CharField()
    set_version = serializers.CharField()
    run_id = serializers.CharField()
    run_name = serializers.CharField()
    run_link = serializers.CharField()
    baseline_run_id = serializers.CharField()
    baseline_run_name = serializers.CharField()
    baseline_run_link = serializers.CharField()
    compare_link = serializers.CharField(help_text="the two runs side by side ('' without both)")
    metrics = GateMetricSerializer(many=True)
    regressions = FlippedCaseSerializer(many=True, help_text="solved by production, not by this version")
    fixes = FlippedCaseSerializer(many=True)
    note = serializers.CharField()

    class Meta:
        ref_name = "GateSetEvidence"


class GateOutputSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="false: no gate applies to this harness (approve as usual)")
    passed = serializers.BooleanField()
    summary = serializers.CharField()
    failing = serializers.ListField(child=serializers.CharField(), help_text="names of the rules that fail")
    rules = GateRuleSerializer(many=True)
    sets = GateSetSerializer(many=True)
    policy = serializers.ListField(child=serializers.CharField())
    baseline = serializers.CharField(help_text="what production points at")
    start_url = serializers.CharField(help_text="page action that starts the missing runs ('' when none)")
    missing_runs = serializers.ListField(child=serializers.CharField())

    class Meta:
        ref_name = "ApprovalGate"


class VersionGateApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(tags=[VERSION_TAG], operation_id="version_gate",
                   description="The version's approval gate: the policy, each rule with pass/fail and why, and the "
                               "evidence (scores with 95 % intervals, changes against production, flipped cases).",
                   responses={200: GateOutputSerializer, **ERRORS_READ})
    def get(self, request, slug: str, number: int):
        evidence = gate.approval_evidence(_version(_harness(slug), number))
        return Response(GateOutputSerializer(evidence.to_dict()).data)


class VersionRejectApi(_TransitionApi):
    required_perms = {"POST": roles.REVIEW_VERSION}
    service = staticmethod(services.version_reject)

    @extend_schema(tags=[VERSION_TAG], operation_id="version_reject",
                   description="Reject a submitted version with a comment saying what must change.",
                   **_TRANSITION_SCHEMA)
    def post(self, request, slug: str, number: int):
        return super().post(request, slug, number)
