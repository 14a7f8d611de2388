"""How long ``reproduce_hat --budget gpu`` takes on the GPU host, planned here (:func:`estimate`) and measured there
(:func:`preflight`: versions, imports of the whole gpu path, CUDA, one decode, one SFT step and five decoding
processes at once, then the run's predicted wall time). Split from :mod:`training_jobs.reproduce.gpu_bundle`, which
moves the base and the wheels there. Plain Python (no Django); torch is imported by the preflight only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from training_jobs.reproduce.gpu_bundle import (
    BUNDLE_DIR,
    GPU_PATH_MODULES,
    HOST_PROVIDED,
    MODEL_DIR,
    Log,
    _version,
    read_manifest,
)

# --- how long the gpu budget takes ------------------------------------------------------------------------------------

# Planning figures for SmolLM2-135M in bfloat16 on one H200, before the preflight measures the two that matter
# (decode and SFT step). Decoding is one sequence at a time (in-process generation through PolicyBackend, as the
# evaluation and the RL rollouts do), so it is bound by kernel launches and Python, not by the GPU's arithmetic:
# 30 layers of about 15 kernels per token, taken as 20 ms per token. An SFT step at batch 8 of about 2,200 tokens
# is about 23 TFLOP (6 x 135 M parameters and attention per token): 0.3 s at about 80 TFLOP/s (a 576-wide model
# uses the tensor cores poorly) with the trainer's overhead.
DECODE_S_PER_TOKEN = 0.020
SFT_STEP_S = 0.30  # at batch 8, about 2,200 tokens a row
TOKENS_PER_TURN = 150  # a harness turn: about 2.5 model calls of about 60 tokens (a tool call, then the reply)
TOKENS_PER_IFEVAL = 110  # an IFEval answer: most run to the 128-token cap
TOKENS_PER_ROLLOUT = 175  # an RL rollout: about 2.5 calls of about 70 tokens (cap 96)
FIXED_S = 75.0  # imports and CUDA start, data, six model loads, four saves, the table
EVAL_PARALLEL_EFFICIENCY = 0.7  # five decoding processes on one GPU give about 3.5x one (time-sliced contexts)


def estimate(budget: Any, *, decode_s: float = DECODE_S_PER_TOKEN, sft_step_s: float = SFT_STEP_S,
             models: int = 5, parallel_efficiency: float = EVAL_PARALLEL_EFFICIENCY) -> dict[str, float]:
    """Seconds each part of a run with ``budget`` takes (planning figures or the preflight's measurements): the
    budget's ``eval_workers`` models are evaluated at once at ``parallel_efficiency``."""
    sft = 2 * budget.sft_steps * sft_step_s * budget.sft_batch_size / 8
    distill = budget.distill_steps * (budget.distill_max_new_tokens * decode_s + sft_step_s / 3)
    rollout_tokens = min(TOKENS_PER_ROLLOUT, 2.5 * budget.rl_max_completion_length)
    rl = budget.rl_steps * (budget.rl_batch_size * rollout_tokens * decode_s + sft_step_s / 2)
    harness = budget.n_t1 + budget.n_t2 + 5 * budget.n_t3_per_level
    per_model = budget.k * (harness * TOKENS_PER_TURN + budget.n_t4 * min(
        TOKENS_PER_IFEVAL, budget.eval_max_new_tokens)) * decode_s
    workers = max(1, min(int(getattr(budget, "eval_workers", 1)), models))
    evaluation = per_model * models / (workers * parallel_efficiency if workers > 1 else 1)
    parts = {"fixed": FIXED_S, "sft": sft, "distill": distill, "rl": rl, "evaluation": evaluation}
    parts["total"] = sum(parts.values())
    return {k: round(v, 1) for k, v in parts.items()}


# --- preflight (there) --------------------------------------------------------------------------------------------


def preflight(model_dir: Path | None = None, *, bundle: Path = BUNDLE_DIR, timing: bool = True,
              log: Log = print) -> dict[str, Any]:
    """On the GPU host, after the wheels are on PYTHONPATH: versions, the gpu path's imports (IFEval's checkers
    included), CUDA, and a decode and an SFT step of a SmolLM2-shaped model (random weights from the bundle's
    config) to predict the gpu budget's wall time. Returns what it printed."""
    import importlib

    out: dict[str, Any] = {"python": sys.version.split()[0]}
    manifest = read_manifest(bundle)
    pins = dict(p.split("==") for p in manifest.get("pins", []))
    versions = {name: (_version(name), pins.get(name, "")) for name in pins}
    project = manifest.get("project_versions", {})
    versions.update({name: (_version(name), "") for name in HOST_PROVIDED})
    out["versions"] = versions
    off = [f"{n} {have} (pinned {want})" for n, (have, want) in versions.items() if want and have != want]
    log(f"python {out['python']}; " + ", ".join(f"{n} {have}" for n, (have, _) in versions.items()))
    if off:
        log("not the pinned version (is PYTHONPATH the wheels' site?): " + "; ".join(off))
    other = [f"{n} {versions[n][0]} (project {v})" for n, v in project.items() if versions[n][0] != v]
    if other:
        log("the host's own packages that differ from the project's .venv: " + "; ".join(other))
    failed = {}
    t0 = time.perf_counter()
    for name in GPU_PATH_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, the others still tried
            failed[name] = f"{type(exc).__name__}: {exc}"
    try:
        from training_jobs.evals import ifeval

        ifeval._checkers()
    except Exception as exc:  # noqa: BLE001
        failed["IFEval checkers"] = f"{type(exc).__name__}: {exc}"
    django = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
    out["imports"] = {"failed": failed, "seconds": round(time.perf_counter() - t0, 1), "django": bool(django)}
    log(f"imports: {len(GPU_PATH_MODULES) + 1 - len(failed)} ok in {out['imports']['seconds']} s"
        + ("".join(f"\n  FAILED {k}: {v}" for k, v in failed.items())) + ("; django imported!" if django else ""))
    import torch

    out["cuda"] = torch.cuda.is_available()
    if not out["cuda"] or not timing:
        log("CUDA: " + ("not available" if not out["cuda"] else f"{torch.cuda.get_device_name(0)} (no timing)"))
        return out
    log(f"CUDA: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    config_path = Path(model_dir or MODEL_DIR) / "config.json"
    if not config_path.is_file():
        config_path = Path(bundle) / "call1" / "meta" / "config.json"
    from training_jobs.reproduce.budgets import budget_for

    b = budget_for("gpu", "smol")
    timing = out["timing"] = _time_model(config_path, log)
    if b.eval_workers > 1:
        timing.update(_time_parallel_decode(config_path.parent, b.eval_workers, timing["decode_s_per_token"], log))
    measured = {"decode_s": timing["decode_s_per_token"], "sft_step_s": timing["sft_step_s"],
                "parallel_efficiency": timing.get("parallel_efficiency", EVAL_PARALLEL_EFFICIENCY)}
    for label, kw in (("planning figures", {}), ("measured", measured)):
        est = estimate(b, **kw)
        out[f"estimate_{label.split()[0]}"] = est
        log(f"gpu budget, {label}: " + ", ".join(f"{k} {v:.0f} s" for k, v in est.items()))
    verdict = "fits" if out["estimate_measured"]["total"] <= 500 else "does NOT fit: do not start the run"
    log(f"the run's 540 s limit: {verdict} (measured estimate {out['estimate_measured']['total']:.0f} s)")
    return out


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _time_model(config_path: Path, log: Log, *, device: str = "cuda", context_len: int = 2000,
                row_len: int = 2200) -> dict[str, float]:
    """Seconds per decoded token (batch 1, ``context_len`` tokens of context) and per training step (8 rows of
    ``row_len`` tokens, AdamW) of a model of ``config_path``'s shape with random weights, in bfloat16."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_path.parent))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(device)
    model.eval()
    context = torch.randint(100, config.vocab_size - 100, (1, context_len), device=device)
    timing = {}
    with torch.no_grad():
        model.generate(input_ids=context, attention_mask=torch.ones_like(context), max_new_tokens=8,
                       min_new_tokens=8, do_sample=True, pad_token_id=0)
        _sync(device)
        t0 = time.perf_counter()
        model.generate(input_ids=context, attention_mask=torch.ones_like(context), max_new_tokens=64,
                       min_new_tokens=64, do_sample=True, pad_token_id=0)
        _sync(device)
    timing["decode_s_per_token"] = round((time.perf_counter() - t0) / 64, 4)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = torch.randint(100, config.vocab_size - 100, (8, row_len), device=device)
    for i in range(4):
        if i == 1:
            _sync(device)
            t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    _sync(device)
    timing["sft_step_s"] = round((time.perf_counter() - t0) / 3, 4)
    log(f"timing: decode {timing['decode_s_per_token'] * 1000:.1f} ms/token (batch 1, 2,000-token context), "
        f"SFT step {timing['sft_step_s']:.3f} s (8 x 2,200 tokens)")
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return timing


def _decode_worker(config_dir: str, tokens: int, barrier: Any, results: Any, device: str = "cuda",
                   context_len: int = 2000) -> None:
    """One of the preflight's parallel decoders (a spawned process): seconds per token while the others decode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(device).eval()
    context = torch.randint(100, config.vocab_size - 100, (1, context_len), device=device)
    kw = dict(attention_mask=torch.ones_like(context), do_sample=True, pad_token_id=0)
    with torch.no_grad():
        model.generate(input_ids=context, max_new_tokens=4, min_new_tokens=4, **kw)
        _sync(device)
        barrier.wait(timeout=300)
        t0 = time.perf_counter()
        model.generate(input_ids=context, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
        _sync(device)
    results.put((time.perf_counter() - t0) / tokens)


def _time_parallel_decode(config_dir: Path, workers: int, alone_s: float, log: Log, *, tokens: int = 48,
                          device: str = "cuda", context_len: int = 2000) -> dict[str, float]:
    """Seconds per token of each of ``workers`` processes decoding at once (the evaluation's ``eval_workers``),
    and the parallel efficiency against one process alone."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(workers), context.Queue()
    procs = [context.Process(target=_decode_worker, args=(str(config_dir), tokens, barrier, results, device,
                                                          context_len)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    try:
        times = [results.get(timeout=300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    each = sum(times) / len(times)
    efficiency = min(1.0, alone_s / each) if each > 0 else 0.0
    log(f"timing: {workers} processes decoding at once: {each * 1000:.1f} ms/token each, parallel efficiency "
        f"{efficiency:.2f} ({workers * efficiency:.1f}x one process)")
    return {"parallel_decode_s_per_token": round(each, 4), "parallel_efficiency": round(efficiency, 3)}
