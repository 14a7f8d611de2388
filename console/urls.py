from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from console import health
from console.views import SignInView
from streams import mcp_import_views, try_draft_views
from training_jobs.gate_views import gate_urls
from training_jobs.urls import eval_run_urls, eval_urls, model_urls, training_urls
from training_jobs.urls import latency_urls
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health/", health.health, name="health"),  # = readiness
    path("health/live", health.live, name="health-live"),
    path("health/ready", health.ready, name="health-ready"),
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),  # CSP: no inline JS
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("api/", include("console.api_urls")),
    # MCP tool import lives in streams (the registry imports nothing from it), under the harness's address
    path("harnesses/<slug:slug>/v<int:number>/mcp-import/", mcp_import_views.mcp_import, name="mcp_import"),
    path("harnesses/<slug:slug>/v<int:number>/try/", try_draft_views.try_draft, name="try_draft"),  # draft vs production
    path("harnesses/", include("harness_editor.urls")),
    path("preview/", include("streams.urls")),
    path("live/", include("streams.live_urls")),
    path("deployments/", include("streams.deployment_urls")),
    path("serving/", include("streams.serving_urls")),
    path("datasets/", include("training_jobs.urls")),
    path("training/", include(training_urls)),
    path("models/", include(model_urls)),
    path("eval-sets/", include(eval_urls)),
    path("evals/runs/", include(eval_run_urls)),
    path("gate/", include(gate_urls)),
    path("evals/latency/", include(latency_urls)),
    path("", include("console.page_urls")),
]
