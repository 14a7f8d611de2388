"""Deployment pages per role: every page and action with its 403/404/405, buttons only for those allowed (four eyes:
the proposer never sees approve), the semantic diff of a proposal, rollback's confirmation page, and the timeline
linking deployment scopes and the live sessions a change affected."""

from __future__ import annotations

import pytest

from console.models import AuditEvent
from harness_editor import services as harness_services
from harness_editor.models import Label
from streams.services import deployments
from tests.streams.deployment_helpers import deploy_world, deployed, live_session_on  # noqa: F401

pytestmark = pytest.mark.django_db

BASE = "/deployments/tiny-live/"
ROLES = ["manager", "reviewer", "ml_staff", "ml_lead", "operator"]


def _login(client, request, role):
    user = request.getfixturevalue(role)
    client.force_login(user)
    return user


@pytest.fixture
def pending(deployed, ml_staff, reviewer):
    """r2 proposed by ml_staff (another model and profile; production moved to v2 meanwhile)."""
    harness_services.label_move(user=reviewer, harness=deployed["harness"], name="production", version=deployed["v2"])
    r2 = deployments.deployment_propose(user=ml_staff, deployment=deployed["deployment"], model=deployed["tuned"],
                                        serve_profile="vllm-plain", note="the SFT model")
    return {**deployed, "r2": r2}


@pytest.mark.parametrize("role", ROLES)
def test_everyone_sees_the_list_and_a_deployment(client, request, deployed, role):
    user = _login(client, request, role)
    session = live_session_on(deployed["deployment"], user, title="Night show")
    page = client.get("/deployments/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-name="tiny-live"' in html and "ep-a, ep-b" in html and "demo-tiny" in html and "vllm-cpu" in html
    assert f'href="/live/{session.pk}/"' in html and ">v1<" in html
    assert ('data-testid="new-deployment"' in html) == (role in ("manager", "ml_staff", "ml_lead"))
    assert 'href="/deployments/"' in html  # the nav link
    detail = client.get(BASE)
    assert detail.status_code == 200
    assert client.get("/deployments/ghost/").status_code == 404
    assert client.get(BASE + "revisions/1/").status_code == 200
    assert client.get(BASE + "revisions/9/").status_code == 404


def test_outsider_and_anonymous_are_refused_everywhere(client, outsider, pending):
    pages = ["/deployments/", "/deployments/new/", BASE, BASE + "propose/", BASE + "rollback/", BASE + "revisions/2/"]
    posts = [BASE + "revisions/2/approve/", BASE + "revisions/2/reject/", BASE + "revisions/2/withdraw/",
             BASE + "rollback/", BASE + "propose/", "/deployments/new/"]
    for url in pages + posts:
        response = client.get(url) if url in pages else client.post(url, {"comment": "x"})
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
    client.force_login(outsider)
    before = AuditEvent.objects.count()
    for url in pages:
        assert client.get(url).status_code == 403, url
    for url in posts:
        assert client.post(url, {"comment": "x", "confirm": "on"}).status_code == 403, url
    assert AuditEvent.objects.count() == before


def test_buttons_follow_roles_and_four_eyes(client, pending, ml_staff, reviewer, operator, manager):
    client.force_login(ml_staff)  # the proposer: withdraw, no review, no rollback
    html = client.get(BASE).content.decode()
    assert 'data-testid="withdraw"' in html and 'data-testid="approve"' not in html
    assert 'data-testid="rollback"' not in html and 'data-testid="propose"' not in html  # one proposal at a time
    client.force_login(reviewer)
    html = client.get(BASE).content.decode()
    assert 'data-testid="approve"' in html and 'data-testid="reject"' in html and 'data-testid="withdraw"' not in html
    # the diff, field by field, against what is in force
    assert 'data-field="model" class="change" data-changed="1"' in html
    assert 'data-field="serve profile" class="change"' in html and 'data-field="endpoints">' in html
    assert "<del>v1</del>" not in html  # the label moved to v2 before: in force and proposed both read v2 now
    client.force_login(operator)
    html = client.get(BASE).content.decode()
    assert 'data-testid="approve"' not in html and 'data-testid="propose"' not in html
    assert 'data-testid="rollback"' not in html  # r1 is the first approved revision: nothing to roll back to
    client.force_login(manager)
    html = client.get(BASE).content.decode()
    assert 'data-testid="approve"' not in html and 'data-testid="withdraw"' not in html


def test_proposer_with_a_review_role_sees_the_four_eyes_note(client, deploy_world, ml_lead):
    w = deploy_world
    deployments.deployment_create(user=ml_lead, name="tiny-live", harness=w["harness"], label="production",
                                  serve_profile=w["vllm"], endpoints=[w["ep_a"]])
    client.force_login(ml_lead)
    html = client.get(BASE).content.decode()
    assert 'data-testid="four-eyes"' in html and 'data-testid="approve"' not in html
    response = client.post(BASE + "revisions/1/approve/", {"comment": "mine"})
    assert response.status_code == 403 and "four eyes" in response.content.decode()


def test_create_page(client, deploy_world, ml_staff, reviewer, operator):
    for user in (reviewer, operator):
        client.force_login(user)
        assert client.get("/deployments/new/").status_code == 403
    client.force_login(ml_staff)
    page = client.get("/deployments/new/")
    assert page.status_code == 200 and "ep-a" in page.content.decode()
    form = {"name": "tiny-live", "title": "Tiny", "harness": "tiny-room", "label": "production",
            "serve_profile": "vllm-cpu", "endpoints": "ep-a, ghost, far", "model": "", "adapter": "", "note": ""}
    bad = client.post("/deployments/new/", form)
    assert bad.status_code == 400
    html = bad.content.decode()
    assert "endpoints[1]: no model endpoint ghost" in html and "endpoints[2]: model endpoint" in html
    assert not deploy_world["harness"].labels.filter(name="ghost").exists()
    assert client.post("/deployments/new/", {**form, "serve_profile": "nope"}).status_code == 400  # not a choice
    response = client.post("/deployments/new/", {**form, "endpoints": "ep-b, ep-a",
                                                 "model": str(deploy_world["base"].pk)})
    assert response.status_code == 302 and response["Location"] == BASE
    html = client.get(BASE).content.decode()
    assert "r1 waits for review" in html


def test_propose_page(client, deployed, ml_staff, operator):
    client.force_login(operator)
    assert client.get(BASE + "propose/").status_code == 403
    client.force_login(ml_staff)
    assert client.get("/deployments/ghost/propose/").status_code == 404
    page = client.get(BASE + "propose/")
    assert page.status_code == 200 and 'value="ep-a, ep-b"' in page.content.decode()  # prefilled from r1
    form = {"label": "production", "serve_profile": "vllm-cpu", "endpoints": "ep-a, ep-b",
            "model": str(deployed["base"].pk), "adapter": "", "note": ""}
    same = client.post(BASE + "propose/", form)
    assert same.status_code == 400 and "nothing changes" in same.content.decode().lower()
    assert client.post(BASE + "propose/", {**form, "label": "staging"}).status_code == 302
    again = client.post(BASE + "propose/", {**form, "serve_profile": "vllm-plain"})
    assert again.status_code == 409 and "waiting for review" in again.content.decode()


def test_decisions(client, pending, ml_staff, ml_lead, reviewer, manager):
    client.force_login(manager)  # may propose, not review
    assert client.post(BASE + "revisions/2/approve/").status_code == 403
    client.force_login(ml_lead)  # not the proposer: may not withdraw
    response = client.post(BASE + "revisions/2/withdraw/")
    assert response.status_code == 403 and "only whoever proposed" in response.content.decode()
    client.force_login(reviewer)
    assert client.get(BASE + "revisions/2/approve/").status_code == 405
    assert client.post(BASE + "revisions/9/approve/").status_code == 404
    assert client.post("/deployments/ghost/revisions/2/approve/").status_code == 404
    blank = client.post(BASE + "revisions/2/reject/", {"comment": " "})
    assert blank.status_code == 400 and "say what must change" in blank.content.decode()
    assert client.post(BASE + "revisions/2/approve/", {"comment": "ok"}).status_code == 302
    pending["deployment"].refresh_from_db()
    assert pending["deployment"].current_revision == pending["r2"]
    again = client.post(BASE + "revisions/2/reject/", {"comment": "too late"})
    assert again.status_code == 409
    client.force_login(ml_staff)
    r3 = deployments.deployment_propose(user=ml_staff, deployment=pending["deployment"], label="staging")
    assert client.post(BASE + f"revisions/{r3.number}/withdraw/").status_code == 302
    r3.refresh_from_db()
    assert r3.status == "withdrawn"


def test_rollback_page_confirms_and_needs_a_reason(client, pending, reviewer, operator, ml_staff):
    deployments.deployment_approve(user=reviewer, revision=pending["r2"])
    session = live_session_on(pending["deployment"], operator, title="Night show")
    client.force_login(ml_staff)
    assert client.get(BASE + "rollback/").status_code == 403
    assert client.post(BASE + "rollback/", {"comment": "x", "confirm": "on"}).status_code == 403
    client.force_login(operator)
    assert client.get("/deployments/ghost/rollback/").status_code == 404
    html = client.get(BASE).content.decode()
    assert 'data-testid="rollback"' in html and "Roll back to r1" in html
    page = client.get(BASE + "rollback/")
    html = page.content.decode()
    assert page.status_code == 200 and 'data-testid="rollback-preview"' in html
    assert 'data-field="harness version" class="change"' in html and "<strong>v1</strong>" in html
    assert f'href="/live/{session.pk}/"' in html
    assert client.post(BASE + "rollback/", {"comment": "too long"}).status_code == 400  # not confirmed
    assert client.post(BASE + "rollback/", {"confirm": "on", "comment": ""}).status_code == 400
    assert Label.objects.get(harness=pending["harness"], name="production").version == pending["v2"]
    response = client.post(BASE + "rollback/", {"confirm": "on", "comment": "replies too long"})
    assert response.status_code == 302
    assert Label.objects.get(harness=pending["harness"], name="production").version == pending["v1"]
    # nothing left to roll back to: the page says so with 409, and so does a POST
    assert client.get(BASE + "rollback/").status_code == 409
    assert client.post(BASE + "rollback/", {"confirm": "on", "comment": "again"}).status_code == 409
    # the deployment's timeline and the console's link the sessions; the console's links the deployment scope
    html = client.get(BASE).content.decode()
    assert 'data-action="deployment.rollback"' in html and f'href="/live/{session.pk}/"' in html
    timeline = client.get("/timeline/").content.decode()
    assert 'href="/deployments/tiny-live/" data-testid="scope-link"' in timeline
    assert f'href="/live/{session.pk}/" data-testid="session-link"' in timeline
    scoped = client.get("/timeline/?scope=deployment:tiny-live").content.decode()
    assert 'value="deployment:tiny-live" selected' in scoped and "deployment.approve" in scoped
    assert "label.moved" not in scoped  # the label's move is on the harness's scope (its label history)
