"""REST API of the manifest's contract (mounted at /api/ by console.api_urls): the manifest's own JSON Schema and
the binding catalog, for editors, importers and tools that write manifests. Read-only; the role as for the other
harness reads (VIEW_HARNESS)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ApiView
from harness_editor.apis import HARNESS_TAG
from harness_editor.schemas.bindings import binding_catalog
from harness_editor.schemas.json_schema import (
    BINDING_DESCRIPTION,
    binding_kind_schemas,
    manifest_json_schema,
)


class ManifestSchemaApi(ApiView):
    """The manifest's own JSON Schema, for editors and tools that write manifests."""

    required_perms = {"GET": roles.VIEW_HARNESS}

    @extend_schema(tags=[HARNESS_TAG], operation_id="manifest_schema",
                   description="The manifest's JSON Schema (draft 2020-12), generated from the models the parser "
                               "uses. What a schema cannot say (unique ids, references, tool schemas, bindings "
                               "against their signatures) is checked by POST /api/validate.",
                   responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="a JSON Schema (2020-12)"),
                              **ERRORS_READ})
    def get(self, request):
        return Response(manifest_json_schema())


class BindingParamSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=["string", "integer", "number", "boolean"])
    required = serializers.BooleanField()
    coerces_digit_strings = serializers.BooleanField(
        help_text="an integer parameter that also takes a string of digits (the tool schema may say so with a "
                  "digits-only pattern)")

    class Meta:
        ref_name = "BindingParam"


class BuiltinBindingSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="the value of a tool's binding")
    kind = serializers.ChoiceField(choices=["builtin"])
    description = serializers.CharField()
    params = BindingParamSerializer(many=True, help_text="map each required one in the tool's argument_map")

    class Meta:
        ref_name = "BuiltinBinding"


class BindingKindSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["http", "fixture", "mcp"])
    description = serializers.CharField()
    schema = serializers.DictField(help_text="the JSON Schema (2020-12) of a binding of this kind")

    class Meta:
        ref_name = "BindingKind"


class BindingListApi(ApiView):
    required_perms = {"GET": roles.VIEW_HARNESS}

    class OutputSerializer(serializers.Serializer):
        description = serializers.CharField()
        builtin = BuiltinBindingSerializer(many=True)
        kinds = BindingKindSerializer(many=True, help_text="the open kinds: a tool's binding {kind: ..., ...}")

        class Meta:
            ref_name = "BindingCatalog"

    @extend_schema(tags=[HARNESS_TAG], operation_id="binding_list",
                   description="What a manifest tool can be bound to: the built-in bindings with their signatures "
                               "and the open kinds (http, fixture, mcp) with their schemas.",
                   responses={200: OutputSerializer, **ERRORS_READ})
    def get(self, request):
        schemas = binding_kind_schemas()
        kinds = [{"kind": kind, "description": schema.get("description", ""), "schema": schema}
                 for kind, schema in schemas.items()]
        return Response(self.OutputSerializer({"description": BINDING_DESCRIPTION, "builtin": binding_catalog(),
                                               "kinds": kinds}).data)
