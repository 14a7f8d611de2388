"""Eval-set pages: every role's answer on each page, import by paste and by upload (errors with their line and
field, nothing saved), the case table's filters and pages (a page and its htmx fragment), a case, the download, the
pin, and "save as eval case" from a preview transcript."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.models import AuditEvent
from training_jobs import eval_services as services
from training_jobs.eval_models import EvalSet, EvalSetVersion
from tests.training_jobs.eval_helpers import (  # noqa: F401
    GOOD, canonical_jsonl, preview_turn, scripted_endpoint, scripted_model, t1_case, t4_case)

pytestmark = pytest.mark.django_db

ROLES = ["manager", "reviewer", "ml_staff", "ml_lead", "operator", "outsider", "anonymous"]


@pytest.fixture
def world(ml_staff):
    cases = [t1_case(i, tags=["price", "typo"] if i % 2 else ["stock"]) for i in range(30)]
    v1, _ = services.eval_set_import(user=ml_staff, name="t1-demo", kind="t1", jsonl_text=canonical_jsonl(cases[:3]),
                                     note="first")
    v2, _ = services.eval_set_import(user=ml_staff, name="t1-demo", kind="t1", jsonl_text=canonical_jsonl(cases),
                                     note="thirty")
    t4, _ = services.eval_set_import(user=ml_staff, name="t4-mini", kind="t4", note="",
                                     jsonl_text=canonical_jsonl([t4_case(1), t4_case(2, "detectable_format:title")]))
    return {"v1": v1, "v2": v2, "t4": t4}


def _client(request, role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


READ_PAGES = ["/eval-sets/", "/eval-sets/t1-demo/", "/eval-sets/t1-demo/v2/", "/eval-sets/t1-demo/v2/cases/t1-001/",
              "/eval-sets/t1-demo/v1/export/", "/eval-sets/t4-mini/v1/cases/ifeval-2/"]


@pytest.mark.parametrize("role", ROLES)
def test_every_role_on_the_read_pages(request, world, role):
    client = _client(request, role)
    for path in READ_PAGES:
        response = client.get(path)
        if role == "anonymous":
            assert response.status_code == 302 and "/accounts/login/" in response["Location"], path
        elif role == "outsider":
            assert response.status_code == 403, path
        else:
            assert response.status_code == 200, (role, path)


@pytest.mark.parametrize("role,status", [("manager", 403), ("reviewer", 403), ("ml_staff", 200), ("ml_lead", 200),
                                         ("operator", 403), ("outsider", 403), ("anonymous", 302)])
def test_who_may_import(request, world, role, status):
    client = _client(request, role)
    assert client.get("/eval-sets/import/").status_code == status
    response = client.post("/eval-sets/import/", {"name": "new-set", "kind": "t1",
                                                  "jsonl": canonical_jsonl([t1_case(1)])})
    assert response.status_code == (302 if status == 200 else status)
    assert EvalSet.objects.filter(name="new-set").exists() == (status == 200)


@pytest.mark.parametrize("role,status", [("manager", 403), ("reviewer", 403), ("ml_staff", 403), ("ml_lead", 302),
                                         ("operator", 403), ("outsider", 403), ("anonymous", 302)])
def test_who_may_pin(request, world, role, status):
    response = _client(request, role).post("/eval-sets/t1-demo/pin/", {"number": "2"})
    assert response.status_code == status
    assert (EvalSet.objects.get(name="t1-demo").pinned_id == world["v2"].pk) == (role == "ml_lead")


def test_missing_things_are_404(client, ml_staff, world):
    client.force_login(ml_staff)
    for path in ["/eval-sets/nope/", "/eval-sets/t1-demo/v9/", "/eval-sets/t1-demo/v2/cases/nope/",
                 "/eval-sets/t1-demo/v9/export/", "/eval-sets/nope/v1/"]:
        assert client.get(path).status_code == 404, path


def test_list_shows_latest_version_hash_and_pin(client, reviewer, ml_lead, world):
    services.eval_set_pin(user=ml_lead, eval_set=world["v1"].eval_set, version=world["v1"])
    client.force_login(reviewer)
    html = client.get("/eval-sets/").content.decode()
    assert 'data-name="t1-demo"' in html and "/eval-sets/t1-demo/v2/" in html
    assert world["v2"].content_hash[:10] in html and 'data-testid="pinned">v1<' in html
    assert "Import a set" not in html  # a reviewer browses, does not import
    assert 'href="/eval-sets/">Evaluations</a>' in html  # the nav entry


def test_import_by_paste_then_the_same_again(client, ml_staff):
    client.force_login(ml_staff)
    text = canonical_jsonl([t1_case(1), t1_case(2)])
    response = client.post("/eval-sets/import/", {"name": "pasted", "kind": "t1", "jsonl": text, "note": "by hand"})
    version = EvalSetVersion.objects.get(eval_set__name="pasted")
    assert response.status_code == 302 and response["Location"] == "/eval-sets/pasted/v1/"
    assert version.change_note == "by hand" and version.author == ml_staff
    response = client.post("/eval-sets/import/", {"name": "pasted", "kind": "t1", "jsonl": text}, follow=True)
    assert "already pasted v1: no new version" in response.content.decode()
    assert EvalSetVersion.objects.filter(eval_set__name="pasted").count() == 1


def test_import_by_upload(client, ml_staff):
    client.force_login(ml_staff)
    upload = SimpleUploadedFile("cases.jsonl", canonical_jsonl([t4_case(5)]).encode(), "application/x-ndjson")
    response = client.post("/eval-sets/import/", {"name": "uploaded", "kind": "t4", "file": upload})
    assert response.status_code == 302
    assert EvalSetVersion.objects.get(eval_set__name="uploaded").case_count == 1


def test_import_errors_show_line_and_field_and_save_nothing(client, ml_staff):
    client.force_login(ml_staff)
    bad = t1_case(2)
    bad["comments"] = []
    text = canonical_jsonl([t1_case(1)]) + '{"id": "x"\n' + __import__("json").dumps(bad) + "\n"
    response = client.post("/eval-sets/import/", {"name": "broken", "kind": "t1", "jsonl": text})
    html = response.content.decode()
    assert response.status_code == 400
    assert "<code>line 2</code>" in html and "<code>line 3.comments</code>" in html
    response = client.post("/eval-sets/import/", {"name": "Bad Name", "kind": "t1", "jsonl": canonical_jsonl([t1_case(1)])})
    assert response.status_code == 400 and "lowercase letters" in response.content.decode()
    response = client.post("/eval-sets/import/", {"name": "empty", "kind": "t1", "jsonl": ""})
    assert response.status_code == 400 and "paste the cases or upload a file" in response.content.decode()
    assert not EvalSet.objects.exists()


def test_case_table_filters_and_pages(client, operator, world):
    client.force_login(operator)
    html = client.get("/eval-sets/t1-demo/v2/").content.decode()
    assert "30 cases" in html and html.count('data-testid="case-row"') == 25 and 'data-testid="next-page"' in html
    html = client.get("/eval-sets/t1-demo/v2/?tag=typo").content.decode()
    assert "15 cases match the filters" in html and html.count('data-testid="case-row"') == 15
    assert 'data-case="t1-001"' in html and 'data-case="t1-002"' not in html
    # the htmx request gets the table only, with the filters kept in the page links
    fragment = client.get("/eval-sets/t1-demo/v2/?tag=stock&page=1", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section id="cases"') and "<html" not in fragment
    assert "15 cases match" in fragment
    html = client.get("/eval-sets/t1-demo/v2/?q=(29)").content.decode()
    assert html.count('data-testid="case-row"') == 1 and 'data-case="t1-029"' in html
    html = client.get("/eval-sets/t1-demo/v2/?tool=catalog.product_info&claim=efficacy&page=2").content.decode()
    assert "page 2 of 2" in html and "tool=catalog.product_info" in html
    # unknown filter values and pages are ignored, not errors
    assert client.get("/eval-sets/t1-demo/v2/?tag=nonsense&claim=zzz&page=99").status_code == 200


def test_t4_table_and_case(client, reviewer, world):
    client.force_login(reviewer)
    html = client.get("/eval-sets/t4-mini/v1/?instruction_group=detectable_format").content.decode()
    assert html.count('data-testid="case-row"') == 1 and "detectable_format:title" in html
    html = client.get("/eval-sets/t4-mini/v1/cases/ifeval-1/").content.decode()
    assert "Write a haiku number 1 without commas." in html and "punctuation:no_comma" in html


def test_case_page_shows_room_comments_facts_calls_and_claims(client, manager, world):
    client.force_login(manager)
    html = client.get("/eval-sets/t1-demo/v2/cases/t1-003/").content.decode()
    for needle in ("how much is the serum?? (3)", "HydraGlow Hyaluronic Serum 30 ml", "catalog.product_info",
                   "heals acne", "price_stock_qa", 'data-testid="gold-facts"', "skincare_v1"):
        assert needle in html, needle
    assert "/eval-sets/t1-demo/v2/cases/t1-002/" in html and "/eval-sets/t1-demo/v2/cases/t1-004/" in html


def test_download_is_the_version_bytes(client, operator, world):
    client.force_login(operator)
    response = client.get("/eval-sets/t1-demo/v2/export/")
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert 'filename="t1-demo-v2.jsonl"' in response["Content-Disposition"]
    assert response.content == services.eval_set_export(version=world["v2"]).encode()


def test_pin_and_unpin_from_the_set_page(client, ml_lead, world):
    client.force_login(ml_lead)
    html = client.get("/eval-sets/t1-demo/").content.decode()
    assert html.count('data-testid="pin"') == 2
    assert client.post("/eval-sets/t1-demo/pin/", {"number": "1"}).status_code == 302
    assert EvalSet.objects.get(name="t1-demo").pinned == world["v1"]
    assert client.post("/eval-sets/t1-demo/pin/", {"number": "7"}).status_code == 400
    assert client.post("/eval-sets/t1-demo/pin/", {"number": "x"}).status_code == 400
    assert client.post("/eval-sets/t1-demo/pin/", {"number": ""}).status_code == 302
    assert EvalSet.objects.get(name="t1-demo").pinned is None


# --- save as eval case ---------------------------------------------------------------------------------------------


def test_transcript_offers_save_as_case_to_those_who_may(client, preview_turn, manager, reviewer, ml_staff):
    room, turn_id = preview_turn
    client.force_login(manager)
    html = client.get(f"/preview/{room.pk}/transcript/").content.decode()
    assert f'href="/eval-sets/save-turn/{room.pk}/{turn_id}/" data-testid="save-as-case"' in html
    html = client.get(f"/preview/{room.pk}/").content.decode()
    assert f'data-save-case="/eval-sets/save-turn/{room.pk}/TURN_ID/"' in html  # the live room's script adds it
    room.members.add(reviewer)
    client.force_login(reviewer)
    html = client.get(f"/preview/{room.pk}/transcript/").content.decode()
    assert "save-as-case" not in html and "data-save-case" not in client.get(f"/preview/{room.pk}/").content.decode()


@pytest.mark.parametrize("role,status", [("manager", 200), ("manager2", 404), ("ml_staff", 404), ("reviewer", 403),
                                         ("operator", 403), ("outsider", 403), ("anonymous", 302)])
def test_who_may_open_the_save_form(request, preview_turn, role, status):
    room, turn_id = preview_turn
    client = _client(request, role)
    assert client.get(f"/eval-sets/save-turn/{room.pk}/{turn_id}/").status_code == status
    response = client.post(f"/eval-sets/save-turn/{room.pk}/{turn_id}/", {"set_name": "regressions",
                                                                          "gold_reply": "It is $24.9."})
    assert response.status_code == (302 if status == 200 else status)
    assert EvalSet.objects.filter(name="regressions").exists() == (status == 200)


def test_save_form_shows_the_turn_and_saves_the_edited_reply(client, preview_turn, manager):
    room, turn_id = preview_turn
    client.force_login(manager)
    url = f"/eval-sets/save-turn/{room.pk}/{turn_id}/"
    html = client.get(url).content.decode()
    assert "how much is #101? and stock??" in html and "lookup_product" in html and GOOD in html
    assert f"{GOOD}</textarea>" in html  # the gold reply starts as the avatar's reply
    assert client.get(f"/eval-sets/save-turn/{room.pk}/{'0' * 32}/").status_code == 404
    # a bad claim line and a bad tag come back on their fields; nothing saved
    response = client.post(url, {"set_name": "regressions", "gold_reply": "It is $24.9.",
                                 "forbidden_claims": "lies: it cures", "tags": "Bad Tag!"})
    assert response.status_code == 400 and "unknown kind" in response.content.decode()
    response = client.post(url, {"set_name": "regressions", "gold_reply": "It is $24.9.", "tags": "Bad!"})
    assert response.status_code == 400 and "tags[0]" in response.content.decode()
    assert not EvalSet.objects.exists()
    response = client.post(url, {"set_name": "regressions", "gold_reply": "HydraGlow is $24.9 today, 180 left.",
                                 "forbidden_claims": "efficacy: it heals scars\nfalse_stock: sold out",
                                 "tags": "price, regression", "note": "keep"})
    case_url = f"/eval-sets/regressions/v1/cases/turn-{turn_id}/"
    assert response.status_code == 302 and response["Location"] == case_url
    html = client.get(case_url).content.decode()
    assert "HydraGlow is $24.9 today, 180 left." in html and "it heals scars" in html and "sold out" in html
    assert "glow-gadget@1" in html
    assert AuditEvent.objects.filter(action="eval_case.saved_from_turn", actor=manager).count() == 1
    response = client.post(url, {"set_name": "regressions", "gold_reply": "again"})  # once per set
    assert response.status_code == 400 and "already saved" in response.content.decode()
