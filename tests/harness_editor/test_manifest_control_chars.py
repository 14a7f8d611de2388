"""NUL and other C0 control characters (all but tab and line breaks) in any manifest string are refused with the
manifest's path-precise error, whichever way the manifest enters: YAML (``"\\0"``), JSON text (``\\u0000``),
the API. A NUL reached PostgreSQL (jsonb refuses it: a 500) and the rest reached the model and the TTS voice.
JSON text nested past the decoder's recursion limit is a manifest error too, not a RecursionError."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from harness_editor.models import Harness
from harness_editor.schemas import ManifestError, manifest_from_json, manifest_from_yaml, parse_manifest


def _errors(call) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as caught:
        call()
    return [(e.path, e.message) for e in caught.value.errors]


def test_control_characters_anywhere_are_located(demo_manifest):
    data = demo_manifest("skincare_v1").model_dump(mode="json")
    data["name"] = "Glow\x00"
    data["skills"][1]["body"] = "tabs\tand\r\nbreaks are fine"
    data["prompt"]["blocks"][0]["items"] = ["ok", "bell\x07"]
    data["tools"][0]["parameters"]["properties"]["sku\x1b"] = {"type": "string"}
    errors = _errors(lambda: parse_manifest(data))
    # in document order
    assert [path for path, _ in errors] == ["name", "tools[0].parameters.properties", "prompt.blocks[0].items[1]"]
    assert "'\\x00'" in errors[0][1] and "sku" in errors[1][1] and "'\\x07'" in errors[2][1]


def test_yaml_and_json_text_escapes_are_refused(demo_yaml):
    text = demo_yaml("skincare_v1").replace("name: ", 'name: "Glow\\0" #', 1)
    assert _errors(lambda: manifest_from_yaml(text))[0][0] == "name"
    data = manifest_from_yaml(demo_yaml("skincare_v1")).model_dump(mode="json")
    data["description"] = "soft\x01hyphen"
    assert _errors(lambda: manifest_from_json(json.dumps(data)))[0][0] == "description"


@pytest.mark.parametrize("text", ["[" * 5_000 + "]" * 5_000, '{"a": ' * 990 + "1" + "}" * 990])
def test_json_text_nested_too_deeply_is_a_manifest_error(text):
    assert _errors(lambda: manifest_from_json(text)) == [("", "invalid JSON: nested too deeply")]


@pytest.mark.django_db
def test_api_and_page_refuse_them_and_save_nothing(manager, demo_yaml, demo_manifest):
    api = APIClient()
    api.force_login(manager)
    yaml_text = demo_yaml("skincare_v1").replace("name: ", 'name: "Glow\\0" #', 1)
    response = api.post("/api/harnesses/", {"slug": "ctl-yaml", "name": "n", "manifest_yaml": yaml_text},
                        format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_manifest"
    assert [e["path"] for e in response.json()["errors"]] == ["name"]

    data = demo_manifest("skincare_v1").model_dump(mode="json")
    data["skills"][0]["description"] = "escape\x1b[31m"  # not NUL: the JSON parser lets it through
    response = api.post("/api/validate", {"manifest": data}, format="json")
    assert response.status_code == 400 and [e["path"] for e in response.json()["errors"]] == [
        "skills[0].description"]

    page = Client()
    page.force_login(manager)
    data["skills"][0]["description"] = "nul\x00"
    response = page.post("/harnesses/new/", {"slug": "ctl-page", "name": "n", "source": "paste",
                                             "manifest_text": json.dumps(data)})  # "\u0000" in the text
    assert response.status_code == 400 and b"skills[0].description" in response.content
    assert not Harness.objects.filter(slug__startswith="ctl-").exists()
