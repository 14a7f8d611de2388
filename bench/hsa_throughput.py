"""HSA augmentation throughput (augmented samples per second per core) and memory for 100,000 samples.

    .venv/bin/python bench/hsa_throughput.py [--rows 100000] [--variants 4] [--pool 128] [--data mix]
                                             [--target 5000] [--repeat 3] [--stream-to DIR]

Input: the demo data as canonical samples — every comment of the demo scenarios under skincare_v1..v3 (the
reference policy's gold turns) and the tiny model's seeded gold turns (tiny_room harness); ``--data`` picks
``mix`` (both), ``scenario`` or ``tiny``. To reach ``--rows`` augmented rows the base samples are reused under
new sample ids, so each copy draws its own harness variants (as more gold turns would).

Measured in one process, one thread, ``--repeat`` times (the median is judged): the augmented build with every
operator on (``Recipe()`` defaults: all 21 operators, K = ``--variants`` per sample, shared harness variants
``--pool``; variant creation, validation, relabelling, re-checks, hook corrections and rendering all count, each
run anew), then the fixed-harness pass over the same
samples as the baseline. Rates use CPU time of this process (``time.process_time``: on a shared machine, wall
time also counts other programs); wall time is printed too. Memory: peak RSS of the process (``ru_maxrss``)
before and after the first augmented build, which holds all ``--rows`` rows in memory. PASS means the median
augmented rows/s >= ``--target``; exit status 1 on FAIL.

``--stream-to DIR`` measures the streaming writer instead (:func:`training_jobs.hsa.dataset.build_to_disk`: rows
written to an Arrow file as they are made, then ``save_to_disk``), in this process only, so the peak RSS it
prints is the streamed build's (the in-memory build is not run). Its rate includes the writing. DIR must be new
or empty (refused otherwise: the build replaces ``DIR/dataset``).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from training_jobs.hsa.dataset import Recipe, build, build_fixed_harness, build_to_disk  # noqa: E402
from harness_editor.schemas import _schema_errors_cached, _schema_own_valid  # noqa: E402
from training_jobs.hsa.samples import clear_memos, scenario_samples, tiny_model_samples  # noqa: E402


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _anon_mib() -> float:
    """Resident anonymous memory now (the process's own heap; file pages it maps are not counted)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="augmented rows to make")
    ap.add_argument("--variants", type=int, default=4, help="K: augmented rows per canonical sample")
    ap.add_argument("--pool", type=int, default=128, help="harness variants per base harness (0: one per row)")
    ap.add_argument("--data", choices=("mix", "scenario", "tiny"), default="mix")
    ap.add_argument("--tiny", type=int, default=2000, help="tiny-model gold samples in the base set")
    ap.add_argument("--target", type=float, default=5000.0)
    ap.add_argument("--repeat", type=int, default=3, help="augmented builds to time (the median is judged: this "
                    "machine is shared, and one run can be a third slower than the next)")
    ap.add_argument("--stream-to", default=None,
                    help="measure build_to_disk into this new (or empty) folder instead")
    args = ap.parse_args()
    if args.stream_to and Path(args.stream_to).exists() and any(Path(args.stream_to).iterdir()):
        # build_to_disk replaces DIR/dataset (and removes it on failure): never over something that was there
        ap.error(f"--stream-to {args.stream_to}: the folder exists and is not empty; give a new one")

    t0 = time.perf_counter()
    base = []
    if args.data in ("mix", "scenario"):
        base += scenario_samples()
    if args.data in ("mix", "tiny"):
        base += tiny_model_samples(args.tiny, seed=0)
    need = -(-args.rows // args.variants)
    samples = [base[i % len(base)] for i in range(need)]
    samples = [s if i < len(base) else s.__class__(**{**s.__dict__, "id": f"{s.id}#{i // len(base)}"})
               for i, s in enumerate(samples)]
    print(f"base samples: {len(base)} ({args.data}); canonical samples used: {len(samples)}; "
          f"prepared in {time.perf_counter() - t0:.1f}s")

    recipe = Recipe(variants_per_sample=args.variants, harness_pool_size=args.pool, progress_every=10_000)
    if args.stream_to:
        rss_before, anon = _rss_mib(), [_anon_mib()]
        c0, w0 = time.process_time(), time.perf_counter()
        result = build_to_disk(samples, recipe, args.stream_to, progress_every=1_000,
                               progress=lambda done, total: anon.append(_anon_mib()))
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        rows = result.stats.rows + result.stats.dropped
        print(f"streamed to {args.stream_to}: {result.stats.rows} rows kept + {result.stats.dropped} dropped in "
              f"{cpu:.1f}s CPU ({wall:.1f}s wall) -> {rows / cpu:,.0f} samples/s per core including the write")
        print(f"memory: peak RSS {rss_before:,.0f} MiB before the build, {_rss_mib():,.0f} MiB after "
              f"(+{_rss_mib() - rss_before:,.0f} MiB, with the pages of the Arrow file that save_to_disk maps and "
              f"copies); anonymous memory {anon[0]:,.0f} MiB before, at most {max(anon):,.0f} MiB while building "
              f"(sampled every 1,000 rows), {_anon_mib():,.0f} MiB after")
        return 0
    rates = []
    for run in range(1, args.repeat + 1):
        clear_memos()  # every run from cold: no check or schema verdict remembered from the run before
        _schema_own_valid.cache_clear()
        _schema_errors_cached.cache_clear()
        rss_before = _rss_mib()
        c0, w0 = time.process_time(), time.perf_counter()
        result = build(samples, recipe)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        rss_after = _rss_mib()
        rows = result.stats.rows + result.stats.dropped  # dropped rows did all the work too
        rates.append(rows / cpu)
        print(f"run {run}: augmented (all {len(recipe.operators)} operators on, K={args.variants}, pool={args.pool}): "
              f"{result.stats.rows} rows kept + {result.stats.dropped} dropped in {cpu:.1f}s CPU ({wall:.1f}s wall), "
              f"{result.stats.harness_variants} harness variants validated -> {rates[-1]:,.0f} samples/s per core "
              f"({rows / wall:,.0f}/s wall)")
        if run == 1:
            print(f"  mean prompt tokens {result.stats.mean_prompt_tokens}; drop reasons {result.stats.drop_reasons}")
            print(f"  memory: peak RSS {rss_before:,.0f} MiB before the build, {rss_after:,.0f} MiB after "
                  f"(+{rss_after - rss_before:,.0f} MiB for {len(result.rows):,} rows held in memory)")
        del result
    rate = statistics.median(rates)

    c0, w0 = time.process_time(), time.perf_counter()
    fixed = build_fixed_harness(samples, progress_every=10_000)
    cpu_f, wall_f = time.process_time() - c0, time.perf_counter() - w0
    print(f"baseline fixed-harness pass (no augmentation, same samples): {fixed.stats.rows} rows in {cpu_f:.1f}s CPU "
          f"-> {fixed.stats.rows / cpu_f:,.0f} samples/s per core ({fixed.stats.rows / wall_f:,.0f}/s wall)")
    ok = rate >= args.target
    print(f"{'PASS' if ok else 'FAIL'}: median of {len(rates)} runs {rate:,.0f} augmented samples/s per core "
          f"(best {max(rates):,.0f}, worst {min(rates):,.0f}; target {args.target:,.0f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
