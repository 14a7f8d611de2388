"""The adapters section of a server: the LoRA adapters loaded now (the name requests carry, the adapter, when), the
recent load and unload steps from the audit timeline (requested → loaded / unloaded or failed with vLLM's reason),
and, for those who manage serving, a form to load an adapter of the model this server serves and a button per
adapter to unload it.

One URL serves the whole page and the fragment the server pages include (htmx); forms are plain POSTs, so it works
without script.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.models import AuditEvent
from console.views import role_required
from streams.live_models import ServerInstance
from streams.model_artefacts import ModelArtefact, model_get, model_list, models_by_id
from streams.services import adapters as adapter_services

RECENT_STEPS = 12


def _instance_or_404(instance_id) -> ServerInstance:  # instance_id: a UUID (the URL's converter)
    instance = ServerInstance.objects.select_related("profile", "model", "endpoint").filter(pk=instance_id).first()
    if instance is None:
        raise Http404("no such server")
    return instance


def loadable_adapters(instance: ServerInstance) -> list[ModelArtefact]:
    """Adapters of the model this server serves (what the load form offers)."""
    if instance.model_id:
        return list(model_list(adapters=True, base_id=instance.model_id, limit=100))
    return list(model_list(adapters=True, base_path=instance.model_path, limit=100))


def _page(request: HttpRequest, instance: ServerInstance, *, error: Exception | None = None,
          status: int = 200) -> HttpResponse:
    spec = instance.profile.spec or {}
    names = {str(a.get("model_id")) for a in instance.adapters or []}
    models = models_by_id(names)
    loaded = [{**a, "model": models.get(str(a.get("model_id")))} for a in instance.adapters or []]
    steps = AuditEvent.objects.filter(scope=adapter_services.server_scope(instance),
                                      action__in=(adapter_services.LOAD_ACTION, adapter_services.UNLOAD_ACTION)
                                      ).select_related("actor").order_by("-id")[:RECENT_STEPS]
    context = {
        "instance": instance, "loaded": loaded, "steps": list(steps), "error": error,
        "lora_enabled": bool(spec.get("enable_lora") and spec.get("runtime_lora_updating")),
        "max_lora_rank": adapter_services.max_lora_rank(instance),
        "can_manage": request.user.has_perm(roles.MANAGE_SERVING),
        "choices": loadable_adapters(instance) if request.user.has_perm(roles.MANAGE_SERVING) else [],
        "pending": any(s.to_state == "requested" for s in steps[:1]),
    }
    template = "streams/serving/adapters.html#adapters" if request.htmx else "streams/serving/adapters.html"
    return render(request, template, context, status=status)


@role_required(roles.VIEW_SERVING)
@require_GET
def server_adapters(request: HttpRequest, instance_id) -> HttpResponse:
    return _page(request, _instance_or_404(instance_id))


def _done(request: HttpRequest, instance: ServerInstance, notice: str) -> HttpResponse:
    if request.htmx:
        return _page(request, instance)
    messages.info(request, notice)
    return redirect("serving:server-adapters", instance_id=instance.pk)  # a reload is a GET, not a second load


@role_required(roles.MANAGE_SERVING)
@require_POST
def server_adapter_load(request: HttpRequest, instance_id) -> HttpResponse:
    instance = _instance_or_404(instance_id)
    adapter_id = request.POST.get("adapter", "")
    adapter = model_get(adapter_id)
    try:
        if adapter is None:
            raise ValidationFailed("pick an adapter", errors=[{"path": "adapter", "message": f"no model "
                                                                                            f"{adapter_id!r}"[:200]}])
        name = adapter_services.adapter_load(user=request.user, instance=instance, adapter=adapter)
    except DomainError as exc:
        return _page(request, instance, error=exc, status=exc.status_code)
    return _done(request, instance, f"Loading {adapter.name} as {name} on {instance.host or 'its host'}.")


@role_required(roles.MANAGE_SERVING)
@require_POST
def server_adapter_unload(request: HttpRequest, instance_id, name: str) -> HttpResponse:
    instance = _instance_or_404(instance_id)
    try:
        adapter_services.adapter_unload(user=request.user, instance=instance, name=name)
    except DomainError as exc:
        return _page(request, instance, error=exc, status=exc.status_code)
    return _done(request, instance, f"Unloading {name}.")
