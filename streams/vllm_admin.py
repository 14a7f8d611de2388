"""Talking to a running vLLM server's admin routes (plain Python, no Django): LoRA adapters loaded and unloaded at
run time, and the models it serves now.

vLLM accepts ``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter`` only when it was started with
``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (STACK.md "vLLM on CPU"); the adapter directory is
read by the server, so the path is one on the server's own host. ``base_url`` is the server's root
(``http://host:port``); a trailing ``/v1`` is accepted and dropped.

Every failure is a :class:`VllmAdminError` whose message says what went wrong and where (the server's own error
text when it answered), never a bare HTTP exception.
"""

from __future__ import annotations

from typing import Any

import httpx

DEFAULT_TIMEOUT_S = 60.0  # loading reads and converts the adapter's weights: seconds for a large one


class VllmAdminError(RuntimeError):
    """A vLLM admin call failed. ``status`` is the server's HTTP status (None: no answer at all)."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


def server_root(base_url: str) -> str:
    """``http://host:port`` of a server from its root or its OpenAI base URL (``…/v1``)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        if isinstance(error, str):
            return error[:500]
        if body.get("detail"):
            return str(body["detail"])[:500]
    return str(body)[:500]


def _post(base_url: str, route: str, payload: dict[str, Any], *, what: str, timeout: float) -> str:
    url = f"{server_root(base_url)}{route}"
    try:
        response = httpx.post(url, json=payload, timeout=timeout)
    except httpx.TimeoutException:
        raise VllmAdminError(f"{what}: {url} did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise VllmAdminError(f"{what}: cannot reach {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 404 and "not found" == _error_text(response).lower().strip():
        # the route itself is missing: the server runs without runtime LoRA updating
        raise VllmAdminError(f"{what}: {url} does not exist: start the server with --enable-lora and "
                             f"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", status=404)
    if response.status_code >= 400:
        raise VllmAdminError(f"{what}: the server answered {response.status_code}: {_error_text(response)}",
                             status=response.status_code)
    return response.text.strip()


def load_lora_adapter(base_url: str, name: str, path: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Load the adapter directory ``path`` (on the server's host) under ``name``; requests then say
    ``"model": name``. Returns the server's answer ("Success: LoRA adapter … added successfully.")."""
    return _post(base_url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path},
                 what=f"loading LoRA adapter {name!r} from {path}", timeout=timeout)


def unload_lora_adapter(base_url: str, name: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Unload the adapter loaded under ``name``. A name the server does not know is an error (status 404)."""
    return _post(base_url, "/v1/unload_lora_adapter", {"lora_name": name},
                 what=f"unloading LoRA adapter {name!r}", timeout=timeout)


def served_models(base_url: str, *, timeout: float = 10.0) -> list[dict[str, Any]]:
    """What ``GET /v1/models`` lists: ``[{"id", "root", "parent"}]`` (an adapter's ``parent`` is its base model;
    the base model's is None)."""
    url = f"{server_root(base_url)}/v1/models"
    try:
        response = httpx.get(url, timeout=timeout)
    except httpx.TimeoutException:
        raise VllmAdminError(f"listing models: {url} did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise VllmAdminError(f"listing models: cannot reach {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code >= 400:
        raise VllmAdminError(f"listing models: the server answered {response.status_code}: {_error_text(response)}",
                             status=response.status_code)
    try:
        data = response.json()["data"]
        return [{"id": m["id"], "root": m.get("root"), "parent": m.get("parent")} for m in data]
    except (ValueError, KeyError, TypeError):
        raise VllmAdminError(f"listing models: {url} answered something that is not a model list: "
                             f"{response.text[:200]!r}") from None
