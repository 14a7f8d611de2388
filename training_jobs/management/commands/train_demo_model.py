"""Reproduce the committed demo checkpoint: build → SFT on reference-policy gold turns → evaluate → export.

A background job of tens of minutes on 2 CPU cores (a minute on a GPU): not something to run at every start.
"""

from __future__ import annotations

import os
import time

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Build, train (TRL SFT, CPU) and evaluate the tiny demo model; write models/demo-tiny + MODEL_CARD.md."

    def add_arguments(self, parser):
        parser.add_argument("--max-steps", type=int, default=2400)
        parser.add_argument("--train-samples", type=int, default=12000)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--stop-after-steps", type=int, default=None, help="stop here (the lr schedule still spans --max-steps)"
        )
        parser.add_argument("--minutes", type=float, default=None, help="stop (and still export) after this long")
        parser.add_argument("--out", default=None, help="export directory (default models/demo-tiny)")
        parser.add_argument("--work", default=None, help="work directory (default var/tiny_run)")
        parser.add_argument("--eval-n", type=int, default=60)
        parser.add_argument("--init-from", default=None,
                            help="continue training this checkpoint (its tokenizer and weights) instead of building one")
        parser.add_argument("--learning-rate", type=float, default=None)
        parser.add_argument("--threads", type=int, default=None,
                            help="torch CPU threads (1 avoids OpenMP stalls on cores shared with other work)")
        parser.add_argument("--mix", default=None,
                            help="demo manifests and their shares of the gold data, e.g. "
                                 "tiny_room=0.4,skincare_v1=0.3,skincare_v2=0.15,skincare_v3=0.15 "
                                 "(default: tiny_room only)")

    def handle(self, *args, **o):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from django.core.management.base import CommandError

        from training_jobs.tiny_model import pipeline
        from training_jobs.tiny_model.gold import parse_mix

        try:
            mix = parse_mix(o["mix"]) if o["mix"] else None
        except ValueError as exc:
            raise CommandError(f"--mix: {exc}") from None

        kwargs = {
            "max_steps": o["max_steps"],
            "train_samples": o["train_samples"],
            "seed": o["seed"],
            "deadline_unix": time.time() + 60 * o["minutes"] if o["minutes"] else None,
            "stop_after_steps": o["stop_after_steps"],
            "eval_n": o["eval_n"],
            "init_from": o["init_from"],
            "learning_rate": o["learning_rate"],
            "threads": o["threads"],
            "mix": mix,
            "log": self.stdout.write,
        }
        if o["out"]:
            kwargs["out_dir"] = o["out"]
        if o["work"]:
            kwargs["work_dir"] = o["work"]
        info = pipeline.run(**kwargs)
        # the serving figures in the model card come from the real local server on the exported directory
        pipeline.record_serving(kwargs.get("out_dir", pipeline.DEMO_MODEL_DIR), seed=o["seed"], log=self.stdout.write)
        self.stdout.write(self.style.SUCCESS(f"done: {info['train']['steps']} steps, metrics in metrics.json"))
