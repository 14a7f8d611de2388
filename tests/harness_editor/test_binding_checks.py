"""Semantic checks of open bindings against the tool's own schema, and the warning for unbound tools."""

from __future__ import annotations

import copy

import pytest

from harness_editor.schemas import ManifestError, manifest_warnings, parse_manifest

ORDER_PARAMS = {"type": "object", "properties": {
    "order": {"type": "object", "properties": {"id": {"type": "string"}, "lines": {"type": "array"}}},
    "region": {"type": "string"}, "page": {"type": "integer"}, "filters": {"type": "object"}}}


def with_tool(manifest_data, binding, parameters=None, **extra):
    data = copy.deepcopy(manifest_data)
    data["tools"].append({"name": "get_order", "description": "Look up an order.",
                          "parameters": copy.deepcopy(parameters or ORDER_PARAMS), "binding": binding, **extra})
    return data, len(data["tools"]) - 1


@pytest.fixture
def base(demo_manifest):
    return demo_manifest("skincare_v1").model_dump(mode="json")


def errors(data):
    with pytest.raises(ManifestError) as e:
        parse_manifest(data)
    return {err.path: err.message for err in e.value.errors}


def http(**kw):
    return {"kind": "http", "endpoint": "orders", **kw}


def test_valid_open_bindings_pass(base):
    for binding in (http(path="/orders/{order.id}", query={"region": "{region}", "p": "page-{page}"},
                         result="data.items[0].sku"),
                    http(method="POST", path="/orders", body="arguments"),
                    {"kind": "fixture", "cases": [{"when": {"order.id": "A1", "region": "EU"}, "result": {"ok": 1}}]},
                    {"kind": "mcp", "server": "docs", "tool": "lookup"}):
        data, _ = with_tool(base, binding)
        assert parse_manifest(data).tools[-1].binding is not None


def test_http_path_template_must_name_a_parameter_path(base):
    data, i = with_tool(base, http(path="/orders/{order.number}"))
    msg = errors(data)[f"tools[{i}].binding.path"]
    assert msg == ("{order.number} is not a parameter path of tool 'get_order' (dotted names through 'properties', "
                   "e.g. order.id)")


def test_every_template_problem_is_reported(base):
    data, i = with_tool(base, http(path="/orders/{order.number}/{customer}"))
    with pytest.raises(ManifestError) as e:
        parse_manifest(data)
    assert [err.message.split(" is not")[0] for err in e.value.errors if err.path == f"tools[{i}].binding.path"] \
        == ["{order.number}", "{customer}"]


def test_http_templates_only_put_scalars_into_a_url(base):
    data, i = with_tool(base, http(path="/orders/{order}", query={"f": "{filters}", "l": "{order.lines}"}))
    errs = errors(data)
    assert "only a string, number, integer or boolean goes into a URL" in errs[f"tools[{i}].binding.path"]
    assert "{filters} is of type object" in errs[f"tools[{i}].binding.query.f"]
    assert "{order.lines} is of type array" in errs[f"tools[{i}].binding.query.l"]


def test_http_query_keys_are_located(base):
    data, i = with_tool(base, http(query={"the region": "{regio}"}))
    assert "{regio} is not a parameter path" in errors(data)[f'tools[{i}].binding.query["the region"]']


@pytest.mark.parametrize(("path", "message"), [
    ("/orders?id={order.id}", "query parameters go in query"),
    ("//evil.example.com/x", "no scheme, host"),
    ("@evil.example.com/x", "no scheme, host"),
    ("https://evil.example.com/x", "no scheme, host"),
    ("/orders/../admin", "would leave the endpoint's base URL"),
    ("/orders/{order.id", "unbalanced braces"),
    ("/orders/{}", "an empty {} names no argument"),
])
def test_http_path_stays_a_path(base, path, message):
    data, i = with_tool(base, http(path=path))
    assert message in errors(data)[f"tools[{i}].binding.path"]


@pytest.mark.parametrize("path", [
    "/%2e%2e/outside", "/%2E%2E/outside", "/orders/%2e", "/a%2fb", "/a%2F..", "/x%5c..%5cy", "/%252e%252e/x",
    "/%00", "/..;/admin", "/orders/.;x/y", "/orders/\uff0e\uff0e/x", "/orders/\u2025", "/%c0%ae%c0%ae/x",
    "/orders/%zz",
])
def test_http_path_hides_no_way_out_of_the_base_url(base, path):
    """An upstream (or its proxy) that decodes escapes, reads ';' parameters or folds Unicode must not be led out
    of the endpoint's base path: these passed validation, and '/%2e%2e/outside' left the base path."""
    data, i = with_tool(base, http(path=path))
    message = errors(data)[f"tools[{i}].binding.path"]
    assert "leave the endpoint's base URL" in message or "escape" in message, message


def test_http_paths_that_stay_under_the_base_url_pass(base):
    for path in ("/orders/{order.id}/lines", "/v1/items:search", "/files/report.v2.json", "/a%20b",
                 "/orders/{order.id}.json", "/~x/-_!$&'()*+,="):
        data, _ = with_tool(base, http(path=path))
        assert parse_manifest(data).tools[-1].binding.path == path


def test_http_result_must_be_a_json_path(base):
    data, i = with_tool(base, http(result="data..items[x]"))
    assert "is not a JSON path" in errors(data)[f"tools[{i}].binding.result"]


def test_http_body_goes_with_methods_that_have_one(base):
    data, i = with_tool(base, http(method="GET", body="arguments"))
    assert "a GET request has no body" in errors(data)[f"tools[{i}].binding.body"]


def test_http_structural_errors_are_located(base):
    data, i = with_tool(base, http(timeout_s=600, retries=9, verb="GET"))
    errs = errors(data)
    assert {f"tools[{i}].binding.timeout_s", f"tools[{i}].binding.retries", f"tools[{i}].binding.verb"} <= set(errs)


def test_fixture_when_keys_must_be_parameter_paths(base):
    data, i = with_tool(base, {"kind": "fixture", "cases": [
        {"when": {"order.id": "A1"}, "result": 1},
        {"when": {"order.number": "A1", "region": "EU"}, "result": 2}]})
    errs = errors(data)
    assert list(errs) == [f"tools[{i}].binding.cases[1].when[\"order.number\"]"]
    assert "'order.number' is not a parameter path of tool 'get_order'" in errs[
        f"tools[{i}].binding.cases[1].when[\"order.number\"]"]


@pytest.mark.parametrize("binding", [http(), {"kind": "fixture"}, {"kind": "mcp", "server": "docs"}])
def test_open_kinds_take_no_argument_map(base, binding):
    data, i = with_tool(base, binding, argument_map={"link_id": "order.id"})
    assert "leave argument_map empty" in errors(data)[f"tools[{i}].argument_map"]


def test_unbound_tool_is_valid_with_a_warning(base):
    data, i = with_tool(base, None)
    m = parse_manifest(data)
    assert m.tools[i].binding is None
    (warning,) = manifest_warnings(m)
    assert warning.path == f"tools[{i}].binding"
    assert "'get_order' has no binding: a call gets the fault 'unbound'" in warning.message
    assert manifest_warnings(parse_manifest(base)) == []


def test_allow_list_names_are_not_checked_against_a_host(base):
    # a stored version stays valid whatever the administrator's allow-list holds (the runtime answers
    # binding_unavailable; streams.tool_bindings.binding_availability tells the editor)
    data, _ = with_tool(base, http(endpoint="never-configured-anywhere"))
    assert parse_manifest(data).tools[-1].binding.endpoint == "never-configured-anywhere"
