"""REST API of the tool import: foreign tool definitions (OpenAI, Anthropic, MCP, plain Python-typed functions)
into a harness, reported before anything is saved (mounted at /api/ by console.api_urls).

``POST /api/harnesses/<slug>/import-tools``: ``dry_run`` answers the report only (what the converter changed,
name clashes with the harness's tools, and the errors and warnings of the manifest the import would make);
otherwise the tools are added to a new draft started from ``base`` (default: the latest version) — or, with
``draft`` and its ``lock_version``, saved into that draft of the caller's — whole or not at all.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_WRITE, ApiView
from console.errors import ValidationFailed
from harness_editor import selectors, services
from harness_editor.apis import (
    HARNESS_TAG,
    VersionDetailOutputSerializer,
    _harness,
    _version,
    _with_labels,
)
from harness_editor.importers import SOURCES
from harness_editor.importers.plan import plan_import

ON_CONFLICT = ("rename", "replace", "skip", "error")
MAX_INT = 2**31 - 1  # version numbers and lock versions are PostgreSQL integers


class ImportChangeSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="where, in what was sent (tools[3].function.name)")
    kind = serializers.CharField(help_text="renamed, duplicate_name, type_mapped, unknown_type, converted, "
                                           "dropped_key, defaulted, truncated, conflict")
    message = serializers.CharField()
    tool = serializers.IntegerField(allow_null=True, help_text="index of the imported tool it concerns")

    class Meta:
        ref_name = "ImportChange"


class LocatedErrorSerializer(serializers.Serializer):
    path = serializers.CharField()
    message = serializers.CharField()

    class Meta:
        ref_name = "ImportProblem"


class ImportReportSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="the harness with these tools added is valid")
    source = serializers.CharField(allow_null=True, help_text="the form read: openai, anthropic, mcp, functions, "
                                                               "mixed")
    tools = serializers.ListField(child=serializers.JSONField(), help_text="the manifest tools made")
    origins = serializers.ListField(child=serializers.CharField(), help_text="each tool's name as sent")
    changes = ImportChangeSerializer(many=True)
    conflicts = ImportChangeSerializer(many=True, help_text="names the harness already uses")
    added = serializers.ListField(child=serializers.CharField(), help_text="tools the harness gains or replaces")
    errors = LocatedErrorSerializer(many=True)
    import_failed = serializers.BooleanField(help_text="the definitions could not be read (errors: paths into "
                                                       "what was sent); else errors are the manifest's")
    warnings = LocatedErrorSerializer(many=True, help_text="e.g. unbound tools")

    class Meta:
        ref_name = "ImportReport"


class ImportOutputSerializer(serializers.Serializer):
    report = ImportReportSerializer()
    version = VersionDetailOutputSerializer(allow_null=True, help_text="the draft saved (null on a dry run)")

    class Meta:
        ref_name = "ImportResultOutput"


def _prefixed(field: str, path: str) -> str:
    if not path:
        return field
    return f"{field}{path}" if path.startswith("[") else f"{field}.{path}"


class HarnessImportToolsApi(ApiView):
    required_perms = {"POST": roles.EDIT_DRAFT}

    class InputSerializer(serializers.Serializer):
        tools = serializers.JSONField(required=False, help_text="the definitions as JSON: a list, a request's "
                                      "{tools: [...]}, an MCP tools/list result, or one tool")
        tools_text = serializers.CharField(required=False, trim_whitespace=False, help_text="the definitions as "
                                           "text: JSON, YAML or Python signatures (instead of tools)")
        source = serializers.ChoiceField(choices=SOURCES, default="auto")
        on_conflict = serializers.ChoiceField(choices=ON_CONFLICT, default="rename", help_text="a name the harness "
                                              "already uses: rename the imported tool, replace the harness's, skip "
                                              "it, or refuse the import")
        base = serializers.IntegerField(required=False, min_value=1, max_value=MAX_INT,
                                        help_text="the version the new draft starts from (default: the latest)")
        draft = serializers.IntegerField(required=False, min_value=1, max_value=MAX_INT,
                                         help_text="save into this draft of yours instead of starting a new one "
                                                   "(needs lock_version)")
        lock_version = serializers.IntegerField(required=False, min_value=1, max_value=MAX_INT)
        change_note = serializers.CharField(required=False, allow_blank=True, max_length=2000)
        dry_run = serializers.BooleanField(default=False, help_text="answer the report only; save nothing")

        class Meta:
            ref_name = "ImportToolsInput"

        def validate(self, data):
            if ("tools" in data) == ("tools_text" in data):
                raise serializers.ValidationError({"tools": "send either tools (JSON) or tools_text (text)"})
            if "draft" in data and "base" in data:
                raise serializers.ValidationError({"base": "leave this out when draft is given"})
            if "draft" in data and "lock_version" not in data and not data.get("dry_run"):
                raise serializers.ValidationError({"lock_version": "the lock_version of the draft is required"})
            return data

    @extend_schema(
        tags=[HARNESS_TAG], operation_id="harness_import_tools", request=InputSerializer,
        description="Import foreign tool definitions (OpenAI tools/functions, Anthropic tools, MCP tools/list, "
                    "plain functions with Python-style types or signatures) into a harness. Every change the "
                    "converter made is reported. dry_run: 200 with the report (ok false when the harness would be "
                    "invalid). Otherwise 201 with a new draft (from base, default the latest version), or 200 when "
                    "saved into your draft (draft + lock_version; a stale lock_version is a 409); any problem is a "
                    "400 with every error located, and nothing is saved.",
        responses={200: ImportOutputSerializer, 201: ImportOutputSerializer, **ERRORS_WRITE},
    )
    def post(self, request, slug: str):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        harness = _harness(slug)
        field = "tools" if "tools" in data else "tools_text"
        if "draft" in data:
            base = _version(harness, data["draft"])
        elif "base" in data:
            base = _version(harness, data["base"])
        else:
            latest = selectors.version_history(harness=harness).first()
            if latest is None:
                raise ValidationFailed("the harness has no version to import into",
                                       errors=[{"path": "base", "message": "no versions"}])
            base = _version(harness, latest.number)
        plan = plan_import(base.manifest.model_dump(mode="json"), data[field], source=data["source"],
                           on_conflict=data["on_conflict"])
        report = plan.as_dict()
        if plan.import_failed:
            report["errors"] = [{"path": _prefixed(field, e.path), "message": e.message} for e in plan.errors]
        if data["dry_run"]:
            return Response(ImportOutputSerializer({"report": report, "version": None}).data)
        if not plan.ok:
            count = len(report["errors"])
            what = "the tool definitions could not be imported" if plan.import_failed else \
                "the harness would be invalid with these tools"
            raise ValidationFailed(f"{what} ({count} problem{'s' if count != 1 else ''}); nothing was saved",
                                   errors=report["errors"])
        note = data.get("change_note")
        if note is None:
            note = f"imported {len(plan.added)} tool{'s' if len(plan.added) != 1 else ''}: {', '.join(plan.added)}"
            note = note[:2000]
        if "draft" in data:
            version = services.version_save_draft(user=request.user, version=base, manifest=plan.manifest,
                                                  lock_version=data["lock_version"], change_note=note)
            code = status.HTTP_200_OK
        else:
            version = services.version_create_draft(user=request.user, harness=harness, manifest=plan.manifest,
                                                    parent=base, change_note=note)
            code = status.HTTP_201_CREATED
        out = {"report": report, "version": _with_labels(version)}
        return Response(ImportOutputSerializer(out).data, status=code)

