"""Check that no evaluation case or prompt on record appears in training data on record (exit 1 if one does).

    manage.py check_eval_leakage [--json]

Training data: every finished dataset's rows and every distillation stage's general prompts; evaluation: the
latest and the pinned version of every eval set (training_jobs.eval_leakage).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from django.core.management.base import BaseCommand

from training_jobs.eval_leakage import leakage_report


class Command(BaseCommand):
    help = "Report evaluation cases and prompts that also appear in training data on record (exit 1 if any)."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", dest="as_json")

    def handle(self, *args, as_json: bool, **options):
        report = leakage_report()
        if as_json:
            self.stdout.write(json.dumps({"clean": report.clean, "sets": report.sets,
                                          "training_sources": report.training_sources,
                                          "training_texts": report.training_texts,
                                          "leaks": [asdict(leak) for leak in report.leaks]}, indent=2))
        else:
            self.stdout.write(f"{len(report.sets)} eval set versions against {report.training_sources} training "
                              f"sources ({report.training_texts} texts)")
            for leak in report.leaks:
                self.stdout.write(f"  LEAK {leak.describe()}")
            self.stdout.write("no leaks" if report.clean else f"{len(report.leaks)} leak(s)")
        if not report.clean:
            raise SystemExit(1)
