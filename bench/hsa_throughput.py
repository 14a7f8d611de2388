"""HSA augmentation throughput (built samples per second per core) on the demo harnesses and on a foreign one, and
memory for a large build.

    .venv/bin/python bench/hsa_throughput.py [--rows 100000] [--variants 4] [--pool 128] [--data mix]
                                             [--foreign-samples 960] [--target 5000] [--repeat 3] [--stream-to DIR]

Input, every canonical sample used once (a real build never sees a sample twice; copies under new ids would hit
the memoised checks of their originals and flatter the rate):

- demo: every comment of the demo scenarios under skincare_v1..v3 (the reference policy's gold turns) and as many
  distinct seeded gold turns of the tiny model (tiny_room harness) as ``--rows`` / ``--variants`` needs;
  ``--data`` picks ``mix`` (both), ``scenario`` or ``tiny``;
- foreign: the order desk (harness_editor/demo/order_desk.yaml, 16 fixture-bound tools, a written policy) with the
  written gold turns of tests/training_jobs/data/order_desk_turns.yaml, each asked in several wordings by distinct
  customers with several reply openings (``--foreign-samples`` distinct samples, each checked by the harness's
  hooks; 0 skips the foreign build).

Measured in one process, one thread, ``--repeat`` times (medians are judged), every build from cold (memoised hook
checks, argument JSON and schema verdicts cleared before each): the augmented build with every operator on
(``Recipe()`` defaults: all operators, K = ``--variants`` per sample, shared harness variants ``--pool``; variant
creation, validation, relabelling, re-checks, hook corrections and rendering all count), for the demo samples
and then the foreign ones, then the fixed-harness pass over the demo samples as the baseline. A rate counts every
built row once: rows kept, never rows the re-check dropped (those are reported beside it). Rates use CPU time of
this process (``time.process_time``: on a shared machine wall time also counts other programs); wall time is
printed too. Memory: peak RSS of the process (``ru_maxrss``) around the first demo build, which holds all its rows.
PASS means the demo median >= ``--target``; exit status 1 on FAIL. The foreign/demo ratio is printed.

``--stream-to DIR`` measures the streaming writer instead (:func:`training_jobs.hsa.dataset.build_to_disk`: rows
written to an Arrow file as they are made, then ``save_to_disk``) on the demo samples, in this process only, so
the peak RSS it prints is the streamed build's. Its rate includes the writing. DIR must be new or empty.
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

from harness_editor.schemas import _schema_errors_cached, _schema_own_valid  # noqa: E402
from training_jobs.hsa import state as hsa_state  # noqa: E402
from training_jobs.hsa import tool_ops  # noqa: E402
from training_jobs.hsa.dataset import Recipe, build, build_fixed_harness, build_to_disk  # noqa: E402
from training_jobs.hsa.samples import (  # noqa: E402
    clear_memos,
    load_demo_manifest,
    scenario_samples,
    tiny_model_samples,
)
from training_jobs.hsa.written import WrittenTurnError, load_turns, written_sample  # noqa: E402

FOREIGN_TURNS = ROOT / "tests" / "training_jobs" / "data" / "order_desk_turns.yaml"
_ASKS = ("", "Quick question: ", "One more thing: ", "Please help: ", "Can you check this: ", "I need help: ",
         "Question for you: ", "Could you look into this? ")
_OPENINGS = ("", "Thanks for waiting. ", "Sure. ", "Thanks for asking. ", "Happy to help. ", "Of course. ",
             "Good question. ", "Let me explain. ", "Certainly. ", "I checked for you. ")


def foreign_samples(n: int) -> list:
    """Up to ``n`` distinct order-desk samples (turns x asks x openings), each accepted by the harness's hooks (a
    combination they refuse, e.g. an opening the relevance check reads as off-topic, is left out)."""
    manifest = load_demo_manifest("order_desk")
    turns = load_turns(FOREIGN_TURNS)
    out = []
    for i in range(len(turns) * len(_ASKS) * len(_OPENINGS)):
        if len(out) >= n:
            break
        t = turns[i % len(turns)]
        ask = _ASKS[(i // len(turns)) % len(_ASKS)]
        opening = _OPENINGS[(i // (len(turns) * len(_ASKS))) % len(_OPENINGS)]
        comment = ask + (t["comment"][0].lower() + t["comment"][1:] if ask else t["comment"])
        turn = {**t, "id": f"{t['id']}-{i}", "comment": comment, "viewer": f"customer{i}",
                "reply": opening + t["reply"]}
        try:
            out.append(written_sample(manifest, turn, index=i, source="bench:order_desk"))
        except WrittenTurnError:
            continue
    return out


def _cold() -> None:
    """Forget everything a previous build memoised, so each build is timed from cold."""
    clear_memos()
    _schema_own_valid.cache_clear()
    _schema_errors_cached.cache_clear()
    hsa_state._mention_pattern.cache_clear()
    tool_ops._string_id_schema_allowed.cache_clear()


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _anon_mib() -> float:
    """Resident anonymous memory now (the process's own heap; file pages it maps are not counted)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="augmented demo rows to aim for (distinct samples x K)")
    ap.add_argument("--variants", type=int, default=4, help="K: augmented rows per canonical sample")
    ap.add_argument("--pool", type=int, default=128, help="harness variants per base harness (0: one per row)")
    ap.add_argument("--data", choices=("mix", "scenario", "tiny"), default="mix")
    ap.add_argument("--foreign-samples", type=int, default=960, help="distinct order-desk samples (at most 960; "
                    "0: skip)")
    ap.add_argument("--target", type=float, default=5000.0)
    ap.add_argument("--repeat", type=int, default=3, help="builds to time per harness (the median is judged: this "
                    "machine is shared, and one run can be a third slower than the next)")
    ap.add_argument("--stream-to", default=None,
                    help="measure build_to_disk into this new (or empty) folder instead")
    args = ap.parse_args()
    if args.stream_to and Path(args.stream_to).exists() and any(Path(args.stream_to).iterdir()):
        # build_to_disk replaces DIR/dataset (and removes it on failure): never over something that was there
        ap.error(f"--stream-to {args.stream_to}: the folder exists and is not empty; give a new one")

    t0 = time.perf_counter()
    need = -(-args.rows // args.variants)
    demo = scenario_samples()[:need] if args.data in ("mix", "scenario") else []
    if args.data in ("mix", "tiny") and need > len(demo):
        demo += tiny_model_samples(need - len(demo), seed=0)  # distinct seeded gold turns, none repeated
    assert len({s.id for s in demo}) == len(demo), "a sample used twice"
    foreign = foreign_samples(args.foreign_samples) if args.foreign_samples else []
    print(f"demo samples: {len(demo)} distinct ({args.data}); foreign (order desk) samples: {len(foreign)} distinct; "
          f"each used once; prepared in {time.perf_counter() - t0:.1f}s")

    recipe = Recipe(variants_per_sample=args.variants, harness_pool_size=args.pool, progress_every=10_000)
    if args.stream_to:
        _cold()
        rss_before, anon = _rss_mib(), [_anon_mib()]
        c0, w0 = time.process_time(), time.perf_counter()
        result = build_to_disk(demo, recipe, args.stream_to, progress_every=1_000,
                               progress=lambda done, total: anon.append(_anon_mib()))
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        print(f"streamed to {args.stream_to}: {result.stats.rows} rows built ({result.stats.dropped} dropped, not "
              f"counted) in {cpu:.1f}s CPU ({wall:.1f}s wall) -> {result.stats.rows / cpu:,.0f} samples/s per core "
              f"including the write")
        print(f"memory: peak RSS {rss_before:,.0f} MiB before the build, {_rss_mib():,.0f} MiB after "
              f"(+{_rss_mib() - rss_before:,.0f} MiB, with the pages of the Arrow file that save_to_disk maps and "
              f"copies); anonymous memory {anon[0]:,.0f} MiB before, at most {max(anon):,.0f} MiB while building "
              f"(sampled every 1,000 rows), {_anon_mib():,.0f} MiB after")
        return 0

    rates: dict[str, list[float]] = {"demo": [], "foreign": []}
    sets = [("demo", demo)] + ([("foreign", foreign)] if foreign else [])
    for run in range(1, args.repeat + 1):
        for label, samples in sets:
            _cold()  # every build from cold: no check or schema verdict remembered from the build before
            rss_before = _rss_mib()
            c0, w0 = time.process_time(), time.perf_counter()
            result = build(samples, recipe)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            rss_after = _rss_mib()
            built = result.stats.rows  # every built row once; dropped rows are no samples
            rates[label].append(built / cpu)
            print(f"run {run} {label}: {len(samples)} samples x K={args.variants} (all {len(recipe.operators)} "
                  f"operators on, pool={args.pool}): {built} rows built, {result.stats.dropped} dropped (not counted), "
                  f"in {cpu:.2f}s CPU ({wall:.2f}s wall), {result.stats.harness_variants} harness variants validated "
                  f"-> {rates[label][-1]:,.0f} samples/s per core ({built / wall:,.0f}/s wall)")
            if run == 1:
                never = [n for n, o in result.stats.operators.items() if o.applied == 0]
                print(f"  mean prompt tokens {result.stats.mean_prompt_tokens}; drop reasons "
                      f"{result.stats.drop_reasons}; operators that never fired: {never or 'none'}")
                if label == "demo":
                    print(f"  memory: peak RSS {rss_before:,.0f} MiB before the build, {rss_after:,.0f} MiB after "
                          f"(+{rss_after - rss_before:,.0f} MiB for {len(result.rows):,} rows held in memory)")
            del result
    rate = statistics.median(rates["demo"])

    _cold()
    c0, w0 = time.process_time(), time.perf_counter()
    fixed = build_fixed_harness(demo, progress_every=10_000)
    cpu_f, wall_f = time.process_time() - c0, time.perf_counter() - w0
    print(f"baseline fixed-harness pass (no augmentation, demo samples): {fixed.stats.rows} rows in {cpu_f:.2f}s CPU "
          f"-> {fixed.stats.rows / cpu_f:,.0f} samples/s per core ({fixed.stats.rows / wall_f:,.0f}/s wall)")
    if rates["foreign"]:
        f_rate = statistics.median(rates["foreign"])
        print(f"foreign (order desk): median {f_rate:,.0f} built samples/s per core (best {max(rates['foreign']):,.0f}, "
              f"worst {min(rates['foreign']):,.0f}); foreign/demo ratio {f_rate / rate:.2f}")
    ok = rate >= args.target
    print(f"{'PASS' if ok else 'FAIL'}: demo median of {len(rates['demo'])} runs {rate:,.0f} built samples/s per core "
          f"(best {max(rates['demo']):,.0f}, worst {min(rates['demo']):,.0f}; target {args.target:,.0f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
