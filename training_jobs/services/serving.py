"""Serving a registered model on a worker host: a local OpenAI-compatible server whose endpoint the preview room
can pick (tasks on the gpu queue)."""

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
    """Attach a registered model to a local OpenAI-compatible server: a task on the gpu queue starts it on a
    worker host and registers its endpoint, which the preview room then offers. Idempotent while served."""
    require(user, roles.RUN_TRAINING, "serve models")
    from training_jobs.tasks import model_serve

    if model.is_adapter:
        raise InvalidTransition(f"{model.name} is a LoRA adapter: load it into a vLLM server that serves its base "
                                f"(Serving)")
    if not (model.directory / "config.json").is_file():
        raise InvalidTransition(f"{model.name}: its directory {model.path} is gone")
    model_id = str(model.pk)
    transaction.on_commit(lambda: model_serve.apply_async(args=(model_id,), queue="gpu"))
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
    """Ask the worker host that serves a model to stop its server (a task on the gpu queue). Preview rooms may be
    using it: only the person who started the server, the model's owner or an ML lead may stop it."""
    require(user, roles.RUN_TRAINING, "stop serving models")
    if not may_manage(user, selectors.model_served_by(model), model.created_by):
        raise NotAllowed("only the person who started its server, the model's owner or an ML lead may stop it")
    from training_jobs.tasks import model_serve_stop as stop_task

    model_id = str(model.pk)
    transaction.on_commit(lambda: stop_task.apply_async(args=(model_id,), queue="gpu"))
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
