"""Stage 1 (HSA-SFT) in bf16 on a GPU worker: samples/s and peak memory on a larger randomly initialised model.

    .venv/bin/python bench/hat_stage1_gpu.py                      # on a GPU host: ~0.3 B parameters, bf16
    .venv/bin/python bench/hat_stage1_gpu.py --smoke              # anywhere: a few CPU steps of a small model

Everything is built offline, in a temporary folder: the model (the project's Qwen3 architecture and tokenizer,
``training_jobs.tiny_model.build``, at the size the flags give, randomly initialised) and an HSA dataset of the
demo scenarios' samples (rows of 1.3k-2k tokens). The stage runs through ``training_jobs.hat.sft.run_sft``, the
code a worker runs, with the stage config a GPU job would use. Prints one line per measurement and a JSON summary:
samples/s and tokens/s over the whole run and after the first third (steady state), and the peak GPU memory
(``torch.cuda.max_memory_allocated``) or the process's peak RSS on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Timeline:
    """The stage's reporter: keeps each progress point with the time it arrived."""

    def __init__(self) -> None:
        self.points: list[tuple[float, dict]] = []

    def report(self, point: dict) -> None:
        self.points.append((time.perf_counter(), point))

    def log(self, line: str) -> None:
        print("  stage:", line, flush=True)

    def should_stop(self) -> bool:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="a small model for a few CPU steps (checks the script)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8, help="per device")
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--processes", type=int, default=1, help="GPUs (accelerate launch when > 1)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, a.steps, a.batch = 64, 2, 4, 2, 128, 4, 2

    import torch

    from training_jobs.hat.config import SFTStageConfig
    from training_jobs.hat.sft import run_sft
    from training_jobs.hsa.dataset import Recipe, build_to_disk
    from training_jobs.hsa.samples import scenario_samples
    from training_jobs.tiny_model.build import TinyModelSpec, build_tiny_model, param_count

    cuda = torch.cuda.is_available() and not a.smoke
    print(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu'}; torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hat-gpu-bench-") as tmp:
        t0 = time.perf_counter()
        spec = TinyModelSpec(hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                             num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                             head_dim=a.hidden // a.heads, max_position_embeddings=max(2048, a.max_length))
        model_dir = build_tiny_model(Path(tmp) / "model", spec, gold_samples=200)
        from transformers import AutoModelForCausalLM

        params = param_count(AutoModelForCausalLM.from_pretrained(str(model_dir)))
        samples = scenario_samples()
        build_to_disk(samples, Recipe(variants_per_sample=1, harness_pool_size=4), Path(tmp) / "ds")
        print(f"built offline in {time.perf_counter() - t0:.0f} s: model {params / 1e6:.1f} M parameters "
              f"({a.layers} layers x {a.hidden}), dataset from {len(samples)} scenario samples", flush=True)
        config = SFTStageConfig(max_steps=a.steps, per_device_batch_size=a.batch, max_length=a.max_length,
                                learning_rate=3e-4, save_steps=10 * a.steps, logging_steps=1,
                                device="cuda" if cuda else "cpu", bf16=cuda, num_processes=a.processes,
                                threads=os.cpu_count() or 1)
        timeline = Timeline()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        if a.processes > 1:
            from training_jobs.hat.stage import launch_command, run_launched

            (Path(tmp) / "c.json").write_text(config.model_dump_json())
            result = run_launched(launch_command("sft", config, [
                "--config", str(Path(tmp) / "c.json"), "--model", str(model_dir), "--dataset",
                str(Path(tmp) / "ds" / "dataset"), "--out", str(Path(tmp) / "run")]), timeline)
        else:
            result = run_sft(config, model_dir=model_dir, dataset_dir=Path(tmp) / "ds" / "dataset",
                             out_dir=Path(tmp) / "run", reporter=timeline)
        losses = [(t, p) for t, p in timeline.points if "loss" in p]
        third = losses[len(losses) // 3]
        steady_steps = losses[-1][1]["step"] - third[1]["step"]
        steady_s = losses[-1][0] - third[0]
        per_step = a.batch * a.processes
        tokens = [p.get("num_tokens") for _, p in (third, losses[-1])]
        summary = {
            "device": torch.cuda.get_device_name(0) if cuda else "cpu", "bf16": cuda, "processes": a.processes,
            "parameters_m": round(params / 1e6, 1), "steps": result.steps, "batch_per_device": a.batch,
            "max_length": a.max_length, "final_loss": result.metrics.get("final_loss"),
            "samples_per_s": result.metrics.get("samples_per_s"),
            "steady_samples_per_s": round(steady_steps * per_step / steady_s, 2) if steady_s > 0 else None,
            "steady_tokens_per_s": round((tokens[1] - tokens[0]) / steady_s, 0)
            if steady_s > 0 and None not in tokens else None,
            "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        }
    print(f"stage 1 on {summary['device']} ({'bf16' if cuda else 'fp32'}): {summary['samples_per_s']} samples/s "
          f"over the run, {summary['steady_samples_per_s']} samples/s and {summary['steady_tokens_per_s']} tokens/s "
          f"after the first third; peak GPU memory {summary['peak_gpu_memory_gib']} GiB; final loss "
          f"{summary['final_loss']}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
