"""REST API of LoRA adapters on a running server: list what is loaded, load an adapter (202: queued on the server's
host; the name it will be served under comes back at once), unload one by name (202). VIEW_SERVING reads,
MANAGE_SERVING loads and unloads; refusals are located 400s, 409 for a server that is not ready."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ERRORS_WRITE, ApiView
from console.errors import ValidationFailed
from streams.live_models import ServerInstance
from streams.model_artefacts import model_get
from streams.services import adapters as adapter_services

TAG = "serving"


def _instance(instance_id) -> ServerInstance:
    instance = ServerInstance.objects.select_related("profile", "model", "endpoint").filter(pk=instance_id).first()
    if instance is None:
        raise exceptions.NotFound(f"no server {instance_id}")
    return instance


class LoadedAdapterSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="what requests put in 'model'")
    # null where the server loaded it at start (a profile's lora_adapters) rather than through the console
    path = serializers.CharField(allow_null=True, help_text="the adapter directory on the server's host")
    model_id = serializers.UUIDField(allow_null=True, help_text="the adapter (a registered model)")
    loaded_at = serializers.CharField(allow_null=True)

    class Meta:
        ref_name = "LoadedAdapter"


class AdapterLoadInputSerializer(serializers.Serializer):
    adapter = serializers.UUIDField(help_text="the adapter's model id (GET /api/models/: is_adapter)")


class AdapterQueuedSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField(help_text="'queued': the server's host loads or unloads it next")

    class Meta:
        ref_name = "AdapterQueued"


class ServerAdapterListApi(ApiView):
    required_perms = {"GET": roles.VIEW_SERVING, "POST": roles.MANAGE_SERVING}

    @extend_schema(tags=[TAG], operation_id="server_adapter_list",
                   responses={200: LoadedAdapterSerializer(many=True), **ERRORS_READ})
    def get(self, request, instance_id):
        return Response(LoadedAdapterSerializer(_instance(instance_id).adapters or [], many=True).data)

    @extend_schema(tags=[TAG], operation_id="server_adapter_load", request=AdapterLoadInputSerializer,
                   description="Load an adapter of the model this server serves under a new unique name "
                               "(<slug>-<8 hex>). The load runs on the server's host; it appears in the list once "
                               "vLLM accepted it (the audit timeline says loaded or failed).",
                   responses={202: AdapterQueuedSerializer, **ERRORS_WRITE})
    def post(self, request, instance_id):
        instance = _instance(instance_id)
        data = AdapterLoadInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        adapter = model_get(data.validated_data["adapter"])
        if adapter is None:
            raise ValidationFailed("no such adapter", errors=[{"path": "adapter", "message":
                                                               f"no model {data.validated_data['adapter']}"}])
        name = adapter_services.adapter_load(user=request.user, instance=instance, adapter=adapter)
        return Response({"name": name, "status": "queued"}, status=status.HTTP_202_ACCEPTED)


class ServerAdapterDetailApi(ApiView):
    required_perms = {"DELETE": roles.MANAGE_SERVING}

    @extend_schema(tags=[TAG], operation_id="server_adapter_unload", request=None,
                   responses={202: AdapterQueuedSerializer, **ERRORS_WRITE})
    def delete(self, request, instance_id, name: str):
        name = adapter_services.adapter_unload(user=request.user, instance=_instance(instance_id), name=name)
        return Response({"name": name, "status": "queued"}, status=status.HTTP_202_ACCEPTED)
