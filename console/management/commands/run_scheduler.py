"""``manage.py run_scheduler``: the periodic sweeps, in their own process (see console/scheduler.py)."""

from __future__ import annotations

import logging
import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.scheduler import Scheduler


class Command(BaseCommand):
    help = ("Run the periodic sweeps of CELERY_BEAT_SCHEDULE in this process until SIGTERM/SIGINT (no worker "
            "needed): fails jobs whose worker died, re-sends lost clock ticks.")

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run every sweep once and exit (cron)")

    def handle(self, *args, **options):
        logging.basicConfig(stream=sys.stderr, level=settings.ENV.log_level,
                            format="[%(asctime)s: %(levelname)s/scheduler] %(message)s")
        try:
            scheduler = Scheduler(settings.CELERY_BEAT_SCHEDULE)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if options["once"]:
            failed = [name for name, ok, _ in scheduler.run_due() if not ok]
            if failed:
                raise CommandError(f"sweeps failed: {', '.join(failed)}")
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: scheduler.stop.set())
        scheduler.run_forever()
