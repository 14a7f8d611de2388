"""Console pages: login, header, home dashboard, audit timeline — per role."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.services import audit_record
from tests.conftest import PASSWORD


ROLE_USERS = ["manager", "reviewer", "ml_staff", "operator"]


@pytest.mark.parametrize("name", ["home", "timeline"])
def test_anonymous_is_sent_to_login(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response["Location"] == f"{reverse('login')}?next={reverse(name)}"


@pytest.mark.parametrize("name", ["home", "timeline"])
def test_user_without_role_gets_403_with_explanation(client, outsider, name):
    client.force_login(outsider)
    response = client.get(reverse(name))
    assert response.status_code == 403
    assert b"no console role" in response.content and b"Log out" in response.content


@pytest.mark.parametrize("name", ["home", "timeline"])
@pytest.mark.parametrize("who", ROLE_USERS)
def test_pages_open_to_every_role(request, client, who, name):
    client.force_login(request.getfixturevalue(who))
    assert client.get(reverse(name)).status_code == 200


@pytest.mark.parametrize("name", ["home", "timeline"])
def test_pages_refuse_post(client, manager, name):
    client.force_login(manager)
    assert client.post(reverse(name)).status_code == 405


def test_login_page_and_login_redirects_home(client, manager):
    page = client.get(reverse("login"))
    assert page.status_code == 200 and b'name="username"' in page.content
    response = client.post(reverse("login"), {"username": "cm_alice", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == reverse("home")
    bad = client.post(reverse("login"), {"username": "cm_alice", "password": "wrong"})
    assert bad.status_code == 200 and b"didn't match" in bad.content


def test_header_shows_user_roles_and_logout_form(client, reviewer):
    client.force_login(reviewer)
    body = client.get(reverse("home")).content.decode()
    assert "cr_carol" in body and "compliance reviewer" in body
    assert f'<form method="post" action="{reverse("logout")}">' in body and "csrfmiddlewaretoken" in body
    assert 'hx-headers=\'{"X-CSRFToken": "' in body


def test_logout_is_post(client, manager):
    client.force_login(manager)
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 302


def test_home_for_reviewer_shows_queue_and_labels(client, harness_with_history, reviewer):
    client.force_login(reviewer)
    body = client.get(reverse("home")).content.decode()
    assert "Review queue" in body and "glow-gadget v2" in body  # submitted, waiting
    assert "production → v1" in body
    assert "version.approved" in body  # recent audit events
    assert "My drafts" not in body  # reviewers do not draft


def test_home_for_manager_shows_drafts_not_queue(client, harness_with_history, manager):
    client.force_login(manager)
    body = client.get(reverse("home")).content.decode()
    assert "My drafts" in body and reverse("harness_editor:edit", args=["glow-gadget", 3]) in body
    assert "Review queue" not in body
    assert reverse("harness_editor:new") in body


def test_home_for_operator_is_read_only(client, harness_with_history, operator):
    client.force_login(operator)
    body = client.get(reverse("home")).content.decode()
    assert "Review queue" not in body and "My drafts" not in body and reverse("harness_editor:new") not in body
    assert "production → v1" in body


def test_timeline_lists_events_with_from_to_and_comment(client, harness_with_history, operator):
    client.force_login(operator)
    body = client.get(reverse("timeline")).content.decode()
    assert "version.approved" in body and "submitted → approved" in body and "checked claims" in body
    assert "label.moved" in body and "label:production" in body and "cr_carol" in body


def test_timeline_filters_by_harness_scope(client, harness_with_history, manager):
    audit_record(actor=manager, action="version.created", scope="harness:other-room", target="version:1",
                 to_state="draft", comment="elsewhere")
    client.force_login(manager)
    everything = client.get(reverse("timeline")).content.decode()
    assert "elsewhere" in everything
    only = client.get(reverse("timeline"), {"scope": "harness:glow-gadget"}).content.decode()
    assert "elsewhere" not in only and "checked claims" in only


def test_timeline_is_paginated_and_serves_htmx_fragment(client, manager):
    for i in range(60):
        audit_record(actor=manager, action="test.event", scope="harness:x", target=f"thing:{i}")
    client.force_login(manager)
    first = client.get(reverse("timeline")).content.decode()
    assert "Page 1 of 2" in first and "thing:59" in first and "thing:0<" not in first
    fragment = client.get(reverse("timeline"), {"page": 2}, headers={"HX-Request": "true", "HX-Target": "events"})
    body = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in body and 'id="events"' in body
    assert "thing:0<" in body and "thing:59" not in body
