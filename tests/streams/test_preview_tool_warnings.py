"""The preview room says which tools would answer with a fault on this host (unbound, an http endpoint not on the
allow-list) before anyone sends a comment; a harness whose tools all answer shows nothing."""

from __future__ import annotations

import copy

import pytest
from django.urls import reverse

from harness_editor import services as registry
from harness_editor.schemas import manifest_to_json, parse_manifest
from streams import services


def _page(client, user, room) -> str:
    client.force_login(user)
    return client.get(reverse("streams:preview_room", args=[room.pk])).content.decode()


def test_tools_without_a_working_binding_are_named(client, manager, harness_with_history, scripted_model) -> None:
    data = copy.deepcopy(harness_with_history["v1"].manifest.model_dump(mode="json"))
    data["tools"][0]["binding"], data["tools"][0]["argument_map"] = None, {}
    data["tools"][1]["binding"] = {"kind": "http", "endpoint": "orders-api", "path": "/x"}
    data["tools"][1]["argument_map"] = {}
    draft = registry.version_create_draft(user=manager, harness=harness_with_history["harness"],
                                          manifest=parse_manifest(data),
                                          parent=harness_with_history["v1"])
    room = services.preview_open(user=manager, version=draft, endpoint=scripted_model)
    body = _page(client, manager, room)
    assert 'data-testid="tool-warnings"' in body
    assert "tools[0].binding" in body and "unbound" in body
    assert "tools[1].binding" in body and "orders-api" in body


def test_nothing_is_said_when_every_tool_answers(client, manager, harness_with_history, scripted_model) -> None:
    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    assert 'data-testid="tool-warnings"' not in _page(client, manager, room)
    assert manifest_to_json(harness_with_history["v1"].manifest)  # the built-in catalog: all bound
