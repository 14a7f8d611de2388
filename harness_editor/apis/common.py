"""What the registry's API modules share: the tags of the OpenAPI document, lookups that answer 404, the
manifest input (a JSON object or YAML text) and the output serializers several endpoints render."""

from __future__ import annotations

import json

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import (
    extend_schema_field,
)
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console.errors import ValidationFailed
from harness_editor import selectors
from harness_editor.models import Harness, HarnessVersion
from harness_editor.schemas import (
    Manifest,
    manifest_from_yaml,
    parse_manifest,
)
from harness_editor.schemas.json_schema import manifest_openapi_components

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
