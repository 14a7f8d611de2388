"""Writes around the approval gate: start the evaluation runs a version's gate still needs, and record policy
changes on the audit timeline (the policy itself is edited by administrators in the Django admin)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console import roles
from console.errors import InvalidTransition, NotAllowed
from console.services import audit_record
from harness_editor.models import HarnessVersion
from training_jobs.eval_run_models import EvalRun
from training_jobs.eval_run_services import eval_run_start
from training_jobs.gate import needed_runs
from training_jobs.gate_models import GatePolicy


def gate_runs_start(*, user, version: HarnessVersion) -> list[EvalRun]:
    """Queue every run the gate of ``version`` needs and has neither finished nor in progress: this version (and,
    where a regression rule compares, the production version) on each required set's pinned version, against the
    policy's endpoint with its k and seed (1 and 0 when the policy leaves them open). NotAllowed without
    ``roles.RUN_EVAL``; InvalidTransition (409) when nothing is left to start."""
    if not user.has_perm(roles.RUN_EVAL):
        raise NotAllowed("your role does not allow you to launch evaluation runs")
    policy, needed = needed_runs(version)
    if policy is None or not policy.enabled:
        raise InvalidTransition(f"no evaluation gate applies to {version.harness.slug}: nothing to start")
    startable = [n for n in needed if n.in_progress is None]
    if not startable:
        raise InvalidTransition("every run the gate needs is finished or in progress")
    with transaction.atomic():
        return [eval_run_start(user=user, eval_set_version=n.set_version, endpoint=policy.endpoint,
                               harness_version=n.harness_version, k=policy.k or 1,
                               seed=policy.seed if policy.seed is not None else 0,
                               name=f"gate · {n.label} · {policy.endpoint.name}")
                for n in startable]


def policy_snapshot(policy: GatePolicy) -> dict[str, Any]:
    """What the audit row keeps of a policy: every setting and requirement, by name."""
    return {"harness": policy.harness.slug if policy.harness_id else None, "enabled": policy.enabled,
            "endpoint": policy.endpoint.name if policy.endpoint_id else None, "k": policy.k, "seed": policy.seed,
            "regression_needs_ci": policy.regression_needs_ci, "note": policy.note,
            "requirements": [{"eval_set": r.eval_set.name, "metric": r.metric, "minimum": r.minimum,
                              "max_drop": r.max_drop}
                             for r in policy.requirements.select_related("eval_set").order_by("eval_set__name",
                                                                                                "metric")]}


def gate_policy_recorded(*, user, policy: GatePolicy, before: dict[str, Any] | None, deleted: bool = False) -> None:
    """Audit a policy change made in the admin (call inside its transaction, after the requirements are saved)."""
    scope = f"harness:{policy.harness.slug}" if policy.harness_id else "gate:default"
    after = None if deleted else policy_snapshot(policy)
    action = "gate_policy.deleted" if deleted else ("gate_policy.created" if before is None else "gate_policy.changed")
    audit_record(actor=user, action=action, scope=scope, target=f"gate_policy:{policy.pk}",
                 to_state="" if deleted else ("enabled" if policy.enabled else "switched off"),
                 data={"before": before, "after": after})


DEMO_GATE_SET = "t1-live-stream-qa"
# What the demo policy asks of a glow-gadget version: a finished T1 run on the local model, accuracy at least 50 %,
# and no more than 5 points lost on accuracy or effectiveness against the production version.
DEMO_GATE_RULES = (("accuracy", 50.0, 5.0), ("effectiveness", None, 5.0))


def gate_policy_seed_demo(*, harness_slug: str, endpoint_name: str = "local") -> GatePolicy | None:
    """The demo policy for ``harness_slug`` (seed_demo), created when the harness has no policy yet: enabled, the
    ``endpoint_name`` endpoint as the production model, T1 Live-Stream QA required on its pinned version with
    :data:`DEMO_GATE_RULES`. Idempotent (an existing policy is left as an administrator set it); None when the
    harness, the endpoint or the set is missing. Recorded on the audit timeline."""
    from harness_editor.models import Harness
    from streams.models import ModelEndpoint
    from training_jobs.eval_models import EvalSet

    harness = Harness.objects.filter(slug=harness_slug).first()
    endpoint = ModelEndpoint.objects.filter(name=endpoint_name).first()
    eval_set = EvalSet.objects.filter(name=DEMO_GATE_SET).first()
    if harness is None or endpoint is None or eval_set is None:
        return None
    with transaction.atomic():
        if GatePolicy.objects.filter(harness=harness).exists():
            return None
        policy = GatePolicy.objects.create(
            harness=harness, enabled=True, endpoint=endpoint,
            note="Demo policy: a version needs a finished T1 run on the local model and must not lose more than "
                 "5 points against production.")
        for metric, minimum, max_drop in DEMO_GATE_RULES:
            policy.requirements.create(eval_set=eval_set, metric=metric, minimum=minimum, max_drop=max_drop)
        gate_policy_recorded(user=None, policy=policy, before=None)
    return policy
