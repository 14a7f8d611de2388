"""The manifest's own JSON Schema (generated from the models) in the OpenAPI document and at GET
/api/manifest-schema, and the binding catalog at GET /api/bindings; both read APIs checked by role."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from harness_editor.schemas import load_yaml
from harness_editor.schemas.bindings import BUILTIN_BINDINGS
from harness_editor.schemas.json_schema import (
    manifest_json_schema,
    manifest_openapi_components,
)

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
DEMOS = [load_yaml((DEMO / f"skincare_v{i}.yaml").read_text(encoding="utf-8")) for i in (1, 2, 3)]


# --- the schema itself ---------------------------------------------------------------------------------------


def test_the_schema_is_2020_12_and_accepts_the_demo_manifests():
    schema = manifest_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for data in DEMOS:
        assert list(validator.iter_errors(data)) == []


def test_the_schema_refuses_what_the_structural_pass_refuses():
    validator = jsonschema.Draft202012Validator(manifest_json_schema())
    bad = copy.deepcopy(DEMOS[0])
    bad["skills"][0]["priority"] = 1
    bad["hooks"][0]["kind"] = "nope"
    bad["tools"][0]["binding"] = {"kind": "http", "endpoint": "orders", "timeout_s": 0}
    paths = {tuple(e.absolute_path)[:3] for e in validator.iter_errors(bad)}
    assert {("skills", 0), ("hooks", 0), ("tools", 0, "binding")} <= {p[:2] if p[0] != "tools" else p
                                                                      for p in paths}


def test_bindings_are_documented_in_the_schema():
    binding = manifest_json_schema()["$defs"]["Tool"]["properties"]["binding"]
    assert "GET /api/bindings" in binding["description"] and "unbound" in binding["description"]
    members = binding["oneOf"]
    assert {m.get("$ref") for m in members} >= {"#/$defs/HttpBinding", "#/$defs/FixtureBinding", "#/$defs/McpBinding"}
    (builtin,) = [m for m in members if m.get("type") == "string"]
    assert builtin["enum"] == sorted(BUILTIN_BINDINGS)


def test_openapi_components_are_openapi_3_0():
    components = manifest_openapi_components()
    assert components["Manifest"]["properties"]["skills"]["items"] == {"$ref": "#/components/schemas/ManifestSkill"}
    text = yaml.safe_dump(components)
    assert "#/$defs/" not in text and "const:" not in text and "type: 'null'" not in text
    timeout = components["ManifestHttpBinding"]["properties"]["timeout_s"]
    assert timeout["exclusiveMinimum"] is True and timeout["minimum"] == 0
    assert components["ManifestTool"]["properties"]["binding"]["nullable"] is True


# --- the OpenAPI document --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi(tmp_path_factory):
    out = tmp_path_factory.mktemp("openapi") / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    return yaml.safe_load(out.read_text())


def test_the_openapi_document_carries_the_manifest_schema(openapi):
    schemas = openapi["components"]["schemas"]
    assert {"Manifest", "ManifestSkill", "ManifestTool", "ManifestHttpBinding", "ManifestViewerInputHook"} <= \
        set(schemas)
    assert schemas["HarnessCreateInput"]["properties"]["manifest"] == {"$ref": "#/components/schemas/Manifest"}
    assert schemas["HarnessVersion"]["properties"]["manifest"]["allOf"] == [{"$ref": "#/components/schemas/Manifest"}]
    assert "GET /api/bindings" in schemas["ManifestTool"]["properties"]["binding"]["description"]
    assert "see harness_editor.schemas.Manifest" not in yaml.safe_dump(openapi)
    paths = openapi["paths"]
    assert "/api/manifest-schema" in paths and "/api/bindings" in paths
    assert "every error" in paths["/api/validate"]["post"]["description"]


# --- the endpoints and their roles -----------------------------------------------------------------------------


def _client(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.django_db
def test_manifest_schema_endpoint(reviewer):
    response = _client(reviewer).get("/api/manifest-schema")
    assert response.status_code == 200
    assert response.json() == manifest_json_schema()
    assert response.json()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.django_db
def test_binding_list_endpoint(ml_staff):
    response = _client(ml_staff).get("/api/bindings")
    assert response.status_code == 200
    body = response.json()
    builtin = {b["id"]: b for b in body["builtin"]}
    assert set(builtin) == set(BUILTIN_BINDINGS)
    assert builtin["coupons.issue"]["params"] == [
        {"name": "coupon_code", "type": "string", "required": True, "coerces_digit_strings": False},
        {"name": "viewer_id", "type": "string", "required": True, "coerces_digit_strings": False}]
    assert builtin["catalog.stock"]["params"][0]["coerces_digit_strings"] is True
    kinds = {k["kind"]: k for k in body["kinds"]}
    assert set(kinds) == {"http", "fixture", "mcp"}
    assert kinds["http"]["schema"]["properties"]["endpoint"]["type"] == "string"
    assert "FixtureCase" in kinds["fixture"]["schema"]["$defs"]
    jsonschema.Draft202012Validator(kinds["fixture"]["schema"]).validate(
        {"kind": "fixture", "cases": [{"when": {"order_id": "A1"}, "result": {"status": "shipped"}}]})
    assert kinds["mcp"]["description"]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/manifest-schema", "/api/bindings"])
@pytest.mark.parametrize(("who", "expected"), [("manager", 200), ("reviewer", 200), ("ml_staff", 200),
                                               ("operator", 200), ("outsider", 403), (None, 401)])
def test_roles(request, url, who, expected):
    user = request.getfixturevalue(who) if who else None
    response = _client(user).get(url)
    assert response.status_code == expected
    if expected != 200:
        assert response.json()["code"] in {"permission_denied", "not_authenticated"}


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/manifest-schema", "/api/bindings"])
def test_read_only(manager, url):
    assert _client(manager).post(url, {}, format="json").status_code == 405
