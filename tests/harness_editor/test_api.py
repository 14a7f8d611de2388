"""The REST API of the harness registry: happy paths for every endpoint, path-precise 400s, conflicts,
token auth, 405s and the OpenAPI schema. Authorization per role is in tests/console/test_authz_matrix_api.py."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from harness_editor.models import Harness, HarnessVersion
from harness_editor.schemas import content_hash, manifest_from_json, manifest_from_yaml, manifest_to_yaml

pytestmark = pytest.mark.django_db



BASE = "/api/harnesses/glow-gadget"


@pytest.fixture
def client_for():
    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def as_manager(client_for, manager):
    return client_for(manager)


@pytest.fixture
def as_reviewer(client_for, reviewer):
    return client_for(reviewer)


@pytest.fixture
def manifest_dict(demo_manifest):
    def load(name: str = "skincare_v1") -> dict:
        return demo_manifest(name).model_dump(mode="json")

    return load


def _bad_tool_type(manifest: dict) -> dict:
    bad = copy.deepcopy(manifest)
    first_param = next(iter(bad["tools"][0]["parameters"]["properties"]))
    bad["tools"][0]["parameters"]["properties"][first_param]["type"] = "int"
    return bad


# --- harnesses -------------------------------------------------------------------------------------------

def test_harness_list(as_reviewer, harness_with_history):
    response = as_reviewer.get("/api/harnesses/")
    assert response.status_code == 200
    [item] = response.json()
    assert item["slug"] == "glow-gadget"
    assert item["name"] == "Glow & Gadget live room"
    assert item["version_count"] == 3
    assert item["latest_number"] == 3
    assert item["labels"] == {"production": 1}
    assert item["created_by"] == "cm_alice"


def test_harness_detail_and_404(as_reviewer, harness_with_history):
    response = as_reviewer.get(f"{BASE}/")
    assert response.status_code == 200
    assert response.json()["labels"] == {"production": 1}
    missing = as_reviewer.get("/api/harnesses/nope/")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"


def test_harness_create_from_json(as_manager, manifest_dict):
    manifest = manifest_dict()
    response = as_manager.post("/api/harnesses/", {
        "slug": "new-room", "name": "New room", "description": "d", "manifest": manifest,
        "change_note": "first cut"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["harness"] == "new-room"
    assert body["number"] == 1
    assert body["status"] == "draft"
    assert body["author"] == "cm_alice"
    assert body["change_note"] == "first cut"
    assert body["lock_version"] == 1
    assert body["manifest"] == manifest
    assert body["content_hash"] == content_hash(manifest_from_json(json.dumps(manifest)))
    assert Harness.objects.get(slug="new-room").description == "d"


def test_harness_create_from_yaml(as_manager, demo_yaml, demo_manifest):
    response = as_manager.post("/api/harnesses/", {
        "slug": "yaml-room", "name": "YAML room", "manifest_yaml": demo_yaml("skincare_v2")}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["content_hash"] == content_hash(demo_manifest("skincare_v2"))
    assert response.json()["change_note"] == "Initial version"


def test_harness_create_duplicate_slug(as_manager, harness_with_history, manifest_dict):
    response = as_manager.post("/api/harnesses/", {
        "slug": "glow-gadget", "name": "again", "manifest": manifest_dict()}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert response.json()["errors"][0]["path"] == "slug"
    assert Harness.objects.count() == 1


@pytest.mark.parametrize("payload, path", [
    ({"name": "x"}, "slug"),
    ({"slug": "bad slug!", "name": "x"}, "slug"),
    ({"slug": "ok"}, "name"),
])
def test_harness_create_field_errors(as_manager, manifest_dict, payload, path):
    response = as_manager.post("/api/harnesses/", {**payload, "manifest": manifest_dict()}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert [e["path"] for e in body["errors"]] == [path]


def test_harness_create_manifest_errors(as_manager, manifest_dict, demo_yaml):
    neither = as_manager.post("/api/harnesses/", {"slug": "a", "name": "a"}, format="json")
    assert neither.status_code == 400 and neither.json()["errors"][0]["path"] == "manifest"
    both = as_manager.post("/api/harnesses/", {"slug": "a", "name": "a", "manifest": manifest_dict(),
                                               "manifest_yaml": demo_yaml()}, format="json")
    assert both.status_code == 400 and both.json()["errors"][0]["path"] == "manifest_yaml"
    invalid = as_manager.post("/api/harnesses/", {"slug": "a", "name": "a",
                                                  "manifest": _bad_tool_type(manifest_dict())}, format="json")
    assert invalid.status_code == 400
    assert invalid.json()["code"] == "invalid_manifest"
    assert invalid.json()["errors"][0]["path"] == "tools[0].parameters.properties.link_id.type"
    assert not Harness.objects.exists()


@pytest.mark.parametrize("body", [
    {"manifest": None}, {"manifest": 5}, {"manifest": []}, {"manifest": "name: x"},
    {"manifest_yaml": ""}, {"manifest_yaml": "a: [unclosed"}, {"manifest_yaml": "- just\n- a list"},
    {"manifest_yaml": "{}"}, {"manifest": {"name": "x", "skills": "nope"}},
])
def test_bad_manifests_are_400_never_500(as_manager, body):
    response = as_manager.post("/api/harnesses/", {"slug": "a", "name": "a", **body}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"], response.json()
    assert not Harness.objects.exists()


def test_malformed_request_bodies(as_manager):
    not_json = as_manager.post("/api/harnesses/", "{not json", content_type="application/json")
    assert not_json.status_code == 400
    assert not_json.json()["code"] == "parse_error"
    a_list = as_manager.post("/api/harnesses/", [1, 2], format="json")
    assert a_list.status_code == 400


# --- versions --------------------------------------------------------------------------------------------

def test_version_list_newest_first_without_manifest(as_reviewer, harness_with_history):
    response = as_reviewer.get(f"{BASE}/versions/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    numbers = [v["number"] for v in body["results"]]
    assert numbers == [3, 2, 1]
    v3, v2, v1 = body["results"]
    assert "manifest" not in v1 and "manifest_json" not in v1
    assert set(v1) == {"number", "status", "author", "parent", "change_note", "content_hash", "created_at",
                       "submitted_at", "decided_at", "decided_by", "decision_comment", "labels"}
    assert (v1["status"], v2["status"], v3["status"]) == ("approved", "submitted", "draft")
    assert (v1["parent"], v2["parent"], v3["parent"]) == (None, 1, 2)
    assert v1["labels"] == ["production"] and v2["labels"] == [] and v3["labels"] == []
    assert v1["decided_by"] == "cr_carol" and v1["decision_comment"] == "checked claims"
    assert v2["submitted_at"] and v2["decided_at"] is None and v2["decided_by"] is None
    assert v3["change_note"] == "tool rename"


def test_version_list_pagination(as_reviewer, harness_with_history):
    body = as_reviewer.get(f"{BASE}/versions/?limit=2").json()
    assert [v["number"] for v in body["results"]] == [3, 2]
    assert body["next"] and body["previous"] is None
    page2 = as_reviewer.get(f"{BASE}/versions/?limit=2&offset=2").json()
    assert [v["number"] for v in page2["results"]] == [1]
    assert as_reviewer.get("/api/harnesses/nope/versions/").status_code == 404


def test_version_detail(as_reviewer, harness_with_history, demo_manifest):
    response = as_reviewer.get(f"{BASE}/versions/2/")
    assert response.status_code == 200
    body = response.json()
    assert body["number"] == 2 and body["parent"] == 1 and body["status"] == "submitted"
    assert body["lock_version"] == 1
    assert body["manifest"] == demo_manifest("skincare_v2").model_dump(mode="json")
    # key order of the stored canonical JSON survives (JSON Schema property order matters to the model)
    assert list(body["manifest"]) == list(json.loads(harness_with_history["v2"].manifest_json))
    assert as_reviewer.get(f"{BASE}/versions/99/").status_code == 404
    assert as_reviewer.get("/api/harnesses/nope/versions/1/").status_code == 404


def test_create_draft_from_parent(as_manager, harness_with_history, demo_yaml, demo_manifest):
    response = as_manager.post(f"{BASE}/versions/", {
        "parent": 1, "manifest_yaml": demo_yaml("skincare_v2"), "change_note": "try again"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["number"], body["parent"], body["status"]) == (4, 1, "draft")
    assert body["content_hash"] == content_hash(demo_manifest("skincare_v2"))
    no_parent = as_manager.post(f"{BASE}/versions/", {"manifest": demo_manifest().model_dump(mode="json")},
                                format="json")
    assert no_parent.status_code == 201 and no_parent.json()["parent"] is None


def test_create_draft_unknown_parent(as_manager, harness_with_history, manifest_dict):
    response = as_manager.post(f"{BASE}/versions/", {"parent": 42, "manifest": manifest_dict()}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "parent"
    assert HarnessVersion.objects.count() == 3


def test_save_draft(as_manager, harness_with_history, manifest_dict):
    manifest = manifest_dict("skincare_v3")
    manifest["constraints"]["reply_max_chars"] = 180
    response = as_manager.patch(f"{BASE}/versions/3/", {
        "manifest": manifest, "lock_version": 1, "change_note": "shorter replies"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["lock_version"] == 2
    assert body["change_note"] == "shorter replies"
    assert body["manifest"]["constraints"]["reply_max_chars"] == 180
    assert body["content_hash"] != harness_with_history["v3"].content_hash
    # change note only: the manifest stays as it is
    note_only = as_manager.patch(f"{BASE}/versions/3/", {"lock_version": 2, "change_note": "n"}, format="json")
    assert note_only.status_code == 200
    assert note_only.json()["lock_version"] == 3
    assert note_only.json()["content_hash"] == body["content_hash"]


def test_save_draft_from_yaml(as_manager, harness_with_history, demo_yaml, demo_manifest):
    response = as_manager.patch(f"{BASE}/versions/3/", {
        "manifest_yaml": demo_yaml("skincare_v1"), "lock_version": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["content_hash"] == content_hash(demo_manifest("skincare_v1"))
    assert response.json()["change_note"] == "tool rename"


def test_save_draft_invalid_tool_schema_is_path_precise_and_saves_nothing(as_manager, harness_with_history,
                                                                          manifest_dict):
    v3 = harness_with_history["v3"]
    response = as_manager.patch(f"{BASE}/versions/3/", {
        "manifest": _bad_tool_type(manifest_dict("skincare_v3")), "lock_version": 1, "change_note": "x"},
        format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_manifest"
    assert body["errors"][0]["path"].startswith("tools[0].parameters.properties.")
    assert body["errors"][0]["path"].endswith(".type")
    assert body["errors"][0]["message"]
    fresh = HarnessVersion.objects.get(pk=v3.pk)
    assert (fresh.lock_version, fresh.content_hash, fresh.manifest_json, fresh.change_note) == (
        1, v3.content_hash, v3.manifest_json, "tool rename")


def test_save_draft_reports_every_error_with_its_path(as_manager, harness_with_history, manifest_dict):
    manifest = manifest_dict("skincare_v3")
    manifest["skills"][0]["kind"] = "sideways"
    manifest["constraints"]["reply_max_chars"] = "long"
    response = as_manager.patch(f"{BASE}/versions/3/", {"manifest": manifest, "lock_version": 1}, format="json")
    assert response.status_code == 400
    paths = {e["path"] for e in response.json()["errors"]}
    assert {"skills[0].kind", "constraints.reply_max_chars"} <= paths


def test_save_draft_stale_lock_version_is_409(as_manager, harness_with_history, manifest_dict):
    first = as_manager.patch(f"{BASE}/versions/3/", {"lock_version": 1, "change_note": "first"}, format="json")
    assert first.status_code == 200
    stale = as_manager.patch(f"{BASE}/versions/3/", {
        "manifest": manifest_dict("skincare_v1"), "lock_version": 1, "change_note": "second"}, format="json")
    assert stale.status_code == 409
    body = stale.json()
    assert body["code"] == "edit_conflict"
    assert body["current_lock_version"] == 2
    assert body["detail"]
    fresh = HarnessVersion.objects.get(pk=harness_with_history["v3"].pk)
    assert (fresh.lock_version, fresh.change_note) == (2, "first")
    assert fresh.content_hash == harness_with_history["v3"].content_hash


def test_save_draft_requires_lock_version(as_manager, harness_with_history):
    response = as_manager.patch(f"{BASE}/versions/3/", {"change_note": "x"}, format="json")
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == ["lock_version"]
    not_int = as_manager.patch(f"{BASE}/versions/3/", {"lock_version": "abc"}, format="json")
    assert not_int.status_code == 400


def test_save_non_draft_is_409(as_manager, harness_with_history):
    response = as_manager.patch(f"{BASE}/versions/1/", {"lock_version": 1, "change_note": "x"}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "invalid_transition"


def test_discard_draft(as_manager, harness_with_history):
    response = as_manager.delete(f"{BASE}/versions/3/")
    assert response.status_code == 204
    assert as_manager.get(f"{BASE}/versions/3/").status_code == 404
    approved = as_manager.delete(f"{BASE}/versions/1/")
    assert approved.status_code == 409
    assert HarnessVersion.objects.filter(number=1).exists()


@pytest.mark.parametrize("fmt, content_type", [("yaml", "text/yaml"), ("json", "application/json")])
def test_export(as_reviewer, harness_with_history, fmt, content_type):
    response = as_reviewer.get(f"{BASE}/versions/2/export/?as={fmt}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith(content_type)
    assert response["Content-Disposition"] == f'attachment; filename="glow-gadget-v2.{fmt}"'
    text = response.content.decode()
    parsed = manifest_from_yaml(text) if fmt == "yaml" else manifest_from_json(text)
    assert content_hash(parsed) == harness_with_history["v2"].content_hash


def test_export_defaults_to_yaml_and_rejects_unknown_format(as_reviewer, harness_with_history):
    response = as_reviewer.get(f"{BASE}/versions/1/export/")
    assert response.status_code == 200
    assert response.content.decode() == manifest_to_yaml(harness_with_history["v1"].manifest)
    bad = as_reviewer.get(f"{BASE}/versions/1/export/?as=xml")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "as"
    assert as_reviewer.get(f"{BASE}/versions/9/export/").status_code == 404


# --- transitions -----------------------------------------------------------------------------------------

def test_submit_approve(as_manager, as_reviewer, harness_with_history):
    submitted = as_manager.post(f"{BASE}/versions/3/submit", {"comment": "ready"}, format="json")
    assert submitted.status_code == 200, submitted.json()
    assert submitted.json()["status"] == "submitted" and submitted.json()["submitted_at"]
    approved = as_reviewer.post(f"{BASE}/versions/3/approve", {"comment": "ok"}, format="json")
    assert approved.status_code == 200
    body = approved.json()
    assert (body["status"], body["decided_by"], body["decision_comment"]) == ("approved", "cr_carol", "ok")
    # approving again is not a valid transition
    again = as_reviewer.post(f"{BASE}/versions/3/approve", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"


def test_reject_needs_a_comment(as_reviewer, harness_with_history):
    missing = as_reviewer.post(f"{BASE}/versions/2/reject", {"comment": "  "}, format="json")
    assert missing.status_code == 400
    assert missing.json()["errors"] == [{"path": "comment", "message": missing.json()["errors"][0]["message"]}]
    assert HarnessVersion.objects.get(pk=harness_with_history["v2"].pk).status == "submitted"
    rejected = as_reviewer.post(f"{BASE}/versions/2/reject", {"comment": "claims too strong"}, format="json")
    assert rejected.status_code == 200
    assert rejected.json()["status"] == "rejected"


def test_approve_a_draft_is_409(as_reviewer, harness_with_history):
    response = as_reviewer.post(f"{BASE}/versions/3/approve", {}, format="json")
    assert response.status_code == 409
    assert as_reviewer.post(f"{BASE}/versions/99/approve", {}, format="json").status_code == 404


# --- render and diff -------------------------------------------------------------------------------------

def test_render(as_reviewer, harness_with_history):
    response = as_reviewer.get(f"{BASE}/versions/1/render")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"messages", "tools", "system_text", "token_estimate"}
    assert body["messages"][0]["role"] == "system"
    assert body["system_text"]
    tool_names = {t["function"]["name"] for t in body["tools"]}
    assert "lookup_product" in tool_names
    assert body["token_estimate"] > 0
    with_comment = as_reviewer.get(f"{BASE}/versions/1/render", {"comment": "how much is #101?"}).json()
    assert with_comment["messages"][-1] == {"role": "user", "content": "[viewer] how much is #101?"}


def test_render_with_demo_room(as_reviewer, harness_with_history):
    plain = as_reviewer.get(f"{BASE}/versions/1/render").json()
    with_room = as_reviewer.get(f"{BASE}/versions/1/render?room=demo")
    assert with_room.status_code == 200
    assert with_room.json()["system_text"] != plain["system_text"]
    assert as_reviewer.get(f"{BASE}/versions/1/render?room=mars").status_code == 400
    assert as_reviewer.get(f"{BASE}/versions/7/render").status_code == 404


def test_diff(as_reviewer, harness_with_history):
    response = as_reviewer.get(f"{BASE}/diff/?from=2&to=3")
    assert response.status_code == 200
    body = response.json()
    assert (body["from"], body["to"]) == (2, 3)
    assert body["changes"]
    assert body["breaking"] is True  # v3 renames tools
    assert any(c["breaking"] for c in body["changes"])
    change = body["changes"][0]
    assert {"component", "kind", "key", "path", "summary", "breaking", "before", "after", "text_diff"} <= set(change)
    assert sum(body["summary"].values()) == len(body["changes"])
    assert isinstance(change["text_diff"], list)
    same = as_reviewer.get(f"{BASE}/diff/?from=1&to=1").json()
    assert same["changes"] == [] and same["breaking"] is False


@pytest.mark.parametrize("query, status_code", [
    ("", 400), ("?from=1", 400), ("?to=2", 400), ("?from=a&to=2", 400), ("?from=1&to=2.5", 400),
    ("?from=1&to=99", 404), ("?from=99&to=1", 404),
])
def test_diff_bad_params(as_reviewer, harness_with_history, query, status_code):
    response = as_reviewer.get(f"{BASE}/diff/{query}")
    assert response.status_code == status_code
    if status_code == 400:
        assert response.json()["errors"][0]["path"] in ("from", "to")


# --- labels ----------------------------------------------------------------------------------------------

def _approve(manager, reviewer, version):
    from harness_editor import services

    if version.status == "draft":
        version = services.version_submit(user=manager, version=version)
    return services.version_approve(user=reviewer, version=version)


def test_labels_list_move_rollback_history(as_reviewer, harness_with_history, manager, reviewer):
    _approve(manager, reviewer, harness_with_history["v2"])
    listed = as_reviewer.get(f"{BASE}/labels/")
    assert listed.status_code == 200
    assert [(x["name"], x["version"]) for x in listed.json()] == [("production", 1)]

    moved = as_reviewer.put(f"{BASE}/labels/production/", {"version": 2, "comment": "ship v2"}, format="json")
    assert moved.status_code == 200, moved.json()
    assert moved.json()["version"] == 2 and moved.json()["moved_by"] == "cr_carol"
    assert as_reviewer.get(f"{BASE}/labels/production/").json()["version"] == 2

    rolled = as_reviewer.post(f"{BASE}/labels/production/rollback", {"comment": "bad replies"}, format="json")
    assert rolled.status_code == 200
    assert rolled.json()["version"] == 1

    history = as_reviewer.get(f"{BASE}/labels/production/history")
    assert history.status_code == 200
    rows = history.json()["results"]
    assert [(r["from_state"], r["to_state"], r["rollback"]) for r in rows] == [
        ("v2", "v1", True), ("v1", "v2", False), ("", "v1", False)]
    assert rows[0]["comment"] == "bad replies" and rows[1]["comment"] == "ship v2"


def test_new_label_is_created_on_first_move(as_manager, harness_with_history):
    response = as_manager.put(f"{BASE}/labels/room:42/", {"version": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["name"] == "room:42"
    assert as_manager.get("/api/harnesses/").json()[0]["labels"] == {"production": 1, "room:42": 1}


@pytest.mark.parametrize("number", [2, 3])
def test_only_approved_versions_carry_a_label(as_reviewer, harness_with_history, number):
    response = as_reviewer.put(f"{BASE}/labels/production/", {"version": number}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "version"
    assert "approved" in response.json()["errors"][0]["message"]
    assert harness_with_history["harness"].labels.get(name="production").version.number == 1


def test_label_move_errors(as_reviewer, harness_with_history):
    unknown_version = as_reviewer.put(f"{BASE}/labels/production/", {"version": 77}, format="json")
    assert unknown_version.status_code == 400 and unknown_version.json()["errors"][0]["path"] == "version"
    bad_name = as_reviewer.put(f"{BASE}/labels/Prod!/", {"version": 1}, format="json")
    assert bad_name.status_code == 400 and bad_name.json()["errors"][0]["path"] == "name"
    same = as_reviewer.put(f"{BASE}/labels/production/", {"version": 1}, format="json")
    assert same.status_code == 400
    missing_body = as_reviewer.put(f"{BASE}/labels/production/", {}, format="json")
    assert missing_body.status_code == 400 and missing_body.json()["errors"][0]["path"] == "version"
    assert as_reviewer.put("/api/harnesses/nope/labels/production/", {"version": 1},
                           format="json").status_code == 404


def test_rollback_without_history_is_400(as_reviewer, harness_with_history):
    response = as_reviewer.post(f"{BASE}/labels/production/rollback", {}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "name"


def test_unknown_label_is_404(as_reviewer, harness_with_history):
    assert as_reviewer.get(f"{BASE}/labels/staging/").status_code == 404
    assert as_reviewer.get(f"{BASE}/labels/staging/history").status_code == 404
    assert as_reviewer.post(f"{BASE}/labels/staging/rollback", {}, format="json").status_code == 404


# --- validate --------------------------------------------------------------------------------------------

def test_validate(as_manager, manifest_dict, demo_yaml, demo_manifest):
    ok = as_manager.post("/api/validate", {"manifest": manifest_dict()}, format="json")
    assert ok.status_code == 200
    assert ok.json() == {"valid": True, "content_hash": content_hash(demo_manifest())}
    ok_yaml = as_manager.post("/api/validate", {"manifest_yaml": demo_yaml("skincare_v3")}, format="json")
    assert ok_yaml.json()["content_hash"] == content_hash(demo_manifest("skincare_v3"))
    bad = as_manager.post("/api/validate", {"manifest": _bad_tool_type(manifest_dict())}, format="json")
    assert bad.status_code == 400
    assert bad.json()["code"] == "invalid_manifest"
    assert bad.json()["errors"][0]["path"] == "tools[0].parameters.properties.link_id.type"
    broken_yaml = as_manager.post("/api/validate", {"manifest_yaml": "name: [x"}, format="json")
    assert broken_yaml.status_code == 400
    assert "line" in broken_yaml.json()["errors"][0]["message"]
    dup = as_manager.post("/api/validate", {"manifest_yaml": demo_yaml() + "\nname: twice\n"}, format="json")
    assert dup.status_code == 400 and dup.json()["errors"][0]["path"] == "name"


# --- auth, methods, schema -------------------------------------------------------------------------------

def test_token_auth(client_for, manager, harness_with_history):
    anonymous = client_for()
    denied = anonymous.get("/api/harnesses/")
    assert denied.status_code == 401
    assert denied["WWW-Authenticate"] == "Token"
    assert denied.json()["code"] == "not_authenticated"
    token = anonymous.post("/api/auth/token/", {"username": "cm_alice", "password": "correct-horse-battery"},
                           format="json")
    assert token.status_code == 200
    key = token.json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/harnesses/").status_code == 200
    created = client.post(f"{BASE}/versions/", {"parent": 1, "manifest_yaml": yaml.safe_dump({"x": 1})},
                          format="json")
    assert created.status_code == 400  # reached the parser: token auth needs no CSRF token
    wrong = anonymous.post("/api/auth/token/", {"username": "cm_alice", "password": "nope"}, format="json")
    assert wrong.status_code == 400
    bad_token = APIClient()
    bad_token.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert bad_token.get("/api/harnesses/").status_code == 401


def test_session_auth_enforces_csrf(manager, harness_with_history):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(manager)
    assert client.get("/api/harnesses/").status_code == 200
    response = client.post(f"{BASE}/versions/3/submit", {}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


@pytest.mark.parametrize("method, url", [
    ("put", "/api/harnesses/"),
    ("delete", f"{BASE}/"),
    ("post", f"{BASE}/versions/1/"),
    ("get", f"{BASE}/versions/1/submit"),
    ("delete", f"{BASE}/versions/1/approve"),
    ("post", f"{BASE}/diff/?from=1&to=2"),
    ("post", f"{BASE}/labels/"),
    ("delete", f"{BASE}/labels/production/"),
    ("get", f"{BASE}/labels/production/rollback"),
    ("get", "/api/validate"),
    ("post", "/api/audit/"),
    ("get", "/api/auth/token/"),
])
def test_wrong_method_is_405(as_manager, harness_with_history, method, url):
    response = getattr(as_manager, method)(url, {}, format="json") if method != "get" else as_manager.get(url)
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_openapi_schema_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    paths = schema["paths"]
    for expected in ["/api/harnesses/", "/api/harnesses/{slug}/versions/{number}/",
                     "/api/harnesses/{slug}/versions/{number}/submit", "/api/harnesses/{slug}/diff/",
                     "/api/harnesses/{slug}/labels/{name}/rollback", "/api/audit/", "/api/validate",
                     "/api/auth/token/"]:
        assert expected in paths
    version_list = paths["/api/harnesses/{slug}/versions/"]["get"]
    assert {p["name"] for p in version_list["parameters"]} >= {"limit", "offset", "slug"}


def test_schema_endpoint_and_docs(client_for, reviewer):
    client = client_for(reviewer)
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html
    assert "cdn" not in html.lower()  # served from drf-spectacular-sidecar's static files
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html


def test_oversized_manifest_is_400(as_manager):
    huge = "name: x\ndescription: '" + "a" * 1_100_000 + "'\n"
    response = as_manager.post("/api/validate", {"manifest_yaml": huge}, format="json")
    assert response.status_code == 400
    assert "larger than" in response.json()["errors"][0]["message"]


def test_version_list_query_count_does_not_grow(as_reviewer, harness_with_history, manager, demo_manifest):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from harness_editor import services

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert as_reviewer.get(f"{BASE}/versions/").status_code == 200
        return len(ctx.captured_queries)

    before = queries()
    parent = harness_with_history["v3"]
    for _ in range(12):
        parent = services.version_create_draft(user=manager, harness=parent.harness, manifest=demo_manifest(),
                                               parent=parent)
    assert queries() == before
