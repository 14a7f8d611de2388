"""Harness versions: history, drafts (create, save, discard), export, the rendered prompt and the diff
between two versions."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import yaml
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
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
from harness_editor import render, selectors, services
from harness_editor.apis.common import (
    VERSION_TAG,
    ManifestInputSerializer,
    VersionDetailOutputSerializer,
    VersionOutputSerializer,
    _harness,
    _manifest_from,
    _version,
    _version_response,
)
from harness_editor.diff import COMPONENTS
from harness_editor.models import HarnessVersion
from harness_editor.schemas import (
    manifest_to_yaml,
)

DEMO_ROOM = Path(__file__).resolve().parent.parent / "demo" / "room.yaml"


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
