"""REST API of the harness registry (mounted at /api/ by console.api_urls).

Thin views, HackSoft style: parse the input (nested ``InputSerializer`` + the manifest parser), let
:class:`console.apis.RolePermission` check the role for the method, call one service or selector, render
with an output serializer. Rules about the particular user and object (author-only edits, four eyes, only
approved versions carry labels) live in the services; their errors become 4xx bodies in
:func:`console.apis.exception_handler`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import yaml
from django.http import HttpResponse
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import (
    ERRORS_READ,
    ERRORS_WRITE,
    ApiView,
    ErrorSerializer,
    Pagination,
    paginated_response,
)
from console.errors import ValidationFailed
from harness_editor import gate, render, selectors, services
from harness_editor.diff import COMPONENTS
from harness_editor.models import Harness, HarnessVersion
from harness_editor.schemas import (
    Manifest,
    content_hash,
    manifest_from_yaml,
    manifest_to_yaml,
    parse_manifest,
)
from harness_editor.schemas.json_schema import manifest_openapi_components

DEMO_ROOM = Path(__file__).resolve().parent / "demo" / "room.yaml"
VERSION_TAG = "harness versions"
HARNESS_TAG = "harnesses"
LABEL_TAG = "labels"


# --- lookups and input helpers ---------------------------------------------------------------------------

def _harness(slug: str) -> Harness:
    try:
        return selectors.harness_get(slug=slug)
    except Harness.DoesNotExist:
        raise exceptions.NotFound(f"no harness '{slug}'") from None


def _version(harness: Harness, number: int) -> HarnessVersion:
    try:
        return selectors.version_get(harness=harness, number=number)
    except HarnessVersion.DoesNotExist:
        raise exceptions.NotFound(f"{harness.slug} has no version {number}") from None


def _with_labels(version: HarnessVersion) -> HarnessVersion:
    version.label_names = selectors.version_labels(version=version)
    return version


def _manifest_from(data: dict, *, required: bool = True) -> Manifest | None:
    """The manifest from ``manifest`` (a JSON object) or ``manifest_yaml`` (YAML text); exactly one of them.

    Raises ManifestError (400, one error per field path) when it is not a valid manifest."""
    has_json, has_yaml = "manifest" in data, "manifest_yaml" in data
    if has_json and has_yaml:
        raise ValidationFailed("send either manifest or manifest_yaml, not both", errors=[
            {"path": "manifest_yaml", "message": "leave this out when manifest is given"}])
    if not (has_json or has_yaml):
        if not required:
            return None
        raise ValidationFailed("a manifest is required", errors=[
            {"path": "manifest", "message": "send manifest (a JSON object) or manifest_yaml (YAML text)"}])
    if has_json:
        return parse_manifest(data["manifest"])  # parse_manifest reports a non-object at path ""
    return manifest_from_yaml(data["manifest_yaml"])


class ManifestField(serializers.JSONField):
    """A manifest as a JSON object; documented in the OpenAPI document by the manifest's own schema (components
    ``Manifest``, ``ManifestTool``, ...: :func:`harness_editor.schemas.json_schema.manifest_openapi_components`)."""


class ManifestFieldExtension(OpenApiSerializerFieldExtension):
    """Puts the manifest's JSON Schema (generated from the models) into the OpenAPI document's components."""

    target_class = ManifestField

    def map_serializer_field(self, auto_schema, direction):
        for name, schema in manifest_openapi_components().items():
            auto_schema.registry.register_on_missing(
                ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=schema))
        return {"$ref": "#/components/schemas/Manifest"}


class ManifestInputSerializer(serializers.Serializer):
    """Either ``manifest`` or ``manifest_yaml``; the manifest parser validates the content."""

    manifest = ManifestField(required=False)
    manifest_yaml = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                          help_text="the manifest as YAML text (instead of manifest)")

    class Meta:
        ref_name = "ManifestInput"


# --- output serializers shared by several endpoints --------------------------------------------------------

class VersionOutputSerializer(serializers.Serializer):
    """A version without its manifest (history lists). Reads the dict rows of
    ``version_history(...).values(*LIST_FIELDS)``: no model instances, no manifest text."""

    number = serializers.IntegerField()
    status = serializers.ChoiceField(choices=HarnessVersion.Status.choices)
    author = serializers.CharField(source="author__username")
    parent = serializers.IntegerField(source="parent__number", allow_null=True)
    change_note = serializers.CharField()
    content_hash = serializers.CharField()
    created_at = serializers.DateTimeField()
    submitted_at = serializers.DateTimeField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(source="decided_by__username", allow_null=True)
    decision_comment = serializers.CharField()
    labels = serializers.ListField(child=serializers.CharField(), source="label_names")

    class Meta:
        ref_name = "HarnessVersionSummary"


class VersionDetailOutputSerializer(serializers.Serializer):
    """One version with its manifest (reads a model instance)."""

    harness = serializers.SlugField(source="harness.slug")
    number = serializers.IntegerField()
    status = serializers.ChoiceField(choices=HarnessVersion.Status.choices)
    author = serializers.CharField(source="author.username")
    parent = serializers.IntegerField(source="parent.number", allow_null=True, default=None)
    change_note = serializers.CharField()
    content_hash = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    submitted_at = serializers.DateTimeField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True, default=None)
    decision_comment = serializers.CharField()
    labels = serializers.ListField(child=serializers.CharField(), source="label_names")
    lock_version = serializers.IntegerField()
    manifest = serializers.SerializerMethodField()

    class Meta:
        ref_name = "HarnessVersion"

    @extend_schema_field(ManifestField)
    def get_manifest(self, version: HarnessVersion) -> dict:
        return json.loads(version.manifest_json)  # the stored canonical text, key order kept


class HarnessOutputSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    description = serializers.CharField()
    created_by = serializers.CharField(source="created_by.username")
    created_at = serializers.DateTimeField()
    version_count = serializers.IntegerField()
    latest_number = serializers.IntegerField(allow_null=True)
    labels = serializers.SerializerMethodField()

    class Meta:
        ref_name = "Harness"

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"},
                          "description": "label name -> version number"})
    def get_labels(self, harness: Harness) -> dict[str, int]:
        return {label.name: label.version.number for label in harness.labels.all()}


class LabelOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField(source="version.number")
    moved_at = serializers.DateTimeField()
    moved_by = serializers.CharField(source="moved_by.username")

    class Meta:
        ref_name = "Label"


class CommentInputSerializer(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)

    class Meta:
        ref_name = "CommentInput"


def _version_response(version: HarnessVersion, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(VersionDetailOutputSerializer(_with_labels(version)).data, status=status_code)


# --- harnesses -------------------------------------------------------------------------------------------

class HarnessListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS, "POST": roles.ADD_HARNESS}

    class InputSerializer(ManifestInputSerializer):
        slug = serializers.SlugField(max_length=64)
        name = serializers.CharField(max_length=120)
        description = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
        change_note = serializers.CharField(required=False, allow_blank=True, default="Initial version",
                                            max_length=2000)

        class Meta:
            ref_name = "HarnessCreateInput"

    @extend_schema(tags=[HARNESS_TAG], operation_id="harness_list",
                   responses={200: HarnessOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return Response(HarnessOutputSerializer(selectors.harness_list(), many=True).data)

    @extend_schema(tags=[HARNESS_TAG], operation_id="harness_create", request=InputSerializer,
                   responses={201: VersionDetailOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        manifest = _manifest_from(data)
        version = services.harness_create(user=request.user, slug=data["slug"], name=data["name"],
                                          description=data["description"], manifest=manifest,
                                          change_note=data["change_note"])
        return _version_response(version, status.HTTP_201_CREATED)


class HarnessDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(tags=[HARNESS_TAG], operation_id="harness_retrieve",
                   responses={200: HarnessOutputSerializer, **ERRORS_READ})
    def get(self, request, slug: str):
        harness = selectors.harness_list().filter(slug=slug).first()
        if harness is None:
            raise exceptions.NotFound(f"no harness '{slug}'")
        return Response(HarnessOutputSerializer(harness).data)


# --- versions --------------------------------------------------------------------------------------------

class VersionListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS, "POST": roles.EDIT_DRAFT}
    pagination_class = Pagination

    class InputSerializer(ManifestInputSerializer):
        parent = serializers.IntegerField(allow_null=True, required=False, default=None, min_value=1,
                                          help_text="number of the version this draft starts from")
        change_note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)

        class Meta:
            ref_name = "DraftCreateInput"

    @extend_schema(tags=[VERSION_TAG], operation_id="version_list",
                   responses={200: VersionOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, slug: str):
        harness = _harness(slug)
        labels_by_version: dict[int, list[str]] = defaultdict(list)
        for label in selectors.label_list(harness=harness):
            labels_by_version[label.version_id].append(label.name)

        def attach_labels(page):
            for row in page:
                row["label_names"] = labels_by_version.get(row["id"], [])

        rows = selectors.version_history(harness=harness).values(*selectors.LIST_FIELDS)
        return paginated_response(view=self, queryset=rows, serializer_class=VersionOutputSerializer,
                                  transform=attach_labels)

    @extend_schema(tags=[VERSION_TAG], operation_id="version_create_draft", request=InputSerializer,
                   responses={201: VersionDetailOutputSerializer, **ERRORS_WRITE})
    def post(self, request, slug: str):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        harness = _harness(slug)
        parent = None
        if data["parent"] is not None:
            try:
                parent = selectors.version_get(harness=harness, number=data["parent"])
            except HarnessVersion.DoesNotExist:
                raise ValidationFailed("no such parent version", errors=[
                    {"path": "parent", "message": f"{slug} has no version {data['parent']}"}]) from None
        manifest = _manifest_from(data)
        version = services.version_create_draft(user=request.user, harness=harness, manifest=manifest,
                                                parent=parent, change_note=data["change_note"])
        return _version_response(version, status.HTTP_201_CREATED)


class VersionDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS, "PATCH": roles.EDIT_DRAFT, "DELETE": roles.EDIT_DRAFT}

    class InputSerializer(ManifestInputSerializer):
        lock_version = serializers.IntegerField(min_value=1, help_text="the lock_version the edit started from")
        change_note = serializers.CharField(required=False, allow_blank=True, max_length=2000)

        class Meta:
            ref_name = "DraftSaveInput"

    @extend_schema(tags=[VERSION_TAG], operation_id="version_retrieve",
                   responses={200: VersionDetailOutputSerializer, **ERRORS_READ})
    def get(self, request, slug: str, number: int):
        return _version_response(_version(_harness(slug), number))

    @extend_schema(
        tags=[VERSION_TAG], operation_id="version_save_draft", request=InputSerializer,
        description="Save a draft (author only). Without manifest/manifest_yaml only the change note changes. "
                    "A stale lock_version is a 409 conflict carrying current_lock_version.",
        responses={200: VersionDetailOutputSerializer, **ERRORS_WRITE},
    )
    def patch(self, request, slug: str, number: int):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        version = _version(_harness(slug), number)
        manifest = _manifest_from(data, required=False) or version.manifest
        version = services.version_save_draft(user=request.user, version=version, manifest=manifest,
                                              lock_version=data["lock_version"],
                                              change_note=data.get("change_note"))
        return _version_response(version)

    @extend_schema(tags=[VERSION_TAG], operation_id="version_discard_draft",
                   responses={204: None, **ERRORS_READ, 409: ErrorSerializer})
    def delete(self, request, slug: str, number: int):
        services.version_discard_draft(user=request.user, version=_version(_harness(slug), number))
        return Response(status=status.HTTP_204_NO_CONTENT)


class VersionExportApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(
        tags=[VERSION_TAG], operation_id="version_export",
        parameters=[OpenApiParameter("as", OpenApiTypes.STR, enum=["yaml", "json"], default="yaml",
                                     description="file format")],
        responses={
            # a YAML file whose document is the manifest mapping: described as the object it holds, which is what
            # a client (or a schema checker) gets by loading it
            (200, "text/yaml"): OpenApiResponse({"type": "object", "additionalProperties": True},
                                                description="the manifest as a YAML file (as=yaml)"),
            (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT, description="the manifest as JSON"),
            **ERRORS_WRITE,
        },
    )
    def get(self, request, slug: str, number: int):
        fmt = request.query_params.get("as", "yaml")
        if fmt not in ("yaml", "json"):
            raise ValidationFailed("unknown export format", errors=[
                {"path": "as", "message": "use as=yaml or as=json"}])
        version = _version(_harness(slug), number)
        if fmt == "json":
            body, content_type = version.manifest_json, "application/json"
        else:
            body, content_type = manifest_to_yaml(version.manifest), "text/yaml; charset=utf-8"
        response = HttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{slug}-v{number}.{fmt}"'
        return response


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

    class Meta:
        ref_name = "ApproveInput"


class VersionApproveApi(ApiView):
    required_perms = {"POST": roles.REVIEW_VERSION}

    @extend_schema(tags=[VERSION_TAG], operation_id="version_approve", request=ApproveInputSerializer,
                   description="Approve a submitted version (never by its author): submitted -> approved. When the "
                               "version's evaluation gate fails (GET .../gate) the answer is 409 'gate_failed' with "
                               "one error per failing rule (path 'gate.<rule>'), unless a compliance lead gives "
                               "override_reason; a reason from anyone else is 403. Overrides are audited.",
                   responses={200: VersionDetailOutputSerializer, **ERRORS_WRITE})
    def post(self, request, slug: str, number: int):
        serializer = ApproveInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        version = services.version_approve(user=request.user, version=_version(_harness(slug), number),
                                           comment=data["comment"], override_reason=data["override_reason"])
        return _version_response(version)


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


@lru_cache(maxsize=1)
def _demo_room_text() -> str:
    return DEMO_ROOM.read_text(encoding="utf-8")


def demo_room() -> dict:
    """A fresh copy of the demo live room (bindings may mutate the room they are given)."""
    return yaml.safe_load(_demo_room_text())


class VersionRenderApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    class OutputSerializer(serializers.Serializer):
        messages = serializers.ListField(child=serializers.DictField())
        tools = serializers.ListField(child=serializers.DictField())
        system_text = serializers.CharField()
        token_estimate = serializers.IntegerField(help_text="rough size of messages + tools in tokens")

        class Meta:
            ref_name = "RenderedPrompt"

    @extend_schema(
        tags=[VERSION_TAG], operation_id="version_render",
        description="The OpenAI-style messages and tools the model would be given for this version.",
        parameters=[
            OpenApiParameter("room", OpenApiTypes.STR, enum=["demo"],
                             description="render with the demo live room (harness_editor/demo/room.yaml)"),
            OpenApiParameter("comment", OpenApiTypes.STR, description="a viewer comment to add as the user message"),
        ],
        responses={200: OutputSerializer, **ERRORS_WRITE},
    )
    def get(self, request, slug: str, number: int):
        room_name = request.query_params.get("room")
        if room_name not in (None, "", "demo"):
            raise ValidationFailed("unknown room", errors=[{"path": "room", "message": "only room=demo exists"}])
        comment = request.query_params.get("comment", "").strip()
        version = _version(_harness(slug), number)
        rendered = render.render_prompt(
            version.manifest, room=demo_room() if room_name == "demo" else None,
            comments=[{"viewer": "viewer", "text": comment}] if comment else (),
        )
        return Response(self.OutputSerializer({
            "messages": rendered.messages, "tools": rendered.tools, "system_text": rendered.system_text,
            "token_estimate": rendered.estimated_tokens(),
        }).data)


# --- diff ------------------------------------------------------------------------------------------------

class ChangeOutputSerializer(serializers.Serializer):
    component = serializers.ChoiceField(choices=COMPONENTS)
    kind = serializers.ChoiceField(choices=["added", "removed", "changed", "renamed", "reordered"])
    key = serializers.CharField()
    path = serializers.CharField()
    summary = serializers.CharField()
    breaking = serializers.BooleanField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    text_diff = serializers.ListField(child=serializers.CharField(), help_text="unified diff lines")

    class Meta:
        ref_name = "ManifestChange"


class HarnessDiffApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    # ``from`` is a Python keyword, hence a serializer built from a dict.
    Params = type("DiffParams", (serializers.Serializer,), {
        "from": serializers.IntegerField(min_value=1), "to": serializers.IntegerField(min_value=1)})

    @extend_schema(
        tags=[VERSION_TAG], operation_id="version_diff",
        parameters=[OpenApiParameter("from", OpenApiTypes.INT, required=True, description="old version number"),
                    OpenApiParameter("to", OpenApiTypes.INT, required=True, description="new version number")],
        responses={200: inline_serializer("ManifestDiff", {
            "from": serializers.IntegerField(), "to": serializers.IntegerField(),
            "breaking": serializers.BooleanField(),
            "summary": serializers.DictField(child=serializers.IntegerField(),
                                             help_text="number of changes per component"),
            "changes": ChangeOutputSerializer(many=True),
        }), **ERRORS_WRITE},
    )
    def get(self, request, slug: str):
        params = self.Params(data=request.query_params)
        params.is_valid(raise_exception=True)
        harness = _harness(slug)
        old = _version(harness, params.validated_data["from"])
        new = _version(harness, params.validated_data["to"])
        diff = selectors.version_diff(old=old, new=new)
        return Response({
            "from": old.number, "to": new.number, "breaking": diff.breaking, "summary": diff.summary(),
            "changes": ChangeOutputSerializer([c.model_dump(mode="json") for c in diff.changes], many=True).data,
        })


# --- labels ----------------------------------------------------------------------------------------------

def _label(harness: Harness, name: str):
    label = selectors.label_list(harness=harness).filter(name=name).first()
    if label is None:
        raise exceptions.NotFound(f"{harness.slug} has no label '{name}'")
    return label


class LabelListApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(tags=[LABEL_TAG], operation_id="label_list",
                   responses={200: LabelOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, slug: str):
        return Response(LabelOutputSerializer(selectors.label_list(harness=_harness(slug)), many=True).data)


class LabelDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS, "PUT": roles.MOVE_LABEL}

    class InputSerializer(serializers.Serializer):
        version = serializers.IntegerField(min_value=1, help_text="number of an approved version")
        comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)

        class Meta:
            ref_name = "LabelMoveInput"

    @extend_schema(tags=[LABEL_TAG], operation_id="label_retrieve",
                   responses={200: LabelOutputSerializer, **ERRORS_READ})
    def get(self, request, slug: str, name: str):
        return Response(LabelOutputSerializer(_label(_harness(slug), name)).data)

    @extend_schema(tags=[LABEL_TAG], operation_id="label_move", request=InputSerializer,
                   description="Point the label at an approved version (creating the label on first use).",
                   responses={200: LabelOutputSerializer, **ERRORS_WRITE})
    def put(self, request, slug: str, name: str):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        harness = _harness(slug)
        try:
            version = selectors.version_get(harness=harness, number=serializer.validated_data["version"])
        except HarnessVersion.DoesNotExist:
            raise ValidationFailed("no such version", errors=[
                {"path": "version", "message": f"{slug} has no version {serializer.validated_data['version']}"}
            ]) from None
        label = services.label_move(user=request.user, harness=harness, name=name, version=version,
                                    comment=serializer.validated_data["comment"])
        return Response(LabelOutputSerializer(label).data)


class LabelRollbackApi(ApiView):
    required_perms = {"POST": roles.MOVE_LABEL}

    @extend_schema(tags=[LABEL_TAG], operation_id="label_rollback", request=CommentInputSerializer,
                   description="Move the label back to where it pointed before its latest move.",
                   responses={200: LabelOutputSerializer, **ERRORS_WRITE})
    def post(self, request, slug: str, name: str):
        serializer = CommentInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        harness = _harness(slug)
        _label(harness, name)
        label = services.label_rollback(user=request.user, harness=harness, name=name,
                                        comment=serializer.validated_data["comment"])
        return Response(LabelOutputSerializer(label).data)


class LabelHistoryApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}
    pagination_class = Pagination

    class OutputSerializer(serializers.Serializer):
        at = serializers.DateTimeField()
        actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
        from_state = serializers.CharField()
        to_state = serializers.CharField()
        comment = serializers.CharField()
        rollback = serializers.SerializerMethodField()

        class Meta:
            ref_name = "LabelMove"

        def get_rollback(self, event) -> bool:
            return bool(event.data.get("rollback"))

    @extend_schema(tags=[LABEL_TAG], operation_id="label_history",
                   responses={200: OutputSerializer(many=True), **ERRORS_READ})
    def get(self, request, slug: str, name: str):
        harness = _harness(slug)
        _label(harness, name)
        return paginated_response(view=self, queryset=selectors.label_history(harness=harness, name=name),
                                  serializer_class=self.OutputSerializer)


# --- validation ------------------------------------------------------------------------------------------

class ValidateApi(ApiView):
    """Validate a manifest without saving it (the editor's live validation)."""

    required_perms = {"POST": roles.VIEW_HARNESS}

    class OutputSerializer(serializers.Serializer):
        valid = serializers.BooleanField()
        content_hash = serializers.CharField()

        class Meta:
            ref_name = "ValidateResult"

    @extend_schema(tags=[HARNESS_TAG], operation_id="manifest_validate", request=ManifestInputSerializer,
                   description="Validate a manifest without saving it. A 400 'invalid_manifest' lists every error "
                               "at once, each with its path (structure, duplicates, references, tool schemas, "
                               "bindings), in document order. The manifest's schema: GET /api/manifest-schema; "
                               "YAML text, JSON text and a JSON object share one size limit (1,000,000 bytes, an "
                               "object measured as compact JSON).",
                   responses={200: OutputSerializer, 400: ErrorSerializer, 401: ErrorSerializer,
                              403: ErrorSerializer})
    def post(self, request):
        serializer = ManifestInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        manifest = _manifest_from(serializer.validated_data)
        return Response(self.OutputSerializer({"valid": True, "content_hash": content_hash(manifest)}).data)

