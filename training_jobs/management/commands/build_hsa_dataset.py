"""Build an HSA (or fixed-harness) dataset from the command line, with a progress bar: the same samples,
recipe and artifact folder as a console job, without a job row. Labels by regeneration name their teacher and
judge by model endpoint record (``--teacher-endpoint NAME``): the same outbound check and secrets as the console.

    manage.py build_hsa_dataset --out var/datasets/demo --variants 4 --seed 0
    manage.py build_hsa_dataset --recipe recipe.json --tiny-gold 500 --scenarios '' --out /data/hsa
    manage.py build_hsa_dataset --fixed-harness --out var/datasets/demo-fixed
    manage.py build_hsa_dataset --teacher-endpoint local --variants 1 --out var/datasets/regen
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from pydantic import ValidationError

from training_jobs.hsa.dataset import BuildCancelled, Recipe, default_operators
from training_jobs.schemas import Sources, located_errors


def _csv(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [x.strip() for x in text.split(",") if x.strip()]


class Command(BaseCommand):
    help = "Build an HSA dataset (or the fixed-harness baseline) into a folder, with a progress bar."

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="dataset folder to write (replaced when complete)")
        parser.add_argument("--recipe", default=None, help="a recipe JSON file (the options below override it)")
        parser.add_argument("--fixed-harness", action="store_true", help="the baseline: no augmentation")
        parser.add_argument("--name", default=None)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--variants", type=int, default=None, help="K augmented rows per sample")
        parser.add_argument("--names", choices=["train", "heldout"], default=None, help="name pool")
        parser.add_argument("--harness-pool-size", type=int, default=None)
        parser.add_argument("--operators", default=None,
                            help="comma-separated operators (default: all), each name or name=probability")
        parser.add_argument("--scenarios", default=None, help="comma-separated demo scenario ids (default: all; "
                            "'' for none)")
        parser.add_argument("--demo-manifests", default=None, help="comma-separated demo manifests")
        parser.add_argument("--versions", default=None, help="comma-separated approved versions slug@number "
                            "(read from the database)")
        parser.add_argument("--tiny-gold", type=int, default=0, help="samples from the tiny gold generator")
        parser.add_argument("--tiny-gold-seed", type=int, default=0)
        parser.add_argument("--preview-rooms", default=None, help="comma-separated preview room / scenario run "
                            "ids whose recorded turns become samples when they are right (read from the database)")
        parser.add_argument("--max-samples", type=int, default=None)
        parser.add_argument("--teacher-endpoint", default=None, metavar="NAME",
                            help="label by regeneration: the model endpoint (by name) that re-answers each row")
        parser.add_argument("--judge-endpoint", default=None, metavar="NAME",
                            help="an optional judge endpoint (by name) on top of the rule checks")
        parser.add_argument("--no-progress", action="store_true")

    def _recipe(self, o) -> Recipe:
        data = {}
        if o["recipe"]:
            try:
                data = json.loads(Path(o["recipe"]).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read the recipe: {exc}") from None
        for key, opt in (("name", "name"), ("seed", "seed"), ("variants_per_sample", "variants"),
                         ("names", "names"), ("harness_pool_size", "harness_pool_size")):
            if o[opt] is not None:
                data[key] = o[opt]
        if o["teacher_endpoint"] is not None:
            data["teacher"], data["label_mode"] = o["teacher_endpoint"], "regenerate"
        if o["judge_endpoint"] is not None:
            data["judge"] = o["judge_endpoint"]
        if o["operators"] is not None:
            defaults = {s.name: s.probability for s in default_operators()}
            ops = []
            for item in _csv(o["operators"]) or []:
                name, _, p = item.partition("=")
                ops.append({"name": name, "probability": float(p) if p else defaults.get(name, 0.5)})
            data["operators"] = ops
        try:
            return Recipe.model_validate(data)
        except ValidationError as exc:
            raise CommandError("invalid recipe:\n" + "\n".join(f"  {e['path'] or '(recipe)'}: {e['message']}"
                                                                for e in located_errors(exc))) from None

    def _sources(self, o) -> Sources:
        data: dict = {"tiny_gold": o["tiny_gold"], "tiny_gold_seed": o["tiny_gold_seed"],
                      "max_samples": o["max_samples"]}
        for key in ("scenarios", "demo_manifests", "versions", "preview_rooms"):
            value = _csv(o[key])
            if value is not None:
                data[key] = value
        try:
            return Sources.model_validate(data)
        except ValidationError as exc:
            raise CommandError("invalid sources:\n" + "\n".join(f"  {e['path'] or '(sources)'}: {e['message']}"
                                                                 for e in located_errors(exc))) from None

    def handle(self, *args, **o):
        from console.errors import ValidationFailed
        from streams.engine.outbound import OutboundRefused
        from training_jobs import services

        kind = "fixed_harness" if o["fixed_harness"] else "hsa"
        recipe = None if o["fixed_harness"] else self._recipe(o)
        sources = self._sources(o)
        self.stdout.write("collecting samples ...")
        try:
            services.validate_build(kind=kind, recipe=recipe, sources=sources)
            samples, recorded = services.collect_samples(sources)
            endpoints = services.recipe_endpoints(recipe)  # checked again; keys read from their secrets here
        except OutboundRefused as exc:
            raise CommandError(str(exc)) from None
        except ValidationFailed as exc:
            raise CommandError("; ".join(f"{e['path']}: {e['message']}" for e in exc.errors)) from None
        if recorded is not None:
            self.stdout.write(f"recorded turns: {recorded['kept']} of {recorded['considered']} kept; left out: "
                              + (", ".join(f"{k} {n}" for k, n in recorded["rejected"].items()) or "none"))
        total = len(samples) * (recipe.variants_per_sample if recipe else 1)
        self.stdout.write(f"{len(samples)} samples -> {total} rows ({kind})")
        bar = None
        if not o["no_progress"]:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="row", file=sys.stderr, dynamic_ncols=True)

        def progress(done: int, _total: int) -> None:
            if bar is not None:
                bar.update(done - bar.n)

        t0 = time.perf_counter()
        try:
            result = services.build_artifact(samples, o["out"], kind=kind, recipe=recipe, progress=progress,
                                             endpoints=endpoints)
        except BuildCancelled as exc:
            raise CommandError(str(exc)) from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        finally:
            if bar is not None:
                bar.close()
        stats = result.stats
        self.stdout.write(self.style.SUCCESS(
            f"wrote {stats.rows} rows ({stats.dropped} dropped) to {o['out']} in {time.perf_counter() - t0:.1f} s"))
        for name, op in stats.to_dict()["operators"].items():
            self.stdout.write(f"  {name:28} applied {op['applied']:6}  dropped {op['dropped']:5}  "
                              f"mean prompt tokens {op['mean_prompt_tokens']}")
