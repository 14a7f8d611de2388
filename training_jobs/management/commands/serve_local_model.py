"""Serve a local model directory over an OpenAI-compatible API on loopback (transformers serve, offline)."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Start the local OpenAI-compatible model server (default: models/demo-tiny on 127.0.0.1:8011)."

    def add_arguments(self, parser):
        from training_jobs.tiny_model.serve import DEFAULT_HOST, DEFAULT_PORT, DEMO_MODEL_DIR

        parser.add_argument("--model-dir", default=str(DEMO_MODEL_DIR))
        parser.add_argument("--host", default=DEFAULT_HOST)
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)
        parser.add_argument("--log-level", default="warning")
        parser.add_argument(
            "--check", action="store_true", help="only check that a server is ready there (exit 1 if not)"
        )

    def handle(self, *args, **o):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from training_jobs.tiny_model import serve

        base = f"http://{o['host']}:{o['port']}"
        if o["check"]:
            if not serve.is_ready(base):
                raise CommandError(f"no ready model server at {base}")
            self.stdout.write(self.style.SUCCESS(f"ready: {base}/v1"))
            return
        if not os.path.isdir(o["model_dir"]):
            raise CommandError(f"no model directory {o['model_dir']}")
        self.stdout.write(f"serving {o['model_dir']} at {base}/v1 (model name = its absolute path)")
        serve.serve(o["model_dir"], o["host"], o["port"], o["log_level"])
