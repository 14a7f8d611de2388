"""The approval gate's policy, set by an administrator (Django admin): which evaluation evidence a harness version
needs before a compliance reviewer may approve it.

A :class:`GatePolicy` applies to one harness, or to every harness without its own (``harness`` empty, at most one
such default). It names the endpoint whose model counts as the production model (runs against other endpoints are
not evidence) and, optionally, the ``k`` and ``seed`` the runs must use. Its :class:`GateRequirement` rows say
which eval sets are required (each is evaluated on its *pinned* version) and, per metric, the minimum score and
the largest drop against the version ``production`` points at — both in points (percent). A set with a row whose
metric has neither threshold is still required: a finished run must exist.

The evidence itself is read by :mod:`training_jobs.gate`; the registry only sees its answer (harness_editor.gate).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Value
from django.db.models.functions import Coalesce

# metric -> (label, the set kinds it applies to)
HARNESS_KINDS = ("t1", "t2", "t3")
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "accuracy": ("Accuracy", HARNESS_KINDS),
    "effectiveness": ("Effectiveness", HARNESS_KINDS),
    "pass_k": ("pass^k", HARNESS_KINDS),
    "pass_1": ("pass@1 (solve rate)", HARNESS_KINDS),
    "prompt_strict": ("IFEval prompt-level strict", ("t4",)),
    "instruction_strict": ("IFEval instruction-level strict", ("t4",)),
    "prompt_loose": ("IFEval prompt-level loose", ("t4",)),
    "instruction_loose": ("IFEval instruction-level loose", ("t4",)),
}
POINTS = [MinValueValidator(0.0), MaxValueValidator(100.0)]


class GatePolicy(models.Model):
    harness = models.ForeignKey(
        "harness_editor.Harness", on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        help_text="the harness this policy gates; empty: every harness that has no policy of its own")
    enabled = models.BooleanField(default=True, help_text="off: versions of the harness are approved without "
                                                          "evidence (the review page says so)")
    endpoint = models.ForeignKey(
        "streams.ModelEndpoint", on_delete=models.PROTECT, related_name="+",
        help_text="the production model: only runs against this endpoint count as evidence")
    k = models.PositiveSmallIntegerField(null=True, blank=True, validators=[MinValueValidator(1)],
                                         help_text="samples per case the runs must use (empty: any)")
    seed = models.IntegerField(null=True, blank=True, validators=[MinValueValidator(0)],
                               help_text="seed the runs must use (empty: any)")
    regression_needs_ci = models.BooleanField(
        default=False, verbose_name="regressions judged on the interval",
        help_text="a regression rule passes only when the 95 % interval of the per-case change excludes a drop "
                  "larger than the maximum (stricter than comparing the means; needs enough cases)")
    note = models.TextField(blank=True, max_length=2000, help_text="why the thresholds are what they are")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "approval gate policy"
        verbose_name_plural = "approval gate policies"
        # one policy per harness and one default (harness empty): NULLs are distinct in a plain unique index
        constraints = [models.UniqueConstraint(
            Coalesce("harness", Value(0), output_field=models.BigIntegerField()), name="gate_policy_one_per_harness",
            violation_error_message="there is already a policy for this harness (or a default policy)")]

    def __str__(self) -> str:
        return f"gate for {self.harness.slug if self.harness_id else 'every harness'}"


class GateRequirement(models.Model):
    """One required set and, optionally, a threshold on one of its metrics."""

    policy = models.ForeignKey(GatePolicy, on_delete=models.CASCADE, related_name="requirements")
    eval_set = models.ForeignKey("training_jobs.EvalSet", on_delete=models.PROTECT, related_name="+",
                                 help_text="required; its pinned version is the one evaluated")
    metric = models.CharField(max_length=24, choices=[(k, v[0]) for k, v in METRICS.items()], default="accuracy",
                              help_text="accuracy, effectiveness, pass^k, pass@1 for T1–T3; IFEval figures for T4")
    minimum = models.FloatField(null=True, blank=True, validators=POINTS,
                                help_text="lowest acceptable score, in percent (empty: no minimum)")
    max_drop = models.FloatField(null=True, blank=True, validators=POINTS,
                                 help_text="largest acceptable drop against the production version, in points "
                                           "(empty: no regression rule; T4 runs use no harness, so none)")

    class Meta:
        ordering = ["policy", "eval_set__name", "metric"]
        constraints = [models.UniqueConstraint(fields=["policy", "eval_set", "metric"],
                                               name="gate_requirement_unique")]

    def __str__(self) -> str:
        return f"{self.eval_set.name}: {self.metric}"

    def clean(self) -> None:
        kinds = METRICS.get(self.metric, ("", ()))[1]
        if self.eval_set_id and self.eval_set.kind not in kinds:
            raise ValidationError({"metric": f"{METRICS[self.metric][0]} is not a metric of "
                                             f"{self.eval_set.get_kind_display()} sets"
                                   if self.metric in METRICS else "unknown metric"})
        if self.max_drop is not None and self.eval_set_id and self.eval_set.kind == "t4":
            raise ValidationError({"max_drop": "IFEval runs use no harness: there is no production version to "
                                               "compare with; set a minimum instead"})
