"""Test the report's claims in miniature: train the fixed-harness SFT baseline, HSA-SFT, HSA-SFT → distillation
and HSA-SFT → distillation → RL from one base with one budget and seed, evaluate them and the base on T1-T4, and
write one table (training_jobs.reproduce).

    manage.py reproduce_hat --base tiny --budget smoke            # a few minutes of CPU (CI)
    manage.py reproduce_hat --base smol --budget cpu --seed 0     # SmolLM2-135M, LoRA: hours on 2 cores (--keep)
    manage.py reproduce_hat --base smol --budget gpu              # bfloat16 on one GPU
    manage.py reproduce_hat --base smol --budget cpu --keep results/hat-miniature/parts   # over several sittings
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Train the four HAT arms from one base and budget, evaluate them and the base, write the table."

    def add_arguments(self, parser):
        from training_jobs.reproduce.run import add_arguments

        add_arguments(parser)  # the same arguments as python -m training_jobs.reproduce.run

    def handle(self, *args, **o):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from training_jobs.hat.config import MAX_SEED
        from training_jobs.reproduce.run import BaseNotBuilt, base_model_dir, command_line, reproduce

        if not 0 <= o["seed"] <= MAX_SEED:
            raise CommandError(f"--seed: 0 to {MAX_SEED}")
        try:
            base_model_dir(o["base"])
        except BaseNotBuilt as exc:
            raise CommandError(str(exc)) from None
        out = Path(o["out"]) if o["out"] else (Path(settings.ENV.data_dir) / "reproduce"
                                               / f"{o['base']}-{o['budget']}-seed{o['seed']}")
        keep = Path(o["keep"]) if o["keep"] else None
        run = reproduce(base=o["base"], budget=o["budget"], out_dir=out, seed=o["seed"], log=self.stdout.write,
                        command=command_line(o["base"], o["budget"], out, o["seed"], keep), keep_dir=keep)
        self.stdout.write(self.style.SUCCESS(f"done in {run['wall_s']['total']} s: {out / 'run.json'}"))
