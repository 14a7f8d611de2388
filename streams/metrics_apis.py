"""REST API of the serving metrics: every vLLM endpoint's figures now, or one endpoint's by name. VIEW_SERVING
reads; an endpoint that cannot be read is ``up: false`` with the reason (200), an unknown name 404."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.response import Response

from console import roles
from console.apis import ERRORS_READ, ApiView
from streams import metrics_selectors
from streams.models import ModelEndpoint

TAG = "serving"


class TtftSerializer(serializers.Serializer):
    requests = serializers.IntegerField(help_text="first tokens observed")
    p50_s = serializers.FloatField(allow_null=True, help_text="estimated from the histogram buckets")
    p95_s = serializers.FloatField(allow_null=True)
    mean_s = serializers.FloatField(allow_null=True, help_text="sum / count")

    class Meta:
        ref_name = "ServingTtft"


class LoraInfoSerializer(serializers.Serializer):
    running = serializers.ListField(child=serializers.CharField())
    waiting = serializers.ListField(child=serializers.CharField())
    max_loras = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "ServingLoraInfo"


class FiguresSerializer(serializers.Serializer):
    ttft = TtftSerializer(allow_null=True, help_text="time to first token since the server started")
    ttft_recent = TtftSerializer(allow_null=True, help_text="since the previous reading (None: no request since)")
    generation_tokens_per_s = serializers.FloatField(allow_null=True, help_text="between the previous reading and "
                                                                                "this one (None on the first)")
    rate_window_s = serializers.FloatField(allow_null=True)
    generation_tokens_total = serializers.FloatField(allow_null=True)
    prompt_tokens_total = serializers.FloatField(allow_null=True)
    requests_done = serializers.FloatField(allow_null=True)
    queue_length = serializers.FloatField(allow_null=True, help_text="requests waiting")
    running = serializers.FloatField(allow_null=True, help_text="requests running")
    kv_cache_usage = serializers.FloatField(allow_null=True, help_text="0 to 1")
    kv_cache_metric = serializers.CharField(allow_null=True, help_text="the series it was read from")
    lora = LoraInfoSerializer(allow_null=True)

    class Meta:
        ref_name = "ServingFigures"


class EndpointMetricsSerializer(serializers.Serializer):
    endpoint = serializers.CharField()
    model = serializers.CharField()
    kind = serializers.CharField()
    up = serializers.BooleanField()
    error = serializers.CharField(allow_blank=True, help_text="why it could not be read (when down)")
    read_at = serializers.FloatField(help_text="Unix time of the reading")
    figures = FiguresSerializer(allow_null=True)

    class Meta:
        ref_name = "EndpointMetrics"


class ServingMetricsApi(ApiView):
    required_perms = {"GET": roles.VIEW_SERVING}

    @extend_schema(tags=[TAG], operation_id="serving_metrics",
                   description="Every vLLM endpoint's figures, read now (2 s at most per server).",
                   responses={200: EndpointMetricsSerializer(many=True), **ERRORS_READ})
    def get(self, request):
        return Response(EndpointMetricsSerializer(metrics_selectors.endpoints_metrics(), many=True).data)


class EndpointMetricsApi(ApiView):
    required_perms = {"GET": roles.VIEW_SERVING}

    @extend_schema(tags=[TAG], operation_id="endpoint_metrics",
                   description="One vLLM endpoint's figures by its name: TTFT p50/p95/mean, generation tokens/s, "
                               "queue length, running requests, KV-cache use, adapters running.",
                   responses={200: EndpointMetricsSerializer, **ERRORS_READ})
    def get(self, request, name: str):
        try:
            endpoint = metrics_selectors.metrics_endpoint_get(name=name)
        except ModelEndpoint.DoesNotExist:
            raise exceptions.NotFound(f"no vLLM endpoint {name!r}") from None
        return Response(EndpointMetricsSerializer(metrics_selectors.endpoint_metrics(endpoint)).data)
