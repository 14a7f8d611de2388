"""The review checklist: a compliance lead sets it (others read it, 403 on setting), reviewers tick every item
before an approval goes through (400 otherwise, nothing approved), and the ticks are kept with the approval, shown
on the version page and in the approval's audit data."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console import roles
from console.models import AuditEvent
from harness_editor import review_services
from harness_editor.models import ApprovalChecklist, HarnessVersion, ReviewChecklistItem
from tests.harness_editor.gate_helpers import compliance_lead  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db
SLUG = "glow-gadget"
PAGE = reverse("harness_editor:review_checklist")


def url(name: str, *args) -> str:
    return reverse(f"harness_editor:{name}", args=args)


@pytest.fixture
def checklist(compliance_lead):
    return review_services.review_checklist_set(user=compliance_lead, texts=[
        "Every price claim is backed by a tool result", "No efficacy promise", "Banned phrases list is current"])


def test_only_the_compliance_lead_may_set_it():
    assert roles.SET_REVIEW_CHECKLIST in roles.ROLE_PERMISSIONS[roles.COMPLIANCE_LEAD]
    assert [r for r in roles.ROLES if roles.SET_REVIEW_CHECKLIST in roles.ROLE_PERMISSIONS[r]] == [
        roles.COMPLIANCE_LEAD]


def test_the_lead_sets_the_checklist_on_its_page(client, compliance_lead):
    client.force_login(compliance_lead)
    assert 'data-testid="checklist-form"' in client.get(PAGE).content.decode()
    response = client.post(PAGE, {"items": "Prices backed by tools\r\n\r\n  No efficacy promise  \n"})
    assert response.status_code == 302
    assert [i.text for i in ReviewChecklistItem.objects.filter(active=True)] == ["Prices backed by tools",
                                                                                 "No efficacy promise"]
    event = AuditEvent.objects.get(action="review.checklist_set")
    assert event.data["items"] == ["Prices backed by tools", "No efficacy promise"] and event.actor == compliance_lead
    # a new list retires the old items (kept for the approvals that ticked them)
    client.post(PAGE, {"items": "Only this"})
    assert [i.text for i in ReviewChecklistItem.objects.filter(active=True)] == ["Only this"]
    assert ReviewChecklistItem.objects.filter(active=False).count() == 2


@pytest.mark.parametrize("items,message", [
    ("x" * 301, "longer than 300 characters"),
    ("\n".join(f"item {i}" for i in range(31)), "at most 30 items"),
    ("same\nsame", "listed twice"),
])
def test_a_bad_list_is_400_and_keeps_the_old_one(client, compliance_lead, checklist, items, message):
    client.force_login(compliance_lead)
    response = client.post(PAGE, {"items": items})
    assert response.status_code == 400 and message in response.content.decode()
    assert [i.pk for i in ReviewChecklistItem.objects.filter(active=True)] == [i.pk for i in checklist]


@pytest.mark.parametrize("who", ["reviewer", "manager", "ml_staff", "operator"])
def test_others_read_it_but_may_not_set_it(request, client, checklist, who):
    client.force_login(request.getfixturevalue(who))
    page = client.get(PAGE)
    assert page.status_code == 200 and "No efficacy promise" in page.content.decode()
    assert 'data-testid="checklist-form"' not in page.content.decode()
    assert client.post(PAGE, {"items": "mine"}).status_code == 403
    assert ReviewChecklistItem.objects.filter(active=True).count() == 3


def test_anonymous_and_roleless_users_are_refused(client, outsider):
    assert client.get(PAGE).status_code == 302
    client.force_login(outsider)
    assert client.get(PAGE).status_code == 403 and client.post(PAGE, {"items": "x"}).status_code == 403


def test_approve_needs_every_item_ticked(harness_with_history, client, reviewer, checklist):
    client.force_login(reviewer)
    page = client.get(url("version", SLUG, 2)).content.decode()
    assert 'data-testid="checklist"' in page and page.count('data-checklist-item') == 3
    assert "data-needs-checklist" in page and "harness_editor/review.js" in page
    some = [checklist[0].pk, checklist[1].pk]
    response = client.post(url("approve", SLUG, 2), {"comment": "ok", "checklist": some})
    html = response.content.decode()
    assert response.status_code == 400 and "not ticked: Banned phrases list is current" in html
    assert html.count(" checked>") == 2  # what was ticked stays ticked
    assert HarnessVersion.objects.get(pk=harness_with_history["v2"].pk).status == "submitted"
    assert not ApprovalChecklist.objects.exists()
    assert client.post(url("approve", SLUG, 2), {"checklist": ["junk", "1" * 12]}).status_code == 400


def test_the_ticks_are_kept_with_the_approval(harness_with_history, client, reviewer, checklist):
    client.force_login(reviewer)
    response = client.post(url("approve", SLUG, 2), {"comment": "ok", "checklist": [i.pk for i in checklist]})
    assert response.status_code == 302
    v2 = HarnessVersion.objects.get(pk=harness_with_history["v2"].pk)
    assert v2.status == "approved"
    kept = ApprovalChecklist.objects.get(version=v2)
    assert [i["text"] for i in kept.items] == [i.text for i in checklist] and kept.ticked_by == reviewer
    event = AuditEvent.objects.get(action="version.approved", target="version:2")
    assert event.data["review"]["checklist"] == kept.items and event.data["review"]["unresolved_comments"] == 0
    html = client.get(url("version", SLUG, 2)).content.decode()
    assert 'data-testid="approval-checklist"' in html and "☑ No efficacy promise" in html
    # a later list does not change what was ticked
    review_services.review_checklist_set(user=checklist[0].created_by, texts=["new item"])
    assert "☑ No efficacy promise" in client.get(url("version", SLUG, 2)).content.decode()


def test_four_eyes_and_status_come_before_the_checklist(harness_with_history, client, manager, reviewer, checklist):
    from django.contrib.auth.models import Group

    manager.groups.add(Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    client.force_login(manager)  # the author of v2
    response = client.post(url("approve", SLUG, 2))
    assert response.status_code == 403 and "four eyes" in response.content.decode()
    client.force_login(reviewer)
    assert client.post(url("approve", SLUG, 1)).status_code == 409  # v1 is approved already

