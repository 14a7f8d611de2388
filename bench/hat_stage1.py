"""HAT stage 1 through the job system vs a plain TRL script, step by step, and the wall time of the CPU pipeline.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/hat_stage1.py \\
        [--steps 30] [--batch 4] [--repeat 3] [--warmup-pairs 1] [--target 0.95] \\
        [--pipeline-sft 40 --pipeline-distill 20 --pipeline-rl 5 | --no-pipeline] [--scratch-db NAME]

Same model (the committed tiny demo model), same dataset (a fixed-harness dataset of tiny gold turns built by
the console's own builder), same hyperparameters, in this process:
- **plain**: ``trl.SFTTrainer`` on the dataset folder, nothing else (the script a researcher would write);
- **job**: ``training_job_start`` + ``training_job_run`` -- the console's path on a worker: the atomic claim,
  the heartbeat thread, progress points and log lines written to the database, the cancel check, the
  checkpoint and model registration.

Both train at once in two threads and take turns step by step (``bench/paired.py``): pair 1 runs the plain
step then the job's, pair 2 the job's then the plain one, and so on, one step at a time, so the drift of a
shared machine and its neighbours' load hit both sides alike (whole runs one after the other swung from 0.49 to
2.99). A step's time is from its ``on_step_begin`` to its side's next one (or the end of training): the step and
everything its side does before the next -- for the job its progress writes, cancel check and final checkpoint.
The figure is the **median over pairs of the per-pair throughput ratio job/plain** (= plain step time / job step
time; the first ``--warmup-pairs`` of each run left out), with its interquartile range and the number of pairs;
PASS when it is >= ``--target`` (0.95). Beside it, from the same runs: the old whole-run figure (total plain step
time / total job step time per run, median over the runs); the same pairs on process CPU time (which does not
count waiting for a core that other programs hold, so it moves less on a loaded machine); and the job's own
bookkeeping timed where it happens (progress and log writes, cancel checks), in ms per step.

Then one pipeline job (HSA-SFT -> distillation -> RL) on an HSA dataset, with its wall time per stage.

``DATABASE_URL`` only names the PostgreSQL server: the bench creates its own scratch database
(``hat_stage1_<pid>_<random>``, or ``--scratch-db NAME``, refused if that database exists) and a temporary data
folder, and removes both at the end -- also on failure, Ctrl-C or SIGTERM. It never drops a database it did not
create.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from paired import Alternator, paired_ratio, whole_run_ratio  # noqa: E402
from scratch_db import ScratchDatabase, ScratchRefused, use_in_django  # noqa: E402

PLAIN_THREADS = 2  # = the job config's default ``threads``


def plain_trl(dataset_dir: Path, out: Path, steps: int, batch: int, callback=None) -> list[float]:
    """The plain script: trl.SFTTrainer on the dataset folder (``callback``: the bench's step timer). Returns the
    tokens seen after each step (to check that both sides trained on the same batches)."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

    torch.set_num_threads(PLAIN_THREADS)
    tok = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR, dtype=torch.float32)
    ds = load_from_disk(str(dataset_dir)).select_columns(["messages", "tools"])
    args = SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch, learning_rate=1e-3,
                     lr_scheduler_type="cosine", warmup_steps=2, max_length=1024, assistant_only_loss=True,
                     packing=False, logging_steps=1, save_strategy="no", use_cpu=True, bf16=False, fp16=False,
                     gradient_checkpointing=False, report_to="none", dataloader_num_workers=0, disable_tqdm=True,
                     seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                         callbacks=[callback] if callback else None)
    trainer.train()
    return _tokens_seen(trainer.state.log_history)


def _tokens_seen(points: list[dict]) -> list[float]:
    return [p["num_tokens"] for p in points if "loss" in p and "num_tokens" in p]


def interleaved_run(*, user, fixed, base, config: dict, work: Path, steps: int, batch: int) -> dict:
    """One plain trainer and one job, step by step in alternating pairs. Returns both sides' step times."""
    from unittest import mock

    from django.db import connection

    from training_jobs import services, tasks
    from training_jobs.hat import sft

    alternator = Alternator()
    errors: dict[str, BaseException] = {}
    holder: dict = {}  # what each side's thread hands back
    with mock.patch.object(tasks.training_job, "apply_async"):  # run here, not on a worker
        job = services.training_job_start(user=user, kind="baseline_sft", config=config, dataset_id=fixed.pk,
                                          base_model_id=base.pk)
    finish = sft.train_and_finish

    def timed_finish(stage, trainer, *a, **kw):  # the job's own trainer, with the step timer as its last callback
        trainer.add_callback(alternator.callback("job"))
        return finish(stage, trainer, *a, **kw)

    def plain_side() -> None:
        try:
            holder["plain_tokens"] = plain_trl(fixed.artifact_dir / "dataset", work, steps, batch,
                                               alternator.callback("plain"))
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors["plain"] = exc
        finally:
            alternator.end("plain", wait=False)

    def job_side() -> None:
        try:
            holder["job"] = services.training_job_run(job_id=job.pk)
        except BaseException as exc:  # noqa: BLE001
            errors["job"] = exc
        finally:
            alternator.end("job", wait=False)
            connection.close()  # this thread's connection

    # Both sides' imports here, once: trl's lazy module is not safe to import from two threads at once.
    import datasets  # noqa: F401
    import trl  # noqa: F401
    from trl import SFTConfig, SFTTrainer  # noqa: F401

    # The job's own bookkeeping, timed where it happens (an absolute figure beside the ratio): progress points
    # and log lines written to its row, and the cancel checks.
    bookkeeping: list[float] = []

    def timed(method):
        def wrapper(self, *a, **kw):
            t0 = time.perf_counter()
            try:
                return method(self, *a, **kw)
            finally:
                bookkeeping.append(time.perf_counter() - t0)
        return wrapper

    reporter = services.training.JobReporter
    with mock.patch.object(sft, "train_and_finish", timed_finish), \
            mock.patch.object(reporter, "report", timed(reporter.report)), \
            mock.patch.object(reporter, "log", timed(reporter.log)), \
            mock.patch.object(reporter, "should_stop", timed(reporter.should_stop)):
        threads = [threading.Thread(target=f, daemon=True, name=f.__name__) for f in (job_side, plain_side)]
        # One setup at a time (TRL tokenises through a shared, stateful chat-template renderer): the job loads its
        # model and dataset first, then waits at its first step while the plain script loads its own.
        threads[0].start()
        alternator.wait_ready("job")
        threads[1].start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)  # short joins: Ctrl-C / SIGTERM still reach the main thread
    if errors:
        side, exc = next(iter(errors.items()))
        raise RuntimeError(f"the {side} side failed: {type(exc).__name__}: {exc}") from exc
    job = holder["job"]
    assert job.status == "succeeded", job.error
    return {"plain": alternator.times["plain"], "job": alternator.times["job"], "trace": alternator.trace,
            "plain_cpu": alternator.cpu_times["plain"], "job_cpu": alternator.cpu_times["job"],
            "points": len(job.metrics), "bookkeeping_s": sum(bookkeeping),
            "same_batches": holder["plain_tokens"] == _tokens_seen(job.metrics)}


def run(args) -> int:
    from django.contrib.auth.models import Group, User

    from console import roles
    from training_jobs import services, tasks

    user = User.objects.create_user("bench_ml")
    user.groups.add(Group.objects.get(name=roles.ML_STAFF))
    base = services.demo_base_model()

    def dataset(kind: str):
        d = services.dataset_build_start(user=user, kind=kind, recipe={"variants_per_sample": 2,
                                                                       "harness_pool_size": 8},
                                         sources={"scenarios": [], "tiny_gold": 200, "tiny_gold_seed": 1})
        d = services.dataset_build_run(dataset_id=d.pk)
        assert d.status == "succeeded", d.error
        return d

    fixed = dataset("fixed_harness")
    config = {"max_steps": args.steps, "per_device_batch_size": args.batch, "learning_rate": 1e-3,
              "warmup_ratio": 2 / args.steps, "max_length": 1024, "save_steps": 10 * args.steps,
              "logging_steps": 1, "threads": PLAIN_THREADS}
    plain_all, job_all, plain_cpu, job_cpu, whole, kept = [], [], [], [], [], []
    for i in range(1, args.repeat + 1):
        r = interleaved_run(user=user, fixed=fixed, base=base, config=config, work=Path(args.work) / f"plain-{i}",
                            steps=args.steps, batch=args.batch)
        n = min(len(r["plain"]), len(r["job"]))
        plain_s, job_s = r["plain"][:n], r["job"][:n]
        one = paired_ratio(plain_s, job_s, skip=args.warmup_pairs)
        whole.append(whole_run_ratio(plain_s, job_s))
        plain_all += plain_s[args.warmup_pairs:]
        job_all += job_s[args.warmup_pairs:]
        plain_cpu += r["plain_cpu"][args.warmup_pairs:n]
        job_cpu += r["job_cpu"][args.warmup_pairs:n]
        kept.append(r["bookkeeping_s"] / n)
        if args.show_pairs:
            for k in range(n):
                first = "plain" if k % 2 == 0 else "job"
                print(f"  pair {k + 1:>3} ({first} first): plain {plain_s[k] * 1000:7.0f} ms "
                      f"(CPU {r['plain_cpu'][k] * 1000:6.0f}), job {job_s[k] * 1000:7.0f} ms "
                      f"(CPU {r['job_cpu'][k] * 1000:6.0f}), ratio {plain_s[k] / job_s[k]:.3f}"
                      f"{'  (warm-up, left out)' if k < args.warmup_pairs else ''}")
        print(f"run {i}: {n} step pairs in the order {' '.join(s[0].upper() for s in r['trace'][:8])} ... "
              f"(P plain, J job); step time p50 plain {statistics.median(plain_s) * 1000:.0f} ms, "
              f"job {statistics.median(job_s) * 1000:.0f} ms; per-pair ratio median {one.median:.3f} "
              f"(IQR {one.q1:.3f}-{one.q3:.3f}, {one.n} pairs); whole run {whole[-1]:.3f}; "
              f"{r['points']} progress points stored by the job, its reporting and cancel checks "
              f"{kept[-1] * 1000:.1f} ms per step; "
              f"{'the same batches on both sides' if r['same_batches'] else 'DIFFERENT batches on the two sides'}",
              flush=True)
    total = paired_ratio(plain_all, job_all)
    cpu = paired_ratio(plain_cpu, job_cpu)
    job_p50 = statistics.median(job_all)
    print(f"the job's own bookkeeping (progress and log writes, cancel checks): {statistics.median(kept) * 1000:.1f} "
          f"ms per step = {100 * statistics.median(kept) / job_p50:.1f}% of the job's median step "
          f"({job_p50 * 1000:.0f} ms)")
    print(f"same pairs on CPU time (process CPU seconds per step; not counting waits for a core held by other "
          f"programs): median {cpu.median:.3f} (IQR {cpu.q1:.3f}-{cpu.q3:.3f}, {cpu.n} pairs)")
    ok = total.median >= args.target
    print(f"whole-run ratio (old figure: total plain step time / total job step time): median "
          f"{statistics.median(whole):.3f} over {len(whole)} runs ({', '.join(f'{w:.3f}' for w in whole)})")
    print(f"{'PASS' if ok else 'FAIL'}: stage-1 throughput through the job system / plain TRL = {total.median:.3f} "
          f"(median of {total.n} per-step pair ratios, IQR {total.q1:.3f}-{total.q3:.3f} = {total.iqr:.3f}; "
          f"pairs alternate plain-first / job-first; target {args.target})", flush=True)

    if not args.no_pipeline:
        from unittest import mock

        hsa = dataset("hsa")
        pipeline = {"sft": {**config, "max_steps": args.pipeline_sft},
                    "distill": {"max_steps": args.pipeline_distill, "per_device_batch_size": 4,
                                "max_new_tokens": 32, "general_prompts": 64, "save_steps": 1000},
                    "rl": {"max_steps": args.pipeline_rl, "per_device_batch_size": 4, "num_generations": 4,
                           "max_completion_length": 64, "prompts": 32, "save_steps": 1000}}
        with mock.patch.object(tasks.training_job, "apply_async"):
            job = services.training_job_start(user=user, kind="pipeline", config=pipeline, dataset_id=hsa.pk,
                                              base_model_id=base.pk)
        t0 = time.perf_counter()
        job = services.training_job_run(job_id=job.pk)
        wall = time.perf_counter() - t0
        assert job.status == "succeeded", job.error
        parts = ", ".join(f"{s['stage']} {s['steps']} steps {s['metrics']['wall_s']:.0f} s" for s in
                          job.result["stages"])
        print(f"pipeline (HSA-SFT -> distillation -> RL) on CPU: {wall:.0f} s wall in all ({parts})")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30, help="steps per run (one pair per step)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs (each trains both sides once)")
    ap.add_argument("--warmup-pairs", type=int, default=1, help="leading pairs of each run left out of the ratio")
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--pipeline-sft", type=int, default=40)
    ap.add_argument("--pipeline-distill", type=int, default=20)
    ap.add_argument("--pipeline-rl", type=int, default=5)
    ap.add_argument("--no-pipeline", action="store_true")
    ap.add_argument("--show-pairs", action="store_true", help="print every pair's step times (wall and CPU)")
    ap.add_argument("--scratch-db", default=None,
                    help="name of the scratch database to create (refused if it exists; default: a unique name)")
    args = ap.parse_args()
    if args.steps <= args.warmup_pairs or args.repeat < 1 or args.warmup_pairs < 0:
        ap.error("need --steps > --warmup-pairs >= 0 and --repeat >= 1")
    db_url = os.environ.get("DATABASE_URL", "")
    if not db_url.startswith(("postgres://", "postgresql://")):
        print("set DATABASE_URL=postgres://... (the server; the bench creates and drops its own database)",
              file=sys.stderr)
        return 2

    # Datasets, runs and checkpoints go to a folder of this run, never into the console's data folder.
    data_dir = tempfile.mkdtemp(prefix="hat-stage1-bench-")
    os.environ["HAT_DATA_DIR"] = data_dir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work = str(Path(data_dir) / "plain")
    try:
        import django

        django.setup()
        with ScratchDatabase(db_url, "hat_stage1", name=args.scratch_db) as scratch:
            print(f"scratch database {scratch.name}; data folder {data_dir}; load average "
                  f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
            restore = use_in_django(scratch.name)
            try:
                return run(args)
            finally:
                restore()
    except ScratchRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
