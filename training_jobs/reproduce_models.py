"""Reproduction runs: ``manage.py reproduce_hat`` as a console job (:class:`console.jobs.Job`) on the ``gpu`` queue.

A run is (base, budget, seed): the worker calls :func:`training_jobs.reproduce.run.reproduce`, which trains the
four arms from the base, evaluates them and the base and writes ``run.json``, ``results.json``, ``table.md``,
``table.csv`` and four SVG plots into ``out_dir``. When it succeeds the row keeps a summary of ``run.json`` (the
git commit, the wall times, the claims' verdicts and the provenance: command, base weights' sha256, data hashes,
arms), so the run's page still says what was measured when its folder is gone.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from django.db import models

from console.jobs import Job

BASES = (("tiny", "tiny (models/demo-tiny)"), ("smol", "smol (models/smollm2-135m)"))
BUDGETS = (("smoke", "smoke (minutes on CPU)"), ("cpu", "cpu (several hours on 2 cores)"),
           ("gpu", "gpu (bfloat16 on one GPU)"))
LOG_LINES_KEPT = 200


class ReproductionRun(Job):
    job_kind = "reproduction"
    job_noun = "reproduction run"
    job_task = "training_jobs.tasks.reproduction_run"
    job_queue = "gpu"  # batch work (hours of training and evaluation): never in front of interactive turns
    job_progress_every_s = 1.0

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    base = models.CharField(max_length=8, choices=BASES)
    budget = models.CharField(max_length=8, choices=BUDGETS)
    seed = models.BigIntegerField(default=0, help_text="seed of the data draw and of every stage (0 to 2**32 - 1)")
    out_dir = models.CharField(max_length=500, help_text="where reproduce() writes run.json, the table and the plots")
    log = models.TextField(blank=True, help_text=f"the last {LOG_LINES_KEPT} lines reproduce() logged")
    # copied from run.json when the run succeeds (the page shows them when the folder is gone)
    git_commit = models.CharField(max_length=64, blank=True)
    wall_s = models.JSONField(default=dict, blank=True, help_text="run.json's wall_s: data, each arm, training, "
                                                                  "evaluation, total")
    claims = models.JSONField(default=list, blank=True, help_text="results.json's claims with their verdicts")
    provenance = models.JSONField(default=dict, blank=True,
                                  help_text="run.json's command, base (name, dir, weights_sha256), budget, data "
                                            "(hashes), arms (stages, steps, wall time, data sha256)")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="reproduction_status_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def name(self) -> str:
        return f"{self.base} · {self.budget} · seed {self.seed}"

    @property
    def path(self) -> Path:
        return Path(self.out_dir)
