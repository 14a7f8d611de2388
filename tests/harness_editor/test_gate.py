"""The approval gate on the registry's side (harness_editor.gate + version_approve): gate off without a provider or
a policy; a failing gate refuses approval (409, one error per failing rule) for reviewers; a compliance lead
overrides only with a written reason, and the override lands on the audit timeline with the reason and the
failing rules; the same through the pages and the API for every role. The evidence here comes from a stand-in
provider (tests/harness_editor/gate_helpers.py); the real one is tested in tests/training_jobs/test_gate_evidence.py.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from console.errors import InvalidTransition, NotAllowed
from console.models import AuditEvent
from harness_editor import gate, services
from harness_editor.gate import GateEvidence, GateFailed
from harness_editor.models import HarnessVersion
from tests.harness_editor.gate_helpers import CALLS, FAILING, PASSING, compliance_lead, set_evidence  # noqa: F401

pytestmark = pytest.mark.django_db

SLUG = "glow-gadget"
API = f"/api/harnesses/{SLUG}/versions"


def _status(version) -> str:
    return HarnessVersion.objects.get(pk=version.pk).status


def _events(action: str):
    return list(AuditEvent.objects.filter(action=action, scope=f"harness:{SLUG}").order_by("id"))


# --- the interface --------------------------------------------------------------------------------------------

def test_no_provider_means_no_gate(settings, harness_with_history, reviewer):
    settings.HAT_APPROVAL_EVIDENCE = ""
    evidence = gate.approval_evidence(harness_with_history["v2"])
    assert not evidence.enabled and evidence.passed and evidence.summary == gate.NO_PROVIDER
    v2 = services.version_approve(user=reviewer, version=harness_with_history["v2"])
    assert v2.status == "approved" and _events("version.approved")[-1].data["gate"]["enabled"] is False


def test_a_provider_that_cannot_be_loaded_or_answers_wrong_is_an_error_not_an_open_gate(settings, harness_with_history,
                                                                                      reviewer):
    settings.HAT_APPROVAL_EVIDENCE = "tests.harness_editor.gate_helpers.no_such_function"
    with pytest.raises(ImportError):
        services.version_approve(user=reviewer, version=harness_with_history["v2"])
    settings.HAT_APPROVAL_EVIDENCE = "tests.harness_editor.gate_helpers.wrong_answer"  # answers a dict
    with pytest.raises(TypeError):
        gate.approval_evidence(harness_with_history["v2"])
    assert _status(harness_with_history["v2"]) == "submitted"


def test_the_default_provider_is_the_training_side_and_with_no_policy_the_gate_is_off(harness_with_history):
    from django.conf import settings

    assert settings.HAT_APPROVAL_EVIDENCE == "training_jobs.gate.approval_evidence"
    evidence = gate.approval_evidence(harness_with_history["v2"])
    assert not evidence.enabled and evidence.passed
    assert evidence.summary.startswith("No evaluation gate is set for this harness")


def test_gate_failed_lists_every_failing_rule():
    exc = GateFailed(FAILING, hint="ask a compliance lead")
    assert exc.status_code == 409 and exc.code == "gate_failed"
    assert [e["path"] for e in exc.errors] == ["gate.t1 v1: Accuracy ≥ 80",
                                               "gate.t1 v1: Accuracy drops at most 2 points against production"]
    assert "2 rules" in exc.message and "ask a compliance lead" in exc.message
    assert FAILING.to_dict()["failing"] == [r.name for r in FAILING.failing]


# --- the service ------------------------------------------------------------------------------------------------

def test_failing_gate_refuses_a_reviewer_and_changes_nothing(set_evidence, harness_with_history, reviewer):
    v2 = harness_with_history["v2"]
    before = AuditEvent.objects.count()
    with pytest.raises(GateFailed) as exc:
        services.version_approve(user=reviewer, version=v2, comment="looks fine")
    assert "ask a compliance lead to override" in exc.value.message
    assert len(exc.value.errors) == 2 and CALLS == [v2.pk]
    assert _status(v2) == "submitted" and AuditEvent.objects.count() == before


def test_an_override_reason_from_a_reviewer_who_may_not_override_is_refused(set_evidence, harness_with_history,
                                                                           reviewer):
    with pytest.raises(NotAllowed, match="only a compliance lead"):
        services.version_approve(user=reviewer, version=harness_with_history["v2"], override_reason="urgent")
    assert _status(harness_with_history["v2"]) == "submitted"


@pytest.mark.parametrize("reason", ["", "   \n "])
def test_a_compliance_lead_needs_a_written_reason(set_evidence, harness_with_history, compliance_lead, reason):
    with pytest.raises(GateFailed, match="you may override it with a written reason"):
        services.version_approve(user=compliance_lead, version=harness_with_history["v2"], override_reason=reason)
    assert _status(harness_with_history["v2"]) == "submitted"


def test_override_by_a_compliance_lead_is_audited_with_reason_and_failing_rules(set_evidence, harness_with_history,
                                                                                compliance_lead):
    v2 = services.version_approve(user=compliance_lead, version=harness_with_history["v2"], comment="ship it",
                                  override_reason="  T1 regression is in a retired product line  ")
    assert v2.status == "approved" and v2.decided_by == compliance_lead and v2.gate_overridden
    override, = _events("version.gate_overridden")
    assert override.actor == compliance_lead and override.target == "version:2"
    assert override.data["reason"] == "T1 regression is in a retired product line"
    assert override.comment == ("T1 regression is in a retired product line\n— overrode: "
                                "t1 v1: Accuracy ≥ 80; t1 v1: Accuracy drops at most 2 points against production")
    assert override.from_state == "gate failed (2 rules)" and override.to_state == "overridden"
    assert [f["rule"] for f in override.data["failing"]] == [r.name for r in FAILING.failing]
    assert override.data["failing"][0]["detail"] == "62.0 (95 % CI 55.0–70.0) < 80"
    approved = _events("version.approved")[-1]
    assert approved.data["gate"]["overridden"] is True and approved.data["gate"]["passed"] is False
    assert approved.comment == "ship it" and approved.id > override.id


def test_a_superuser_may_override(set_evidence, harness_with_history, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.test", "pw-not-used-1234")
    v2 = services.version_approve(user=admin, version=harness_with_history["v2"], override_reason="incident fix")
    assert v2.status == "approved" and _events("version.gate_overridden")


def test_passing_gate_approves_and_records_the_verdict(set_evidence, harness_with_history, reviewer):
    set_evidence(PASSING)
    v2 = services.version_approve(user=reviewer, version=harness_with_history["v2"], override_reason="not needed")
    assert v2.status == "approved" and not v2.gate_overridden
    assert not _events("version.gate_overridden")
    gate_data = _events("version.approved")[-1].data["gate"]
    assert gate_data["enabled"] and gate_data["passed"] and not gate_data["overridden"] and gate_data["failing"] == []


def test_state_and_four_eyes_come_before_the_gate(set_evidence, harness_with_history, reviewer, manager,
                                                  compliance_lead):
    with pytest.raises(InvalidTransition):
        services.version_approve(user=compliance_lead, version=harness_with_history["v1"], override_reason="x")
    with pytest.raises(NotAllowed):
        services.version_approve(user=manager, version=harness_with_history["v2"], override_reason="x")
    assert CALLS == []


# --- the version page, every role -------------------------------------------------------------------------------

ROLES = ["manager", "reviewer", "compliance_lead", "ml_staff", "operator", "outsider", "anonymous"]


def _client(request, role):
    from django.test import Client

    client = Client()
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


def _page(slug: str, number: int, name: str = "version") -> str:
    return reverse(f"harness_editor:{name}", args=[slug, number])


@pytest.mark.parametrize("role", ROLES)
def test_version_page_shows_the_gate_and_who_may_do_what(request, set_evidence, harness_with_history, role):
    response = _client(request, role).get(_page(SLUG, 2))
    if role == "anonymous":
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
        return
    if role == "outsider":
        assert response.status_code == 403
        return
    body = response.content.decode()
    assert response.status_code == 200 and 'data-testid="gate"' in body
    assert "The evaluation gate fails" in body and "62.0 (95 % CI 55.0–70.0) &lt; 80" in body
    assert ('data-testid="approve-disabled"' in body) == (role == "reviewer")
    assert ('data-testid="override-approve"' in body) == (role == "compliance_lead")
    assert ('name="override_reason"' in body) == (role == "compliance_lead")
    if role == "reviewer":
        assert "ask a compliance lead to override" in body


def test_version_page_says_plainly_when_no_gate_is_set(harness_with_history, as_reviewer):
    body = as_reviewer.get(_page(SLUG, 2)).content.decode()
    assert "No evaluation gate is set for this harness" in body
    assert 'data-testid="approve-disabled"' not in body and ">Approve</button>" in body


def test_decided_versions_show_no_gate_panel(set_evidence, harness_with_history, as_reviewer):
    assert 'data-testid="gate"' not in as_reviewer.get(_page(SLUG, 1)).content.decode()
    assert CALLS == []


@pytest.fixture
def as_reviewer(client, reviewer):
    client.force_login(reviewer)
    return client


@pytest.mark.parametrize("role, expected", [("manager", 403), ("ml_staff", 403), ("operator", 403),
                                            ("outsider", 403), ("anonymous", 302)])
def test_approve_page_action_refused_to_other_roles(request, set_evidence, harness_with_history, role, expected):
    response = _client(request, role).post(_page(SLUG, 2, "approve"), {"override_reason": "x"})
    assert response.status_code == expected
    assert _status(harness_with_history["v2"]) == "submitted"


def test_reviewer_posting_approve_on_a_failing_gate_gets_409_and_why(set_evidence, harness_with_history, as_reviewer):
    response = as_reviewer.post(_page(SLUG, 2, "approve"), {"comment": "ok"})
    assert response.status_code == 409
    body = response.content.decode()
    assert 'data-testid="action-error"' in body and "the evaluation gate fails (2 rules" in body
    assert "gate.t1 v1: Accuracy ≥ 80" in body
    response = as_reviewer.post(_page(SLUG, 2, "approve"), {"comment": "ok", "override_reason": "please"})
    assert response.status_code == 403 and "only a compliance lead" in response.content.decode()
    assert _status(harness_with_history["v2"]) == "submitted"


def test_compliance_lead_overrides_through_the_page(request, set_evidence, harness_with_history):
    client = _client(request, "compliance_lead")
    response = client.post(_page(SLUG, 2, "approve"), {"comment": "ok", "override_reason": ""})
    assert response.status_code == 409 and "you may override it with a written reason" in response.content.decode()
    response = client.post(_page(SLUG, 2, "approve"), {"comment": "ok", "override_reason": "known flaky cases"},
                           follow=True)
    assert response.status_code == 200 and "gate overridden" in response.content.decode()
    assert _status(harness_with_history["v2"]) == "approved"
    assert _events("version.gate_overridden")[-1].data["reason"] == "known flaky cases"


def test_unknown_version_is_404(request, set_evidence, harness_with_history):
    client = _client(request, "compliance_lead")
    assert client.get(_page(SLUG, 99)).status_code == 404
    assert client.post(_page(SLUG, 99, "approve"), {"override_reason": "x"}).status_code == 404


# --- the API, every role ----------------------------------------------------------------------------------------

def _api(request, role) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


@pytest.mark.parametrize("role, expected", [("manager", 200), ("reviewer", 200), ("compliance_lead", 200),
                                            ("ml_staff", 200), ("ml_lead", 200), ("operator", 200),
                                            ("outsider", 403), ("anonymous", 401)])
def test_gate_api_is_readable_by_every_role(request, set_evidence, harness_with_history, role, expected):
    response = _api(request, role).get(f"{API}/2/gate")
    assert response.status_code == expected
    if expected == 200:
        body = response.json()
        assert body["enabled"] and not body["passed"] and body["failing"] == [r.name for r in FAILING.failing]
        assert body["rules"][1] == {"name": "t1 v1: Accuracy ≥ 80", "passed": False,
                                    "detail": "62.0 (95 % CI 55.0–70.0) < 80", "link": ""}
        assert body["baseline"] == "production → v1"


def test_gate_api_404s(request, set_evidence, harness_with_history):
    client = _api(request, "reviewer")
    assert client.get(f"{API}/99/gate").status_code == 404
    assert client.get("/api/harnesses/nope/versions/1/gate").status_code == 404


@pytest.mark.parametrize("role, expected", [("manager", 403), ("ml_staff", 403), ("operator", 403),
                                            ("outsider", 403), ("anonymous", 401)])
def test_approve_api_refused_to_other_roles(request, set_evidence, harness_with_history, role, expected):
    response = _api(request, role).post(f"{API}/2/approve", {"override_reason": "x"}, format="json")
    assert response.status_code == expected
    assert _status(harness_with_history["v2"]) == "submitted"


def test_approve_api_409_then_override(request, set_evidence, harness_with_history):
    reviewer = _api(request, "reviewer")
    response = reviewer.post(f"{API}/2/approve", {"comment": "fine"}, format="json")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "gate_failed" and body["detail"].startswith("the evaluation gate fails (2 rules")
    assert body["errors"][0] == {"path": "gate.t1 v1: Accuracy ≥ 80", "message": "62.0 (95 % CI 55.0–70.0) < 80"}
    response = reviewer.post(f"{API}/2/approve", {"comment": "fine", "override_reason": "urgent"}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "not_allowed"
    lead = _api(request, "compliance_lead")
    response = lead.post(f"{API}/2/approve", {"override_reason": "x" * 4001}, format="json")
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "override_reason"
    response = lead.post(f"{API}/2/approve", {"comment": "ok"}, format="json")
    assert response.status_code == 409
    response = lead.post(f"{API}/2/approve", {"comment": "ok", "override_reason": "accepted risk, ticket 42"},
                         format="json")
    assert response.status_code == 200 and response.json()["status"] == "approved"
    assert _events("version.gate_overridden")[-1].data["reason"] == "accepted risk, ticket 42"


def test_approve_api_with_a_passing_gate(request, set_evidence, harness_with_history):
    set_evidence(PASSING)
    response = _api(request, "reviewer").post(f"{API}/2/approve", {"comment": "fine"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "approved"


def test_gate_off_evidence_shape():
    off = GateEvidence.off("No evaluation gate is set for this harness.")
    assert off.to_dict()["failing"] == [] and off.rules == () and not off.enabled and off.passed
