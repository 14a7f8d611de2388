"""REST API routes of serving (added to console.api_urls)."""

from django.urls import path  # noqa: F401

urlpatterns: list = []

# LoRA adapters and endpoint metrics (helper "lora": streams/adapter_apis.py, streams/metrics_apis.py)
from streams import adapter_apis, metrics_apis  # noqa: E402

urlpatterns += [
    path("serving/metrics", metrics_apis.ServingMetricsApi.as_view(), name="api-serving-metrics"),
    path("serving/endpoints/<str:name>/metrics", metrics_apis.EndpointMetricsApi.as_view(),
         name="api-endpoint-metrics"),
    path("serving/servers/<uuid:instance_id>/adapters/", adapter_apis.ServerAdapterListApi.as_view(),
         name="api-server-adapters"),
    path("serving/servers/<uuid:instance_id>/adapters/<str:name>", adapter_apis.ServerAdapterDetailApi.as_view(),
         name="api-server-adapter"),
]
