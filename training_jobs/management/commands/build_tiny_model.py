"""Build the tiny chat model offline: tokenizer trained on the project's text + a small random Qwen3."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Build a tiny Qwen3 model + byte-level BPE tokenizer (one token per digit) offline into a directory."

    def add_arguments(self, parser):
        parser.add_argument("out", help="output directory")
        parser.add_argument("--layers", type=int, default=4)
        parser.add_argument("--hidden", type=int, default=128)
        parser.add_argument("--intermediate", type=int, default=512)
        parser.add_argument("--heads", type=int, default=4)
        parser.add_argument("--kv-heads", type=int, default=2)
        parser.add_argument("--vocab", type=int, default=4096)
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, **o):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from training_jobs.tiny_model.build import TinyModelSpec, build_tiny_model

        spec = TinyModelSpec(
            vocab_size=o["vocab"],
            hidden_size=o["hidden"],
            intermediate_size=o["intermediate"],
            num_hidden_layers=o["layers"],
            num_attention_heads=o["heads"],
            num_key_value_heads=o["kv_heads"],
            head_dim=o["hidden"] // o["heads"],
            seed=o["seed"],
        )
        path = build_tiny_model(o["out"], spec)
        self.stdout.write(self.style.SUCCESS(f"built {path}"))
