"""Serve profiles: how a model is put behind an OpenAI-compatible endpoint, written down as data.

A profile produces the exact command line that serves a model, so the console can show it and record which
profile served what (DESIGN.md section 5):

- ``kind="vllm"`` (GPU workers, production):
  ``vllm serve MODEL --enable-auto-tool-choice --tool-call-parser hermes``, optionally MTP speculative
  decoding (``--speculative-config '{"method":"mtp","num_speculative_tokens":N}'``) and LoRA
  (``--enable-lora`` with runtime adapter loading: ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and
  ``POST /v1/load_lora_adapter``);
- ``kind="local"`` (CPU machines, CI, the embedded default): the project's own tiny model through
  ``transformers serve`` on loopback (``python -m training_jobs.tiny_model.serve``).

Both speak the same chat-completions API with tools and streaming, so the turn engine has one code path.
Plain pydantic, no Django.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

REPO = Path(__file__).resolve().parents[1]
DEMO_MODEL_DIR = REPO / "models" / "demo-tiny"


class LoraAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.\-]+$")
    path: str = Field(min_length=1, description="Local directory of the adapter.")


class ServeProfile(BaseModel):
    """One way to serve one model. Every field is documented; defaults are the safe choice."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=120, description="Display name of the profile.")
    kind: Literal["vllm", "local"] = Field(description="vLLM on a GPU, or the local CPU server.")
    model: str = Field(min_length=1, description="Model path (local directory) or name the server loads.")
    served_model_name: str | None = Field(default=None, description="Name clients put in requests (vLLM).")
    host: str = Field(default="127.0.0.1", description="Listen address; loopback unless a proxy is in front.")
    port: int = Field(default=8000, ge=1, le=65535)
    tool_call_parser: str = Field(default="hermes", description="vLLM tool-call parser (Qwen3 uses hermes).")
    mtp_speculative_tokens: int | None = Field(
        default=None, ge=1, le=16, description="MTP speculative decoding: draft tokens per step (vLLM only)."
    )
    enable_lora: bool = Field(default=False, description="Allow LoRA adapters (vLLM only).")
    lora_adapters: list[LoraAdapter] = Field(default_factory=list, description="Adapters loaded at start.")
    max_lora_rank: int | None = Field(default=None, ge=1, le=512)
    runtime_lora_updating: bool = Field(
        default=False, description="Allow POST /v1/load_lora_adapter (sets VLLM_ALLOW_RUNTIME_LORA_UPDATING)."
    )
    max_model_len: int | None = Field(default=None, ge=256)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    extra_args: list[str] = Field(default_factory=list, description="Appended verbatim (vLLM flags).")

    @model_validator(mode="after")
    def _check(self) -> ServeProfile:
        if self.kind == "local" and (
            self.mtp_speculative_tokens or self.enable_lora or self.lora_adapters or self.runtime_lora_updating
        ):
            raise ValueError("MTP and LoRA options need kind 'vllm'")
        if (self.lora_adapters or self.runtime_lora_updating or self.max_lora_rank) and not self.enable_lora:
            raise ValueError("LoRA adapters, max_lora_rank and runtime updating need enable_lora")
        return self

    # --- command lines ---------------------------------------------------------------------------------

    def argv(self, python: str = "python") -> list[str]:
        """The command that serves this profile, as an argv list."""
        if self.kind == "local":
            return [
                python, "-m", "training_jobs.tiny_model.serve",
                "--model-dir", self.model, "--host", self.host, "--port", str(self.port),
            ]  # fmt: skip
        argv = ["vllm", "serve", self.model, "--host", self.host, "--port", str(self.port)]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.mtp_speculative_tokens:
            spec = {"method": "mtp", "num_speculative_tokens": self.mtp_speculative_tokens}
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if self.enable_lora:
            argv.append("--enable-lora")
            if self.max_lora_rank:
                argv += ["--max-lora-rank", str(self.max_lora_rank)]
            if self.lora_adapters:
                argv += ["--lora-modules", *(f"{a.name}={a.path}" for a in self.lora_adapters)]
        if self.max_model_len:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.gpu_memory_utilization:
            argv += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return argv + list(self.extra_args)

    def env(self) -> dict[str, str]:
        """Environment variables the command needs on top of the inherited ones."""
        if self.kind == "local":
            return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        env = {"HF_HUB_OFFLINE": "1"}
        if self.runtime_lora_updating:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    def command_line(self, python: str = "python") -> str:
        """A shell line (env assignments + quoted argv), for display and copy-paste."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env().items()))
        return f"{env} {shlex.join(self.argv(python))}".strip()

    @property
    def base_url(self) -> str:
        """OpenAI base URL a client uses for this profile."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def request_model(self) -> str:
        """The ``model`` field clients send."""
        return self.served_model_name or self.model


def local_demo_profile(port: int = 8011, model_dir: str | Path = DEMO_MODEL_DIR) -> ServeProfile:
    """The embedded default: the committed tiny demo model on loopback."""
    return ServeProfile(name="local demo-tiny", kind="local", model=str(Path(model_dir).resolve()), port=port)
