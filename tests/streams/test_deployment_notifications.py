"""Deployment changes notify as harness versions do (console.services NOTIFY_RULES): a proposed revision asks
everyone who may review deployments (never the proposer), a decision tells the proposer (never the decider), in-app
with a link to the revision and by e-mail through the mail task; withdrawals and rollbacks notify nobody."""

from __future__ import annotations

import pytest
from django.core import mail
from django.urls import reverse

from console.models import Notification
from streams.services import deployments
from tests.streams.deployment_helpers import deploy_world, deployed, ml_lead2

FIXTURES = (deploy_world, deployed, ml_lead2)  # taken by name below (pytest finds them in this module)

pytestmark = pytest.mark.django_db


def _told(user) -> list[str]:
    return list(Notification.objects.filter(recipient=user, kind__startswith="deployment.").order_by("-id")
                .values_list("text", flat=True))


def _create(user, w, **over):
    kwargs = dict(user=user, name="tiny-live", title="Tiny live", harness=w["harness"], label="production",
                  serve_profile=w["vllm"], endpoints=[w["ep_a"]], model=w["base"], note="first")
    kwargs.update(over)
    return deployments.deployment_create(**kwargs)


def test_a_new_deployment_asks_every_deployment_reviewer(deploy_world, ml_staff, reviewer, reviewer2, ml_lead,
                                                        manager, operator, ml_staff2):
    _create(ml_staff, deploy_world)
    asked = "ml_erin proposed deployment tiny-live r1 for review"
    # compliance reviewers and ML leads review deployments; the proposer, managers, operators, other ML staff do not
    assert _told(reviewer) == _told(reviewer2) == _told(ml_lead) == [asked]
    assert _told(ml_staff) == _told(manager) == _told(operator) == _told(ml_staff2) == []
    n = Notification.objects.get(recipient=reviewer, kind="deployment.create")
    assert n.url == reverse("deployment:revision", args=["tiny-live", 1]) and n.event.target == "revision:1"


def test_approval_tells_the_proposer_only(deploy_world, ml_staff, reviewer, reviewer2, ml_lead):
    deployment = _create(ml_staff, deploy_world)
    deployments.deployment_approve(user=reviewer, revision=deployment.revisions.get(number=1), comment="ok")
    assert _told(ml_staff) == ["cr_carol approved deployment tiny-live r1"]
    told = Notification.objects.get(recipient=ml_staff, kind="deployment.approve")
    assert told.url == reverse("deployment:revision", args=["tiny-live", 1])
    # the decider is never told of their own decision, the other reviewers only of the proposal
    assert all("proposed" in t for t in _told(reviewer) + _told(reviewer2) + _told(ml_lead))


def test_a_proposed_change_then_its_rejection(deployed, ml_staff, reviewer, ml_lead, ml_lead2, mail_queue,
                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        r2 = deployments.deployment_propose(user=ml_staff, deployment=deployed["deployment"],
                                            endpoints=[deployed["ep_b"]], note="fail over to ep-b first")
    assert _told(reviewer)[0] == _told(ml_lead)[0] == "ml_erin proposed deployment tiny-live r2 for review"
    assert _told(ml_lead2) == ["ml_erin proposed deployment tiny-live r2 for review"]  # no address: in-app only
    mail_queue.run()
    assert sorted(m.to[0] for m in mail.outbox) == ["cr_carol@example.test", "ml_ivan@example.test"]
    assert "Open: http://localhost:8000/deployments/tiny-live/revisions/2/" in mail.outbox[0].body
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        deployments.deployment_reject(user=ml_lead2, revision=r2, comment="ep-b is the slower one")
    assert _told(ml_staff)[0] == "ml_lena rejected deployment tiny-live r2"
    mail_queue.run()
    [message] = mail.outbox
    assert message.to == ["ml_erin@example.test"]
    assert message.subject == "[hat-console] ml_lena rejected deployment tiny-live r2"
    assert "Comment: ep-b is the slower one" in message.body


def test_a_reviewer_who_proposes_is_not_asked_to_review_it(deploy_world, ml_lead, ml_lead2, reviewer):
    _create(ml_lead, deploy_world)
    assert _told(ml_lead) == [] and _told(ml_lead2) == _told(reviewer) == [
        "ml_ivan proposed deployment tiny-live r1 for review"]


def test_withdrawal_and_rollback_notify_nobody(deployed, ml_staff, reviewer, operator):
    w = deployed
    r2 = deployments.deployment_propose(user=ml_staff, deployment=w["deployment"], endpoints=[w["ep_b"]])
    before = Notification.objects.count()
    deployments.deployment_withdraw(user=ml_staff, revision=r2)
    assert Notification.objects.count() == before
    r3 = deployments.deployment_propose(user=ml_staff, deployment=w["deployment"], endpoints=[w["ep_b"]])
    deployments.deployment_approve(user=reviewer, revision=r3)
    before = Notification.objects.count()
    deployments.deployment_rollback(user=operator, deployment=w["deployment"], comment="slow replies")
    assert Notification.objects.count() == before  # (r1's label still points where it did: no label move either)


def test_a_deployment_notification_opens_its_revision_page(client, deploy_world, ml_staff, reviewer):
    _create(ml_staff, deploy_world)
    n = Notification.objects.get(recipient=reviewer, kind="deployment.create")
    client.force_login(reviewer)
    body = client.get(reverse("notifications")).content.decode()
    assert "ml_erin proposed deployment tiny-live r1 for review" in body
    response = client.post(reverse("notification_open", args=[n.pk]))
    assert response.status_code == 302 and response["Location"] == "/deployments/tiny-live/revisions/1/"
    assert client.get(response["Location"]).status_code == 200
