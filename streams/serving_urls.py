"""serving pages (mounted at /serving/ by console.urls)."""

from django.urls import path

from streams import serving_views as views

app_name = "serving"

urlpatterns: list = [
    path("", views.serving_index, name="index"),
    path("profiles/", views.profile_create, name="profile_create"),
    path("servers/", views.server_launch, name="launch"),
    path("servers/<uuid:instance_id>/", views.server_detail, name="server"),
    path("servers/<uuid:instance_id>/stop/", views.server_stop, name="stop"),
]

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
