"""Deployment services: four eyes, one proposal at a time, located validation errors, approval records the label's
version, rollback moves label + model + profile back together (on the label's own history), the one timeline with
the live sessions each change affected, and deployment_in_force resolving the label at every call."""

from __future__ import annotations

import pytest

from console.errors import InvalidTransition, NotAllowed, ValidationFailed
from console.models import AuditEvent
from harness_editor import services as harness_services
from harness_editor.models import Label
from harness_editor.selectors import label_history
from streams.deployment_selectors import deployment_in_force, revision_diff
from streams.models import DeploymentRevision
from streams.services import deployments
from tests.streams.deployment_helpers import deploy_world, deployed, live_session_on, ml_lead2  # noqa: F401

pytestmark = pytest.mark.django_db


def _paths(exc) -> dict[str, str]:
    return {e["path"]: e["message"] for e in exc.value.errors}


def _create(user, w, **over):
    kwargs = dict(user=user, name="tiny-live", title="Tiny live", harness=w["harness"], label="production",
                  serve_profile=w["vllm"], endpoints=[w["ep_a"]], model=w["base"])
    kwargs.update(over)
    return deployments.deployment_create(**kwargs)


def test_create_proposes_revision_1_and_serves_nothing_yet(deploy_world, ml_staff):
    deployment = _create(ml_staff, deploy_world, endpoints=["ep-a", "ep-b"], serve_profile="vllm-cpu",
                         harness="tiny-room", model=str(deploy_world["base"].pk))
    r1 = deployment.revisions.get()
    assert (r1.number, r1.status, r1.proposed_by, r1.label) == (1, "proposed", ml_staff, "production")
    assert r1.endpoints == [deploy_world["ep_a"].pk, deploy_world["ep_b"].pk]
    assert deployment.current_revision is None
    with pytest.raises(InvalidTransition, match="no approved revision"):
        deployment_in_force(deployment)
    event = AuditEvent.objects.get(action="deployment.create")
    assert (event.scope, event.target, event.actor) == ("deployment:tiny-live", "revision:1", ml_staff)
    assert event.data["triple"]["endpoints"] == ["ep-a", "ep-b"] and event.data["sessions"] == []


def test_four_eyes_and_roles_on_review(deploy_world, ml_lead, ml_lead2, ml_staff, reviewer, manager):
    deployment = _create(ml_lead, deploy_world)  # an ML lead may propose and review, never their own
    r1 = deployment.revisions.get()
    with pytest.raises(NotAllowed, match="four eyes"):
        deployments.deployment_approve(user=ml_lead, revision=r1)
    with pytest.raises(NotAllowed, match="four eyes"):
        deployments.deployment_reject(user=ml_lead, revision=r1, comment="no")
    for user in (ml_staff, manager):  # may propose, not review
        with pytest.raises(NotAllowed, match="review deployment"):
            deployments.deployment_approve(user=user, revision=r1)
    r1.refresh_from_db()
    assert r1.status == "proposed" and not AuditEvent.objects.filter(action="deployment.approve").exists()
    approved = deployments.deployment_approve(user=ml_lead2, revision=r1, comment="fine")
    assert approved.status == "approved" and approved.decided_by == ml_lead2
    with pytest.raises(InvalidTransition, match="only a proposed"):
        deployments.deployment_approve(user=reviewer, revision=r1)


def test_approval_records_where_the_label_points_then(deploy_world, ml_staff, reviewer):
    w = deploy_world
    deployment = _create(ml_staff, w, endpoints=[w["ep_b"], w["ep_a"]])
    r1 = deployment.revisions.get()
    assert r1.harness_version == w["v1"]
    harness_services.label_move(user=reviewer, harness=w["harness"], name="production", version=w["v2"])
    r1 = deployments.deployment_approve(user=reviewer, revision=r1)
    assert r1.harness_version == w["v2"]
    deployment.refresh_from_db()
    assert deployment.current_revision == r1
    in_force = deployment_in_force(deployment)
    assert in_force.version == w["v2"] and in_force.label == "production"
    assert [e.name for e in in_force.endpoints] == ["ep-b", "ep-a"]  # failover order kept
    assert in_force.model == w["base"] and in_force.profile == w["vllm"] and in_force.adapter is None
    assert in_force.request_model == "demo"


def test_approval_refused_when_the_label_is_gone(deploy_world, ml_staff, reviewer):
    deployment = _create(ml_staff, deploy_world, label="staging")
    Label.objects.filter(harness=deploy_world["harness"], name="staging").delete()
    with pytest.raises(ValidationFailed) as exc:
        deployments.deployment_approve(user=reviewer, revision=deployment.revisions.get())
    assert "no label 'staging'" in _paths(exc)["label"]
    assert deployment.revisions.get().status == "proposed"


def test_reject_needs_a_comment_and_withdraw_is_the_proposers(deploy_world, ml_staff, ml_lead, reviewer):
    deployment = _create(ml_staff, deploy_world)
    r1 = deployment.revisions.get()
    for blank in ("", "   "):
        with pytest.raises(ValidationFailed) as exc:
            deployments.deployment_reject(user=reviewer, revision=r1, comment=blank)
        assert "comment" in _paths(exc)
    with pytest.raises(NotAllowed, match="only whoever proposed"):
        deployments.deployment_withdraw(user=ml_lead, revision=r1)
    rejected = deployments.deployment_reject(user=reviewer, revision=r1, comment="use the staging label first")
    assert (rejected.status, rejected.decision_comment) == ("rejected", "use the staging label first")
    with pytest.raises(InvalidTransition):
        deployments.deployment_withdraw(user=ml_staff, revision=r1)
    r2 = deployments.deployment_propose(user=ml_staff, deployment=deployment, label="staging")
    assert r2.number == 2 and r2.label == "staging" and r2.model == deploy_world["base"]  # rest from r1
    withdrawn = deployments.deployment_withdraw(user=ml_staff, revision=r2)
    assert withdrawn.status == "withdrawn"
    actions = list(AuditEvent.objects.filter(scope="deployment:tiny-live").order_by("id")
                   .values_list("action", "target"))
    assert actions == [("deployment.create", "revision:1"), ("deployment.reject", "revision:1"),
                       ("deployment.propose", "revision:2"), ("deployment.withdraw", "revision:2")]


def test_one_proposal_at_a_time_and_a_proposal_must_change_something(deployed, ml_staff, ml_lead):
    w = deployed
    with pytest.raises(ValidationFailed, match="nothing changes"):
        deployments.deployment_propose(user=ml_staff, deployment=w["deployment"], endpoints=["ep-a", "ep-b"])
    r2 = deployments.deployment_propose(user=ml_staff, deployment=w["deployment"], model=w["tuned"])
    with pytest.raises(InvalidTransition, match="r2 is waiting for review"):
        deployments.deployment_propose(user=ml_lead, deployment=w["deployment"], serve_profile="vllm-plain")
    assert w["deployment"].revisions.count() == 2 and r2.status == "proposed"


def test_bad_input_is_located_and_nothing_is_saved(deploy_world, ml_staff, outsider, operator):
    w = deploy_world
    with pytest.raises(ValidationFailed) as exc:
        _create(ml_staff, w, name="Bad Name", title="x" * 121, label="nope", serve_profile="missing",
                endpoints=["ep-a", "ghost", "ep-a", "far"], model="not-a-uuid", note="n" * 2001)
    paths = _paths(exc)
    assert set(paths) == {"name", "title", "label", "serve_profile", "endpoints[1]", "endpoints[2]",
                          "endpoints[3]", "model", "note"}
    assert "listed twice" in paths["endpoints[2]"] and "refused" in paths["endpoints[3]"]
    with pytest.raises(ValidationFailed) as exc:
        _create(ml_staff, w, harness="ghost-harness", endpoints=[])
    assert "harness" in _paths(exc)
    with pytest.raises(ValidationFailed) as exc:
        _create(ml_staff, w, endpoints=[])
    assert "at least one" in _paths(exc)["endpoints"]
    for user in (outsider, operator):
        with pytest.raises(NotAllowed):
            _create(user, w)
    assert not w["harness"].labels.filter(name="nope").exists()
    from streams.models import Deployment

    assert Deployment.objects.count() == 0 and not AuditEvent.objects.filter(scope__startswith="deployment:").exists()
    _create(ml_staff, w)
    with pytest.raises(ValidationFailed) as exc:
        _create(ml_staff, w)
    assert "already taken" in _paths(exc)["name"]


def test_adapter_rules(deploy_world, ml_staff):
    w = deploy_world
    with pytest.raises(ValidationFailed) as exc:  # an adapter of another base
        _create(ml_staff, w, model=w["other"], adapter=w["adapter"])
    assert "not an adapter of 'other-base'" in _paths(exc)["adapter"]
    with pytest.raises(ValidationFailed) as exc:  # a profile without LoRA
        _create(ml_staff, w, serve_profile=w["plain"], adapter=w["adapter"])
    assert "does not enable LoRA" in _paths(exc)["adapter"]
    with pytest.raises(ValidationFailed) as exc:
        _create(ml_staff, w, model=w["base"], adapter=str(w["tuned"].pk))  # a full model is no adapter
    assert "is a full model, not a LoRA adapter" in _paths(exc)["adapter"]
    deployment = _create(ml_staff, w, model=w["base"], adapter=w["adapter"])
    assert deployment.revisions.get().adapter == w["adapter"]


def test_rollback_moves_label_model_and_profile_back_on_the_label_history(deployed, ml_staff, reviewer, operator,
                                                                          manager):
    w = deployed
    deployment = w["deployment"]
    session = live_session_on(deployment, operator)
    # r2: production moved to v2 by a reviewer, another model and profile
    harness_services.label_move(user=reviewer, harness=w["harness"], name="production", version=w["v2"])
    r2 = deployments.deployment_propose(user=ml_staff, deployment=deployment, model=w["tuned"],
                                        serve_profile="vllm-plain", note="sft model")
    rows = {r["field"]: r for r in revision_diff(in_force=w["r1"], proposed=r2)}
    assert rows["model"] == {"field": "model", "before": "demo-tiny", "after": "demo-sft", "changed": True}
    assert rows["serve profile"]["changed"] and not rows["label"]["changed"] and not rows["endpoints"]["changed"]
    deployments.deployment_approve(user=reviewer, revision=r2)
    deployment.refresh_from_db()
    assert deployment_in_force(deployment).version == w["v2"]

    with pytest.raises(NotAllowed):  # ML staff may propose, not roll back
        deployments.deployment_rollback(user=ml_staff, deployment=deployment, comment="bad")
    with pytest.raises(ValidationFailed) as exc:
        deployments.deployment_rollback(user=operator, deployment=deployment, comment="  ")
    assert "comment" in _paths(exc)
    assert not operator.has_perm("harness_editor.move_label")
    deployments.deployment_rollback(user=operator, deployment=deployment, comment="replies too long on air")
    deployment.refresh_from_db()
    in_force = deployment_in_force(deployment)
    assert in_force.revision == w["r1"]
    assert (in_force.version, in_force.model, in_force.profile) == (w["v1"], w["base"], w["vllm"])
    assert Label.objects.get(harness=w["harness"], name="production").version == w["v1"]
    move = label_history(harness=w["harness"], name="production").first()
    assert (move.actor, move.from_state, move.to_state) == (operator, "v2", "v1")
    assert move.data["rollback"] is True
    assert move.data["reason"] == {"deployment": "tiny-live", "from_revision": 2, "to_revision": 1}
    assert "replies too long on air" in move.comment
    event = AuditEvent.objects.filter(action="deployment.rollback").get()
    assert (event.scope, event.target, event.from_state, event.to_state) == (
        "deployment:tiny-live", "revision:1", "r2", "r1 in force")
    assert event.data["label"] == {"name": "production", "from_version": 2, "to_version": 1}
    assert event.data["sessions"] == [{"id": str(session.pk), "title": "Evening show"}]
    assert AuditEvent.objects.get(action="deployment.approve", target="revision:2").data["sessions"] == [
        {"id": str(session.pk), "title": "Evening show"}]
    # r1 was the first approved revision: nothing before it
    with pytest.raises(InvalidTransition, match="nothing to roll back to"):
        deployments.deployment_rollback(user=operator, deployment=deployment, comment="again")


def test_rollback_is_a_stack_of_approvals(deployed, ml_staff, reviewer, operator):
    """r1, r2 approved; rolled back to r1; r3 approved: rolling back goes to r1 (what was in force before r3),
    never to the rolled-back r2."""
    w = deployed
    deployment = w["deployment"]
    r2 = deployments.deployment_propose(user=ml_staff, deployment=deployment, model=w["tuned"])
    deployments.deployment_approve(user=reviewer, revision=r2)
    deployments.deployment_rollback(user=operator, deployment=deployment, comment="r2 is bad")
    r3 = deployments.deployment_propose(user=ml_staff, deployment=deployment, serve_profile="vllm-plain")
    assert r3.model == w["base"]  # proposed from the revision in force (r1), not from the newest
    deployments.deployment_approve(user=reviewer, revision=r3)
    deployments.deployment_rollback(user=operator, deployment=deployment, comment="r3 is bad too")
    deployment.refresh_from_db()
    assert deployment.current_revision == w["r1"]
    # the label never moved: no label move was recorded for these rollbacks
    assert not label_history(harness=w["harness"], name="production").filter(data__rollback=True).exists()
    assert DeploymentRevision.objects.filter(deployment=deployment, status="approved").count() == 3


def test_in_force_resolves_the_label_at_each_call(deployed, reviewer):
    w = deployed
    before = deployment_in_force(w["deployment"])
    assert before.version == w["v1"]
    harness_services.label_move(user=reviewer, harness=w["harness"], name="production", version=w["v2"])
    after = deployment_in_force(w["deployment"])
    assert after.version == w["v2"] and after.revision == before.revision
    assert after.describe()["version"]["number"] == 2


def test_label_move_for_rollback_needs_a_reason(deploy_world, operator):
    with pytest.raises(ValueError):
        harness_services.label_move_for_rollback(user=operator, harness=deploy_world["harness"], name="production",
                                                 version=deploy_world["v2"], comment="x", reason={})


def test_in_force_with_an_adapter_uses_the_endpoints_that_have_it_loaded(deploy_world, ml_staff, reviewer):
    """Requests carry the adapter's LoRA name where a ready server behind the endpoint has it loaded; an endpoint
    without it is left out of the failover list (it would answer with the base model)."""
    from streams.models import ServerInstance

    w = deploy_world
    deployment = _create(ml_staff, w, endpoints=[w["ep_b"], w["ep_a"]], model=w["base"], adapter=w["adapter"])
    deployments.deployment_approve(user=reviewer, revision=deployment.revisions.get())
    deployment.refresh_from_db()
    ServerInstance.objects.create(profile=w["vllm"], endpoint=w["ep_a"], model=w["base"], model_path="/m",
                                  status="ready", adapters=[{"name": "hat-lora-1", "path": "/a",
                                                             "model_id": str(w["adapter"].pk)}])
    ServerInstance.objects.create(profile=w["vllm"], endpoint=w["ep_b"], model=w["base"], model_path="/m",
                                  status="ready", adapters=[])
    in_force = deployment_in_force(deployment)
    assert [e.name for e in in_force.endpoints] == ["ep-a"]
    assert in_force.request_model == "hat-lora-1" and in_force.adapter == w["adapter"]
    assert in_force.describe()["adapter"] == "demo-lora"
