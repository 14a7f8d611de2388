"""REST API routes of serving (added to console.api_urls)."""

from django.urls import path

from streams import serving_apis as apis

urlpatterns: list = [
    path("serving/profiles/", apis.ProfileListCreateApi.as_view(), name="api-serve-profile-list"),
    path("serving/servers/", apis.ServerListLaunchApi.as_view(), name="api-server-list"),
    path("serving/servers/<uuid:instance_id>/", apis.ServerDetailApi.as_view(), name="api-server-detail"),
    path("serving/servers/<uuid:instance_id>/stop/", apis.ServerStopApi.as_view(), name="api-server-stop"),
]

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
