"""The reproduction's in-process evaluation with and without the prefix cache (training_jobs.hat.rl.PrefixCache).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/reproduce_eval_cache.py [--model models/smollm2-135m] [--cases 4]
        [--threads 1] [--max-tokens 96] [--seed 0]

Plays the first ``--cases`` T1 cases that ``manage.py reproduce_hat`` selects at ``--seed`` (the cpu budget's
selection), through the evaluation's own path (:func:`training_jobs.reproduce.evaluate.play_harness_cases`: the turn
engine, the rules, the case's seed), once with a plain backend (every model call reads the whole sequence again)
and once with the shared prefix cache (one per model, as :func:`training_jobs.reproduce.eval_serving.served` makes
it), alternating per case (plain cached, cached plain, ...; bench/paired.py) so a shared machine's load hits both.
The cached side's first case starts cold, as a real evaluation does.

Printed: seconds per case on each side, the median of the per-case ratios plain/cached (with quartiles) and the
ratio of the totals, the share of prompt tokens the cache did not compute again, and whether the two sides gave the
same replies (the draws come from the same logits up to float rounding, so they should).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default=str(ROOT / "models" / "smollm2-135m"))
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the evaluation uses 1 per process)")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per model call (the cpu budget's 96)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.paired import pair_order, paired_ratio
    from training_jobs.hat.rl import PrefixCache
    from training_jobs.reproduce.budgets import budget_for
    from training_jobs.reproduce.eval_serving import _policy_class
    from training_jobs.reproduce.evaluate import TEMPERATURE, play_harness_cases, select_cases

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    policy = _policy_class()
    cases = select_cases(budget_for("cpu", "smol"), args.seed).t1[:args.cases]
    sampling = {"temperature": TEMPERATURE, "max_tokens": args.max_tokens}
    prefix = PrefixCache()

    def factory(cache):
        def new_backend(seed: int):
            torch.manual_seed(seed)
            return policy(model, tokenizer, max_new_tokens=args.max_tokens, temperature=TEMPERATURE, prefix=cache)
        return new_backend

    backends = {"plain": factory(None), "cached": factory(prefix)}
    seconds: dict[str, list[float]] = {"plain": [], "cached": []}
    replies: dict[str, list[str]] = {"plain": [], "cached": []}
    print(f"{args.model}: {len(cases)} T1 cases, {args.threads} thread(s), {args.max_tokens} tokens a call, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    for i, case in enumerate(cases):
        for side in pair_order(i, ("plain", "cached")):
            t0 = time.perf_counter()
            outcome = play_harness_cases([case], new_backend=backends[side], k=1, seed=args.seed,
                                         sampling=sampling)[0]
            seconds[side].append(time.perf_counter() - t0)
            replies[side].append(outcome.reply)
            print(f"  case {i + 1} {side:6s} {seconds[side][-1]:6.1f} s  {outcome.reason}", flush=True)
    ratio = paired_ratio(seconds["plain"], seconds["cached"])
    share = prefix.reused / max(1, prefix.reused + prefix.computed)
    print(f"plain:  {sum(seconds['plain']):.1f} s, median {statistics.median(seconds['plain']):.1f} s a case")
    print(f"cached: {sum(seconds['cached']):.1f} s, median {statistics.median(seconds['cached']):.1f} s a case")
    print(f"speed-up plain/cached: median of per-case ratios {ratio.median:.2f} (quartiles {ratio.q1:.2f}-"
          f"{ratio.q3:.2f}), totals {sum(seconds['plain']) / sum(seconds['cached']):.2f}")
    print(f"prompt tokens not computed again: {prefix.reused} of {prefix.reused + prefix.computed} ({share:.0%})")
    same = replies["plain"] == replies["cached"]
    print(f"same replies on both sides: {'yes' if same else 'NO'}; load {os.getloadavg()[0]:.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
