"""Harnesses: list, create (with the first version), detail; and validating a manifest without saving it."""

from __future__ import annotations

from drf_spectacular.utils import (
    extend_schema,
)
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import (
    ERRORS_READ,
    ERRORS_WRITE,
    ApiView,
    ErrorSerializer,
)
from harness_editor import selectors, services
from harness_editor.apis.common import (
    HARNESS_TAG,
    HarnessOutputSerializer,
    ManifestInputSerializer,
    VersionDetailOutputSerializer,
    _manifest_from,
    _version_response,
)
from harness_editor.schemas import (
    content_hash,
)


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
