"""REST API of MCP tool import: the allow-listed MCP servers (names only), and importing a server's tools into a
harness as a new draft (``dry_run``: the tools and every change, nothing saved). Same permission as editing a
harness (EDIT_DRAFT); an unknown harness or version is 404, an unknown server or tool a located 400, a server that
cannot be listed 502 (``mcp_unavailable``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView, ErrorSerializer
from harness_editor import selectors
from harness_editor.models import Harness, HarnessVersion
from streams.services import mcp_import as services

TAG = "harnesses"


def _version(slug: str, number: int) -> HarnessVersion:
    try:
        harness = selectors.harness_get(slug=slug)
    except Harness.DoesNotExist:
        raise exceptions.NotFound(f"no harness '{slug}'") from None
    try:
        return selectors.version_get(harness=harness, number=number)
    except HarnessVersion.DoesNotExist:
        raise exceptions.NotFound(f"{slug} has no version {number}") from None


class McpServerSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="the name an mcp binding's 'server' gives")

    class Meta:
        ref_name = "McpServer"


class McpImportInputSerializer(serializers.Serializer):
    server = serializers.CharField(max_length=64, help_text="an allow-listed MCP server (GET /api/mcp-servers/)")
    tools = serializers.ListField(child=serializers.CharField(max_length=128), required=False, max_length=500,
                                  help_text="the remote tool names to import (default: every tool it lists)")
    on_conflict = serializers.ChoiceField(choices=services.ON_CONFLICT, default="rename",
                                          help_text="a name the harness already uses: rename (suffix _2), replace "
                                                    "the harness's tool, skip the imported one, or error (400 "
                                                    "naming each clash; nothing saved)")
    change_note = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    dry_run = serializers.BooleanField(default=False, help_text="show the tools and changes; save nothing")

    class Meta:
        ref_name = "McpImportInput"


class ImportChangeSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="into the listed tools that were chosen: tools[i].name, "
                                           "tools[i].inputSchema...; or into the manifest: tools[j]")
    kind = serializers.CharField(help_text="renamed, duplicate_name, type_mapped, dropped_key, defaulted, conflict, "
                                           "unchanged (replace found the same tool), ...")
    message = serializers.CharField()
    tool = serializers.IntegerField(allow_null=True)
    remote = serializers.CharField(allow_null=True, help_text="the remote tool the change is about")

    class Meta:
        ref_name = "McpImportChange"


class RemoteToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    annotations = serializers.JSONField(allow_null=True, help_text="its MCP hints as the manifest carries them "
                                        "({title, read_only, destructive, idempotent, open_world}: what it stated)")
    output_schema = serializers.BooleanField(help_text="it declares the JSON Schema of its result")
    effect = serializers.ChoiceField(["read_only", "writes", "destructive", "unknown"],
                                     help_text="what a call may do, read from the hints (unknown: none given; MCP's "
                                               "default is that it may be destructive)")
    effect_label = serializers.CharField()
    effect_why = serializers.CharField()

    class Meta:
        ref_name = "McpRemoteTool"


class McpImportOutputSerializer(serializers.Serializer):
    server = serializers.CharField()
    remote = RemoteToolSerializer(many=True, help_text="every tool the server lists")
    tools = serializers.ListField(child=serializers.JSONField(), help_text="the manifest tools the draft gains "
                                  "({name, description, parameters, binding: {kind: mcp, server, tool}})")
    changes = ImportChangeSerializer(many=True)
    version = serializers.IntegerField(allow_null=True, help_text="the new draft's number (null on a dry run)")

    class Meta:
        ref_name = "McpImportResult"


class McpServerListApi(ApiView):
    required_perms = {"GET": roles.EDIT_DRAFT}

    @extend_schema(tags=[TAG], operation_id="mcp_server_list",
                   description="The MCP servers of the administrator's allow-list that tools may be imported from "
                               "and bound to (names only: addresses and secrets are never shown).",
                   responses={200: McpServerSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return Response([{"name": name} for name in services.mcp_server_names()])


class McpImportApi(ApiView):
    required_perms = {"POST": roles.EDIT_DRAFT}

    @extend_schema(tags=[TAG], operation_id="version_mcp_import", request=McpImportInputSerializer,
                   description="List an allow-listed MCP server's tools (tools/list) and import them into this "
                               "version as a new draft: each becomes a manifest tool bound to the server "
                               "({kind: mcp, server, tool: <remote name>}); names that are not valid tool names are "
                               "renamed and every change is reported. dry_run: nothing is saved (200).",
                   responses={200: McpImportOutputSerializer, 201: McpImportOutputSerializer, **ERRORS_WRITE,
                              502: ErrorSerializer})
    def post(self, request, slug: str, number: int):
        version = _version(slug, number)
        data = McpImportInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        args = data.validated_data
        options = {"server": args["server"], "select": args.get("tools"), "on_conflict": args["on_conflict"]}
        if args["dry_run"]:
            plan = services.mcp_import_preview(user=request.user, version=version, **options)
            return Response({**plan.as_dict(), "version": None})
        draft, plan = services.mcp_import_save(user=request.user, version=version,
                                               change_note=args["change_note"], **options)
        return Response({**plan.as_dict(), "version": draft.number}, status=status.HTTP_201_CREATED)
