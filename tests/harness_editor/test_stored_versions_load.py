"""A stored version loads whatever the checks of the day: the tool-schema lint added later (unknown keywords,
``required`` names not in ``properties``) judges new input, not versions already stored nor manifests built from
them (HSA variants); new input still gets every error."""

from __future__ import annotations

import copy

import pytest
from django.db import connection

from harness_editor.models import HarnessVersion
from harness_editor.schemas import Manifest, ManifestError, manifest_to_json, parse_manifest


def _lint_only(demo_manifest) -> dict:
    data = copy.deepcopy(demo_manifest("skincare_v1").model_dump(mode="json"))
    schema = data["tools"][0]["parameters"]
    schema["requried"] = ["link_id"]  # a typo the meta-schema allows (unknown keywords are annotations)
    schema["required"] = [*schema.get("required", []), "not_a_property"]
    return data


def test_new_input_gets_the_lint(demo_manifest) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(_lint_only(demo_manifest))
    paths = [e.path for e in info.value.errors]
    assert any(p.endswith("parameters.requried") for p in paths)
    assert any(".parameters.required[" in p for p in paths)


def test_a_manifest_built_from_data_skips_the_lint(demo_manifest) -> None:
    assert Manifest.model_validate(_lint_only(demo_manifest)).tools[0].parameters["requried"] == ["link_id"]


@pytest.mark.django_db
def test_a_stored_version_from_before_the_lint_still_loads(harness_with_history, demo_manifest) -> None:
    v1 = harness_with_history["v1"]
    stored = manifest_to_json(Manifest.model_validate(_lint_only(demo_manifest)))
    with connection.cursor() as cursor:  # as stored before the lint existed (the trigger guards approved content)
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE harness_editor_harnessversion SET manifest_json = %s WHERE id = %s", [stored, v1.pk])
        cursor.execute("SET LOCAL session_replication_role = origin")
    loaded = HarnessVersion.objects.get(pk=v1.pk).manifest
    assert loaded.tools[0].parameters["requried"] == ["link_id"]
