"""LoRA adapters loaded into (and unloaded from) a running vLLM server at run time.

:func:`adapter_load` checks the request here (role, a ready server whose profile allows runtime LoRA loading, an
adapter of the model that server serves, its rank within the server's ``--max-lora-rank``), picks a name unique to
this load (``<slug>-<8 hex>``: requests then say ``"model": name``) and queues the HTTP call on the server's host
(queue ``serve.<host>``): the adapter directory is on that host's disk, and vLLM reads it from there.
:func:`adapter_load_run` (the task's service, on that host) makes the call and, once vLLM said yes, appends
``{"name", "path", "model_id", "loaded_at"}`` to ``ServerInstance.adapters``. Unloading goes the same way.

Every step is on the one audit timeline (scope ``server:<id>``): ``server.adapter_load`` /
``server.adapter_unload`` with ``to_state`` requested, then loaded / unloaded or failed (with vLLM's reason).
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from console import roles
from console.errors import DomainError, InvalidTransition, NotAllowed, ValidationFailed
from console.services import audit_record
from streams.live_models import ServerInstance
from streams.model_artefacts import model_get
from streams.vllm_admin import VllmAdminError, load_lora_adapter, unload_lora_adapter

logger = logging.getLogger(__name__)

DEFAULT_MAX_LORA_RANK = 16  # vLLM's default --max-lora-rank (and this project's servers')
NAME_SLUG_CHARS = 40
LOAD_ACTION, UNLOAD_ACTION = "server.adapter_load", "server.adapter_unload"


class AdapterNotLoaded(DomainError):
    status_code = 404
    code = "not_found"


def serve_queue(host: str) -> str:
    """The queue a worker on ``host`` consumes for the servers it runs (``serve.<hostname>``)."""
    return f"serve.{host}"


def server_scope(instance: ServerInstance) -> str:
    return f"server:{instance.pk}"


def server_base_url(instance: ServerInstance) -> str:
    """Where the server's host reaches it: its endpoint's URL, else loopback on its port."""
    if instance.endpoint_id and instance.endpoint and instance.endpoint.base_url:
        return instance.endpoint.base_url
    return f"http://127.0.0.1:{instance.port}"


def max_lora_rank(instance: ServerInstance) -> int:
    spec = instance.profile.spec or {}
    rank = spec.get("max_lora_rank")
    return int(rank) if isinstance(rank, int) and rank > 0 else DEFAULT_MAX_LORA_RANK


def adapter_name(adapter) -> str:
    """A name unique to one load: the adapter's name as a slug and 8 random hex digits."""
    slug = slugify(adapter.name)[:NAME_SLUG_CHARS].strip("-") or "adapter"
    return f"{slug}-{secrets.token_hex(4)}"


def _require(user, what: str) -> None:
    if not user.has_perm(roles.MANAGE_SERVING):
        raise NotAllowed(f"your role does not allow you to {what}")


def _load_errors(instance: ServerInstance, adapter) -> list[dict[str, str]]:
    spec = instance.profile.spec or {}
    errors = []
    if not (spec.get("enable_lora") and spec.get("runtime_lora_updating")):
        errors.append({"path": "instance", "message": f"profile {instance.profile.name} does not load LoRA adapters "
                                                      f"at run time (enable_lora and runtime_lora_updating)"})
    if not adapter.is_adapter:
        errors.append({"path": "adapter", "message": f"{adapter.name} is a full model, not a LoRA adapter"})
        return errors
    base = adapter.base
    serves_base = base is not None and (instance.model_id == base.pk if instance.model_id
                                        else instance.model_path == base.path)
    if not serves_base:
        errors.append({"path": "adapter", "message": f"{adapter.name} is an adapter of "
                       f"{base.name if base else 'an unknown model'}; this server serves "
                       f"{instance.model.name if instance.model else instance.model_path}"})
    rank, limit = adapter.lora_rank, max_lora_rank(instance)
    if rank is not None and rank > limit:
        errors.append({"path": "adapter", "message": f"{adapter.name} has rank {rank}; this server loads adapters "
                                                     f"up to rank {limit} (--max-lora-rank)"})
    return errors


def adapter_load(*, user, instance: ServerInstance, adapter) -> str:
    """Queue loading ``adapter`` (a registered LoRA adapter — :class:`~streams.model_artefacts.ModelArtefact`, its
    id or row) into the running server ``instance``.
    Returns the name it will be served under. NotAllowed without MANAGE_SERVING, InvalidTransition (409) when the
    server is not ready, ValidationFailed (400, located) when the profile or the adapter does not fit; nothing is
    queued then."""
    _require(user, "load LoRA adapters")
    given, adapter = adapter, model_get(adapter)
    if adapter is None:
        raise ValidationFailed("no such adapter", errors=[{"path": "adapter", "message": f"no model {given!s:.80}"}])
    instance = ServerInstance.objects.select_related("profile", "model", "endpoint").get(pk=instance.pk)
    if instance.status != ServerInstance.Status.READY:
        raise InvalidTransition(f"the server is {instance.status}, not ready: adapters load into a running server")
    errors = _load_errors(instance, adapter)
    if errors:
        raise ValidationFailed("this adapter cannot be loaded into this server", errors=errors)
    taken = {a.get("name") for a in instance.adapters or []}
    name = adapter_name(adapter)
    while name in taken:  # 8 hex digits: practically never, but a name must not serve two adapters
        name = adapter_name(adapter)
    with transaction.atomic():
        audit_record(actor=user, action=LOAD_ACTION, scope=server_scope(instance), target=f"adapter:{name}",
                     to_state="requested", data={"name": name, "model_id": str(adapter.pk), "path": adapter.path,
                                                 "host": instance.host})
        _queue("adapter_load", instance.host, instance.pk, str(adapter.pk), name, user.pk)
    return name


def adapter_unload(*, user, instance: ServerInstance, name: str) -> str:
    """Queue unloading the adapter loaded under ``name``. AdapterNotLoaded (404) when the server holds none by
    that name; InvalidTransition (409) when the server is not running."""
    _require(user, "unload LoRA adapters")
    instance = ServerInstance.objects.select_related("profile").get(pk=instance.pk)
    if not any(a.get("name") == name for a in instance.adapters or []):
        raise AdapterNotLoaded(f"no adapter {name!r} is loaded on this server")
    if instance.status != ServerInstance.Status.READY:
        raise InvalidTransition(f"the server is {instance.status}, not ready")
    with transaction.atomic():
        audit_record(actor=user, action=UNLOAD_ACTION, scope=server_scope(instance), target=f"adapter:{name}",
                     to_state="requested", data={"name": name, "host": instance.host})
        _queue("adapter_unload", instance.host, instance.pk, None, name, user.pk)
    return name


def _queue(task_name: str, host: str, instance_id, adapter_id: str | None, name: str, user_id) -> None:
    from streams import adapter_tasks

    task = getattr(adapter_tasks, task_name)
    args: tuple[Any, ...] = ((str(instance_id), adapter_id, name, user_id) if adapter_id is not None
                             else (str(instance_id), name, user_id))
    transaction.on_commit(lambda: task.apply_async(args=args, queue=serve_queue(host)))


def _user(user_id):
    return get_user_model().objects.filter(pk=user_id).first() if user_id is not None else None


def adapter_load_run(*, instance_id, adapter_id, name: str, user_id=None) -> dict[str, Any]:
    """On the server's host (the task's service): load the adapter into vLLM, then record it on the instance.
    Never raises for a refusal: the outcome (loaded, or failed with vLLM's reason) is audited and returned."""
    user = _user(user_id)
    instance = ServerInstance.objects.select_related("endpoint").get(pk=instance_id)
    adapter = model_get(adapter_id)
    scope, target = server_scope(instance), f"adapter:{name}"
    if adapter is None:  # deleted from the registry since it was queued
        return _failed(user, LOAD_ACTION, scope, target, name, f"no registered model {adapter_id}")
    if instance.status != ServerInstance.Status.READY:
        return _failed(user, LOAD_ACTION, scope, target, name, f"the server is {instance.status}, not ready")
    try:
        answer = load_lora_adapter(server_base_url(instance), name, adapter.path)
    except VllmAdminError as exc:
        return _failed(user, LOAD_ACTION, scope, target, name, str(exc))
    entry = {"name": name, "path": adapter.path, "model_id": str(adapter.pk), "loaded_at": timezone.now().isoformat()}
    with transaction.atomic():
        locked = ServerInstance.objects.select_for_update().get(pk=instance_id)
        locked.adapters = [*(a for a in locked.adapters or [] if a.get("name") != name), entry]
        locked.save(update_fields=["adapters"])
        audit_record(actor=user, action=LOAD_ACTION, scope=scope, target=target, from_state="requested",
                     to_state="loaded", comment=answer[:500], data=entry)
    return {"ok": True, **entry}


def adapter_unload_run(*, instance_id, name: str, user_id=None) -> dict[str, Any]:
    """On the server's host: unload the adapter from vLLM and drop it from the instance. An adapter vLLM no longer
    knows (the server restarted) is dropped too."""
    user = _user(user_id)
    instance = ServerInstance.objects.select_related("endpoint").get(pk=instance_id)
    scope, target = server_scope(instance), f"adapter:{name}"
    comment = ""
    try:
        comment = unload_lora_adapter(server_base_url(instance), name)
    except VllmAdminError as exc:
        if exc.status != 404 or "cannot be found" not in str(exc):
            return _failed(user, UNLOAD_ACTION, scope, target, name, str(exc))
        comment = f"vLLM no longer had it: {exc}"
    with transaction.atomic():
        locked = ServerInstance.objects.select_for_update().get(pk=instance_id)
        locked.adapters = [a for a in locked.adapters or [] if a.get("name") != name]
        locked.save(update_fields=["adapters"])
        audit_record(actor=user, action=UNLOAD_ACTION, scope=scope, target=target, from_state="requested",
                     to_state="unloaded", comment=comment[:500], data={"name": name})
    return {"ok": True, "name": name}


def _failed(user, action: str, scope: str, target: str, name: str, reason: str) -> dict[str, Any]:
    logger.warning("%s %s failed: %s", action, name, reason)
    audit_record(actor=user, action=action, scope=scope, target=target, from_state="requested", to_state="failed",
                 comment=reason[:2000], data={"name": name})
    return {"ok": False, "name": name, "error": reason}


def adapter_name_valid(name: str) -> bool:
    """What a URL may carry as an adapter name (the names :func:`adapter_name` makes)."""
    return bool(re.fullmatch(r"[a-z0-9][a-z0-9_\-]{0,60}", name or ""))
