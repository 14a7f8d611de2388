"""Session replays: a recorded live session played offline again, turn by turn, against another harness version
and/or model, and compared with what was said live (imported by streams.models; its own module).

A :class:`SessionReplay` is a job (:class:`console.jobs.Job`) on the batch ``gpu`` queue, never the interactive
one: it runs each answered turn of the session again through the one turn engine from the room state and the
comments that turn started from (its ``turn_started`` event), judges the recorded reply and the new one with the
one set of reply rules, and stores one :class:`SessionReplayTurn` per turn as it ends. A cancelled, failed or
killed replay resumes at the first turn not stored.
"""

from __future__ import annotations

import uuid

from django.db import models

from console.jobs import Job


class SessionReplay(Job):
    job_kind = "session_replay"
    job_noun = "session replay"
    job_task = "streams.replay_tasks.session_replay"
    job_queue = "gpu"  # batch work: never in front of preview or live turns
    job_resumable = True
    job_progress_every_s = 0.5

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    session = models.ForeignKey("streams.LiveSession", on_delete=models.CASCADE, related_name="replays",
                                help_text="the recorded session whose turns are played again")
    harness_version = models.ForeignKey("harness_editor.HarnessVersion", on_delete=models.PROTECT, related_name="+",
                                        help_text="the harness the turns run under now (any version: drafts too)")
    endpoint = models.ForeignKey("streams.ModelEndpoint", on_delete=models.PROTECT, related_name="+",
                                 help_text="the model server the turns are sent to")
    request_model = models.CharField(max_length=200, blank=True,
                                     help_text="the model name requests carry ('' = the endpoint's; a loaded "
                                               "LoRA adapter's name to replay against the adapter)")
    sampling = models.JSONField(default=dict, blank=True, help_text="temperature, top_p, max_tokens")
    seed = models.IntegerField(default=0, help_text="sent with every turn's requests")
    deadline_s = models.FloatField(null=True, blank=True,
                                   help_text="wall-clock budget per turn (None: the harness's own)")
    summary = models.JSONField(default=dict, blank=True,
                               help_text="turns, replayed, skipped, changed, regressed, improved, and per side "
                                         "(original / new): fallbacks, judge_problems, inaccurate, "
                                         "effectiveness_mean, hook_failures")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["session", "-created_at"], name="session_replay_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class SessionReplayTurn(models.Model):
    """One turn of a session replay: the recorded turn beside the same turn played again.

    ``original`` and ``new`` have one shape: ``{reply, fallback, reason, version, hooks: [{hook_id, passed,
    on_fail, message}], judgement: {accuracy, effectiveness, accuracy_reason, effectiveness_reason, problems},
    tools: [{name, arguments, ok, error, fault}], skills: [...], timings: {...}}``."""

    replay = models.ForeignKey(SessionReplay, on_delete=models.CASCADE, related_name="turns")
    position = models.PositiveIntegerField(help_text="the turn's place in the session (1 = first)")
    turn_id = models.CharField(max_length=64, help_text="the recorded turn's id")
    comments = models.JSONField(default=list, help_text="the comments the turn answered: [{viewer, text}]")
    original = models.JSONField(default=dict)
    new = models.JSONField(default=dict, blank=True)
    changed = models.BooleanField(default=False, help_text="the new reply's words differ from the original's")
    regressed = models.BooleanField(default=False, db_index=True,
                                    help_text="judged worse: less accurate, less effective, or a fallback now")
    improved = models.BooleanField(default=False)
    skipped = models.CharField(max_length=300, blank=True,
                               help_text="why the turn could not be played again ('' = played)")
    error = models.TextField(blank=True, max_length=2000, help_text="the new turn failed in the engine")
    events = models.JSONField(default=list, blank=True, help_text="the new turn's engine events (no tokens)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["replay", "position"]
        constraints = [models.UniqueConstraint(fields=["replay", "turn_id"], name="session_replay_turn_once")]

    def __str__(self) -> str:
        return f"{self.replay_id} turn {self.position}"

    @property
    def outcome(self) -> str:
        """skipped, failed, regressed, improved, changed or unchanged (what the page's badge says)."""
        if self.skipped:
            return "skipped"
        if self.error:
            return "failed"
        if self.regressed:
            return "regressed"
        if self.improved:
            return "improved"
        return "changed" if self.changed else "unchanged"


__all__ = ["SessionReplay", "SessionReplayTurn"]
