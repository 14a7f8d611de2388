"""Serving pages (/serving/): serve profiles, the servers launched from them (which profile served which model
when, on which host, their status, endpoint and loaded adapters), launch and stop for MANAGE_SERVING, read-only
for VIEW_SERVING. Thin: services do the work, selectors the reads."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console import roles
from console.errors import DomainError, ValidationFailed
from console.views import role_required
from streams import serving_selectors as selectors
from streams.model_artefacts import model_get
from streams.models import ServerInstance
from streams.services import serving

SPEC_EXAMPLE = json.dumps({"kind": "vllm", "enable_lora": True, "max_lora_rank": 16, "runtime_lora_updating": True},
                          indent=2)


def _profiles_with_lines():
    """Each profile with its command line, or why it cannot be launched here (a row edited behind the service's
    back, or one stored before its host, flags or runtime adapters were refused): the page still shows."""
    out = []
    for profile in selectors.serve_profile_list():
        try:
            line, problems = serving.profile_spec(profile).for_model("MODEL_DIR", name=profile.name).command_line(), []
        except ValidationFailed as exc:
            line, problems = "", exc.errors or [{"path": "spec", "message": exc.message}]
        out.append({"profile": profile, "command_line": line, "problems": problems})
    return out


def _index(request: HttpRequest, *, error: DomainError | None = None, form: dict | None = None,
           status: int = 200) -> HttpResponse:
    can_manage = request.user.has_perm(roles.MANAGE_SERVING)
    return render(request, "streams/serving/index.html", {
        "profiles": _profiles_with_lines(),
        "servers": list(selectors.server_list()[:100]),
        "models": selectors.launchable_models() if can_manage else [],
        "can_manage": can_manage, "error": error, "form": form or {"spec": SPEC_EXAMPLE},
        "live": ServerInstance.LIVE,
    }, status=status)


@role_required(roles.VIEW_SERVING)
@require_GET
def serving_index(request: HttpRequest) -> HttpResponse:
    return _index(request)


@role_required(roles.MANAGE_SERVING)
@require_POST
def profile_create(request: HttpRequest) -> HttpResponse:
    name, raw = request.POST.get("name", "").strip(), request.POST.get("spec", "")
    form = {"name": name, "spec": raw}
    try:
        try:
            spec = json.loads(raw)
        except ValueError as exc:
            raise ValidationFailed("the serve profile is invalid",
                                   errors=[{"path": "spec", "message": f"not JSON: {exc}"}]) from None
        profile = serving.serve_profile_create(user=request.user, name=name, spec=spec)
    except DomainError as exc:
        return _index(request, error=exc, form=form, status=exc.status_code)
    messages.info(request, f"Serve profile {profile.name} created.")
    return redirect("serving:index")


@role_required(roles.MANAGE_SERVING)
@require_POST
def server_launch(request: HttpRequest) -> HttpResponse:
    errors = []
    profile = None
    try:
        profile = selectors.serve_profile_get(request.POST.get("profile", ""))
    except Exception:  # noqa: BLE001 - missing or malformed: the same answer
        errors.append({"path": "profile", "message": "choose a serve profile"})
    model = model_get(request.POST.get("model", ""))
    if model is None:
        errors.append({"path": "model", "message": "choose a model"})
    try:
        if errors:
            raise ValidationFailed("the launch request is invalid", errors=errors)
        instance = serving.server_launch(user=request.user, profile=profile, model=model)
    except DomainError as exc:
        return _index(request, error=exc, status=exc.status_code)
    messages.info(request, f"Launching {model.name} with {profile.name} on a serve worker (vLLM is ready in about "
                           "90 s on a CPU host).")
    return redirect("serving:server", instance_id=instance.pk)


def _server_or_404(instance_id) -> ServerInstance:
    try:
        return selectors.server_get(instance_id)
    except ServerInstance.DoesNotExist:
        raise Http404("no such server") from None


@role_required(roles.VIEW_SERVING)
@require_GET
def server_detail(request: HttpRequest, instance_id) -> HttpResponse:
    return _server_page(request, _server_or_404(instance_id))


def _server_page(request, instance, *, error: DomainError | None = None, status: int = 200) -> HttpResponse:
    return render(request, "streams/serving/server_detail.html", {
        "instance": instance, "can_manage": request.user.has_perm(roles.MANAGE_SERVING), "error": error,
        "log_tail": selectors.log_tail(instance), "live": ServerInstance.LIVE,
    }, status=status)


@role_required(roles.MANAGE_SERVING)
@require_POST
def server_stop(request: HttpRequest, instance_id) -> HttpResponse:
    instance = _server_or_404(instance_id)
    try:
        serving.server_stop(user=request.user, instance=instance)
    except DomainError as exc:
        return _server_page(request, instance, error=exc, status=exc.status_code)
    messages.info(request, f"Stopping the server on {instance.host or 'its host'}: it says stopped once the process "
                           "is gone.")
    return redirect("serving:server", instance_id=instance.pk)
