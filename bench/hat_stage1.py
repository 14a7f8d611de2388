"""HAT stage 1 through the job system vs a plain TRL script, and the wall time of the whole CPU pipeline.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hat_bench .venv/bin/python bench/hat_stage1.py \\
        [--steps 30] [--batch 4] [--repeat 3] [--pipeline-sft 40 --pipeline-distill 20 --pipeline-rl 5]

Same model (the committed tiny demo model), same dataset (a fixed-harness dataset of tiny gold turns built by
the console's own builder), same hyperparameters, in this process, alternating:
- **plain**: ``trl.SFTTrainer`` on the dataset folder, nothing else (the script a researcher would write);
- **job**: ``training_job_start`` + ``training_job_run`` — the console's path on a worker: the atomic claim,
  the heartbeat thread, progress points and log lines written to the database, the cancel check, the
  checkpoint and model registration.
Throughput is samples per second of ``trainer.train()`` (model loading and tokenisation excluded on both
sides; the job's whole wall time is printed too). PASS when the median ratio job/plain >= ``--target`` (0.95).
Then one pipeline job (HSA-SFT → distillation → RL) on an HSA dataset, with its wall time per stage.
Uses a throwaway test database (``test_<name>`` of DATABASE_URL); needs PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402


def plain_trl(dataset_dir: Path, out: Path, steps: int, batch: int) -> float:
    """The plain script: samples/s of trainer.train()."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from training_jobs.tiny_model.pipeline import DEMO_MODEL_DIR

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR, dtype=torch.float32)
    ds = load_from_disk(str(dataset_dir)).select_columns(["messages", "tools"])
    args = SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch, learning_rate=1e-3,
                     lr_scheduler_type="cosine", warmup_steps=2, max_length=1024, assistant_only_loss=True,
                     packing=False, logging_steps=1, save_strategy="no", use_cpu=True, bf16=False, fp16=False,
                     gradient_checkpointing=False, report_to="none", dataloader_num_workers=0, disable_tqdm=True,
                     seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    t0 = time.perf_counter()
    trainer.train()
    return steps * batch / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--pipeline-sft", type=int, default=40)
    ap.add_argument("--pipeline-distill", type=int, default=20)
    ap.add_argument("--pipeline-rl", type=int, default=5)
    ap.add_argument("--no-pipeline", action="store_true")
    args = ap.parse_args()

    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    work = ROOT / "var" / "bench-hat"
    shutil.rmtree(work, ignore_errors=True)
    try:
        from unittest import mock

        from django.contrib.auth.models import Group, User

        from console import roles
        from training_jobs import services, tasks
        from training_jobs.models import TrainingJob

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
                  "logging_steps": 1}
        plain, job_rates, job_walls = [], [], []
        for run in range(1, args.repeat + 1):
            plain.append(plain_trl(fixed.artifact_dir / "dataset", work / f"plain-{run}", args.steps, args.batch))
            t0 = time.perf_counter()
            with mock.patch.object(tasks.training_job, "apply_async"):  # run here, not on a worker
                job = services.training_job_start(user=user, kind="baseline_sft", config=config,
                                                  dataset_id=fixed.pk, base_model_id=base.pk)
            job = services.training_job_run(job_id=job.pk)
            job_walls.append(time.perf_counter() - t0)
            assert job.status == "succeeded", job.error
            job_rates.append(job.result["stages"][0]["metrics"]["samples_per_s"])
            print(f"run {run}: plain TRL {plain[-1]:.2f} samples/s, job {job_rates[-1]:.2f} samples/s "
                  f"(ratio {job_rates[-1] / plain[-1]:.3f}; the job's whole wall time {job_walls[-1]:.1f} s, "
                  f"{len(job.metrics)} progress points stored)", flush=True)
        ratios = [j / p for j, p in zip(job_rates, plain)]
        ratio = statistics.median(ratios)
        ok = ratio >= args.target
        print(f"{'PASS' if ok else 'FAIL'}: stage-1 throughput through the job system / plain TRL = {ratio:.3f} "
              f"(median of {len(ratios)}; target {args.target})", flush=True)

        if not args.no_pipeline:
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
            print(f"pipeline (HSA-SFT → distillation → RL) on CPU: {wall:.0f} s wall in all ({parts})")
        return 0 if ok else 1
    finally:
        for j in TrainingJob.objects.all():
            shutil.rmtree(j.output_dir, ignore_errors=True)
        from training_jobs.models import Dataset

        for d in Dataset.objects.all():
            shutil.rmtree(services.datasets_dir() / str(d.pk), ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    sys.exit(main())
