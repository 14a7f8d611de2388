"""Harness pages through the Django test client: every page × role, the editor's save / conflict / error
paths, live validation, label moves and reviews through the pages."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.models import AuditEvent
from harness_editor import services
from harness_editor.models import HarnessVersion, Label

SLUG = "glow-gadget"


def url(name: str, *args, **query) -> str:
    u = reverse(f"harness_editor:{name}", args=args)
    if query:
        u += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return u


@pytest.fixture
def h(harness_with_history):
    return harness_with_history


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def editor_post(version, component="skills", **overrides):
    """The POST the editor form sends for ``component``, from the version's current manifest."""
    from harness_editor import forms

    data = version.manifest.model_dump(mode="json")
    state = forms.state_from_manifest(component, data)
    post: dict = {"component": component, "lock_version": version.lock_version, "change_note": version.change_note}
    if component == "skills":
        for i, row in enumerate(state):
            for k, v in row.items():
                post[f"skills-{i}-{k}"] = v
    elif component == "tools":
        for i, row in enumerate(state):
            for k, v in row.items():
                post[f"tools-{i}-{k}"] = v
    elif component == "prompt":
        post["layout"] = state["layout"]
        for i, row in enumerate(state["blocks"]):
            for k, v in row.items():
                post[f"blocks-{i}-{k}"] = v
    elif component == "hooks":
        for i, row in enumerate(state):
            for k, v in row.items():
                if k == "enabled":
                    if v:
                        post[f"hooks-{i}-enabled"] = "on"
                else:
                    post[f"hooks-{i}-{k}"] = v
    elif component == "constraints":
        for k, v in state.items():
            if isinstance(v, bool):
                if v:
                    post[k] = "on"
            else:
                post[k] = str(v)
    elif component == "yaml":
        post["yaml"] = state["text"]
    post.update(overrides)
    return post


# --- page × role matrix ----------------------------------------------------------------------------

READ_PAGES = [
    ("list", ()),
    ("detail", (SLUG,)),
    ("version", (SLUG, 1)),
    ("version", (SLUG, 2)),
    ("version", (SLUG, 3)),
    ("diff", (SLUG,)),
    ("export", (SLUG, 1, "yaml")),
    ("export", (SLUG, 1, "json")),
]
ROLE_USERS = ["manager", "manager2", "reviewer", "ml_staff", "operator"]


@pytest.mark.parametrize("name,args", READ_PAGES)
@pytest.mark.parametrize("who", ROLE_USERS)
def test_read_pages_open_to_every_role(request, h, as_user, who, name, args):
    client = as_user(request.getfixturevalue(who))
    assert client.get(url(name, *args)).status_code == 200


@pytest.mark.parametrize("name,args", READ_PAGES + [("new", ()), ("edit", (SLUG, 3))])
def test_anonymous_is_sent_to_login(client, h, name, args):
    response = client.get(url(name, *args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name,args", READ_PAGES + [("new", ()), ("edit", (SLUG, 3))])
def test_user_without_role_gets_403(h, as_user, outsider, name, args):
    response = as_user(outsider).get(url(name, *args))
    assert response.status_code == 403
    assert b"no console role" in response.content


@pytest.mark.parametrize("name,args", [("detail", ("nope",)), ("version", (SLUG, 99)), ("edit", (SLUG, 99)),
                                       ("export", (SLUG, 1, "xml")), ("diff", ("nope",))])
def test_unknown_objects_are_404(h, as_user, manager, name, args):
    assert as_user(manager).get(url(name, *args)).status_code == 404


def test_diff_of_unknown_version_is_404(h, as_user, manager):
    assert as_user(manager).get(url("diff", SLUG, a=1, b=42)).status_code == 404


@pytest.mark.parametrize("name,args", [
    ("submit", (SLUG, 3)), ("discard", (SLUG, 3)), ("approve", (SLUG, 2)), ("reject", (SLUG, 2)),
    ("new_draft", (SLUG, 1)), ("label_move", (SLUG,)), ("label_rollback", (SLUG, "production")),
    ("validate", (SLUG, 3)),
])
def test_actions_are_post_only(h, as_user, manager, reviewer, name, args):
    user = reviewer if name in ("approve", "reject") else manager
    assert as_user(user).get(url(name, *args)).status_code == 405


@pytest.mark.parametrize("name,args", [("list", ()), ("detail", (SLUG,)), ("version", (SLUG, 1)), ("diff", (SLUG,))])
def test_read_pages_refuse_post(h, as_user, manager, name, args):
    assert as_user(manager).post(url(name, *args)).status_code == 405


@pytest.mark.parametrize("who,name,args", [
    ("reviewer", "new", ()),
    ("ml_staff", "new", ()),
    ("operator", "new", ()),
    ("reviewer", "edit", (SLUG, 3)),
    ("operator", "edit", (SLUG, 3)),
    ("manager2", "edit", (SLUG, 3)),  # a campaign manager, but not the author
])
def test_editing_pages_refuse_other_roles(request, h, as_user, who, name, args):
    assert as_user(request.getfixturevalue(who)).get(url(name, *args)).status_code == 403


@pytest.mark.parametrize("who,name,args", [
    ("reviewer", "submit", (SLUG, 3)), ("operator", "submit", (SLUG, 3)),
    ("reviewer", "discard", (SLUG, 3)), ("ml_staff", "new_draft", (SLUG, 1)),
    ("manager", "approve", (SLUG, 2)), ("operator", "reject", (SLUG, 2)),
    ("ml_staff", "label_move", (SLUG,)), ("operator", "label_rollback", (SLUG, "production")),
    ("reviewer", "validate", (SLUG, 3)), ("outsider", "approve", (SLUG, 2)),
])
def test_actions_refuse_roles_without_the_permission(request, h, as_user, who, name, args):
    before = AuditEvent.objects.count()
    response = as_user(request.getfixturevalue(who)).post(url(name, *args), {"comment": "x", "name": "production",
                                                                             "version": 1})
    assert response.status_code == 403
    assert AuditEvent.objects.count() == before


def test_anonymous_post_is_sent_to_login(client, h):
    response = client.post(url("approve", SLUG, 2))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert HarnessVersion.objects.get(harness=h["harness"], number=2).status == "submitted"


def test_posts_need_csrf(h, manager):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(manager)
    assert client.post(url("submit", SLUG, 3)).status_code == 403
    assert HarnessVersion.objects.get(harness=h["harness"], number=3).status == "draft"


# --- list, detail, version page ------------------------------------------------------------------------


def test_list_shows_labels_and_new_button_for_managers(h, as_user, manager, reviewer):
    body = as_user(manager).get(url("list")).content.decode()
    assert "Glow &amp; Gadget live room" in body and "production → v1" in body
    assert url("new") in body
    assert url("new") not in as_user(reviewer).get(url("list")).content.decode()


def test_detail_shows_history_labels_and_diff_picker(h, as_user, reviewer):
    body = as_user(reviewer).get(url("detail", SLUG)).content.decode()
    for n in (1, 2, 3):
        assert f'href="{url("version", SLUG, n)}"' in body
    assert 'name="a" value="2"' in body and 'name="b" value="3"' in body
    assert url("label_move", SLUG) in body and url("label_rollback", SLUG, "production") in body


def test_detail_hides_label_forms_without_the_permission(h, as_user, operator):
    body = as_user(operator).get(url("detail", SLUG)).content.decode()
    assert url("label_move", SLUG) not in body and url("label_rollback", SLUG, "production") not in body


def test_history_is_paginated_with_constant_queries_and_no_manifest_text(h, as_user, manager, demo_manifest):
    client = as_user(manager)
    client.get(url("detail", SLUG))  # warm caches (content types, session)
    with CaptureQueriesContext(connection) as few:
        assert client.get(url("detail", SLUG)).status_code == 200
    v3 = h["v3"]
    services.version_submit(user=manager, version=v3)
    manifest = demo_manifest("skincare_v1")
    for _ in range(55):
        services.version_create_draft(user=manager, harness=h["harness"], manifest=manifest, parent=None)
    with CaptureQueriesContext(connection) as many:
        response = client.get(url("detail", SLUG))
    assert response.status_code == 200
    assert len(many) == len(few)
    history_sql = [q["sql"] for q in many.captured_queries if "harness_editor_harnessversion" in q["sql"]
                   and "ORDER BY" in q["sql"] and "LIMIT 50" in q["sql"]]
    assert history_sql and all("manifest_json" not in sql for sql in history_sql)
    assert "Page 1 of 2" in response.content.decode()
    page2 = client.get(url("detail", SLUG), {"page": 2}, headers={"HX-Request": "true", "HX-Target": "history"})
    body = page2.content.decode()
    assert page2.status_code == 200 and "<html" not in body and 'id="history"' in body
    assert f'href="{url("version", SLUG, 1)}"' in body


def test_author_sees_edit_submit_discard_but_never_approve(h, as_user, manager):
    client = as_user(manager)
    draft = client.get(url("version", SLUG, 3)).content.decode()
    assert url("edit", SLUG, 3) in draft and url("submit", SLUG, 3) in draft and url("discard", SLUG, 3) in draft
    submitted = client.get(url("version", SLUG, 2)).content.decode()
    assert url("approve", SLUG, 2) not in submitted and ">Approve<" not in submitted
    assert url("edit", SLUG, 2) not in submitted and url("new_draft", SLUG, 2) in submitted


def test_author_with_reviewer_role_still_sees_no_approve(h, as_user, manager):
    from django.contrib.auth.models import Group

    from console import roles

    manager.groups.add(Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    body = as_user(manager).get(url("version", SLUG, 2)).content.decode()
    assert url("approve", SLUG, 2) not in body and ">Approve<" not in body
    assert "another compliance reviewer must decide" in body


def test_other_reviewer_sees_approve_and_reject(h, as_user, reviewer):
    body = as_user(reviewer).get(url("version", SLUG, 2)).content.decode()
    assert url("approve", SLUG, 2) in body and url("reject", SLUG, 2) in body
    assert url("edit", SLUG, 2) not in body and url("new_draft", SLUG, 2) not in body


def test_other_manager_sees_new_draft_but_not_edit(h, as_user, manager2):
    body = as_user(manager2).get(url("version", SLUG, 3)).content.decode()
    assert url("new_draft", SLUG, 3) in body
    assert url("edit", SLUG, 3) not in body and url("submit", SLUG, 3) not in body


def test_version_page_shows_metadata_preview_and_parent_diff(h, as_user, reviewer):
    v2 = h["v2"]
    body = as_user(reviewer).get(url("version", SLUG, 2)).content.decode()
    assert v2.content_hash in body and "coupon strategy reworded" in body
    assert "System message" in body and "You are Mia" in body and "lily_88" in body
    assert "&quot;name&quot;: &quot;load_skill&quot;" in body  # the tools JSON the model gets
    assert "Changes against v1" in body and 'data-testid="diff"' in body
    v1 = as_user(reviewer).get(url("version", SLUG, 1)).content.decode()
    assert "production" in v1 and "checked claims" in v1 and "first version" in v1


def test_export_yaml_and_json_round_trip(h, as_user, operator):
    from harness_editor.schemas import content_hash, manifest_from_json, manifest_from_yaml

    client = as_user(operator)
    y = client.get(url("export", SLUG, 2, "yaml"))
    assert y["Content-Disposition"] == f'attachment; filename="{SLUG}-v2.yaml"'
    assert content_hash(manifest_from_yaml(y.content)) == h["v2"].content_hash
    j = client.get(url("export", SLUG, 2, "json"))
    assert j["Content-Type"].startswith("application/json")
    assert content_hash(manifest_from_json(j.content)) == h["v2"].content_hash


# --- version actions through the page --------------------------------------------------------------------


def test_submit_then_approve_through_the_pages(h, as_user, manager, reviewer):
    response = as_user(manager).post(url("submit", SLUG, 3))
    assert response.status_code == 302 and response["Location"] == url("version", SLUG, 3)
    assert HarnessVersion.objects.get(pk=h["v3"].pk).status == "submitted"
    response = as_user(reviewer).post(url("approve", SLUG, 3), {"comment": "fine"})
    assert response.status_code == 302
    v3 = HarnessVersion.objects.get(pk=h["v3"].pk)
    assert v3.status == "approved" and v3.decided_by == reviewer and v3.decision_comment == "fine"


def test_reject_requires_a_comment(h, as_user, reviewer):
    client = as_user(reviewer)
    response = client.post(url("reject", SLUG, 2), {"comment": "  "})
    assert response.status_code == 400
    body = response.content.decode()
    assert "a rejection needs a comment" in body and "say what must change" in body
    assert HarnessVersion.objects.get(pk=h["v2"].pk).status == "submitted"
    response = client.post(url("reject", SLUG, 2), {"comment": "the bundle skill promises a discount"})
    assert response.status_code == 302
    v2 = HarnessVersion.objects.get(pk=h["v2"].pk)
    assert v2.status == "rejected" and v2.decision_comment == "the bundle skill promises a discount"


def test_approving_twice_shows_the_transition_error_inline(h, as_user, reviewer, reviewer2):
    as_user(reviewer).post(url("approve", SLUG, 2))
    response = as_user(reviewer2).post(url("approve", SLUG, 2))
    assert response.status_code == 409
    assert "v2 is approved; it must be submitted" in response.content.decode()


def test_author_posting_approve_is_refused_by_four_eyes(h, as_user, manager):
    from django.contrib.auth.models import Group

    from console import roles

    manager.groups.add(Group.objects.get(name=roles.COMPLIANCE_REVIEWER))
    response = as_user(manager).post(url("approve", SLUG, 2))
    assert response.status_code == 403 and "four eyes" in response.content.decode()
    assert HarnessVersion.objects.get(pk=h["v2"].pk).status == "submitted"


def test_non_author_manager_cannot_submit_or_discard(h, as_user, manager2):
    client = as_user(manager2)
    assert client.post(url("submit", SLUG, 3)).status_code == 403
    assert client.post(url("discard", SLUG, 3)).status_code == 403
    assert HarnessVersion.objects.get(pk=h["v3"].pk).status == "draft"


def test_discard_draft(h, as_user, manager):
    client = as_user(manager)
    response = client.post(url("discard", SLUG, 3))  # the first POST asks to confirm, naming the draft
    assert response.status_code == 200 and 'data-testid="confirm-change"' in response.content.decode()
    assert HarnessVersion.objects.filter(pk=h["v3"].pk).exists()
    response = client.post(url("discard", SLUG, 3), {"confirm": "1", "expected_lock": h["v3"].lock_version})
    assert response.status_code == 302 and response["Location"] == url("detail", SLUG)
    assert not HarnessVersion.objects.filter(pk=h["v3"].pk).exists()


def test_new_draft_from_version_opens_the_editor(h, as_user, manager2):
    response = as_user(manager2).post(url("new_draft", SLUG, 1))
    assert response.status_code == 302 and response["Location"] == url("edit", SLUG, 4)
    v4 = HarnessVersion.objects.get(harness=h["harness"], number=4)
    assert v4.author == manager2 and v4.parent_id == h["v1"].pk and v4.content_hash == h["v1"].content_hash
    assert as_user(manager2).get(url("edit", SLUG, 4)).status_code == 200


# --- labels through the page -------------------------------------------------------------------------------


def _approve_v2(h, reviewer):
    return services.version_approve(user=reviewer, version=h["v2"])


def test_label_move_and_rollback_through_the_page(h, as_user, reviewer, manager):
    _approve_v2(h, reviewer)
    client = as_user(manager)
    response = client.post(url("label_move", SLUG), {"name": "production", "version": 2, "comment": "go"})
    assert response.status_code == 200 and Label.objects.get(name="production").version.number == 1  # confirm first
    response = client.post(url("label_move", SLUG), {"name": "production", "version": 2, "comment": "go",
                                                     "confirm": "1", "expected_from": "1"})
    assert response.status_code == 302 and response["Location"] == url("detail", SLUG)
    assert Label.objects.get(harness=h["harness"], name="production").version.number == 2
    body = client.get(url("detail", SLUG)).content.decode()
    assert "v1 → v2" in body
    response = client.post(url("label_rollback", SLUG, "production"))
    assert response.status_code == 200 and Label.objects.get(name="production").version.number == 2  # confirm first
    response = client.post(url("label_rollback", SLUG, "production"),
                           {"confirm": "1", "expected_from": "2", "expected_to": "1"})
    assert response.status_code == 302
    assert Label.objects.get(harness=h["harness"], name="production").version.number == 1
    event = AuditEvent.objects.filter(action="label.moved").order_by("-id").first()
    assert event.data["rollback"] is True and event.actor == manager
    assert "rollback" in client.get(url("detail", SLUG)).content.decode()


def test_label_move_to_unapproved_version_shows_error(h, as_user, reviewer):
    response = as_user(reviewer).post(url("label_move", SLUG), {"name": "staging", "version": 2})
    assert response.status_code == 400  # v2 is submitted, not approved
    assert "only approved versions can carry a label" in response.content.decode()
    assert not Label.objects.filter(name="staging").exists()


def test_label_move_to_unknown_version_shows_error(h, as_user, reviewer):
    response = as_user(reviewer).post(url("label_move", SLUG), {"name": "staging", "version": 99})
    assert response.status_code == 400
    assert "has no version 99" in response.content.decode()
    assert not Label.objects.filter(name="staging").exists()


def test_label_move_with_bad_name_shows_service_error(h, as_user, reviewer):
    response = as_user(reviewer).post(url("label_move", SLUG), {"name": "Prod Uction", "version": 1})
    assert response.status_code == 400
    assert "lowercase name" in response.content.decode()


def test_label_move_to_same_version_shows_error(h, as_user, reviewer):
    response = as_user(reviewer).post(url("label_move", SLUG), {"name": "production", "version": 1})
    assert response.status_code == 400
    assert "already points at v1" in response.content.decode()


def test_rollback_without_history_shows_error_inline(h, as_user, reviewer):
    response = as_user(reviewer).post(url("label_rollback", SLUG, "production"))
    assert response.status_code == 400
    assert "has no earlier version" in response.content.decode()
    response = as_user(reviewer).post(url("label_rollback", SLUG, "staging"))
    assert response.status_code == 400 and "no label" in response.content.decode()


# --- diff page ---------------------------------------------------------------------------------------------


def test_diff_page_shows_changes_and_breaking_flags(h, as_user, reviewer):
    response = as_user(reviewer).get(url("diff", SLUG, a=2, b=3))
    body = response.content.decode()
    assert response.status_code == 200 and "v2 → v3" in body
    assert 'class="badge breaking"' in body  # v3 renames a tool
    assert "renamed" in body


def test_diff_page_colours_text_diff_lines(h, as_user, reviewer):
    body = as_user(reviewer).get(url("diff", SLUG, a=1, b=2)).content.decode()
    assert '<div class="add" id="dl-' in body and '<div class="del" id="dl-' in body  # each line anchored for comments


def test_diff_page_without_choice_and_with_bad_numbers(h, as_user, reviewer):
    client = as_user(reviewer)
    assert "Choose two versions" in client.get(url("diff", SLUG)).content.decode()
    response = client.get(url("diff", SLUG, a="x", b=2))
    assert response.status_code == 400 and "version numbers" in response.content.decode()


def test_same_version_diff_says_no_differences(h, as_user, reviewer):
    assert "No differences" in as_user(reviewer).get(url("diff", SLUG, a=1, b=1)).content.decode()


# --- new harness -------------------------------------------------------------------------------------------


def test_new_harness_from_demo(db, as_user, manager):
    response = as_user(manager).post(url("new"), {"slug": "demo-room", "name": "Demo room", "source": "demo",
                                                  "change_note": "first"})
    assert response.status_code == 302 and response["Location"] == url("version", "demo-room", 1)
    v1 = HarnessVersion.objects.get(harness__slug="demo-room", number=1)
    assert v1.status == "draft" and v1.author == manager and v1.change_note == "first"


def test_new_harness_from_pasted_json_and_uploaded_yaml(db, as_user, manager, demo_yaml, demo_manifest):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from harness_editor.schemas import manifest_to_json

    client = as_user(manager)
    text = manifest_to_json(demo_manifest("skincare_v2"))
    assert client.post(url("new"), {"slug": "pasted", "name": "P", "source": "paste",
                                    "manifest_text": text}).status_code == 302
    upload = SimpleUploadedFile("m.yaml", demo_yaml("skincare_v3").encode(), content_type="application/yaml")
    assert client.post(url("new"), {"slug": "uploaded", "name": "U", "source": "upload",
                                    "manifest_file": upload}).status_code == 302
    assert HarnessVersion.objects.filter(harness__slug__in=["pasted", "uploaded"]).count() == 2


def test_new_harness_with_invalid_manifest_shows_paths_and_saves_nothing(db, as_user, manager, demo_yaml):
    text = demo_yaml("skincare_v1").replace("kind: reply", "kind: answer", 1)
    response = as_user(manager).post(url("new"), {"slug": "bad", "name": "Bad", "source": "paste",
                                                  "manifest_text": text})
    assert response.status_code == 400
    assert "skills[0].kind" in response.content.decode()
    assert not HarnessVersion.objects.filter(harness__slug="bad").exists()


def test_new_harness_with_taken_slug(h, as_user, manager):
    response = as_user(manager).post(url("new"), {"slug": SLUG, "name": "Again", "source": "demo"})
    assert response.status_code == 400 and "already taken" in response.content.decode()


# --- editor ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tab", ["skills", "tools", "prompt", "hooks", "constraints", "yaml"])
def test_editor_tabs_render_for_the_author(h, as_user, manager, tab):
    response = as_user(manager).get(url("edit", SLUG, 3), {"tab": tab})
    body = response.content.decode()
    assert response.status_code == 200
    assert f'name="lock_version" value="{h["v3"].lock_version}"' in body
    assert 'hx-trigger="input changed delay:400ms' in body and url("validate", SLUG, 3) in body


@pytest.mark.parametrize("tab", ["skills", "tools", "prompt", "hooks", "constraints", "yaml"])
def test_saving_an_unchanged_tab_keeps_the_content(h, as_user, manager, tab):
    v3 = h["v3"]
    response = as_user(manager).post(url("edit", SLUG, 3), editor_post(v3, tab))
    assert response.status_code == 302, response.content.decode()[:3000]
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert after.content_hash == v3.content_hash and after.lock_version == v3.lock_version + 1


def test_edit_saves_and_bumps_lock_version(h, as_user, manager):
    v3 = h["v3"]
    post = editor_post(v3, "skills", **{"skills-0-description": "Prices, stock and specs, from tools only.",
                                        "skills-0-body": "# Price\r\n\r\nAlways call the tool.\r\n",
                                        "change_note": "tighter price skill"})
    response = as_user(manager).post(url("edit", SLUG, 3), post)
    assert response.status_code == 302 and response["Location"] == url("edit", SLUG, 3) + "?tab=skills"
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert after.lock_version == v3.lock_version + 1 and after.change_note == "tighter price skill"
    assert after.manifest.skills[0].description == "Prices, stock and specs, from tools only."
    assert after.manifest.skills[0].body == "# Price\n\nAlways call the tool.\n"  # CRLF normalised


def test_stale_lock_shows_conflict_keeps_input_and_saves_nothing(h, as_user, manager):
    v3 = h["v3"]
    stale = editor_post(v3, "skills", **{"skills-1-description": "My unsaved wording about parcels"})
    stale_lock = v3.lock_version
    # someone (the same author in another tab) saves first
    services.version_save_draft(user=manager, version=v3, manifest=v3.manifest, lock_version=v3.lock_version,
                                change_note="other tab")
    saved = HarnessVersion.objects.get(pk=v3.pk)
    response = as_user(manager).post(url("edit", SLUG, 3), stale)
    body = response.content.decode()
    assert response.status_code == 409
    assert 'data-testid="conflict"' in body and "was saved elsewhere" in body
    assert 'value="My unsaved wording about parcels"' in body  # the user's input is kept
    assert f'name="lock_version" value="{stale_lock}"' in body  # still the stale one: no silent overwrite
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert after.lock_version == saved.lock_version and after.content_hash == saved.content_hash
    assert after.change_note == "other tab"


def test_invalid_input_shows_path_precise_errors_and_saves_nothing(h, as_user, manager):
    v3 = h["v3"]
    post = editor_post(v3, "skills", **{"skills-2-description": "", "skills-0-id": "9bad id"})
    response = as_user(manager).post(url("edit", SLUG, 3), post)
    body = response.content.decode()
    assert response.status_code == 400
    assert "<code>skills[2].description</code>" in body and "<code>skills[0].id</code>" in body
    assert 'value="9bad id"' in body  # input kept
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert after.lock_version == v3.lock_version and after.content_hash == v3.content_hash


def test_invalid_tool_schema_json_and_type_errors_have_paths(h, as_user, manager):
    v3 = h["v3"]
    params = json.loads(editor_post(v3, "tools")["tools-0-parameters"])
    prop = next(iter(params["properties"]))
    params["properties"][prop]["type"] = "int"
    post = editor_post(v3, "tools", **{"tools-0-parameters": json.dumps(params), "tools-1-parameters": "{oops"})
    body = as_user(manager).post(url("edit", SLUG, 3), post).content.decode()
    assert f"<code>tools[0].parameters.properties.{prop}.type</code>" in body
    assert "<code>tools[1].parameters</code>: invalid JSON" in body
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_constraint_and_hook_errors_have_paths(h, as_user, manager):
    v3 = h["v3"]
    c = as_user(manager).post(url("edit", SLUG, 3), editor_post(v3, "constraints", reply_min_chars="900",
                                                                reply_max_chars="abc")).content.decode()
    assert "<code>constraints.reply_max_chars</code>" in c
    hooks = editor_post(v3, "hooks", **{"hooks-0-params": "max_chars: lots\nbogus: 1\n"})
    body = as_user(manager).post(url("edit", SLUG, 3), hooks).content.decode()
    assert "<code>hooks[0].max_chars</code>" in body and "<code>hooks[0].bogus</code>" in body
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_raw_yaml_tab_reports_yaml_errors(h, as_user, manager):
    v3 = h["v3"]
    response = as_user(manager).post(url("edit", SLUG, 3), editor_post(v3, "yaml", yaml="name: [unclosed\n"))
    assert response.status_code == 400 and "invalid YAML" in response.content.decode()
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_row_ops_reorder_add_remove_without_saving(h, as_user, manager):
    v3 = h["v3"]
    client = as_user(manager)
    first, second = v3.manifest.prompt.blocks[0].id, v3.manifest.prompt.blocks[1].id
    response = client.post(url("edit", SLUG, 3), editor_post(v3, "prompt", op="down:0"))
    body = response.content.decode()
    assert response.status_code == 200 and "Not saved yet" in body
    assert body.index(f'value="{second}"') < body.index(f'value="{first}"')
    n = len(v3.manifest.skills)
    body = client.post(url("edit", SLUG, 3), editor_post(v3, "skills", op="add")).content.decode()
    assert f'name="skills-{n}-id"' in body
    body = client.post(url("edit", SLUG, 3), editor_post(v3, "skills", op="remove:0")).content.decode()
    assert f'name="skills-{n - 1}-id"' not in body
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_moving_a_block_and_saving_changes_the_order(h, as_user, manager):
    v3 = h["v3"]
    client = as_user(manager)
    first = v3.manifest.prompt.blocks[0].id
    state = editor_post(v3, "prompt")
    # the page after "down:0" posts its rows back in the new order: emulate by swapping indices 0 and 1
    swapped = dict(state)
    for field in ("id", "role", "title", "content", "items"):
        swapped[f"blocks-0-{field}"], swapped[f"blocks-1-{field}"] = state[f"blocks-1-{field}"], state[f"blocks-0-{field}"]
    assert client.post(url("edit", SLUG, 3), swapped).status_code == 302
    assert HarnessVersion.objects.get(pk=v3.pk).manifest.prompt.blocks[1].id == first


def test_add_hook_of_a_kind_prefills_its_parameters(h, as_user, manager):
    v3 = h["v3"]
    n = len(v3.manifest.hooks)
    body = as_user(manager).post(url("edit", SLUG, 3), editor_post(
        v3, "hooks", op="add", new_hook_kind="viewer_input")).content.decode()
    assert f'name="hooks-{n}-kind"' in body and "max_chars: 300" in body


def test_htmx_validate_returns_partial_with_errors(h, as_user, manager):
    v3 = h["v3"]
    post = editor_post(v3, "skills", **{"skills-1-description": "line one\nline two"})
    response = as_user(manager).post(url("validate", SLUG, 3), post, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body and 'id="live"' in body
    assert "<code>skills[1].description</code>" in body and "single line" in body
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_htmx_validate_returns_updated_preview_without_saving(h, as_user, manager):
    v3 = h["v3"]
    post = editor_post(v3, "skills", **{"skills-0-description": "Freshly typed description XYZZY"})
    response = as_user(manager).post(url("validate", SLUG, 3), post, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert 'data-testid="live-valid"' in body and "Freshly typed description XYZZY" in body
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert after.lock_version == v3.lock_version and "XYZZY" not in after.manifest_json


def test_validate_without_htmx_renders_the_whole_editor(h, as_user, manager):
    v3 = h["v3"]
    response = as_user(manager).post(url("validate", SLUG, 3), editor_post(v3, "constraints"))
    assert response.status_code == 200 and "<html" in response.content.decode()


def test_editor_for_submitted_version_redirects_to_version_page(h, as_user, manager):
    response = as_user(manager).get(url("edit", SLUG, 2))
    assert response.status_code == 302 and response["Location"] == url("version", SLUG, 2)
    response = as_user(manager).post(url("edit", SLUG, 2), editor_post(h["v2"], "skills"))
    assert response.status_code == 302


def test_saving_after_submit_in_another_tab_goes_to_the_version_page(h, as_user, manager):
    v3 = h["v3"]
    post = editor_post(v3, "constraints")
    services.version_submit(user=manager, version=v3)
    response = as_user(manager).post(url("edit", SLUG, 3), post)
    assert response.status_code == 302 and response["Location"] == url("version", SLUG, 3)


def test_non_author_cannot_save_or_validate(h, as_user, manager2):
    v3 = h["v3"]
    client = as_user(manager2)
    assert client.post(url("edit", SLUG, 3), editor_post(v3, "skills")).status_code == 403
    assert client.post(url("validate", SLUG, 3), editor_post(v3, "skills")).status_code == 403
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_missing_lock_version_never_overwrites(h, as_user, manager):
    v3 = h["v3"]
    post = editor_post(v3, "constraints")
    post.pop("lock_version")
    response = as_user(manager).post(url("edit", SLUG, 3), post)
    assert response.status_code == 409
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version


def test_skill_tab_keeps_allowed_tools_order_in_page_order(h, as_user, manager):
    """Browsers post checkboxes in page order, so the checked tools must come first, in the skill's order."""
    import re

    v3 = h["v3"]
    body = as_user(manager).get(url("edit", SLUG, 3), {"tab": "skills"}).content.decode()
    for i, skill in enumerate(v3.manifest.skills):
        checked = re.findall(rf'name="skills-{i}-allowed_tools" value="([^"]+)" checked', body)
        assert checked == skill.allowed_tools
