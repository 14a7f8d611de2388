"""The approval gate as the registry sees it: may this version be approved, and on what evidence?

The registry owns the decision (``harness_editor.services.version_approve`` refuses a failing gate unless someone
allowed to override gives a written reason) but not the evidence: evaluation runs live in training, which the
registry must not import (DESIGN §8; ``.importlinter``). So the evidence comes through one function the project
wires up by name — ``settings.HAT_APPROVAL_EVIDENCE`` (by default ``training_jobs.gate.approval_evidence``) —
taking a :class:`~harness_editor.models.HarnessVersion` and answering a :class:`GateEvidence` built from the plain
dataclasses below. No setting (or an empty one) means no gate: every version may be approved as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from console.errors import DomainError

NO_PROVIDER = "No evaluation gate is configured for this console."


@dataclass(frozen=True)
class GateRule:
    """One rule of the policy, checked: ``name`` says what it asks ("t1-live-stream-qa: accuracy ≥ 80"),
    ``detail`` why it passed or failed, ``link`` where to look (a run, an eval set), if anywhere."""

    name: str
    passed: bool
    detail: str
    link: str = ""


@dataclass(frozen=True)
class Score:
    """A metric of one run, in percent (points), with its 95 % interval when the run has one."""

    mean: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None


@dataclass(frozen=True)
class MetricEvidence:
    """One metric on one set: the version under review, the production version, the change in points (with the
    95 % interval of the per-case change, when both runs scored the same cases)."""

    metric: str
    label: str
    candidate: Score | None
    baseline: Score | None = None
    delta: float | None = None
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None


@dataclass(frozen=True)
class FlippedCase:
    """A case whose verdict changed between the production version's run and this version's run."""

    case_id: str
    candidate_link: str = ""
    baseline_link: str = ""


@dataclass(frozen=True)
class SetEvidence:
    """What was found for one required eval set: the run of this version, the run of the production version, the
    scores side by side and the cases that flipped (regressions first)."""

    eval_set: str
    set_version: str
    run_id: str = ""
    run_name: str = ""
    run_link: str = ""
    baseline_run_id: str = ""
    baseline_run_name: str = ""
    baseline_run_link: str = ""
    compare_link: str = ""
    metrics: tuple[MetricEvidence, ...] = ()
    regressions: tuple[FlippedCase, ...] = ()
    fixes: tuple[FlippedCase, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class GateEvidence:
    """The gate's answer for one version.

    ``enabled`` False: no gate applies (no policy for this harness, or it is switched off) and ``summary`` says so;
    the version may be approved as before. Otherwise ``passed`` is True exactly when every rule passed.
    ``start_url``: where someone who may launch evaluation runs starts the runs still missing (empty: none)."""

    enabled: bool
    passed: bool
    summary: str
    rules: tuple[GateRule, ...] = ()
    sets: tuple[SetEvidence, ...] = ()
    policy: tuple[str, ...] = ()
    baseline: str = ""
    start_url: str = ""
    missing_runs: tuple[str, ...] = ()

    @property
    def failing(self) -> list[GateRule]:
        return [r for r in self.rules if not r.passed]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failing": [r.name for r in self.failing]}

    @classmethod
    def off(cls, summary: str) -> GateEvidence:
        return cls(enabled=False, passed=True, summary=summary)


class GateFailed(DomainError):
    """Approval refused: the evaluation gate fails and no (allowed) override was given. 409: the version's state
    (its evidence) must change first, or a compliance lead overrides with a reason."""

    status_code = 409
    code = "gate_failed"

    def __init__(self, evidence: GateEvidence, *, hint: str = ""):
        failing = evidence.failing
        names = "; ".join(r.name for r in failing)
        message = f"the evaluation gate fails ({len(failing)} rule{'s' if len(failing) != 1 else ''}: {names})"
        if hint:
            message += f"; {hint}"
        super().__init__(message, errors=[{"path": f"gate.{r.name}", "message": r.detail} for r in failing])
        self.evidence = evidence


def _provider() -> Callable[[Any], GateEvidence] | None:
    name = getattr(settings, "HAT_APPROVAL_EVIDENCE", "") or ""
    return import_string(name) if name else None


def approval_evidence(version) -> GateEvidence:
    """The gate's answer for ``version``, from the provider ``settings.HAT_APPROVAL_EVIDENCE`` names (gate off when
    none is named). A provider that is named but cannot be imported is a configuration error (ImportError), never a
    silently open gate."""
    provider = _provider()
    if provider is None:
        return GateEvidence.off(NO_PROVIDER)
    evidence = provider(version)
    if not isinstance(evidence, GateEvidence):
        raise TypeError(f"{settings.HAT_APPROVAL_EVIDENCE} returned {type(evidence).__name__}, not GateEvidence")
    return evidence
