"""The local OpenAI-compatible server for a model directory: ``transformers serve`` on loopback, offline.

We start ``transformers.cli.serve.Serve`` through ``python -m training_jobs.tiny_model.serve`` rather than the
``transformers`` console script: the script imports ``transformers.cli.chat``, which needs ``requests`` even
though serving does not. Same server, same flags (``--device cpu --host 127.0.0.1 --port N``).

Endpoints: ``POST /v1/chat/completions`` (streaming or not, ``tools``), ``GET /v1/models``, ``GET /health``.
Readiness: ``/health`` answers 200 (the model is preloaded before the server listens).

Known faults of transformers serve (STACK.md), which the turn engine must survive:
- malformed tool-call JSON from the model gives HTTP 500 instead of text;
- reasoning text arrives in a non-standard ``reasoning_content`` delta (the demo model writes an empty
  ``<think></think>`` block first, so expect an empty or whitespace reasoning delta);
- an unclosed think block leaks ``<|im_end|>`` into the content;
- ``GET /v1/models`` scans the Hugging Face hub cache and answers 500 when that directory does not exist;
  :func:`serve` points ``HF_HUB_CACHE`` at an empty directory under ``var/`` in that case.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# a free port and the offline environment are the runtime's (any local model server needs them)
from streams.local_servers import free_port
from streams.local_servers import local_server_env as server_env

REPO = Path(__file__).resolve().parents[2]
DEMO_MODEL_DIR = REPO / "models" / "demo-tiny"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8011


def server_command(model_dir: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                   python: str | None = None) -> list[str]:
    """argv that starts the local server for ``model_dir`` (an absolute path, served offline)."""
    return [
        python or sys.executable,
        "-m",
        "training_jobs.tiny_model.serve",
        "--model-dir",
        str(Path(model_dir).resolve()),
        "--host",
        host,
        "--port",
        str(port),
    ]


def is_ready(base_url: str, timeout: float = 2.0) -> bool:
    """True when ``/health`` answers ok (base_url like ``http://127.0.0.1:8011``). The model is preloaded
    before the HTTP server starts listening, so a healthy server has its model in memory."""
    import httpx

    try:
        h = httpx.get(f"{base_url}/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return h.status_code == 200


def wait_ready(base_url: str, timeout: float = 90.0, proc: subprocess.Popen | None = None) -> float:
    """Block until ready; returns seconds waited. Raises if the process exits or the timeout passes."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"local model server exited with code {proc.returncode}")
        if is_ready(base_url):
            return time.monotonic() - t0
        time.sleep(0.3)
    raise TimeoutError(f"local model server at {base_url} not ready after {timeout:.0f} s")


@dataclass
class LocalServer:
    """A running local server subprocess (see :func:`start_local_server`)."""

    proc: subprocess.Popen
    base_url: str
    model: str  # the model name to put in requests (the local path)
    ready_s: float

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


def start_local_server(model_dir: str | Path = DEMO_MODEL_DIR, host: str = DEFAULT_HOST, port: int | None = None,
                       ready_timeout: float = 120.0, log_path: str | Path | None = None,
                       threads: int = 2) -> LocalServer:
    port = port or free_port(host)
    model = str(Path(model_dir).resolve())
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (handed to the child)
    proc = subprocess.Popen(server_command(model, host, port), cwd=REPO, env=server_env(threads),
                            stdout=out, stderr=subprocess.STDOUT)
    base = f"http://{host}:{port}"
    try:
        ready = wait_ready(base, ready_timeout, proc)
    except BaseException:
        proc.terminate()
        proc.wait(10)
        raise
    return LocalServer(proc=proc, base_url=base, model=model, ready_s=ready)


def serve(model_dir: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, log_level: str = "warning") -> None:
    """Run the server in the foreground (blocks)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # /v1/models scans the hub cache and answers 500 when that directory does not exist (a fresh machine):
    # point it at an empty cache of our own unless one is configured.
    if "HF_HUB_CACHE" not in os.environ and not (Path.home() / ".cache" / "huggingface" / "hub").is_dir():
        empty = REPO / "var" / "hf-hub-cache-empty"
        empty.mkdir(parents=True, exist_ok=True)
        os.environ["HF_HUB_CACHE"] = str(empty)
    from transformers.cli.serve import Serve

    Serve(force_model=str(Path(model_dir).resolve()), device="cpu", dtype="float32", host=host, port=port,
          log_level=log_level)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Serve a local model directory over an OpenAI-compatible API.")
    p.add_argument("--model-dir", default=str(DEMO_MODEL_DIR))
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--log-level", default="warning")
    a = p.parse_args(argv)
    serve(a.model_dir, a.host, a.port, a.log_level)


if __name__ == "__main__":
    main()


def measure_streaming(base_url: str, model: str, requests: list[tuple[list[dict], list[dict]]],
                      max_tokens: int = 64, count_tokens=None) -> dict[str, float]:
    """Stream each (messages, tools) request through the OpenAI client and time it.

    TTFT: request → first chunk carrying content, reasoning or a tool-call delta. transformers serve sends a
    tool call as one chunk once ``</tool_call>`` is generated, and this model's tokens often span several
    words, so chunk counts are not token counts: ``tokens_per_s`` counts the generated text with
    ``count_tokens`` (the model's tokenizer; ~4 characters per token if not given) over request → last chunk
    (prefill included). Returns medians."""
    import statistics

    from openai import OpenAI

    count = count_tokens or (lambda text: max(1, len(text) // 4))
    client = OpenAI(base_url=f"{base_url}/v1", api_key="local", timeout=120)
    ttfts, rates, totals = [], [], []
    for messages, tools in requests:
        t0 = time.perf_counter()
        first = last = None
        text = []
        for chunk in client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True,
                                                    max_tokens=max_tokens):
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            reasoning = getattr(d, "reasoning_content", None)
            if d.content or d.tool_calls or reasoning:
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
                text.append(d.content or reasoning or "")
                for tc in d.tool_calls or []:
                    if tc.function:
                        text.append(f'<tool_call>\n{{"name": "{tc.function.name or ""}", "arguments": '
                                    f'{tc.function.arguments or ""}}}\n</tool_call>')
        if first is None:
            continue
        ttfts.append(first - t0)
        totals.append(last - t0)
        rates.append(count("".join(text)) / max(last - t0, 1e-6))
    med = statistics.median
    return {
        "requests": len(requests),
        "ttft_ms_median": round(1000 * med(ttfts), 1) if ttfts else float("nan"),
        "total_ms_median": round(1000 * med(totals), 1) if totals else float("nan"),
        "tokens_per_s_median": round(med(rates), 1) if rates else float("nan"),
    }
