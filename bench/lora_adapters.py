"""LoRA adapters at run time on a real vLLM server: how long a load and an unload take, what an adapter costs on
disk, and the time to first token through an adapter against the base model, read from the server's own /metrics
(streams.metrics) and from the client's side.

    .venv/bin/python bench/lora_adapters.py --url http://127.0.0.1:8311 [--rank 8] [--loads 10] [--requests 10]

The server must run with ``--enable-lora`` (``--max-lora-rank`` at least ``--rank``) and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (``make run`` and the test fixture ``vllm_server`` do). The adapter is
trained here first by the real SFT stage (3 steps on the demo model, not merged) in a scratch directory that is
removed at the end; every adapter loaded is unloaded again (also on failure). Prints one JSON object.
Wall-clock figures on a shared machine: they depend on what else runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from streams.metrics import read_metrics  # noqa: E402
from streams.vllm_admin import VllmAdminError, load_lora_adapter, served_models, unload_lora_adapter  # noqa: E402


def train(out: Path, rank: int) -> tuple[Path, float]:
    from training_jobs.hat.config import SFTStageConfig
    from training_jobs.hat.sft import run_sft
    from training_jobs.hsa.dataset import Recipe, build_to_disk
    from training_jobs.hsa.samples import tiny_model_samples
    from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

    build_to_disk(tiny_model_samples(8, seed=5), Recipe(variants_per_sample=1, harness_pool_size=2), out / "ds")
    config = SFTStageConfig(max_steps=3, per_device_batch_size=2, learning_rate=5e-3, save_steps=3, max_length=1024,
                            threads=2, lora={"r": rank, "alpha": 2 * rank, "dropout": 0.0, "merge": False})
    t0 = time.perf_counter()
    result = run_sft(config, model_dir=DEMO_MODEL_DIR, dataset_dir=out / "ds" / "dataset", out_dir=out / "run")
    return result.final_dir, time.perf_counter() - t0


def ttft(url: str, model: str) -> float:
    """Client-side time to the first streamed content chunk (the stream is read to its end: the server's token
    counters see whole requests)."""
    t0 = time.perf_counter()
    first = None
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=120, json={
            "model": model, "max_tokens": 16, "temperature": 0, "stream": True, "ignore_eos": True,
            "messages": [{"role": "user", "content": "how much is #101?"}]}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and line.startswith("data: ") and '"content"' in line:
                first = time.perf_counter() - t0
    return first if first is not None else time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the vLLM server's root, e.g. http://127.0.0.1:8311")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--loads", type=int, default=10, help="load/unload cycles timed")
    ap.add_argument("--requests", type=int, default=10, help="streamed requests per model for the TTFT")
    a = ap.parse_args()
    url = a.url.rstrip("/").removesuffix("/v1")
    base = served_models(url)[0]["id"]
    scratch = Path(tempfile.mkdtemp(prefix="bench-lora-"))
    loaded: list[str] = []
    try:
        adapter, train_s = train(scratch, a.rank)
        loads, unloads = [], []
        for i in range(a.loads):
            name = f"bench-lora-{i}"
            t0 = time.perf_counter()
            load_lora_adapter(url, name, str(adapter))
            loads.append(time.perf_counter() - t0)
            loaded.append(name)
            t0 = time.perf_counter()
            unload_lora_adapter(url, name)
            unloads.append(time.perf_counter() - t0)
            loaded.remove(name)
        load_lora_adapter(url, "bench-lora-ttft", str(adapter))
        loaded.append("bench-lora-ttft")
        _, before = read_metrics(url)
        client = {"base": [ttft(url, base) for _ in range(a.requests)],
                  "adapter": [ttft(url, "bench-lora-ttft") for _ in range(a.requests)]}
        figures, _ = read_metrics(url, previous=before)
        report = {
            "rank": a.rank, "train_s": round(train_s, 2),
            "adapter_bytes": (adapter / "adapter_model.safetensors").stat().st_size,
            "load_s": {"p50": round(statistics.median(loads), 4), "max": round(max(loads), 4), "n": len(loads)},
            "unload_s": {"p50": round(statistics.median(unloads), 4), "max": round(max(unloads), 4)},
            "client_ttft_s": {k: {"p50": round(statistics.median(v), 4), "p95": round(pct(v, 0.95), 4)}
                              for k, v in client.items()},
            "server_metrics_during_ttft_runs": figures,
        }
        print(json.dumps(report, indent=2, default=str))
    finally:
        for name in loaded:
            try:
                unload_lora_adapter(url, name)
            except VllmAdminError:
                pass
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
