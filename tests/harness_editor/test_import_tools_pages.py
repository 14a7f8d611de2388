"""Tool import in the editor (paste / upload, the report before anything is saved, confirmation) and through the
API (dry run, a new draft, saving into a draft), every role and 403/404 path; the tools form with open bindings
(HTTP, Fixture, MCP, unbound): errors at ``tools[i].binding...`` and a byte-identical round trip through the
page."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from harness_editor import services
from harness_editor.models import HarnessVersion
from harness_editor.schemas import parse_manifest

pytestmark = pytest.mark.django_db

SLUG = "glow-gadget"
API = f"/api/harnesses/{SLUG}/import-tools"
FOREIGN = [
    {"type": "function", "function": {"name": "orders.get", "description": "An order by id.", "strict": True,
                                      "parameters": {"type": "object", "properties": {"order_id": {"type": "str"}},
                                                     "required": ["order_id"]}}},
    {"name": "orders.cancel", "parameters": {"order_id": "str", "reason": "optional[str]"}},
]


@pytest.fixture
def h(harness_with_history):
    return harness_with_history


def edit_url(number=3, **query):
    u = reverse("harness_editor:edit", args=[SLUG, number])
    return u + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def import_url(number=3):
    return reverse("harness_editor:import_tools", args=[SLUG, number])


def snapshot():
    return sorted(HarnessVersion.objects.values_list("number", "status", "lock_version", "content_hash"))


def login(client, user):
    client.force_login(user)
    return client


# --- the editor's import panel ----------------------------------------------------------------------------

def test_tools_tab_has_the_import_panel_and_the_open_binding_choices(h, client, manager):
    body = login(client, manager).get(edit_url(tab="tools")).content.decode()
    assert 'data-testid="import-panel"' in body and import_url() in body
    for label in ("HTTP", "Fixture", "MCP", "None (unbound)"):
        assert f">{label}</option>" in body
    assert 'data-testid="unbound-warning"' not in body  # the demo's tools are all bound
    assert 'data-testid="import-panel"' not in login(client, manager).get(edit_url(tab="skills")).content.decode()


def test_preview_shows_every_change_and_saves_nothing(h, client, manager):
    before = snapshot()
    v3 = h["v3"]
    response = login(client, manager).post(import_url(), {"tools_text": json.dumps(FOREIGN), "source": "auto",
                                                          "on_conflict": "rename", "lock_version": v3.lock_version})
    body = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="import-ready"' in body and 'data-testid="import-confirm"' in body
    for kind in ("renamed", "type_mapped", "dropped_key", "defaulted"):
        assert f'data-kind="{kind}"' in body, kind
    assert "orders_get" in body and "orders_cancel" in body and "[0].function.strict" in body
    assert "unbound" in body  # the warnings of the manifest it would make
    assert snapshot() == before


def test_confirm_adds_the_tools_unbound_and_the_editor_warns(h, client, manager):
    v3 = h["v3"]
    n = len(v3.manifest.tools)
    response = login(client, manager).post(import_url(), {
        "tools_text": json.dumps(FOREIGN), "source": "auto", "on_conflict": "rename", "op": "confirm",
        "lock_version": v3.lock_version, "change_note": "orders tools"})
    assert response.status_code == 302 and response["Location"] == edit_url(tab="tools")
    after = HarnessVersion.objects.get(pk=v3.pk)
    assert after.lock_version == v3.lock_version + 1 and after.change_note == "orders tools"
    tools = after.manifest.tools
    assert [t.name for t in tools[n:]] == ["orders_get", "orders_cancel"]
    assert all(t.binding is None for t in tools[n:]) and tools[:n] == v3.manifest.tools
    assert tools[n + 1].parameters["required"] == ["order_id"]
    page = client.get(edit_url(tab="tools")).content.decode()
    assert page.count('data-testid="unbound-warning"') == 2
    assert "unbound — a call gets the fault &#x27;unbound&#x27;" in page


def test_upload_a_file_of_signatures(h, client, manager):
    v3 = h["v3"]
    upload = SimpleUploadedFile("tools.py", b"def shipping.quote(weight: float, dims: tuple[float, float, float]) "
                                b"-> dict:\n    '''A shipping quote.'''\n", content_type="text/x-python")
    response = login(client, manager).post(import_url(), {"tools_file": upload, "op": "confirm", "source": "functions",
                                                          "on_conflict": "rename", "lock_version": v3.lock_version})
    assert response.status_code == 302
    tool = HarnessVersion.objects.get(pk=v3.pk).manifest.tool("shipping_quote")
    assert tool.description == "A shipping quote."
    assert tool.parameters["properties"]["dims"]["prefixItems"] == [{"type": "number"}] * 3


@pytest.mark.parametrize("post,status,text", [
    ({"tools_text": "{oops"}, 400, "invalid JSON"),
    ({"tools_text": ""}, 400, "paste tool definitions"),
    ({"tools_text": json.dumps([{"description": "no name"}])}, 400, "[0].name"),
    ({"tools_text": json.dumps(FOREIGN), "source": "bogus"}, 400, "source"),
    ({"tools_text": json.dumps([{"name": "x", "description": "d", "input_schema": {}, "binding": "no.such"}])},
     400, ".binding"),
    ({"tools_text": json.dumps([{"name": "check_stock", "input_schema": {}}]), "on_conflict": "error"}, 400,
     "already has a tool"),
])
@pytest.mark.parametrize("op", ["preview", "confirm"])
def test_bad_imports_show_located_errors_and_save_nothing(h, client, manager, post, status, text, op):
    before = snapshot()
    data = {"source": "auto", "on_conflict": "rename", "lock_version": h["v3"].lock_version, "op": op, **post}
    response = login(client, manager).post(import_url(), data)
    body = response.content.decode()
    assert response.status_code == status and 'data-testid="import-errors"' in body
    assert text in body.replace("&#x27;", "'").replace("&quot;", '"')
    assert 'data-testid="import-confirm"' not in body
    assert snapshot() == before


def test_too_large_an_upload_is_refused(h, client, manager, settings):
    from harness_editor.schemas import MAX_MANIFEST_BYTES

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_MANIFEST_BYTES * 3
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = MAX_MANIFEST_BYTES * 3
    before = snapshot()
    upload = SimpleUploadedFile("big.json", b" " * (MAX_MANIFEST_BYTES + 1) + b"[]")
    response = login(client, manager).post(import_url(), {"tools_file": upload, "op": "confirm",
                                                          "lock_version": h["v3"].lock_version})
    assert response.status_code == 400 and "larger than" in response.content.decode()
    assert snapshot() == before


def test_confirm_from_a_stale_revision_is_a_conflict(h, client, manager):
    v3 = h["v3"]
    opened_at = v3.lock_version
    services.version_save_draft(user=manager, version=v3, manifest=v3.manifest, lock_version=opened_at)
    before = snapshot()
    response = login(client, manager).post(import_url(), {"tools_text": json.dumps(FOREIGN), "op": "confirm",
                                                          "lock_version": opened_at})
    assert response.status_code == 409 and 'data-testid="conflict"' in response.content.decode()
    assert snapshot() == before


@pytest.mark.parametrize("who,status", [("reviewer", 403), ("ml_staff", 403), ("operator", 403),
                                        ("outsider", 403), ("manager2", 403)])
def test_only_the_drafts_author_imports(request, h, client, who, status):
    before = snapshot()
    response = login(client, request.getfixturevalue(who)).post(
        import_url(), {"tools_text": json.dumps(FOREIGN), "op": "confirm", "lock_version": h["v3"].lock_version})
    assert response.status_code == status
    assert snapshot() == before


def test_anonymous_goes_to_login_and_get_is_refused(h, client, manager):
    response = client.post(import_url(), {"tools_text": "[]"})
    assert response.status_code == 302 and "login" in response["Location"]
    assert login(client, manager).get(import_url()).status_code == 405


@pytest.mark.parametrize("slug,number", [("nope", 3), (SLUG, 99)])
def test_unknown_harness_or_version_is_404(h, client, manager, slug, number):
    url = reverse("harness_editor:import_tools", args=[slug, number])
    assert login(client, manager).post(url, {"tools_text": "[]"}).status_code == 404


def test_a_submitted_version_is_not_imported_into(h, client, manager):
    before = snapshot()
    response = login(client, manager).post(import_url(2), {"tools_text": json.dumps(FOREIGN), "op": "confirm",
                                                           "lock_version": h["v2"].lock_version})
    assert response.status_code == 302 and response["Location"] == reverse("harness_editor:version",
                                                                            args=[SLUG, 2])
    assert snapshot() == before


# --- the API ----------------------------------------------------------------------------------------------

@pytest.fixture
def api():
    def make(user=None):
        c = APIClient()
        if user is not None:
            c.force_login(user)
        return c

    return make


def test_api_dry_run_reports_and_saves_nothing(h, api, manager):
    before = snapshot()
    r = api(manager).post(API, {"tools": FOREIGN, "dry_run": True}, format="json")
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["version"] is None and body["report"]["ok"] is True
    assert body["report"]["added"] == ["orders_get", "orders_cancel"]
    assert {c["kind"] for c in body["report"]["changes"]} >= {"renamed", "type_mapped", "dropped_key", "defaulted"}
    assert [w["path"].endswith(".binding") for w in body["report"]["warnings"]] == [True, True]
    assert snapshot() == before


def test_api_saves_a_new_draft_from_the_latest_or_from_base(h, api, manager):
    r = api(manager).post(API, {"tools": FOREIGN, "change_note": "orders"}, format="json")
    assert r.status_code == 201, r.json()
    v = r.json()["version"]
    assert (v["number"], v["parent"], v["status"], v["change_note"]) == (4, 3, "draft", "orders")
    names = [t["name"] for t in v["manifest"]["tools"]]
    assert names[-2:] == ["orders_get", "orders_cancel"]
    r = api(manager).post(API, {"tools_text": "def ping(host: str) -> bool: ...", "base": 1}, format="json")
    assert r.status_code == 201 and r.json()["version"]["parent"] == 1
    assert r.json()["version"]["change_note"] == "imported 1 tool: ping"
    v1_tools = [t.name for t in h["v1"].manifest.tools]
    assert [t["name"] for t in r.json()["version"]["manifest"]["tools"]] == [*v1_tools, "ping"]


def test_api_saves_into_the_callers_draft_with_its_lock(h, api, manager, manager2):
    v3 = h["v3"]
    r = api(manager).post(API, {"tools": FOREIGN, "draft": 3, "lock_version": v3.lock_version}, format="json")
    assert r.status_code == 200, r.json()
    assert HarnessVersion.objects.get(pk=v3.pk).manifest.tool("orders_get") is not None
    before = snapshot()
    stale = api(manager).post(API, {"tools": FOREIGN, "draft": 3, "lock_version": v3.lock_version}, format="json")
    assert stale.status_code == 409 and stale.json()["current_lock_version"] == v3.lock_version + 1
    other = api(manager2).post(API, {"tools": FOREIGN, "draft": 3, "lock_version": v3.lock_version + 1},
                               format="json")
    assert other.status_code == 403
    submitted = api(manager).post(API, {"tools": FOREIGN, "draft": 2, "lock_version": 1}, format="json")
    assert submitted.status_code in (409, 403)
    assert snapshot() == before


@pytest.mark.parametrize("body,path", [
    ({"tools": FOREIGN, "tools_text": "x"}, "tools"),
    ({}, "tools"),
    ({"tools": FOREIGN, "draft": 3}, "lock_version"),
    ({"tools": FOREIGN, "draft": 3, "base": 1, "lock_version": 1}, "base"),
    ({"tools": FOREIGN, "source": "soap"}, "source"),
    ({"tools": [{"description": "nameless"}]}, "tools[0].name"),
    ({"tools_text": "{oops"}, "tools_text"),
    ({"tools": [{"name": "x", "input_schema": {}, "binding": {"kind": "http"}}]}, "tools[6].binding.endpoint"),
    ({"tools": [{"name": "check_stock", "input_schema": {}}], "on_conflict": "error"}, "tools[0].name"),
])
def test_api_bad_input_is_a_located_400_and_saves_nothing(h, api, manager, body, path):
    before = snapshot()
    r = api(manager).post(API, body, format="json")
    assert r.status_code == 400, r.json()
    assert path in [e["path"] for e in r.json()["errors"]], r.json()
    assert snapshot() == before


def test_api_dry_run_of_bad_definitions_reports_them(h, api, manager):
    r = api(manager).post(API, {"tools": [{"description": "nameless"}], "dry_run": True}, format="json")
    assert r.status_code == 200
    report = r.json()["report"]
    assert report["ok"] is False and report["import_failed"] is True
    assert report["errors"][0]["path"] == "tools[0].name"


@pytest.mark.parametrize("who,status", [("reviewer", 403), ("ml_staff", 403), ("operator", 403),
                                        ("outsider", 403), (None, 401)])
def test_api_roles(request, h, api, who, status):
    before = snapshot()
    user = request.getfixturevalue(who) if who else None
    for dry in (True, False):
        r = api(user).post(API, {"tools": FOREIGN, "dry_run": dry}, format="json")
        assert r.status_code == status
    assert snapshot() == before


def test_api_unknown_harness_or_base_is_404(h, api, manager):
    assert api(manager).post("/api/harnesses/nope/import-tools", {"tools": FOREIGN}, format="json").status_code == 404
    assert api(manager).post(API, {"tools": FOREIGN, "base": 99}, format="json").status_code == 404
    assert api(manager).get(API).status_code == 405


def test_api_is_in_the_openapi_document(h, api, manager):
    doc = api(manager).get("/api/schema/?format=json").json()
    op = doc["paths"]["/api/harnesses/{slug}/import-tools"]["post"]
    assert op["operationId"] == "harness_import_tools"
    assert {"200", "201", "400", "403", "404", "409"} <= set(op["responses"])
    assert "ImportReport" in doc["components"]["schemas"] and "ImportToolsInput" in doc["components"]["schemas"]


# --- the tools form with open bindings --------------------------------------------------------------------

OPEN_TOOLS = [
    {"name": "order_lookup", "description": "An order by id.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
     "binding": {"kind": "http", "endpoint": "orders-api", "method": "GET", "path": "/orders/{order_id}",
                 "query": {"expand": "{order_id}"}, "timeout_s": 2.5, "retries": 1, "result": "data.order"}},
    {"name": "order_fixture", "description": "Fixed answers.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
     "binding": {"kind": "fixture", "cases": [
         {"when": {"order_id": "A1"}, "result": {"status": "yes", "lines": [1, 2.5, "on", None, True, {"x": []}]}},
         {"when": {}, "result": "0123"}], "default": {"error": "not_found"}}},
    {"name": "read_file", "description": "A file's text.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
     "binding": {"kind": "mcp", "server": "files", "tool": "files/read", "timeout_s": 10.0}},
    {"name": "not_bound_yet", "description": "Nothing behind it yet.",
     "parameters": {"type": "object", "properties": {}}, "binding": None},
]


@pytest.fixture
def open_draft(h, manager):
    data = copy.deepcopy(h["v3"].manifest.model_dump(mode="json"))
    data["tools"] += copy.deepcopy(OPEN_TOOLS)
    manifest = parse_manifest(data)
    return services.version_create_draft(user=manager, harness=h["harness"], manifest=manifest, parent=h["v3"],
                                         change_note="open bindings")


class _FormFields(HTMLParser):
    """The fields a browser would post from one form: inputs, checked boxes, textareas, selected options."""

    def __init__(self, form_id: str):
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside, self.fields = form_id, False, []
        self._textarea = self._select = None
        self._first_option = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        if tag == "input" and a.get("name") and a.get("type") not in ("submit", "file"):
            if a.get("type") != "checkbox" or "checked" in a:
                self.fields.append((a["name"], a.get("value", "on" if a.get("type") == "checkbox" else "")))
        elif tag == "textarea":
            self._textarea = [a["name"], ""]
        elif tag == "select":
            self._select, self._first_option = a["name"], None
        elif tag == "option" and self._select:
            if self._first_option is None:
                self._first_option = a.get("value")
            if "selected" in a:
                self.fields.append((self._select, a.get("value")))
                self._select = "\0done"

    def handle_data(self, data):
        if self._textarea is not None:
            self._textarea[1] += data

    def handle_endtag(self, tag):
        if tag == "textarea" and self._textarea is not None:
            name, text = self._textarea
            self.fields.append((name, text[1:] if text.startswith("\n") else text))  # as browsers read it
            self._textarea = None
        elif tag == "select" and self._select is not None:
            if self._select != "\0done":
                self.fields.append((self._select, self._first_option))
            self._select = None
        elif tag == "form":
            self.inside = False


def page_form(html: str, form_id: str = "editor-form") -> dict:
    parser = _FormFields(form_id)
    parser.feed(html)
    return dict(parser.fields)


def test_every_binding_kind_loads_into_the_form_and_saves_back_byte_identical(client, manager, open_draft):
    page = login(client, manager).get(edit_url(open_draft.number, tab="tools")).content.decode()
    fields = page_form(page)
    n = len(open_draft.manifest.tools)
    kinds = [fields[f"tools-{i}-binding"] for i in range(n)]
    assert kinds[-4:] == ["@http", "@fixture", "@mcp", "@unbound"]
    assert "endpoint: orders-api" in fields[f"tools-{n - 4}-binding_spec"]
    assert "method" not in fields[f"tools-{n - 4}-binding_spec"]  # defaults are not shown
    assert page.count('data-testid="unbound-warning"') == 1
    fields["op"] = "save"
    response = client.post(edit_url(open_draft.number), fields)
    assert response.status_code == 302, response.content.decode()[:3000]
    after = HarnessVersion.objects.get(pk=open_draft.pk)
    assert after.lock_version == open_draft.lock_version + 1
    assert after.manifest_json == open_draft.manifest_json and after.content_hash == open_draft.content_hash


def test_changing_a_binding_kind_through_the_form(client, manager, open_draft):
    page = login(client, manager).get(edit_url(open_draft.number, tab="tools")).content.decode()
    fields = page_form(page)
    n = len(open_draft.manifest.tools)
    fields[f"tools-{n - 1}-binding"] = "@fixture"
    fields[f"tools-{n - 1}-binding_spec"] = "default:\n  ok: true\n"
    fields[f"tools-{n - 4}-binding"] = "@unbound"
    fields[f"tools-{n - 4}-binding_spec"] = ""
    fields["op"] = "save"
    assert client.post(edit_url(open_draft.number), fields).status_code == 302
    tools = HarnessVersion.objects.get(pk=open_draft.pk).manifest.tools
    assert tools[n - 1].binding.kind == "fixture" and tools[n - 1].binding.default == {"ok": True}
    assert tools[n - 4].binding is None


@pytest.mark.parametrize("choice,spec,path", [
    ("@http", "endpoint: [unclosed", "tools[{i}].binding"),
    ("@http", "- a list", "tools[{i}].binding"),
    ("@http", "endpoint: orders-api\nverb: GET\n", "tools[{i}].binding.verb"),
    ("@http", "path: /orders\n", "tools[{i}].binding.endpoint"),
    ("@http", "endpoint: orders-api\npath: /orders/{nope}\n", "tools[{i}].binding.path"),
    ("@mcp", "kind: http\nserver: files\n", "tools[{i}].binding.kind"),
    ("@fixture", "cases: 3\n", "tools[{i}].binding.cases"),
    ("@unbound", "server: files\n", "tools[{i}].binding"),
    ("catalog.stock", "server: files\n", "tools[{i}].binding"),
])
def test_binding_errors_are_located_and_nothing_is_saved(client, manager, open_draft, choice, spec, path):
    page = login(client, manager).get(edit_url(open_draft.number, tab="tools")).content.decode()
    fields = page_form(page)
    i = len(open_draft.manifest.tools) - 1
    fields[f"tools-{i}-binding"] = choice
    fields[f"tools-{i}-binding_spec"] = spec
    fields["op"] = "save"
    response = client.post(edit_url(open_draft.number), fields)
    body = response.content.decode()
    assert response.status_code == 400
    assert f"<code>{path.format(i=i)}</code>" in body, body[body.find("errorlist"):][:2000]
    after = HarnessVersion.objects.get(pk=open_draft.pk)
    assert after.lock_version == open_draft.lock_version and after.manifest_json == open_draft.manifest_json
