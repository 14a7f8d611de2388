"""Bad input gets a 4xx, never a 500 (issue 10, point 7), through the real middleware, parsers and handlers.

- a NUL character in a list filter reached PostgreSQL (``DataError``: text cannot hold NUL) on every list API and
  the timeline page; now the query, headers and form fields are refused first (console.middleware), for any URL;
- JSON nested 1,000+ levels raised RecursionError in DRF's parser; NUL and NaN inside JSON reached jsonb;
- a body over the size limit got Django's HTML 400 page on /api/, and unknown /api/ addresses the HTML 404 page:
  the API answers in its error shape ``{"detail", "code", "errors": [{"path", "message"}]}`` everywhere.

The NUL cases fail before the fix only on PostgreSQL (SQLite stores NUL); CI runs them on PostgreSQL.
"""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from console import jsonsafe
from harness_editor.models import Harness

pytestmark = pytest.mark.django_db


def _api(user=None) -> APIClient:
    client = APIClient(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def _assert_error_shape(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) >= {"detail", "code", "errors"} and isinstance(body["errors"], list), body
    assert all(set(e) == {"path", "message"} for e in body["errors"]), body
    if code is not None:
        assert body["code"] == code, body
    return body


# --- NUL in query parameters, headers, form fields, paths ---------------------------------------------------

LIST_FILTERS = [
    ("reviewer", "/api/audit/?scope=harness%3Aglow%00", "scope"),
    ("ml_staff", "/api/datasets/?status=queued%00", "status"),
    ("ml_staff", "/api/datasets/?kind=%00", "kind"),
    ("ml_staff", "/api/models/?kind=sft%00", "kind"),
    ("ml_staff", "/api/training-jobs/?status=%00running", "status"),
    ("ml_staff", "/api/training-jobs/?kind=x%00y", "kind"),
    ("manager", "/api/harnesses/glow-gadget/versions/2/render?room=demo&comment=hi%00", "comment"),
    ("manager", "/api/harnesses/?a%00b=1", "a?b"),  # in a parameter's name too
]


@pytest.mark.parametrize("role, url, path", LIST_FILTERS)
def test_nul_in_a_query_parameter_is_a_located_400(request, harness_with_history, role, url, path):
    body = _assert_error_shape(_api(request.getfixturevalue(role)).get(url), 400, "invalid")
    assert body["errors"] == [{"path": path, "message": "NUL characters are not allowed"}]


def test_nul_in_the_timeline_filter_is_a_400_page(reviewer, harness_with_history):
    client = Client(raise_request_exception=False)
    client.force_login(reviewer)
    assert client.get("/timeline/?scope=harness%3Aglow-gadget").status_code == 200
    response = client.get("/timeline/?scope=harness%3Aglow%00")
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
    assert b"NUL characters are not allowed" in response.content and b"scope" in response.content


def test_nul_in_a_page_form_field_is_refused_and_nothing_is_saved(manager):
    client = Client(raise_request_exception=False)
    client.force_login(manager)
    response = client.post("/harnesses/new/", {"slug": "nul-room", "name": "Nul\x00room", "source": "demo"})
    assert response.status_code == 400 and b"name" in response.content
    assert not Harness.objects.filter(slug="nul-room").exists()


def test_nul_in_a_header_or_cookie_is_a_400(ml_staff):
    body = _assert_error_shape(_api(ml_staff).get("/api/models/", HTTP_X_TRACE="a\x00b"), 400, "invalid")
    assert body["errors"][0]["path"] == "header X-Trace"
    client = APIClient(raise_request_exception=False)
    client.cookies[settings.SESSION_COOKIE_NAME] = "abcdefgh\x00ijk"  # a session lookup with NUL: DataError
    _assert_error_shape(client.get("/api/models/"), 400, "invalid")


def test_nul_in_a_path_is_a_404(manager, harness_with_history):
    _assert_error_shape(_api(manager).get("/api/harnesses/glow-gadget/labels/prod%00uction/"), 404, "not_found")
    client = Client(raise_request_exception=False)
    client.force_login(manager)
    assert client.get("/harnesses/glow%00gadget/").status_code == 404


# --- JSON bodies ----------------------------------------------------------------------------------------

def _deep(levels: int) -> str:
    return '{"manifest": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("url", ["/api/validate", "/api/harnesses/"])
@pytest.mark.parametrize("levels", [1_000, 100_000])
def test_deeply_nested_json_is_a_400(manager, url, levels):
    response = _api(manager).post(url, data=_deep(levels), content_type="application/json")
    body = _assert_error_shape(response, 400, "parse_error")
    assert f"more than {jsonsafe.MAX_DEPTH} levels" in body["detail"]


def test_json_at_the_depth_limit_is_parsed(manager):
    # 64 levels (the manifest itself is one): parsed, then refused by the manifest's own rules, at a path
    response = _api(manager).post("/api/validate", data=_deep(jsonsafe.MAX_DEPTH - 1),
                                  content_type="application/json")
    assert _assert_error_shape(response, 400)["code"] != "parse_error"


def test_nul_and_nan_inside_json_are_refused_at_their_path(manager, demo_manifest):
    manifest = demo_manifest("skincare_v1").model_dump(mode="json")
    manifest["skills"][1]["body"] = "clean\x00text"
    response = _api(manager).post("/api/harnesses/", {"slug": "nul-json", "name": "n", "manifest": manifest},
                                  format="json")
    body = _assert_error_shape(response, 400, "invalid")
    assert body["errors"] == [{"path": "manifest.skills[1].body", "message": "NUL characters (\\u0000) are not allowed"}]
    response = _api(manager).post("/api/validate", data='{"manifest": {"name": NaN}}',
                                  content_type="application/json")
    assert "NaN is not valid JSON" in _assert_error_shape(response, 400, "parse_error")["detail"]
    assert not Harness.objects.filter(slug="nul-json").exists()


def test_malformed_json_is_a_400(manager):
    response = _api(manager).post("/api/validate", data='{"manifest": ', content_type="application/json")
    _assert_error_shape(response, 400, "parse_error")


# --- bodies Django cannot read -------------------------------------------------------------------------------

def test_a_body_over_the_limit_gets_the_apis_413(manager):
    too_big = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    response = _api(manager).post("/api/harnesses/", data=b"[" + b" " * too_big + b"]",
                                  content_type="application/json")
    body = _assert_error_shape(response, 413, "too_large")
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in body["detail"]
    # a form body (read by the middleware) and the token endpoint (no authentication) answer the same
    form = b"username=" + b"x" * too_big + b"&password=y"
    response = APIClient(raise_request_exception=False).post(
        "/api/auth/token/", data=form, content_type="application/x-www-form-urlencoded")
    _assert_error_shape(response, 413, "too_large")


def test_a_body_over_the_limit_on_a_page_is_a_400(manager):
    client = Client(raise_request_exception=False)
    client.force_login(manager)
    response = client.post("/harnesses/new/", data=b"manifest_text=" + b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
                           content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400


@pytest.mark.parametrize("content_type, data", [
    ("multipart/form-data; boundary=xyz", b""),
    ("multipart/form-data", b"--xyz\r\n"),  # no boundary
    ("multipart/form-data; boundary=", b"--\r\n"),
    ("multipart/form-data; boundary=xyz", b"--xyz\r\nContent-Disposition: form-data; name=\"slug\"\r\n\r\nx"),
])
def test_empty_or_broken_multipart_bodies_get_the_error_shape(manager, content_type, data):
    for client in (_api(manager), APIClient(raise_request_exception=False)):
        for url in ("/api/harnesses/", "/api/auth/token/", "/api/validate"):
            response = client.post(url, data=data, content_type=content_type)
            assert 400 <= response.status_code < 500, (url, response.status_code)
            _assert_error_shape(response, response.status_code)


# --- addresses --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["get", "post", "patch", "delete"])
@pytest.mark.parametrize("url", ["/api/datasets/not-a-uuid/", "/api/harnesses/with space/", "/api/nothing",
                                 "/api/harnesses"])
def test_unknown_api_addresses_are_a_json_404(manager, method, url):
    client = APIClient(raise_request_exception=False, enforce_csrf_checks=True)
    client.force_login(manager)
    _assert_error_shape(getattr(client, method)(url), 404, "not_found")


def test_the_token_endpoint_documents_its_400(manager):
    response = APIClient(raise_request_exception=False).post("/api/auth/token/", {"username": "cm_alice"},
                                                             format="json")
    _assert_error_shape(response, 400, "invalid")
    schema = APIClient().get("/api/schema/?format=json").json()
    responses = schema["paths"]["/api/auth/token/"]["post"]["responses"]
    assert {"200", "400", "413"} <= set(responses)
    assert responses["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AuthTokenResponse"}
    assert json.dumps(responses["400"]).count("#/components/schemas/Error") == 1
