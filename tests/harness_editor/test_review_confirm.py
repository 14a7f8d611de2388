"""Confirmation steps of the high-impact registry actions through the pages: a label move, a label rollback and a
draft discarded act only on the POST that confirms a page saying exactly what changes (vN → vM, the deployments,
live sessions and rooms the label reaches, the draft that goes); errors come before the confirmation; a page that
went stale (the label moved, the draft was saved) acts on nothing; the APIs act at once as before. And the
deployment rollback page says which version its label moves from and to, and what else serves the label."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.models import AuditEvent
from harness_editor import services
from harness_editor.label_impact import NO_PROVIDER, LabelImpact, label_impact
from harness_editor.models import HarnessVersion, Label
from tests.streams.deployment_helpers import deploy_world, deployed, live_session_on  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db
SLUG = "glow-gadget"


def url(name: str, *args) -> str:
    return reverse(f"harness_editor:{name}", args=args)


@pytest.fixture
def h(harness_with_history, reviewer):
    """v1 approved + production, v2 approved (by the reviewer), v3 draft."""
    v2 = services.version_approve(user=reviewer, version=harness_with_history["v2"])
    return {**harness_with_history, "v2": v2}


def _moves() -> int:
    return AuditEvent.objects.filter(action="label.moved").count()


def test_label_move_asks_to_confirm_then_moves(h, client, reviewer):
    client.force_login(reviewer)
    before = _moves()
    page = client.post(url("label_move", SLUG), {"name": "production", "version": 2, "comment": "go"})
    html = page.content.decode()
    assert page.status_code == 200 and 'data-testid="confirm-change"' in html
    assert "moves from <strong>v1</strong> to <strong>v2</strong>" in html
    assert f'href="{url("diff", SLUG)}?a=1&amp;b=2"' in html  # what changes between them
    assert 'name="confirm" value="1"' in html and 'name="expected_from" value="1"' in html
    assert 'name="comment" value="go"' in html
    assert Label.objects.get(name="production").version.number == 1 and _moves() == before
    done = client.post(url("label_move", SLUG), {"name": "production", "version": 2, "comment": "go",
                                                 "confirm": "1", "expected_from": "1"})
    assert done.status_code == 302 and Label.objects.get(name="production").version.number == 2
    event = AuditEvent.objects.filter(action="label.moved").latest("id")
    assert (event.from_state, event.to_state, event.comment) == ("v1", "v2", "go")


def test_a_new_label_says_it_is_new(h, client, reviewer):
    client.force_login(reviewer)
    html = client.post(url("label_move", SLUG), {"name": "staging", "version": 2}).content.decode()
    assert "is new: it will point at <strong>v2</strong>" in html and 'name="expected_from" value=""' in html
    assert not Label.objects.filter(name="staging").exists()
    assert client.post(url("label_move", SLUG), {"name": "staging", "version": 2, "confirm": "1",
                                                 "expected_from": ""}).status_code == 302
    assert Label.objects.get(name="staging").version.number == 2


def test_a_stale_confirmation_moves_nothing(h, client, reviewer, manager):
    client.force_login(reviewer)
    client.post(url("label_move", SLUG), {"name": "production", "version": 2})  # page shown: v1 → v2
    services.label_move(user=manager, harness=h["harness"], name="production", version=h["v2"])  # someone else
    services.label_move(user=manager, harness=h["harness"], name="production", version=h["v1"])
    before = _moves()
    stale = client.post(url("label_move", SLUG), {"name": "production", "version": 2, "confirm": "1",
                                                  "expected_from": "7"})
    assert stale.status_code == 409 and 'data-testid="confirm-stale"' in stale.content.decode()
    assert _moves() == before


@pytest.mark.parametrize("data,message", [
    ({"name": "production", "version": 3}, "only approved versions can carry a label"),  # v3 is a draft
    ({"name": "production", "version": 1}, "already points at v1"),
    ({"name": "Prod Uction", "version": 2}, "lowercase name"),
    ({"name": "production", "version": 99}, "has no version 99"),
])
def test_errors_come_before_the_confirmation(h, client, reviewer, data, message):
    client.force_login(reviewer)
    for extra in ({}, {"confirm": "1", "expected_from": "1"}):
        response = client.post(url("label_move", SLUG), {**data, **extra})
        assert response.status_code == 400 and message in response.content.decode()
        assert 'data-testid="confirm-change"' not in response.content.decode()
    assert Label.objects.get(name="production").version.number == 1


def test_label_pages_refuse_other_roles_and_unknown_harnesses(h, client, ml_staff, operator, outsider, reviewer):
    for user in (ml_staff, operator, outsider):
        client.force_login(user)
        assert client.post(url("label_move", SLUG), {"name": "production", "version": 2}).status_code == 403
        assert client.post(url("label_rollback", SLUG, "production")).status_code == 403
    client.force_login(reviewer)
    assert client.post(url("label_move", "ghost"), {"name": "production", "version": 2}).status_code == 404
    assert client.post(url("label_rollback", "ghost", "production")).status_code == 404
    assert client.get(url("label_rollback", SLUG, "production")).status_code == 405
    assert Label.objects.get(name="production").version.number == 1


def test_label_rollback_asks_to_confirm_then_rolls_back(h, client, reviewer):
    services.label_move(user=reviewer, harness=h["harness"], name="production", version=h["v2"])
    client.force_login(reviewer)
    page = client.post(url("label_rollback", SLUG, "production"), {"comment": "regression"})
    html = page.content.decode()
    assert page.status_code == 200 and "moves from <strong>v2</strong> back to <strong>v1</strong>" in html
    assert 'name="expected_to" value="1"' in html and Label.objects.get(name="production").version.number == 2
    # a confirmation for another rollback than the one now due acts on nothing
    stale = client.post(url("label_rollback", SLUG, "production"),
                        {"confirm": "1", "expected_from": "2", "expected_to": "3"})
    assert stale.status_code == 409 and Label.objects.get(name="production").version.number == 2
    done = client.post(url("label_rollback", SLUG, "production"),
                       {"confirm": "1", "expected_from": "2", "expected_to": "1", "comment": "regression"})
    assert done.status_code == 302 and Label.objects.get(name="production").version.number == 1
    event = AuditEvent.objects.filter(action="label.moved").latest("id")
    assert event.data["rollback"] is True and event.comment == "regression"


def test_rollback_errors_come_before_the_confirmation(h, client, reviewer):
    client.force_login(reviewer)
    response = client.post(url("label_rollback", SLUG, "production"))
    assert response.status_code == 400 and "has no earlier version" in response.content.decode()
    response = client.post(url("label_rollback", SLUG, "nope"), {"confirm": "1"})
    assert response.status_code == 400 and "no label" in response.content.decode()


def test_the_confirmation_names_deployments_live_sessions_and_rooms(deployed, client, reviewer, operator):
    session = live_session_on(deployed["deployment"], operator, title="Night show")
    client.force_login(reviewer)
    html = client.post(reverse("harness_editor:label_move", args=["tiny-room"]),
                       {"name": "production", "version": 2}).content.decode()
    assert "moves from <strong>v1</strong> to <strong>v2</strong>" in html
    assert 'data-testid="affected-deployments"' in html and 'href="/deployments/tiny-live/"' in html
    assert 'data-testid="affected-sessions"' in html and f'href="/live/{session.pk}/"' in html
    assert "Night show" in html and 'data-testid="affected-rooms"' in html and "live: Night show" in html
    # staging is served by nothing: the page says so
    html = client.post(reverse("harness_editor:label_move", args=["tiny-room"]),
                       {"name": "staging", "version": 1}).content.decode()
    assert 'data-testid="no-live-sessions"' in html and "No deployment serves" in html


def test_a_room_label_names_its_room(deployed):
    from streams import services as stream_services

    room = stream_services.catalog_seed_demo()
    impact = label_impact(deployed["harness"], f"room:{room.slug}")
    assert [r.name for r in impact.rooms] == [room.title] and not impact.sessions


def test_no_provider_reports_nothing(settings, deployed):
    settings.HAT_LABEL_IMPACT = ""
    assert label_impact(deployed["harness"], "production") == LabelImpact(note=NO_PROVIDER)
    settings.HAT_LABEL_IMPACT = "tests.harness_editor.test_review_confirm.wrong_answer"
    with pytest.raises(TypeError):
        label_impact(deployed["harness"], "production")


def wrong_answer(harness, name):
    return {"deployments": []}


def test_discard_asks_to_confirm_naming_the_draft(h, client, manager):
    v3 = h["v3"]
    client.force_login(manager)
    page = client.post(url("discard", SLUG, 3))
    html = page.content.decode()
    assert page.status_code == 200 and "Discard draft v3?" in html and "tool rename" in html
    assert 'data-testid="confirm-diff"' in html and "against v2" in html
    assert f'name="expected_lock" value="{v3.lock_version}"' in html
    assert HarnessVersion.objects.filter(pk=v3.pk).exists()
    # saved since the page was shown: nothing is discarded, the page is shown again
    stale = client.post(url("discard", SLUG, 3), {"confirm": "1", "expected_lock": v3.lock_version + 1})
    assert stale.status_code == 409 and HarnessVersion.objects.filter(pk=v3.pk).exists()
    done = client.post(url("discard", SLUG, 3), {"confirm": "1", "expected_lock": v3.lock_version})
    assert done.status_code == 302 and not HarnessVersion.objects.filter(pk=v3.pk).exists()
    assert AuditEvent.objects.filter(action="version.discarded").count() == 1


def test_discard_refusals_come_before_the_confirmation(h, client, manager, manager2, reviewer):
    client.force_login(manager2)  # not the author
    assert client.post(url("discard", SLUG, 3)).status_code == 403
    client.force_login(reviewer)  # no EDIT_DRAFT
    assert client.post(url("discard", SLUG, 3), {"confirm": "1"}).status_code == 403
    client.force_login(manager)
    response = client.post(url("discard", SLUG, 2))  # approved: not a draft
    assert response.status_code == 409 and "only drafts can be discarded" in response.content.decode()
    assert client.post(url("discard", SLUG, 42)).status_code == 404
    assert client.get(url("discard", SLUG, 3)).status_code == 405
    assert HarnessVersion.objects.filter(harness=h["harness"]).count() == 3


def test_the_apis_act_without_a_confirmation(h, client, reviewer):
    client.force_login(reviewer)
    response = client.put(f"/api/harnesses/{SLUG}/labels/production/", {"version": 2}, content_type="application/json")
    assert response.status_code == 200 and Label.objects.get(name="production").version.number == 2


def test_deployment_rollback_page_says_the_label_versions_and_who_else_serves_it(deployed, client, reviewer,
                                                                                operator, ml_staff):
    from streams.services import deployments

    services.label_move(user=reviewer, harness=deployed["harness"], name="production", version=deployed["v2"])
    r2 = deployments.deployment_propose(user=ml_staff, deployment=deployed["deployment"], model=deployed["tuned"],
                                        serve_profile="vllm-plain", note="the SFT model")
    deployments.deployment_approve(user=reviewer, revision=r2)
    twin = deployments.deployment_create(user=ml_staff, name="tiny-twin", harness=deployed["harness"],
                                         label="production", serve_profile=deployed["vllm"],
                                         endpoints=[deployed["ep_a"]], model=deployed["base"], note="twin")
    deployments.deployment_approve(user=reviewer, revision=twin.revisions.get(number=1))
    live_session_on(twin, operator, title="Twin show")
    client.force_login(operator)
    page = client.get("/deployments/tiny-live/rollback/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-testid="label-change"' in html and "moves from <strong>v2</strong> to <strong>v1</strong>" in html
    assert 'data-testid="label-other-deployments"' in html and 'href="/deployments/tiny-twin/"' in html
    assert 'data-testid="label-other-sessions"' in html and "Twin show" in html
    # without the confirmation box nothing moves
    assert client.post("/deployments/tiny-live/rollback/", {"comment": "why"}).status_code == 400
    assert Label.objects.get(harness=deployed["harness"], name="production").version == deployed["v2"]
