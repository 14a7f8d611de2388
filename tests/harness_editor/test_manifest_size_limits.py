"""One size limit for a manifest however it comes (issue 13, section 3): YAML text, JSON text and a JSON object
(measured as compact JSON) are refused alike with the same message, through the parser, the API, the new-harness
page and the editor; and no service stores a canonical manifest past the limit."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from harness_editor import services
from harness_editor.models import Harness, HarnessVersion
from harness_editor.schemas import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    parse_manifest,
)
from harness_editor.schemas.loading import TOO_LARGE_MESSAGE, check_manifest_size

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
_V1 = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))


def grown(target_bytes: int) -> dict[str, Any]:
    """The demo manifest with extra strategy skills until its compact JSON is about ``target_bytes``."""
    data = copy.deepcopy(_V1)
    size = len(json.dumps(data, separators=(",", ":")))
    k = 0
    while size < target_bytes:
        body = "Say it warmly. " * min(1300, (target_bytes - size) // 15 + 1)
        skill = {"id": f"extra_{k}", "kind": "strategy", "description": "padding", "body": body.strip()}
        data["skills"].append(skill)
        size += len(json.dumps(skill, separators=(",", ":"))) + 1
        k += 1
    return data


BIG = grown(1_170_000)  # the 1.17 MB manifest


def refused(call) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as caught:
        call()
    return [(e.path, e.message) for e in caught.value.errors]


def test_the_big_manifest_is_otherwise_valid():
    assert len(BIG["skills"]) < 200 and Manifest.model_validate(BIG)  # only its size is wrong


def test_yaml_json_text_and_object_are_refused_with_one_message():
    expected = [("", TOO_LARGE_MESSAGE)]
    assert refused(lambda: parse_manifest(BIG)) == expected
    assert refused(lambda: manifest_from_json(json.dumps(BIG))) == expected
    assert refused(lambda: manifest_from_json(json.dumps(BIG).encode())) == expected
    assert refused(lambda: manifest_from_yaml(yaml.safe_dump(BIG))) == expected
    assert refused(lambda: check_manifest_size(BIG)) == expected
    assert str(MAX_MANIFEST_BYTES) in TOO_LARGE_MESSAGE


def test_an_object_is_measured_in_utf8_bytes_of_compact_json():
    data = grown(0)
    data["description"] = ""
    pad = MAX_MANIFEST_BYTES - len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())
    data["description"] = "é" * (pad // 2 + 1)  # 2 bytes a character: over in bytes, under in characters
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    assert len(text) < MAX_MANIFEST_BYTES < len(text.encode())
    assert refused(lambda: check_manifest_size(data)) == [("", TOO_LARGE_MESSAGE)]
    data["description"] = "é" * (pad // 2 - 1)
    check_manifest_size(data)
    just_under = grown(0)
    just_under["skills"][0]["body"] = "x" * 20_000
    check_manifest_size(just_under)


def test_objects_json_refuses_are_measured_too():
    import datetime

    huge_keys = {datetime.date(2026, 1, i % 28 + 1) if i < 28 else f"k{i}": "v" * 40_000 for i in range(30)}
    assert refused(lambda: parse_manifest({"name": "x", "extra": huge_keys})) == [("", TOO_LARGE_MESSAGE)]
    deep: Any = "x" * 1_100_000
    for _ in range(3000):
        deep = [deep]
    assert refused(lambda: parse_manifest({"name": deep})) == [("", TOO_LARGE_MESSAGE)]


@pytest.mark.django_db
@pytest.mark.parametrize("form", ["object", "yaml", "json text"])
def test_the_api_refuses_every_form_alike(manager, form):
    api = APIClient()
    api.force_login(manager)
    body = {"object": {"manifest": BIG}, "yaml": {"manifest_yaml": yaml.safe_dump(BIG)},
            "json text": {"manifest_yaml": json.dumps(BIG)}}[form]  # JSON text is YAML too
    for url, extra in [("/api/validate", {}), ("/api/harnesses/", {"slug": "too-big", "name": "n"})]:
        response = api.post(url, {**body, **extra}, format="json")
        assert response.status_code == 400, (url, response.content[:200])
        assert response.json()["errors"] == [{"path": "", "message": TOO_LARGE_MESSAGE}]
    assert not Harness.objects.filter(slug="too-big").exists()


@pytest.mark.django_db
def test_the_pages_refuse_it_too(harness_with_history, client, manager):
    client.force_login(manager)
    response = client.post("/harnesses/new/", {"slug": "too-big", "name": "n", "source": "paste",
                                               "manifest_text": json.dumps(BIG)})
    assert response.status_code == 400 and "larger than" in response.content.decode()
    v3 = harness_with_history["v3"]
    response = client.post(f"/harnesses/glow-gadget/v{v3.number}/edit/", {
        "component": "yaml", "lock_version": v3.lock_version, "change_note": "", "yaml": yaml.safe_dump(BIG)})
    assert response.status_code == 400 and "larger than" in response.content.decode()
    assert HarnessVersion.objects.get(pk=v3.pk).lock_version == v3.lock_version
    assert not Harness.objects.filter(slug="too-big").exists()


@pytest.mark.django_db
def test_services_store_nothing_past_the_limit(harness_with_history, manager):
    from console.errors import ValidationFailed

    big = Manifest.model_validate(BIG)  # a Manifest built without the parser (HSA, importers, scripts)
    with pytest.raises(ValidationFailed) as caught:
        services.harness_create(user=manager, slug="too-big", name="n", manifest=big)
    assert caught.value.errors == [{"path": "", "message": TOO_LARGE_MESSAGE}]
    assert not Harness.objects.filter(slug="too-big").exists()
    v3 = harness_with_history["v3"]
    with pytest.raises(ValidationFailed):
        services.version_save_draft(user=manager, version=v3, manifest=big, lock_version=v3.lock_version)
    assert HarnessVersion.objects.get(pk=v3.pk).manifest_json == v3.manifest_json
