"""Serving: serve profiles, and the model servers launched from them on worker hosts (or registered).

- :func:`serve_profile_create` stores a profile (a :class:`streams.serve_profiles.ServeSpec`, checked with located
  errors: ``spec.port``, ``spec.lora_adapters[0].name``, ``spec.extra_args[2]``); :func:`serve_spec_check` adds what
  this host's administrator allows (``HAT_SERVE_LISTEN_HOSTS``) and runs again at launch, on the web and on the
  worker before a process starts, so a stored profile that no longer passes fails cleanly with the reason.
- :func:`server_launch` records a :class:`ServerInstance` (STARTING) and sends :func:`server_run` to the ``serve``
  queue (any host); the worker that takes it starts the process on its host, waits until it answers ``/health``,
  registers (or refreshes) the server's :class:`ModelEndpoint` and marks it READY with host, pid, port, argv and
  log; FAILED with the error otherwise.
- :func:`server_stop` sends :func:`server_stop_run` to ``serve.<host>``, the queue only the host running the process
  consumes: the record says STOPPED only once the process is gone (before, a stop on another host cleared the
  record while the server lived on).
- :func:`server_register` records a server started outside the console (``make run``'s vLLM): never stopped by it.
- :func:`servers_check` (periodic) asks each host to look at its servers (:func:`servers_check_here`): one whose
  process died is FAILED.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError

from console import roles
from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from harness_editor.schemas import pydantic_errors
from streams.model_artefacts import model_get, model_served, model_unserved
from streams.models import ModelEndpoint, ServeProfile, ServerInstance
from streams.serve_profiles import (
    ServeSpec,
    launch,
    leads_own_group,
    process_alive,
    stop_process_group,
    vllm_demo_spec,
)

logger = logging.getLogger(__name__)

SERVE_QUEUE = "serve"  # launches: any host with a serve worker
DEFAULT_CPU_PROFILE = "cpu-default"  # the model page's Serve button
STARTING_GRACE_S = 60  # a STARTING record whose process is gone this long after launch lost its task


def serve_host() -> str:
    """This host's name as the serve queues know it (``serve.<host>``): HAT_SERVE_HOST, else the host name (what
    `$(hostname)` prints for the Makefile's serve worker)."""
    return os.environ.get("HAT_SERVE_HOST") or socket.gethostname()


def host_queue(host: str) -> str:
    return f"{SERVE_QUEUE}.{host}"


def _require(user, perm: str, what: str) -> None:
    if not user.has_perm(perm):
        raise NotAllowed(f"your role does not allow you to {what}")


# --- profiles -------------------------------------------------------------------------------------------------

def serve_spec_parse(spec, prefix: str = "spec") -> ServeSpec:
    """A spec from JSON data; ValidationFailed with every located error (``spec.port``)."""
    if isinstance(spec, ServeSpec):
        return spec
    if not isinstance(spec, dict):
        raise ValidationFailed("the serve profile is invalid",
                               errors=[{"path": prefix, "message": "a serve spec is a JSON object"}])
    try:
        return ServeSpec.model_validate(spec)
    except ValidationError as exc:
        errors = []
        for e in pydantic_errors(exc, kinds=("vllm", "local")):
            path = f"{prefix}.{e.path}" if e.path and not e.path.startswith("[") else f"{prefix}{e.path}"
            errors.append({"path": path, "message": e.message})
        raise ValidationFailed("the serve profile is invalid", errors=errors) from None


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_policy_errors(spec: ServeSpec, prefix: str = "spec") -> list[dict[str, str]]:
    """What a valid spec may still not do here: listen on an address the administrator did not allow
    (``HAT_SERVE_LISTEN_HOSTS``: loopback by default; vLLM's API has no authentication), or load adapters at run
    time off loopback (``POST /v1/load_lora_adapter`` would let anyone who reaches the port load any path)."""
    allowed = [h.lower() for h in settings.HAT_SERVE_LISTEN_HOSTS]
    if spec.host.lower() not in allowed:
        return [{"path": f"{prefix}.host", "message": f"model servers may listen on {', '.join(allowed) or 'nothing'} "
                 f"only (HAT_SERVE_LISTEN_HOSTS, set by an administrator), not {spec.host!r}"}]
    if spec.runtime_lora_updating and not _loopback(spec.host):
        return [{"path": f"{prefix}.runtime_lora_updating", "message": "adapters are loaded at run time only into a "
                 f"server on loopback (vLLM's load endpoint has no authentication), not on {spec.host!r}: a server "
                 "other hosts reach loads its adapters at start (lora_adapters)"}]
    return []


def serve_spec_check(spec, prefix: str = "spec") -> ServeSpec:
    """:func:`serve_spec_parse` and :func:`serve_policy_errors`: what may be stored and launched on this host."""
    parsed = serve_spec_parse(spec, prefix)
    errors = serve_policy_errors(parsed, prefix)
    if errors:
        raise ValidationFailed("the serve profile is invalid", errors=errors)
    return parsed


def serve_profile_create(*, user, name: str, spec) -> ServeProfile:
    """Store a serve profile under a unique slug ``name``."""
    _require(user, roles.MANAGE_SERVING, "create serve profiles")
    errors = []
    from django.utils.text import slugify

    if not isinstance(name, str) or not name or slugify(name) != name or len(name) > 64:
        errors.append({"path": "name", "message": "a profile name is a slug (a-z, 0-9, -, _) of at most 64 characters"})
    try:
        parsed = serve_spec_check(spec)
    except ValidationFailed as exc:
        errors += exc.errors
        parsed = None
    if errors:
        raise ValidationFailed("the serve profile is invalid", errors=errors)
    if ServeProfile.objects.filter(name=name).exists():
        raise ValidationFailed("the serve profile is invalid",
                               errors=[{"path": "name", "message": f"a profile named {name!r} exists"}])
    try:
        with transaction.atomic():
            profile = ServeProfile.objects.create(name=name, spec=parsed.model_dump(mode="json", exclude_defaults=True),
                                                  created_by=user)
            audit_record(actor=user, action="serve_profile.create", scope=f"serve_profile:{profile.pk}",
                         target=f"serve_profile:{name}", data={"spec": profile.spec})
    except IntegrityError:  # created by someone else meanwhile
        raise ValidationFailed("the serve profile is invalid",
                               errors=[{"path": "name", "message": f"a profile named {name!r} exists"}]) from None
    return profile


def default_cpu_profile() -> ServeProfile:
    """The profile the model page's Serve button uses: vLLM (CPU build on CPU hosts) with adapters loadable at
    run time."""
    profile, _ = ServeProfile.objects.get_or_create(
        name=DEFAULT_CPU_PROFILE, defaults={"spec": vllm_demo_spec().model_dump(mode="json", exclude_defaults=True)})
    return profile


def profile_spec(profile: ServeProfile) -> ServeSpec:
    """A stored profile's spec, checked as at creation (ValidationFailed, located, when it no longer passes)."""
    return serve_spec_check(profile.spec)




# --- launch ---------------------------------------------------------------------------------------------------

def server_launch(*, user, profile: ServeProfile, model) -> ServerInstance:
    """Record a server of ``model`` (a registered model — :class:`~streams.model_artefacts.ModelArtefact`, its id or
    row — not an adapter: adapters are loaded into a running server) under ``profile`` and send its launch to the
    serve queue on commit."""
    _require(user, roles.MANAGE_SERVING, "launch model servers")
    given, model = model, model_get(model)
    if model is None:
        raise ValidationFailed("no such model", errors=[{"path": "model", "message": f"no model {given!s:.80}"}])
    if model.is_adapter:
        raise InvalidTransition(f"{model.name} is a LoRA adapter: launch its base model and load the adapter into "
                                "that server")
    if not (Path(model.path) / "config.json").is_file():
        raise InvalidTransition(f"{model.name}: its directory {model.path} is gone")
    profile_spec(profile)  # a stored spec edited behind the service's back (or now refused) fails here
    with transaction.atomic():
        instance = ServerInstance.objects.create(profile=profile, model_id=model.id, model_path=model.path,
                                                 managed=True, status=ServerInstance.Status.STARTING,
                                                 started_by=user)
        audit_record(actor=user, action="server.launch", scope=f"server:{instance.pk}",
                     target=f"model:{model.name}", to_state="starting",
                     data={"profile": profile.name, "model": str(model.pk)})
        instance_id = str(instance.pk)

        def send() -> None:
            from streams.serving_tasks import server_run as task

            task.apply_async(args=(instance_id,), queue=SERVE_QUEUE)

        transaction.on_commit(send)
    return instance


def _endpoint_name(instance: ServerInstance) -> str:
    key = str(instance.model_id or instance.pk)[:8]
    return f"{instance.profile.name[:55]}-{key}"


def server_run(instance_id) -> ServerInstance:
    """The launch task's service, on the host that took it: start the process, wait until it is ready, register
    its endpoint; READY, or FAILED with the error. The server outlives the task."""
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update().select_related("profile").get(pk=instance_id)
        if instance.status != ServerInstance.Status.STARTING or instance.pid:
            return instance  # stopped before a worker took it, or a redelivered launch: nothing to start
        instance.host = serve_host()
        instance.save(update_fields=["host"])
    # checked again here, before any process starts: the row may have changed since the launch was asked for, and
    # this host's HAT_SERVE_LISTEN_HOSTS is the one that counts
    try:
        spec = profile_spec(instance.profile)
        profile = spec.for_model(instance.model_path, name=instance.profile.name)
    except (ValidationFailed, ValueError) as exc:  # ValueError: pydantic's, the model path does not fit
        errors = exc.errors if isinstance(exc, ValidationFailed) else []
        why = "; ".join(f"{e['path']}: {e['message']}" for e in errors) or str(exc)
        _fail_unless_stopping(instance.pk, f"the serve profile is invalid: {why}")
        return ServerInstance.objects.get(pk=instance.pk)
    log = Path(settings.ENV.data_dir) / "serve" / f"{instance.pk}.log"
    log.parent.mkdir(parents=True, exist_ok=True)

    def started(proc, argv, port) -> None:  # recorded at once: a stop during the long wait finds the process
        ServerInstance.objects.filter(pk=instance.pk).update(pid=proc.pid, port=port, argv=argv, log_path=str(log))

    connect = instance.host if spec.host in ("0.0.0.0", "::") else None
    try:
        server = launch(profile, log_path=log, connect_host=connect, on_started=started)
    except Exception as exc:  # noqa: BLE001 - every failure is the record's error
        _fail_unless_stopping(instance.pk, f"{type(exc).__name__}: {exc}")
        return ServerInstance.objects.get(pk=instance.pk)
    try:
        ModelEndpoint.check_url(server.openai_base_url)
    except ValueError as exc:  # the outbound allow-list does not let the console call it: useless, stopped
        stop_process_group(server.proc.pid)
        _fail_unless_stopping(instance.pk, f"the console may not call {server.openai_base_url}: {exc}")
        return ServerInstance.objects.get(pk=instance.pk)
    try:
        instance = _mark_ready(instance.pk, spec, server)
    except BaseException as exc:  # a server nobody records is a server nobody stops
        stop_process_group(server.proc.pid)
        _fail_unless_stopping(instance.pk, f"{type(exc).__name__}: {exc}")
        raise
    logger.info("server %s ready on %s:%s after %.1f s", instance.pk, instance.host, instance.port, server.ready_s)
    return instance


def _mark_ready(instance_id, spec: ServeSpec, server) -> ServerInstance:
    """Register (or refresh) the server's endpoint and mark it READY, unless a stop came during the start."""
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update(of=("self",)).select_related("profile", "model") \
            .get(pk=instance_id)
        if instance.status != ServerInstance.Status.STARTING:  # a stop came during the start: the stop task ends it
            return instance
        kind = ModelEndpoint.Kind.VLLM if spec.kind == "vllm" else ModelEndpoint.Kind.LOCAL
        endpoint, _ = ModelEndpoint.objects.update_or_create(
            name=_endpoint_name(instance),
            defaults={"base_url": server.openai_base_url, "model": server.model, "kind": kind, "timeout_s": 120})
        instance.endpoint = endpoint
        instance.status = ServerInstance.Status.READY
        instance.ready_at = timezone.now()
        instance.error = ""
        instance.save(update_fields=["endpoint", "status", "ready_at", "error"])
        if instance.model_id is not None:  # the model page shows where it is served (and the preview room offers it)
            model_served(instance.model_id, endpoint_id=endpoint.pk, pid=instance.pid, host=instance.host)
    return instance


def _fail_unless_stopping(instance_id, error: str) -> None:
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update().get(pk=instance_id)
        if instance.status == ServerInstance.Status.STARTING:
            instance.status, instance.error, instance.stopped_at = ServerInstance.Status.FAILED, error[:4000], \
                timezone.now()
            instance.save(update_fields=["status", "error", "stopped_at"])


# --- stop -----------------------------------------------------------------------------------------------------

def server_stop(*, user, instance: ServerInstance) -> ServerInstance:
    """Ask the host running ``instance`` to stop it (a task on ``serve.<host>``); STOPPED once the process is
    gone. A launch no worker has taken yet is simply cancelled."""
    _require(user, roles.MANAGE_SERVING, "stop model servers")
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update().get(pk=instance.pk)
        if not instance.managed:
            raise InvalidTransition("this server was started outside the console: stop it where it was started")
        if instance.status in (ServerInstance.Status.STOPPED, ServerInstance.Status.FAILED):
            raise InvalidTransition(f"the server is already {instance.status}")
        before = instance.status
        if instance.status == ServerInstance.Status.STARTING and not instance.host:
            instance.status, instance.stopped_at = ServerInstance.Status.STOPPED, timezone.now()
            instance.save(update_fields=["status", "stopped_at"])
        else:
            instance.status = ServerInstance.Status.STOPPING
            instance.save(update_fields=["status"])
            instance_id, queue = str(instance.pk), host_queue(instance.host)

            def send() -> None:
                from streams.serving_tasks import server_stop as task

                task.apply_async(args=(instance_id,), queue=queue)

            transaction.on_commit(send)
        audit_record(actor=user, action="server.stop", scope=f"server:{instance.pk}",
                     target=f"server:{instance.host or '?'}:{instance.port or '?'}", from_state=before,
                     to_state=instance.status)
    return instance


def server_stop_run(instance_id) -> ServerInstance:
    """The stop task's service, on the instance's host: end the process group, then STOPPED."""
    instance = ServerInstance.objects.get(pk=instance_id)
    if instance.host and instance.host != serve_host():
        # only serve.<host> routes here; a worker given another host's name would kill a stranger's pid
        raise RuntimeError(f"server {instance.pk} runs on {instance.host}, not on {serve_host()}")
    if instance.status in (ServerInstance.Status.STOPPED, ServerInstance.Status.FAILED):
        return instance
    pid = instance.pid
    if pid and process_alive(pid) and leads_own_group(pid):
        if not stop_process_group(pid):
            raise RuntimeError(f"server process {pid} did not stop")
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update().get(pk=instance_id)
        instance.status, instance.stopped_at = ServerInstance.Status.STOPPED, timezone.now()
        instance.adapters = []
        instance.save(update_fields=["status", "stopped_at", "adapters"])
        _model_unserved(instance)
    return instance


def _model_unserved(instance: ServerInstance) -> None:
    if instance.model_id is not None and instance.endpoint_id is not None:
        model_unserved(instance.model_id, endpoint_id=instance.endpoint_id)


# --- servers started elsewhere --------------------------------------------------------------------------------

def server_register(*, profile: ServeProfile, endpoint: ModelEndpoint, model=None, host: str = "",
                    managed: bool = False) -> ServerInstance:
    """Record a server started outside the console (``make run``'s vLLM) as READY behind ``endpoint``; the same
    live record is refreshed when called again (seed_demo on every start)."""
    port = urlsplit(endpoint.base_url).port
    live = (ServerInstance.objects.filter(profile=profile, endpoint=endpoint, managed=managed,
                                          status__in=ServerInstance.LIVE).order_by("-created_at").first())
    fields = {"model_id": model.pk if model is not None else None,
              "model_path": model.path if model is not None else endpoint.model,
              "host": host or urlsplit(endpoint.base_url).hostname or "", "port": port,
              "status": ServerInstance.Status.READY}
    if live is None:
        return ServerInstance.objects.create(profile=profile, endpoint=endpoint, managed=managed,
                                             ready_at=timezone.now(), **fields)
    for key, value in fields.items():
        setattr(live, key, value)
    live.save()
    return live


# --- the periodic check ---------------------------------------------------------------------------------------

def servers_check() -> list[str]:
    """Periodic (CELERY_BEAT_SCHEDULE): ask every host with live console-launched servers to check them; returns
    the hosts asked."""
    from streams.serving_tasks import servers_check_host

    hosts = sorted(set(ServerInstance.objects.filter(managed=True, status__in=ServerInstance.LIVE)
                       .exclude(host="").values_list("host", flat=True)))
    for host in hosts:
        servers_check_host.apply_async(args=(host,), queue=host_queue(host), expires=300)
    return hosts


def servers_check_here() -> list[str]:
    """On one host: a READY server whose process is gone is FAILED, a STOPPING one STOPPED; a STARTING one whose
    process died with its launch task (worker killed) FAILED. Returns the ids changed."""
    changed = []
    host = serve_host()
    grace = timezone.now() - timedelta(seconds=STARTING_GRACE_S)
    for instance in ServerInstance.objects.filter(managed=True, host=host, status__in=ServerInstance.LIVE):
        if process_alive(instance.pid):
            continue
        with transaction.atomic():
            row = ServerInstance.objects.select_for_update().get(pk=instance.pk)
            if row.pid != instance.pid or row.status not in ServerInstance.LIVE or process_alive(row.pid):
                continue
            if row.status == ServerInstance.Status.STARTING and (row.created_at > grace):
                continue  # its launch task is still about to start it
            if row.status == ServerInstance.Status.STOPPING:
                row.status = ServerInstance.Status.STOPPED
            else:
                row.status = ServerInstance.Status.FAILED
                row.error = f"the server process ({row.pid}) exited (found by the periodic check)"
            row.stopped_at, row.adapters = timezone.now(), []
            row.save(update_fields=["status", "error", "stopped_at", "adapters"])
            _model_unserved(row)
        changed.append(str(row.pk))
    return changed
