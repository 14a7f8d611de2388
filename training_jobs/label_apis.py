"""REST API of human labels and agreement (mounted at /api/ by console.api_urls):

- ``GET  /api/eval-runs/<id>/labels/``: the run's human labels (filters: ``reviewer``, ``case_id``);
- ``POST /api/eval-runs/<id>/labels/``: label one sample (``case_id``, ``sample``, ``accuracy``, ``effectiveness``,
  ``note``); the answer reveals the rules' and the judges' verdicts. 409 ``already_labelled`` for a second label;
- ``GET  /api/eval-runs/<id>/labels/sample/?n=&seed=``: the seeded sample to label, blind (no verdicts);
- ``GET  /api/eval-runs/<id>/agreement/`` and ``GET /api/eval-sets/<name>/agreement/``: Cohen's kappa, raw
  agreement and confusion matrices of human labels against the rules, each judge, the judges' vote and each other.

Thin views: the serializers check the shape, :func:`training_jobs.label_services.human_label_create` owns the rules
(400 with located errors, nothing saved), one selector per read.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, Pagination, paginated_response
from console.errors import ValidationFailed
from training_jobs import eval_run_selectors
from training_jobs import label_selectors as selectors
from training_jobs import label_services as services
from training_jobs.eval_models import EvalSet
from training_jobs.eval_run_models import EvalResult, EvalRun
from training_jobs.label_models import NOTE_MAX, HumanLabel

TAG = "human labels"

_BLOCK = {"type": "object", "additionalProperties": True,
          "description": "accuracy {n, observed, expected, kappa, weights, labels, matrix, dropped, notes} and "
                         "effectiveness {unweighted, linear} of the same shape (training_jobs.evals.agreement): "
                         "observed = raw agreement, kappa = Cohen's kappa (null where undefined), matrix[i][j] = "
                         "human said labels[i], the other side labels[j]"}


@extend_schema_field(_BLOCK)
class AgreementBlockField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": _BLOCK,
                      "description": "per judge model (endpoint name): the agreement block"})
class JudgeBlocksField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "the judges against the rules over every sample of the run "
                                     "(training_jobs.evals.judge_model.judges_summary); empty without judges"})
class JudgeSummaryField(serializers.JSONField):
    pass


class LabelSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    case_id = serializers.CharField(source="result.case_id")
    sample = serializers.IntegerField(source="result.sample")
    reviewer = serializers.CharField(source="reviewer.username")
    accuracy = serializers.IntegerField(help_text="0 or 1")
    effectiveness = serializers.FloatField(help_text="0, 0.5 or 1")
    note = serializers.CharField()
    created_at = serializers.DateTimeField()

    class Meta:
        ref_name = "HumanLabel"


class _RulesVerdictSerializer(serializers.Serializer):
    accuracy = serializers.FloatField()
    effectiveness = serializers.FloatField()
    solved = serializers.BooleanField()
    problems = serializers.ListField(child=serializers.DictField())
    reason = serializers.CharField()
    fallback = serializers.BooleanField()

    class Meta:
        ref_name = "RulesVerdict"


class _JudgeVerdictSerializer(serializers.Serializer):
    judge = serializers.CharField()
    accuracy = serializers.IntegerField(allow_null=True, help_text="null: abstained")
    effectiveness = serializers.FloatField(allow_null=True, help_text="null: abstained")
    reason = serializers.CharField(allow_blank=True)
    raw = serializers.CharField(allow_blank=True, help_text="the judge's answer as given")
    error = serializers.CharField(allow_blank=True, help_text="why it abstained")

    class Meta:
        ref_name = "JudgeVerdict"


@extend_schema_field({"type": "object", "nullable": True, "additionalProperties": True,
                      "description": "the judges' vote: accuracy, effectiveness (null: abstained), how each was "
                                     "decided (majority, tie_rules, tie_abstain, no_votes), the votes per class"})
class VoteField(serializers.JSONField):
    pass


class LabelRevealSerializer(LabelSerializer):
    rules = _RulesVerdictSerializer(help_text="the rules' verdict (the score of record)")
    judges = _JudgeVerdictSerializer(many=True)
    vote = VoteField(allow_null=True)

    class Meta:
        ref_name = "HumanLabelRevealed"


class BlindSampleSerializer(serializers.Serializer):
    case_id = serializers.CharField()
    sample = serializers.IntegerField()
    reply = serializers.CharField(allow_blank=True)
    comments = serializers.ListField(child=serializers.DictField(), help_text="viewer, text")
    tool_results = serializers.ListField(child=serializers.DictField(),
                                         help_text="tool, arguments, result (what the model was shown), error")
    labelled = serializers.BooleanField(help_text="you have labelled it (GET it through the list to see verdicts)")

    class Meta:
        ref_name = "BlindSample"


class AgreementSerializer(serializers.Serializer):
    labels = serializers.IntegerField()
    results = serializers.IntegerField(help_text="samples with a label")
    reviewers = serializers.IntegerField()
    rules = AgreementBlockField(help_text="humans against the rules")
    judges = JudgeBlocksField(help_text="humans against each judge model")
    vote = AgreementBlockField(allow_null=True, help_text="humans against the judges' vote (null: no judged sample)")
    humans = AgreementBlockField(allow_null=True, help_text="reviewers against each other, every pair of labels of "
                                                             "one sample (null: no sample has two labels)")

    class Meta:
        ref_name = "LabelAgreement"


class RunAgreementSerializer(AgreementSerializer):
    run = serializers.UUIDField()
    judges_vs_rules = JudgeSummaryField()

    class Meta:
        ref_name = "RunLabelAgreement"


class _RunRefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    set_version = serializers.IntegerField(source="eval_set_version.number")

    class Meta:
        ref_name = "LabelledRun"


class SetAgreementSerializer(AgreementSerializer):
    eval_set = serializers.CharField()
    runs = _RunRefSerializer(many=True, help_text="the runs with labels")

    class Meta:
        ref_name = "SetLabelAgreement"


def _run(run_id) -> EvalRun:
    try:
        return eval_run_selectors.eval_run_get(run_id=run_id)
    except EvalRun.DoesNotExist:
        raise exceptions.NotFound(f"no evaluation run {run_id}") from None


def _revealed(label: HumanLabel) -> dict[str, Any]:
    r = label.result
    judges = (r.detail or {}).get("judges") or {}
    return {"id": label.pk, "result": r, "reviewer": label.reviewer, "accuracy": label.accuracy,
            "effectiveness": label.effectiveness, "note": label.note, "created_at": label.created_at,
            "rules": {"accuracy": r.accuracy, "effectiveness": r.effectiveness, "solved": r.solved,
                      "problems": r.problems, "reason": r.reason, "fallback": r.fallback},
            "judges": judges.get("verdicts") or [], "vote": judges.get("vote")}


class LabelListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS, "POST": roles.LABEL_EVAL}
    pagination_class = Pagination

    class FilterSerializer(serializers.Serializer):
        reviewer = serializers.CharField(required=False, max_length=150)
        case_id = serializers.CharField(required=False, max_length=200)

        class Meta:
            ref_name = "HumanLabelFilter"

    class InputSerializer(serializers.Serializer):
        case_id = serializers.CharField(max_length=200, help_text="the case's id in the run's eval set")
        sample = serializers.IntegerField(min_value=0, max_value=2**15 - 1, default=0,
                                          help_text="which of the run's k samples of the case")
        accuracy = serializers.ChoiceField(choices=[0, 1], help_text="0: a factual error, unsupported claim or "
                                                                     "false promise; 1: accurate")
        effectiveness = serializers.ChoiceField(choices=[0, 0.5, 1], help_text="0, 0.5 or 1")
        note = serializers.CharField(max_length=NOTE_MAX, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "HumanLabelInput"

    @extend_schema(tags=[TAG], operation_id="eval_run_label_list",
                   parameters=[OpenApiParameter("reviewer", OpenApiTypes.STR, description="a reviewer's username"),
                               OpenApiParameter("case_id", OpenApiTypes.STR)],
                   responses={200: LabelSerializer(many=True), 400: ERRORS_WRITE[400], **ERRORS_READ})
    def get(self, request, run_id):
        run = _run(run_id)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        qs = HumanLabel.objects.filter(result__run=run).select_related("result", "reviewer").defer(
            "result__events").order_by("result__position", "result__sample", "created_at")
        if f.get("reviewer"):
            qs = qs.filter(reviewer__username=f["reviewer"])
        if f.get("case_id"):
            qs = qs.filter(result__case_id=f["case_id"])
        return paginated_response(view=self, queryset=qs, serializer_class=LabelSerializer)

    @extend_schema(tags=[TAG], operation_id="eval_run_label_create", request=InputSerializer,
                   description="Label one sample of the run, blind: your accuracy (0/1) and effectiveness (0/0.5/1). "
                               "The answer reveals the rules' and the judges' verdicts. One label per person and "
                               "sample: a second one is a 409 (already_labelled). IFEval (T4) samples and samples that "
                               "could not be run are not labelled (400).",
                   responses={201: LabelRevealSerializer, **ERRORS_WRITE})
    def post(self, request, run_id):
        run = _run(run_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        try:
            result = selectors.result_by_case(run, d["case_id"], d["sample"])
        except EvalResult.DoesNotExist:
            raise ValidationFailed("the label is not valid", errors=[
                {"path": "case_id", "message": f"the run has no sample {d['sample']} of case {d['case_id']!r}"}]
            ) from None
        label = services.human_label_create(user=request.user, result=result, accuracy=d["accuracy"],
                                            effectiveness=d["effectiveness"], note=d["note"])
        return Response(LabelRevealSerializer(_revealed(label)).data, status=status.HTTP_201_CREATED)


class LabelSampleApi(ApiView):
    required_perms = {"GET": roles.LABEL_EVAL}

    class QuerySerializer(serializers.Serializer):
        n = serializers.IntegerField(required=False, default=selectors.DEFAULT_SAMPLE, min_value=1,
                                     max_value=selectors.MAX_SAMPLE)
        seed = serializers.IntegerField(required=False, default=0, min_value=0, max_value=2**31 - 1)

        class Meta:
            ref_name = "LabelSampleQuery"

    @extend_schema(tags=[TAG], operation_id="eval_run_label_sample",
                   description="The run's samples to label, drawn with the seed (the same n and seed give everyone the "
                               "same samples), blind: the reply, the comments and the tool results the turn got, "
                               "without any verdict.",
                   parameters=[OpenApiParameter("n", OpenApiTypes.INT, description=f"1–{selectors.MAX_SAMPLE}"),
                               OpenApiParameter("seed", OpenApiTypes.INT)],
                   responses={200: BlindSampleSerializer(many=True), 400: ERRORS_WRITE[400], **ERRORS_READ})
    def get(self, request, run_id):
        run = _run(run_id)
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        sample = selectors.label_sample(run, n=query.validated_data["n"], seed=query.validated_data["seed"])
        mine = selectors.labelled_by(request.user, sample)
        items = []
        for r in sample:
            view = selectors.sample_view(run, r, reveal=False)
            items.append({"case_id": r.case_id, "sample": r.sample, "reply": r.reply, "comments": view["comments"],
                          "tool_results": view["tool_results"], "labelled": r.pk in mine})
        return Response(BlindSampleSerializer(items, many=True).data)


class RunAgreementApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}

    @extend_schema(tags=[TAG], operation_id="eval_run_agreement",
                   responses={200: RunAgreementSerializer, **ERRORS_READ})
    def get(self, request, run_id):
        run = _run(run_id)
        data = selectors.run_agreement(run)
        return Response(RunAgreementSerializer({**data, "run": run.pk,
                                                "judges_vs_rules": (run.summary or {}).get("judges") or {}}).data)


class SetAgreementApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_RUNS}

    @extend_schema(tags=[TAG], operation_id="eval_set_agreement",
                   description="Human labels of every run of every version of the set, against the rules, each judge, "
                               "the judges' vote and each other.",
                   responses={200: SetAgreementSerializer, **ERRORS_READ})
    def get(self, request, eval_set):
        the_set = EvalSet.objects.filter(name=eval_set).first()
        if the_set is None:
            raise exceptions.NotFound(f"no eval set {eval_set!r}")
        data = selectors.set_agreement(the_set)
        return Response(SetAgreementSerializer({**data, "eval_set": the_set.name}).data)
