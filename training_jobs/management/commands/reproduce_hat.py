"""Test the report's claims in miniature: train the fixed-harness SFT baseline, HSA-SFT, HSA-SFT → distillation
and HSA-SFT → distillation → RL from one base with one budget and seed, evaluate them and the base on T1-T4, and
write one table (training_jobs.reproduce).

    manage.py reproduce_hat --base tiny --budget smoke            # a few minutes of CPU (CI)
    manage.py reproduce_hat --base smol --budget cpu --seed 0     # SmolLM2-135M, LoRA, about two hours on 2 cores
    manage.py reproduce_hat --base smol --budget gpu              # bfloat16 on one GPU
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from training_jobs.reproduce.budgets import BASE_NAMES, BUDGET_NAMES


class Command(BaseCommand):
    help = "Train the four HAT arms from one base and budget, evaluate them and the base, write the table."

    def add_arguments(self, parser):
        parser.add_argument("--base", required=True, choices=BASE_NAMES,
                            help="tiny: models/demo-tiny; smol: models/smollm2-135m (built by make install)")
        parser.add_argument("--budget", required=True, choices=BUDGET_NAMES,
                            help="smoke: minutes on CPU (CI); cpu: about two hours on 2 cores; gpu: bfloat16")
        parser.add_argument("--out", default=None,
                            help="output folder (default: <HAT_DATA_DIR>/reproduce/<base>-<budget>-seed<N>)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the data draw and of every stage")

    def handle(self, *args, **o):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from training_jobs.hat.config import MAX_SEED
        from training_jobs.reproduce.run import BaseNotBuilt, base_model_dir, reproduce

        if not 0 <= o["seed"] <= MAX_SEED:
            raise CommandError(f"--seed: 0 to {MAX_SEED}")
        try:
            base_model_dir(o["base"])
        except BaseNotBuilt as exc:
            raise CommandError(str(exc)) from None
        out = Path(o["out"]) if o["out"] else (Path(settings.ENV.data_dir) / "reproduce"
                                               / f"{o['base']}-{o['budget']}-seed{o['seed']}")
        run = reproduce(base=o["base"], budget=o["budget"], out_dir=out, seed=o["seed"], log=self.stdout.write)
        self.stdout.write(self.style.SUCCESS(f"done in {run['wall_s']['total']} s: {out / 'run.json'}"))
