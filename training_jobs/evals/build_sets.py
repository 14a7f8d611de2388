"""Rebuild the committed eval sets (data/evals/*.jsonl) from their builders, or check they are current.

    python -m training_jobs.evals.build_sets           # write T1, T2, T3; print each content hash
    python -m training_jobs.evals.build_sets --check   # exit 1 if a committed file differs from a rebuild

T2 and T3 are built from the T1 cases just built, so a change to T1 flows through. Plain Python.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from training_jobs.evals.build_t1 import build_t1
from training_jobs.evals.cases import EVAL_DATA_DIR, EVAL_SETS, EvalCase, cases_to_jsonl, write_cases
from training_jobs.evals.t2 import build_t2
from training_jobs.evals.t3 import build_t3

T2_SEED = 0
T3_SEED = 0


def build_sets() -> dict[str, list[EvalCase]]:
    """Every committed set by name, built from scratch."""
    t1 = build_t1()
    return {"t1-live-stream-qa": t1, "t2-harness-variant-qa": build_t2(t1, T2_SEED),
            "t3-robustness": build_t3(t1, T3_SEED)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    parser.add_argument("--out", type=Path, default=EVAL_DATA_DIR, help="folder to write the sets to")
    args = parser.parse_args(argv)
    stale = 0
    for name, cases in build_sets().items():
        path = args.out / EVAL_SETS[name].file
        if args.check:
            current = path.read_text(encoding="utf-8") if path.exists() else None
            ok = current == cases_to_jsonl(cases)
            stale += not ok
            print(f"{name}: {len(cases)} cases, {'current' if ok else 'STALE'} ({path})")
        else:
            digest = write_cases(cases, path)
            print(f"{name}: {len(cases)} cases, sha256 {digest} -> {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
