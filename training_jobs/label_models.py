"""Human labels of evaluation results: a reviewer's own verdict on one judged sample, given blind (without seeing
the rules' or the judges' verdict), so the console can say how far the rules and the judge models agree with people
(:mod:`training_jobs.label_selectors`, Cohen's kappa in :mod:`training_jobs.evals.agreement`).

One label per reviewer and sample; a label is not edited afterwards (after submitting, the reviewer sees the
verdicts, and a changed label would no longer be blind).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

ACCURACY_CHOICES = [(0, "0 — a factual error, unsupported claim or false promise"), (1, "1 — accurate")]
EFFECTIVENESS_CHOICES = [(0.0, "0 — does not answer"), (0.5, "0.5 — answers in part"), (1.0, "1 — answers fully")]
NOTE_MAX = 2000


class HumanLabel(models.Model):
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="eval_labels")
    result = models.ForeignKey("training_jobs.EvalResult", on_delete=models.CASCADE, related_name="human_labels")
    accuracy = models.PositiveSmallIntegerField(choices=ACCURACY_CHOICES)
    effectiveness = models.FloatField(choices=EFFECTIVENESS_CHOICES)
    note = models.TextField(blank=True, max_length=NOTE_MAX, help_text="why, in a few words (optional)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["reviewer", "result"], name="human_label_one_per_reviewer"),
            models.CheckConstraint(condition=models.Q(accuracy__in=(0, 1)), name="human_label_accuracy_class"),
            models.CheckConstraint(condition=models.Q(effectiveness__in=(0.0, 0.5, 1.0)),
                                   name="human_label_effectiveness_class"),
        ]
        permissions = [("label_evalresult", "Can label evaluation results (blind human labels)")]

    def __str__(self) -> str:
        return f"{self.reviewer_id} on {self.result_id}: {self.accuracy}/{self.effectiveness}"
