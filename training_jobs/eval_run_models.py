"""Evaluation runs: one (model endpoint, harness version, eval set version, sampling, k, seed) evaluated through
the one turn engine, as a job (:class:`console.jobs.Job`) on the ``gpu`` queue, and its per-sample results.

A run's results are rows (:class:`EvalResult`, one per case and sample) written as the worker goes, so a
cancelled or killed run resumes where it stopped (samples already judged are not played again) and every
sample can be opened with its full turn events. ``summary`` holds the aggregates once it ends
(:func:`training_jobs.evals.runner.aggregate`; for T4 the IFEval scores).
"""

from __future__ import annotations

import uuid

from django.db import models

from console.jobs import Job


class EvalRun(Job):
    job_kind = "eval"
    job_noun = "evaluation run"
    job_task = "training_jobs.tasks.eval_run"
    job_queue = "gpu"
    job_resumable = True
    job_progress_every_s = 1.0

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    eval_set_version = models.ForeignKey("training_jobs.EvalSetVersion", on_delete=models.PROTECT,
                                         related_name="runs")
    harness_version = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.PROTECT, null=True,
                                        blank=True, related_name="+",
                                        help_text="the harness the cases run under (none for T4 / IFEval)")
    endpoint = models.ForeignKey("streams.ModelEndpoint", on_delete=models.PROTECT, related_name="+",
                                 help_text="the model server the cases are sent to")
    model = models.ForeignKey("training_jobs.TrainedModel", on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="eval_runs", help_text="the registered model that endpoint serves, if any")
    sampling = models.JSONField(default=dict, blank=True, help_text="temperature, top_p, max_tokens")
    k = models.PositiveSmallIntegerField(default=1, help_text="samples per case (pass^k needs all k solved)")
    seed = models.IntegerField(default=0, help_text="sample j of every case is sent with seed + j")
    max_cases = models.PositiveIntegerField(null=True, blank=True,
                                            help_text="only the first N cases of the set (None: all of them)")
    deadline_s = models.FloatField(null=True, blank=True,
                                   help_text="wall-clock budget per turn (None: the harness's own)")
    summary = models.JSONField(default=dict, blank=True, help_text="the aggregates (training_jobs.evals.runner)")
    judges = models.JSONField(default=list, blank=True,
                              help_text="names of model endpoints that also judge each sample (a second opinion: "
                                        "training_jobs.evals.judge_model; the rules stay the score of record)")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="evalrun_status_recent")]
        permissions = [("run_evalrun", "Can launch, cancel and resume evaluation runs")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def kind(self) -> str:
        return self.eval_set_version.eval_set.kind


class EvalResult(models.Model):
    """One sample of one case of a run, as judged."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case_id = models.CharField(max_length=200)
    position = models.PositiveIntegerField(help_text="the case's line in its set version")
    sample = models.PositiveSmallIntegerField()
    accuracy = models.FloatField(default=0.0)
    effectiveness = models.FloatField(default=0.0)
    solved = models.BooleanField(default=False, help_text="accurate and fully effective (T4: every instruction "
                                                          "followed, strict)")
    reply = models.TextField(blank=True)
    reason = models.CharField(max_length=64, blank=True, help_text="how the turn ended (ok, blocked:<hook>, ...)")
    fallback = models.BooleanField(default=False)
    problems = models.JSONField(default=list, blank=True, help_text="what the rules found: rule, message, span")
    events = models.JSONField(default=list, blank=True, help_text="the turn's engine events (drill-down)")
    detail = models.JSONField(default=dict, blank=True, help_text="T4: per-instruction results, strict and loose")
    turn_s = models.FloatField(default=0.0)
    ttft_s = models.FloatField(null=True, blank=True)
    decode_tps = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True, max_length=2000, help_text="the case could not be run (judged 0)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "position", "sample"]
        constraints = [models.UniqueConstraint(fields=["run", "case_id", "sample"], name="eval_result_unique")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.case_id}#{self.sample}"
