"""Serving metrics pages: every vLLM endpoint's figures (TTFT, tokens/s, queue, running, KV cache, adapters), one
page that refreshes itself with htmx, and one server's figures as a fragment the server pages include.

Each view: authorise (VIEW_SERVING) → one selector → render; a server that cannot be read shows as down with the
reason (streams.metrics_selectors), never an error page.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import roles
from console.views import role_required
from streams import metrics_selectors
from streams.live_models import ServerInstance

POLL_S = 3


@role_required(roles.VIEW_SERVING)
@require_GET
def serving_metrics(request: HttpRequest) -> HttpResponse:
    rows = metrics_selectors.endpoints_metrics()
    template = "streams/serving/metrics.html#metrics" if request.htmx else "streams/serving/metrics.html"
    return render(request, template, {"rows": rows, "poll_s": POLL_S})


@role_required(roles.VIEW_SERVING)
@require_GET
def server_metrics(request: HttpRequest, instance_id) -> HttpResponse:
    """One server's endpoint figures (a fragment: the server pages load it with htmx and it refreshes itself)."""
    # instance_id is a UUID (the URL's converter)
    instance = ServerInstance.objects.select_related("endpoint").filter(pk=instance_id).first()
    if instance is None:
        raise Http404("no such server")
    rows = [metrics_selectors.endpoint_metrics(instance.endpoint)] if instance.endpoint else []
    return render(request, "streams/serving/_server_metrics.html",
                  {"rows": rows, "instance": instance, "poll_s": POLL_S})
