"""serving pages (mounted by console.urls)."""

from django.urls import path  # noqa: F401

app_name = "serving"

urlpatterns: list = []

# LoRA adapters and metrics (helper "lora": streams/adapter_views.py, streams/metrics_views.py)
from streams import adapter_views, metrics_views  # noqa: E402

urlpatterns += [
    path("metrics/", metrics_views.serving_metrics, name="metrics"),
    path("servers/<uuid:instance_id>/metrics/", metrics_views.server_metrics, name="server-metrics"),
    path("servers/<uuid:instance_id>/adapters/", adapter_views.server_adapters, name="server-adapters"),
    path("servers/<uuid:instance_id>/adapters/load/", adapter_views.server_adapter_load, name="server-adapter-load"),
    path("servers/<uuid:instance_id>/adapters/<str:name>/unload/", adapter_views.server_adapter_unload,
         name="server-adapter-unload"),
]
