"""The deep diff where reviewers see it: the diff API and the compare page, on a harness with foreign tools."""

from __future__ import annotations

import copy

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from harness_editor import services
from harness_editor.schemas import parse_manifest
from tests.harness_editor.test_diff_deep import BASE_DATA, item, params, tool

SLUG = "orders-desk"
SKU_TYPE = "tools[find_orders].parameters.properties.items.items.properties.sku.type"
WRAP_ENUM = "tools[find_orders].parameters.properties.items.items.properties.gift.properties.wrap.enum"


@pytest.fixture
def versions(manager):
    v1 = services.harness_create(user=manager, slug=SLUG, name="Orders desk", manifest=parse_manifest(BASE_DATA))
    d = copy.deepcopy(BASE_DATA)
    item(d)["properties"]["sku"]["type"] = "integer"
    item(d)["properties"]["gift"]["properties"]["wrap"]["enum"] = ["paper"]
    params(d)["properties"]["status"]["description"] = "Only orders in this state."
    tool(d, "find_orders")["binding"]["endpoint"] = "orders-v2"
    v2 = services.version_create_draft(user=manager, harness=v1.harness, manifest=parse_manifest(d), parent=v1,
                                       change_note="sku is numeric now")
    return v1, v2


def test_diff_api_reports_deep_changes_with_paths_and_breaking_flags(versions, reviewer):
    client = APIClient()
    client.force_login(reviewer)
    body = client.get(f"/api/harnesses/{SLUG}/diff/?from=1&to=2").json()
    got = {c["path"]: c["breaking"] for c in body["changes"]}
    assert got == {
        SKU_TYPE: True,
        WRAP_ENUM: True,
        "tools[find_orders].parameters.properties.status.description": False,
        "tools[find_orders].binding.endpoint": True,
    }
    assert body["breaking"] is True and body["summary"] == {"tool": 4}
    sku = next(c for c in body["changes"] if c["path"] == SKU_TYPE)
    assert (sku["kind"], sku["before"], sku["after"]) == ("changed", "string", "integer")


def test_diff_api_refuses_anonymous(versions):
    assert APIClient().get(f"/api/harnesses/{SLUG}/diff/?from=1&to=2").status_code in (401, 403)


def test_compare_page_shows_deep_paths_and_the_breaking_alert(versions, client, reviewer):
    client.force_login(reviewer)
    html = client.get(reverse("harness_editor:diff", args=[SLUG]) + "?a=1&b=2").content.decode()
    assert 'data-testid="breaking-alert"' in html and "3 breaking changes" in " ".join(html.split())
    assert f"<code>{SKU_TYPE}</code>" in html and f"<code>{WRAP_ENUM}</code>" in html
    assert "parameter &#x27;items[].sku&#x27; type" in html
