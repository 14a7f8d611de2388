"""REST API of the eval sets (mounted at /api/ by console.api_urls): list sets and import one (JSON lines in a JSON
body, or a file upload), a set with its versions, a version, its cases (paginated, filtered like the case table),
one case, the download (JSON lines, byte for byte what was imported in canonical form), pin a version (ML lead), and
"save as eval case" for a turn of a preview room or scenario run.

Thin views, HackSoft style: the input serializer checks the shape, one service does the rest; its located errors
(``line 12.comments[0].text``, ``gold_reply``, ``forbidden_claims[0].kind``) come back as a 400, nothing saved.
"""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, Pagination, paginated_response
from console.parsing import SafeJSONParser
from streams.models import PreviewRoom
from training_jobs import eval_selectors as selectors
from training_jobs import eval_services as services
from training_jobs.eval_models import EvalCase, EvalSet, EvalSetVersion

TAG = "eval sets"


@extend_schema_field(serializers.ChoiceField(choices=EvalSet.Kind.choices), component_name="EvalSetKind")
class EvalSetKindField(serializers.ChoiceField):
    def __init__(self, **kwargs):
        super().__init__(choices=EvalSet.Kind.choices, **kwargs)


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "one eval case (training_jobs.evals.cases.EvalCase): id, kind, harness, room, "
                                     "comments, gold_facts, expected_tools, expected_skills, forbidden_claims, "
                                     "gold_reply, tool_faults, harness_variant, tags, source; T4: prompt, "
                                     "instruction_id_list, kwargs"})
class CaseField(serializers.JSONField):
    pass


def _eval_set(name: str) -> EvalSet:
    try:
        return selectors.eval_set_get(name=name)
    except EvalSet.DoesNotExist:
        raise exceptions.NotFound(f"no eval set {name!r}") from None


def _version(name: str, number: int) -> EvalSetVersion:
    try:
        return selectors.eval_set_version_get(eval_set=_eval_set(name), number=number)
    except EvalSetVersion.DoesNotExist:
        raise exceptions.NotFound(f"eval set {name!r} has no version {number}") from None


class EvalSetVersionOutputSerializer(serializers.Serializer):
    eval_set = serializers.CharField(source="eval_set.name")
    kind = EvalSetKindField(source="eval_set.kind")
    number = serializers.IntegerField()
    content_hash = serializers.CharField(help_text="sha256 of the version's JSON lines (the export)")
    case_count = serializers.IntegerField()
    size_bytes = serializers.IntegerField()
    parent = serializers.IntegerField(source="parent.number", allow_null=True, default=None)
    author = serializers.CharField(source="author.username", allow_null=True, default=None,
                                   help_text="null: seeded from the committed data files")
    change_note = serializers.CharField()
    pinned = serializers.SerializerMethodField()
    facet_counts = serializers.DictField(child=serializers.DictField(child=serializers.IntegerField()),
                                         help_text="cases per tag ('tag') and per value of each kind-specific field")
    created_at = serializers.DateTimeField()

    class Meta:
        ref_name = "EvalSetVersion"

    def get_pinned(self, version) -> bool:
        return version.eval_set.pinned_id == version.pk


class EvalSetOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = EvalSetKindField()
    description = serializers.CharField()
    pinned = serializers.IntegerField(source="pinned.number", allow_null=True, default=None,
                                      help_text="the version the approval gate evaluates on")
    latest = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()

    class Meta:
        ref_name = "EvalSet"

    @extend_schema_field(EvalSetVersionOutputSerializer(allow_null=True))
    def get_latest(self, eval_set):
        version = selectors.eval_set_latest(eval_set=eval_set)
        return EvalSetVersionOutputSerializer(version).data if version else None


class EvalCaseOutputSerializer(serializers.Serializer):
    case_id = serializers.CharField()
    position = serializers.IntegerField(help_text="0-based line in the version's JSON lines")
    tags = serializers.ListField(child=serializers.CharField())
    case = CaseField(source="data")

    class Meta:
        ref_name = "EvalCase"


class ImportOutputSerializer(EvalSetVersionOutputSerializer):
    created = serializers.BooleanField(help_text="false: a version with exactly these cases existed and is returned")

    class Meta:
        ref_name = "EvalSetImport"


def _import_response(version: EvalSetVersion, created: bool) -> Response:
    version.created = created
    return Response(ImportOutputSerializer(version).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class _ImportFields(serializers.Serializer):
    name = serializers.CharField(max_length=64, help_text="a set name (lowercase letters, digits, '-', '_'): an "
                                                          "existing set gets a new version")
    kind = EvalSetKindField()
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="",
                                 help_text="change note of the new version")
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class EvalSetListApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_SETS, "POST": roles.IMPORT_EVAL_SET}
    pagination_class = Pagination
    parser_classes = [SafeJSONParser, MultiPartParser]

    class JsonInputSerializer(_ImportFields):
        jsonl = serializers.CharField(trim_whitespace=False, help_text="the cases as JSON lines (one per line)")

        class Meta:
            ref_name = "EvalSetImportInput"

    class UploadInputSerializer(_ImportFields):
        file = serializers.FileField(help_text="a .jsonl file")

        class Meta:
            ref_name = "EvalSetUploadInput"

    @extend_schema(tags=[TAG], operation_id="eval_set_list",
                   parameters=[OpenApiParameter("kind", OpenApiTypes.STR, enum=EvalSet.Kind.values)],
                   responses={200: EvalSetOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        kind = request.query_params.get("kind") or None
        if kind is not None and kind not in EvalSet.Kind.values:
            raise exceptions.ValidationError({"kind": [f"one of {', '.join(EvalSet.Kind.values)}"]})
        return paginated_response(view=self, queryset=selectors.eval_set_list(kind=kind),
                                  serializer_class=EvalSetOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="eval_set_import",
                   request={"application/json": JsonInputSerializer, "multipart/form-data": UploadInputSerializer},
                   description="Import JSON lines as a version of the set ``name`` (created when missing). 201: a new "
                               "version; 200: a version with exactly these cases existed and is returned, nothing "
                               "stored. A bad case is a 400 naming its line and field (``line 12.comments[0].text``); "
                               "nothing is saved then.",
                   responses={201: ImportOutputSerializer, 200: ImportOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        upload = request.content_type.startswith("multipart/")
        serializer = (self.UploadInputSerializer if upload else self.JsonInputSerializer)(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        if upload:
            f = d["file"]
            if f.size > services.MAX_IMPORT_BYTES:
                raise exceptions.ValidationError({"file": [f"at most {services.MAX_IMPORT_BYTES // 2**20} MB"]})
            text = f.read(services.MAX_IMPORT_BYTES + 1)
        else:
            text = d["jsonl"]
        version, created = services.eval_set_import(user=request.user, name=d["name"], kind=d["kind"],
                                                    jsonl_text=text, note=d["note"], description=d["description"])
        return _import_response(version, created)


class EvalSetDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_SETS}

    class OutputSerializer(EvalSetOutputSerializer):
        versions = serializers.SerializerMethodField()

        class Meta:
            ref_name = "EvalSetDetail"

        @extend_schema_field(EvalSetVersionOutputSerializer(many=True))
        def get_versions(self, eval_set):
            return EvalSetVersionOutputSerializer(selectors.eval_set_versions(eval_set=eval_set), many=True).data

    @extend_schema(tags=[TAG], operation_id="eval_set_retrieve", responses={200: OutputSerializer, **ERRORS_READ})
    def get(self, request, eval_set: str):
        return Response(self.OutputSerializer(_eval_set(eval_set)).data)


class EvalSetPinApi(ApiView):
    required_perms = {"POST": roles.PIN_EVAL_SET}

    class InputSerializer(serializers.Serializer):
        number = serializers.IntegerField(min_value=1, max_value=2**31 - 1, allow_null=True,
                                          help_text="the version to pin; null unpins")

        class Meta:
            ref_name = "EvalSetPinInput"

    @extend_schema(tags=[TAG], operation_id="eval_set_pin", request=InputSerializer,
                   description="Pin the version of the set the approval gate evaluates on (ML lead; recorded).",
                   responses={200: EvalSetOutputSerializer, **ERRORS_WRITE})
    def post(self, request, eval_set: str):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        target = _eval_set(eval_set)
        number = serializer.validated_data["number"]
        version = None
        if number is not None:
            version = target.versions.filter(number=number).first()
            if version is None:
                raise exceptions.ValidationError({"number": [f"set {target.name!r} has no version {number}"]})
        return Response(EvalSetOutputSerializer(services.eval_set_pin(user=request.user, eval_set=target,
                                                                      version=version)).data)


class EvalSetVersionDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_SETS}

    @extend_schema(tags=[TAG], operation_id="eval_set_version_retrieve",
                   responses={200: EvalSetVersionOutputSerializer, **ERRORS_READ})
    def get(self, request, eval_set: str, number: int):
        return Response(EvalSetVersionOutputSerializer(_version(eval_set, number)).data)


class CasePagination(LimitOffsetPagination):
    default_limit = 25
    max_limit = 200


FACET_PARAMETERS = [OpenApiParameter(key, OpenApiTypes.STR, description="cases listing this value (kind-specific; "
                                     "the values are the version's facet_counts)") for key in sorted(selectors.FACET_KEYS)]


class EvalCaseListApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_SETS}
    pagination_class = CasePagination

    @extend_schema(tags=[TAG], operation_id="eval_case_list",
                   parameters=[OpenApiParameter("tag", OpenApiTypes.STR, description="cases with this tag"),
                               OpenApiParameter("q", OpenApiTypes.STR, description="text anywhere in the case "
                                                "(comments, gold reply, prompt, claims, id), any case"),
                               *FACET_PARAMETERS],
                   responses={200: EvalCaseOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, eval_set: str, number: int):
        version = _version(eval_set, number)
        params = request.query_params
        for key in ("tag", "q", *selectors.FACET_KEYS):
            if len(params.get(key, "")) > 200:
                raise exceptions.ValidationError({key: ["at most 200 characters"]})
        facets = {k: params[k] for k in selectors.FACET_KEYS if params.get(k)}
        qs = selectors.eval_case_list(version=version, tag=params.get("tag") or None, q=params.get("q") or None,
                                      facets=facets)
        paginator = CasePagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(EvalCaseOutputSerializer(page, many=True).data)


class EvalCaseDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_SETS}

    @extend_schema(tags=[TAG], operation_id="eval_case_retrieve",
                   responses={200: EvalCaseOutputSerializer, **ERRORS_READ})
    def get(self, request, eval_set: str, number: int, case_id: str):
        version = _version(eval_set, number)
        try:
            case = selectors.eval_case_get(version=version, case_id=case_id)
        except EvalCase.DoesNotExist:
            raise exceptions.NotFound(f"no case {case_id!r} in this version") from None
        return Response(EvalCaseOutputSerializer(case).data)


class EvalSetExportApi(ApiView):
    required_perms = {"GET": roles.VIEW_EVAL_SETS}

    @extend_schema(tags=[TAG], operation_id="eval_set_version_export",
                   description="The version's cases as JSON lines: the bytes whose sha256 is its content hash.",
                   responses={(200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR,
                                                                              description="one case per line"),
                              **ERRORS_READ})
    def get(self, request, eval_set: str, number: int):
        version = _version(eval_set, number)
        response = HttpResponse(services.eval_set_export(version=version),
                                content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{version.eval_set.name}-v{version.number}.jsonl"'
        return response


class EvalCaseFromTurnApi(ApiView):
    required_perms = {"POST": roles.SAVE_EVAL_CASE}

    class InputSerializer(serializers.Serializer):
        room = serializers.UUIDField(help_text="the preview room or scenario run")
        turn_id = serializers.CharField(max_length=64)
        eval_set = serializers.CharField(max_length=64, required=False, default=services.TURN_SET_DEFAULT,
                                         help_text="a T1 set (created when missing)")
        gold_reply = serializers.CharField(max_length=2000, help_text="the reply the avatar should have given")
        tags = serializers.ListField(child=serializers.CharField(max_length=40), required=False, default=list,
                                     max_length=20)
        forbidden_claims = serializers.ListField(
            child=serializers.DictField(), required=False, default=list, max_length=50,
            help_text="[{kind, text, pattern, link_id, allowed}] (training_jobs.evals.cases.ForbiddenClaim)")
        note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

        class Meta:
            ref_name = "EvalCaseFromTurnInput"

    class OutputSerializer(serializers.Serializer):
        case_id = serializers.CharField()
        version = EvalSetVersionOutputSerializer()
        case = CaseField()

        class Meta:
            ref_name = "EvalCaseFromTurn"

    @extend_schema(tags=[TAG], operation_id="eval_case_from_turn", request=InputSerializer,
                   description="Save a finished turn of a preview room or scenario run as a new case of a T1 set (a "
                               "new version). 404 when the room is not one you may see or the turn is not in it.",
                   responses={201: OutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        from streams import selectors as stream_selectors

        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        try:
            room = stream_selectors.preview_room_get_for(user=request.user, room_id=d["room"])
        except PreviewRoom.DoesNotExist:
            raise exceptions.NotFound("no such preview room") from None
        version, case_id = services.eval_case_save_from_turn(
            user=request.user, room=room, turn_id=d["turn_id"], set_name=d["eval_set"], gold_reply=d["gold_reply"],
            tags=d["tags"], note=d["note"], forbidden_claims=d["forbidden_claims"])
        case = selectors.eval_case_get(version=version, case_id=case_id)
        return Response(self.OutputSerializer({"case_id": case_id, "version": version, "case": case.data}).data,
                        status=status.HTTP_201_CREATED)
