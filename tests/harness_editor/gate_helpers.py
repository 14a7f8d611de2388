"""Fixtures of the approval-gate tests: a compliance lead (the role that may override a failing gate) and a
stand-in evidence provider for the registry-side tests (the real one, training_jobs.gate, is tested in
tests/training_jobs/test_gate_evidence.py)."""

from __future__ import annotations

import pytest

from console import roles
from harness_editor.gate import GateEvidence, GateRule

FAKE_PROVIDER = "tests.harness_editor.gate_helpers.fake_evidence"
_ANSWER: dict[str, GateEvidence] = {}
CALLS: list[int] = []


def fake_evidence(version) -> GateEvidence:
    """What the test set with :func:`set_evidence` (the provider settings.HAT_APPROVAL_EVIDENCE names in tests)."""
    CALLS.append(version.pk)
    return _ANSWER["evidence"]


FAILING = GateEvidence(
    enabled=True, passed=False, summary="The evaluation gate fails: 2 of 3 rules do not hold.",
    rules=(GateRule("t1 v1: finished run", True, "run “x” finished", "/runs/x/"),
           GateRule("t1 v1: Accuracy ≥ 80", False, "62.0 (95 % CI 55.0–70.0) < 80"),
           GateRule("t1 v1: Accuracy drops at most 2 points against production", False, "change -9.0 points")),
    policy=("Policy: this harness",), baseline="production → v1")
PASSING = GateEvidence(enabled=True, passed=True, summary="The evaluation gate passes: every rule of the policy holds.",
                       rules=(GateRule("t1 v1: finished run", True, "run “x” finished"),),
                       policy=("Policy: this harness",), baseline="production → v1")


@pytest.fixture
def set_evidence(settings, harness_with_history):
    """Point the gate at the stand-in provider (after the demo history was built without a gate); call the
    fixture's value with the GateEvidence it should answer (FAILING until then)."""
    settings.HAT_APPROVAL_EVIDENCE = FAKE_PROVIDER
    CALLS.clear()

    def answer(evidence: GateEvidence) -> None:
        _ANSWER["evidence"] = evidence

    answer(FAILING)
    yield answer
    _ANSWER.clear()


@pytest.fixture
def compliance_lead(db, django_user_model):
    """A compliance reviewer who may also override a failing evaluation gate."""
    from tests.conftest import _make_user

    return _make_user(django_user_model, "cl_grace", roles.COMPLIANCE_LEAD)


def wrong_answer(version) -> dict:
    """A provider that answers something other than GateEvidence."""
    return {"passed": True}
