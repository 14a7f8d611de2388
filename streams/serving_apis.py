"""Serving API (thin): serve profiles (list, create) and servers (list, launch, detail, stop)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import (
    ERRORS_READ,
    ERRORS_WRITE,
    ApiView,
    Pagination,
    paginated_response,
)
from console.errors import ValidationFailed
from streams import serving_selectors as selectors
from streams.model_artefacts import model_get
from streams.models import ServerInstance
from streams.services import serving

TAG = "serving"


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "streams.serve_profiles.ServeSpec: kind (vllm|local), served_model_name, host, "
                                     "port, tool_call_parser, dtype, mtp_speculative_tokens, enable_lora, "
                                     "lora_adapters, max_lora_rank, max_loras, runtime_lora_updating, "
                                     "max_model_len, gpu_memory_utilization, kv_cache_gib, threads, "
                                     "ready_timeout_s, extra_args (allowed vLLM flags with typed values only: "
                                     "streams.vllm_cpu.EXTRA_FLAGS)"})
class SpecField(serializers.JSONField):
    pass


class UserRefSerializer(serializers.Serializer):
    username = serializers.CharField(source="get_username")

    class Meta:
        ref_name = "ServingUserRef"


class ProfileOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    spec = SpecField()
    created_by = UserRefSerializer(allow_null=True)
    created_at = serializers.DateTimeField()

    class Meta:
        ref_name = "ServeProfile"


class ModelRefSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()

    class Meta:
        ref_name = "ServingModelRef"


class EndpointRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    base_url = serializers.CharField()
    model = serializers.CharField()
    kind = serializers.CharField()

    class Meta:
        ref_name = "ServingEndpointRef"


class ServerOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    profile = serializers.CharField(source="profile.name")
    model = ModelRefSerializer(allow_null=True)
    model_path = serializers.CharField()
    endpoint = EndpointRefSerializer(allow_null=True)
    managed = serializers.BooleanField()
    status = serializers.CharField()
    host = serializers.CharField()
    pid = serializers.IntegerField(allow_null=True)
    port = serializers.IntegerField(allow_null=True)
    argv = serializers.ListField(child=serializers.CharField())
    log_path = serializers.CharField()
    adapters = serializers.JSONField()
    error = serializers.CharField()
    started_by = UserRefSerializer(allow_null=True)
    created_at = serializers.DateTimeField()
    ready_at = serializers.DateTimeField(allow_null=True)
    stopped_at = serializers.DateTimeField(allow_null=True)

    class Meta:
        ref_name = "ServerInstance"


class ProfileListCreateApi(ApiView):
    required_perms = {"GET": roles.VIEW_SERVING, "POST": roles.MANAGE_SERVING}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=64)
        spec = SpecField()

        class Meta:
            ref_name = "ServeProfileCreateInput"

    @extend_schema(tags=[TAG], operation_id="serve_profile_list",
                   responses={200: ProfileOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return paginated_response(view=self, queryset=selectors.serve_profile_list(),
                                  serializer_class=ProfileOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="serve_profile_create", request=InputSerializer,
                   description="Store a serve profile. A bad spec is a 400 naming each field's path (spec.port, "
                               "spec.extra_args[2]); nothing is saved then. host: one of HAT_SERVE_LISTEN_HOSTS "
                               "(loopback unless an administrator adds more); runtime_lora_updating: loopback only.",
                   responses={201: ProfileOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        profile = serving.serve_profile_create(user=request.user, name=d["name"], spec=d["spec"])
        return Response(ProfileOutputSerializer(profile).data, status=status.HTTP_201_CREATED)


class ServerListLaunchApi(ApiView):
    required_perms = {"GET": roles.VIEW_SERVING, "POST": roles.MANAGE_SERVING}
    pagination_class = Pagination

    class InputSerializer(serializers.Serializer):
        profile = serializers.CharField(max_length=64, help_text="a serve profile's name")
        model = serializers.UUIDField(help_text="a registered model's id (not an adapter)")

        class Meta:
            ref_name = "ServerLaunchInput"

    @extend_schema(tags=[TAG], operation_id="server_list",
                   parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=ServerInstance.Status.values),
                               OpenApiParameter("profile", OpenApiTypes.STR)],
                   responses={200: ServerOutputSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        wanted = request.query_params.get("status") or None
        if wanted is not None and wanted not in ServerInstance.Status.values:
            raise exceptions.ValidationError({"status": [f"one of {', '.join(ServerInstance.Status.values)}"]})
        qs = selectors.server_list(status=wanted, profile=request.query_params.get("profile") or None)
        return paginated_response(view=self, queryset=qs, serializer_class=ServerOutputSerializer)

    @extend_schema(tags=[TAG], operation_id="server_launch", request=InputSerializer,
                   description="Launch a server of a model under a profile on a serve worker (queue 'serve'): "
                               "201 with the record (starting); it becomes ready (endpoint registered) or failed. "
                               "A stored profile that no longer passes the checks is a 400 with their paths "
                               "(spec.host); the worker checks it again before it starts a process.",
                   responses={201: ServerOutputSerializer, **ERRORS_WRITE})
    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        errors = []
        profile = None
        try:
            profile = selectors.serve_profile_get(d["profile"])
        except ServerInstance.profile.field.related_model.DoesNotExist:
            errors.append({"path": "profile", "message": f"no serve profile named {d['profile']!r}"})
        model = model_get(d["model"])
        if model is None:
            errors.append({"path": "model", "message": f"no model with id {d['model']}"})
        if errors:
            raise ValidationFailed("the launch request is invalid", errors=errors)
        instance = serving.server_launch(user=request.user, profile=profile, model=model)
        instance = selectors.server_get(instance.pk)
        return Response(ServerOutputSerializer(instance).data, status=status.HTTP_201_CREATED)


class ServerDetailApi(ApiView):
    required_perms = {"GET": roles.VIEW_SERVING}

    @extend_schema(tags=[TAG], operation_id="server_retrieve", responses={200: ServerOutputSerializer, **ERRORS_READ})
    def get(self, request, instance_id):
        return Response(ServerOutputSerializer(_server_or_404(instance_id)).data)


class ServerStopApi(ApiView):
    required_perms = {"POST": roles.MANAGE_SERVING}

    @extend_schema(tags=[TAG], operation_id="server_stop", request=None,
                   description="Ask the host running the server to stop it (queue 'serve.<host>'): 202 with the "
                               "record (stopping); it says stopped once the process is gone. 409 when it is not "
                               "running or was started outside the console.",
                   responses={202: ServerOutputSerializer, **ERRORS_WRITE})
    def post(self, request, instance_id):
        instance = serving.server_stop(user=request.user, instance=_server_or_404(instance_id))
        return Response(ServerOutputSerializer(selectors.server_get(instance.pk)).data,
                        status=status.HTTP_202_ACCEPTED)


def _server_or_404(instance_id) -> ServerInstance:
    try:
        return selectors.server_get(instance_id)
    except ServerInstance.DoesNotExist:
        raise exceptions.NotFound("no such server") from None
