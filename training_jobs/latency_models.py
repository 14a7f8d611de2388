"""Latency replays: an eval set's complete-agent turns replayed against a model endpoint at several concurrency
levels, as a job (:class:`console.jobs.Job`) on the ``gpu`` queue.

A replay is (endpoint, harness version, eval set version, concurrency levels, turns per level, seed). Its
``summary`` holds one entry per finished level (P50 / P95 turn time, share under 15 s, TTFT, decode tokens/s,
the turn times for the histogram; :func:`training_jobs.evals.replay.level_summary`), written as each level ends,
with the report's reference figures beside. A cancelled, failed or killed replay resumes at the first level it
did not finish (a level is measured whole: one cut short is played again from its first turn).
"""

from __future__ import annotations

import uuid

from django.db import models

from console.jobs import Job


def default_concurrency() -> list[int]:
    from training_jobs.evals.replay import DEFAULT_CONCURRENCY

    return list(DEFAULT_CONCURRENCY)


class LatencyReplay(Job):
    job_kind = "latency_replay"
    job_noun = "latency replay"
    job_task = "training_jobs.tasks.latency_replay"
    job_queue = "gpu"
    job_resumable = True
    job_progress_every_s = 0.5

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    eval_set_version = models.ForeignKey("training_jobs.EvalSetVersion", on_delete=models.PROTECT,
                                         related_name="latency_replays",
                                         help_text="whose harness cases (T1–T3) are the turns replayed")
    harness_version = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.PROTECT, related_name="+",
                                        help_text="the harness the turns run under (T2/T3: its variants)")
    endpoint = models.ForeignKey("streams.ModelEndpoint", on_delete=models.PROTECT, related_name="+",
                                 help_text="the model server measured")
    concurrency = models.JSONField(default=default_concurrency,
                                   help_text="the levels, in the order they are played: turns in flight at once")
    turns_per_level = models.PositiveIntegerField(default=32)
    seed = models.IntegerField(default=0, help_text="shuffles the cases; turn i is sent with seed + i")
    sampling = models.JSONField(default=dict, blank=True, help_text="temperature, top_p, max_tokens")
    deadline_s = models.FloatField(null=True, blank=True,
                                   help_text="wall-clock budget per turn (None: the harness's own)")
    summary = models.JSONField(default=dict, blank=True,
                               help_text="levels (training_jobs.evals.replay.replay_summary), histogram bins, "
                                         "reference")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="latency_status_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def levels(self) -> list[dict]:
        return list((self.summary or {}).get("levels") or [])

    def finished_levels(self) -> set[int]:
        """The concurrency levels measured whole (a resume skips them)."""
        return {level["concurrency"] for level in self.levels if level.get("complete")}
