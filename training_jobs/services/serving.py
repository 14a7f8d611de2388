"""Serving a registered model from its page: a server launched from the default CPU serve profile
(streams.services.serving), whose endpoint the preview room can pick, stopped on the host that runs it. An
evaluation after training serves its model directly on the gpu worker's host (model_serve_run)."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.db import transaction

from console import roles
from console.errors import InvalidTransition, NotAllowed
from console.services import audit_record
from training_jobs import selectors
from training_jobs.models import TrainedModel
from training_jobs.services.access import may_manage, require

def model_serve_start(*, user, model: TrainedModel) -> TrainedModel:
    """Serve a registered model from the model page: a server launched from the default CPU serve profile
    (streams.services.serving: vLLM, its launch on the serve queue), whose endpoint the preview room then offers.
    Idempotent while a server of it is starting or running."""
    require(user, roles.RUN_TRAINING, "serve models")
    from streams.models import ServerInstance
    from streams.services.serving import default_cpu_profile, server_launch

    if model.is_adapter:
        raise InvalidTransition(f"{model.name} is a LoRA adapter: load it into a vLLM server that serves its base "
                                f"(Serving)")
    if not (model.directory / "config.json").is_file():
        raise InvalidTransition(f"{model.name}: its directory {model.path} is gone")
    with transaction.atomic():
        profile = default_cpu_profile()
        if not ServerInstance.objects.filter(model=model, profile=profile, managed=True,
                                             status__in=ServerInstance.LIVE).exists():
            server_launch(user=user, profile=profile, model=model)
        audit_record(actor=user, action="model.serve", scope=f"model:{model.pk}", target=f"model:{model.name}")
    return model


def model_serve_run(*, model_id) -> TrainedModel:
    """Start the local server for a model on this host (the task's service) and register its endpoint as
    ``model-<id>`` (replacing a dead one). The server outlives the task."""
    import os
    import socket

    from streams.models import ModelEndpoint
    from training_jobs.tiny_model.serve import start_local_server

    model = TrainedModel.objects.select_related("endpoint").get(pk=model_id)
    if model.serve_pid and model.serve_host == socket.gethostname() and _alive(model.serve_pid) and model.endpoint:
        return model
    log = Path(settings.ENV.data_dir) / "serve" / f"{model.pk}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = start_local_server(model.directory, ready_timeout=180, log_path=log,
                                threads=int(os.environ.get("HAT_SERVE_THREADS", "1")))
    try:  # a loopback server: registered only when the outbound allow-list lets the console call it
        ModelEndpoint.check_url(server.openai_base_url)
    except ValueError:
        server.stop()
        raise
    endpoint, _ = ModelEndpoint.objects.update_or_create(
        name=f"model-{str(model.pk)[:8]}", defaults={"base_url": server.openai_base_url, "model": server.model,
                                                      "kind": ModelEndpoint.Kind.LOCAL, "timeout_s": 120})
    model.endpoint, model.serve_pid, model.serve_host = endpoint, server.proc.pid, socket.gethostname()
    model.save(update_fields=["endpoint", "serve_pid", "serve_host"])
    return model


def model_unserve(*, user, model: TrainedModel) -> TrainedModel:
    """Stop a model's server on the host that runs it (streams.services.serving.server_stop: queue serve.<host>).
    Preview rooms may be using it: only the person who started the server, the model's owner or an ML lead may
    stop it. A server this host started directly (an evaluation after training) is stopped the same way."""
    require(user, roles.RUN_TRAINING, "stop serving models")
    if not may_manage(user, selectors.model_served_by(model), model.created_by):
        raise NotAllowed("only the person who started its server, the model's owner or an ML lead may stop it")
    from streams.models import ServerInstance
    from streams.services.serving import host_queue, server_stop
    from training_jobs.tasks import model_serve_stop as stop_task

    with transaction.atomic():
        live = list(ServerInstance.objects.filter(model=model, managed=True, status__in=ServerInstance.LIVE)
                    .order_by("-created_at"))
        for instance in live:
            server_stop(user=user, instance=instance)
        if not live and model.serve_pid and model.serve_host:  # served by model_serve_run on that host
            model_id, queue = str(model.pk), host_queue(model.serve_host)
            transaction.on_commit(lambda: stop_task.apply_async(args=(model_id,), queue=queue))
        elif not live and model.endpoint_id is None:
            raise InvalidTransition(f"{model.name} is not served")
        elif not live:  # an endpoint attached by hand, no process the console knows: only the link goes
            model.endpoint = None
            model.save(update_fields=["endpoint"])
        audit_record(actor=user, action="model.unserve", scope=f"model:{model.pk}", target=f"model:{model.name}")
    return model


def model_serve_stop(*, model_id) -> TrainedModel:
    """Stop a model's server (on the host that runs it) and remove its endpoint."""
    import signal
    import socket

    model = TrainedModel.objects.select_related("endpoint").get(pk=model_id)
    if model.serve_pid and model.serve_host == socket.gethostname() and _alive(model.serve_pid):
        os.kill(model.serve_pid, signal.SIGTERM)
    if model.endpoint is not None:
        from django.db.models import ProtectedError

        try:
            model.endpoint.delete()
        except ProtectedError:  # preview rooms ran on it: it stays for their history (and now fails fast)
            pass
    model.endpoint, model.serve_pid, model.serve_host = None, None, ""
    model.save(update_fields=["endpoint", "serve_pid", "serve_host"])
    return model


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
