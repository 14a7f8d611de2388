"""InteractionConstraints.turn_deadline_s: defaults, validation paths, canonical form and hash stability of
manifests written before the field existed, the diff, and the editor's constraints form. No database."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from harness_editor import forms
from harness_editor.diff import diff_manifests
from harness_editor.schemas import (
    DEFAULT_TURN_DEADLINE_S,
    InteractionConstraints,
    ManifestError,
    content_hash,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    manifest_to_json,
    manifest_to_yaml,
    parse_manifest,
)

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
MANIFESTS = ["skincare_v1.yaml", "skincare_v2.yaml", "skincare_v3.yaml", "tiny_room.yaml"]
V1 = load_yaml((DEMO / "skincare_v1.yaml").read_text(encoding="utf-8"))


def v1(**constraints: Any) -> dict[str, Any]:
    d = copy.deepcopy(V1)
    d["constraints"].update(constraints)
    return d


def errors_of(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(data)
    return {e.path: e.message for e in info.value.errors}


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifests_without_the_field_parse_with_the_default(name):
    text = (DEMO / name).read_text(encoding="utf-8")
    assert "turn_deadline_s" not in text
    m = manifest_from_yaml(text)
    assert m.constraints.turn_deadline_s == DEFAULT_TURN_DEADLINE_S == 20.0


@pytest.mark.parametrize("name", MANIFESTS)
def test_canonical_form_and_hash_of_old_manifests_do_not_change(name):
    # A version stored before the field existed: its canonical JSON has no turn_deadline_s. Parsing it and
    # writing it again must give the same bytes, so its content hash still matches the stored one.
    m = manifest_from_yaml((DEMO / name).read_text(encoding="utf-8"))
    stored = manifest_to_json(m)
    assert "turn_deadline_s" not in stored
    again = manifest_from_json(stored)
    assert manifest_to_json(again) == stored and content_hash(again) == content_hash(m)
    assert "turn_deadline_s" not in manifest_to_yaml(m)
    explicit = parse_manifest(v1(turn_deadline_s=20)) if name == "skincare_v1.yaml" else None
    if explicit is not None:  # writing the default explicitly is the same harness
        assert content_hash(explicit) == content_hash(m)


@pytest.mark.parametrize("value", [1, 2.5, 7, 300])
def test_a_set_deadline_round_trips_byte_stable(value):
    m = parse_manifest(v1(turn_deadline_s=value))
    assert m.constraints.turn_deadline_s == float(value)
    as_json = manifest_to_json(m)
    assert json.loads(as_json)["constraints"]["turn_deadline_s"] == float(value)
    assert list(json.loads(as_json)["constraints"])[-1] == "turn_deadline_s"  # declared last: old order kept
    assert manifest_to_json(manifest_from_json(as_json)) == as_json
    as_yaml = manifest_to_yaml(m)
    assert manifest_to_yaml(manifest_from_yaml(as_yaml)) == as_yaml
    assert manifest_to_json(manifest_from_yaml(as_yaml)) == as_json
    assert content_hash(m) != content_hash(parse_manifest(v1()))


@pytest.mark.parametrize(("value", "message"), [
    (0, "greater than or equal to 1"),
    (0.5, "greater than or equal to 1"),
    (301, "less than or equal to 300"),
    ("fast", "valid number"),
    ("20", "valid number"),
    (True, "valid number"),
    (None, "valid number"),
    (math.inf, "finite number"),
    (math.nan, "finite number"),
])
def test_invalid_deadlines_are_reported_at_their_path(value, message):
    errors = errors_of(v1(turn_deadline_s=value))
    assert list(errors) == ["constraints.turn_deadline_s"] and message in errors["constraints.turn_deadline_s"]


def test_deadline_errors_come_with_the_other_constraint_errors():
    errors = errors_of(v1(turn_deadline_s=0, turn_limit=0, language="english!"))
    assert {"constraints.turn_deadline_s", "constraints.turn_limit", "constraints.language"} <= set(errors)


def test_model_defaults():
    assert InteractionConstraints().turn_deadline_s == 20.0
    assert "turn_deadline_s" not in InteractionConstraints().model_dump()
    assert InteractionConstraints(turn_deadline_s=3).model_dump()["turn_deadline_s"] == 3.0


def test_diff_shows_a_deadline_change():
    old, new = parse_manifest(v1()), parse_manifest(v1(turn_deadline_s=5))
    [change] = diff_manifests(old, new).changes
    assert (change.component, change.key, change.path, change.before, change.after) == (
        "constraint", "turn_deadline_s", "constraints.turn_deadline_s", 20.0, 5.0)
    assert not change.breaking
    [back] = diff_manifests(new, old).changes
    assert (back.before, back.after) == (5.0, 20.0)
    assert diff_manifests(old, parse_manifest(v1(turn_deadline_s=20.0))).is_empty


# --- the editor's constraints form ------------------------------------------------------------------------


def test_form_shows_the_deadline_with_its_value():
    data = parse_manifest(v1()).model_dump(mode="json")
    state = forms.state_from_manifest("constraints", data)
    assert state["turn_deadline_s"] == 20.0 and list(state) == list(InteractionConstraints.model_fields)
    view = forms.editor_view("constraints", state, [], data)
    [field] = [f for f in view["fields"] if f["name"] == "turn_deadline_s"]
    assert (field["kind"], field["value"], field["default"]) == ("float", 20.0, 20.0)


def posted_state(base: dict[str, Any], deadline: str) -> Any:
    """What the browser posts for the constraints tab (strings, checkboxes "on"), with the deadline typed in."""
    from django.http import QueryDict

    post = QueryDict(mutable=True)
    for name, value in forms.state_from_manifest("constraints", base).items():
        if isinstance(value, bool):
            if value:
                post[name] = "on"
        else:
            post[name] = str(value)
    post["turn_deadline_s"] = deadline
    return forms.state_from_post("constraints", post)


@pytest.mark.parametrize(("posted", "expected"), [("7.5", 7.5), (" 12 ", 12.0), ("20.0", 20.0)])
def test_form_reads_the_deadline(posted, expected):
    base = parse_manifest(v1()).model_dump(mode="json")
    state = posted_state(base, posted)
    data, errors = forms.manifest_data_from_state("constraints", state, base)
    assert not errors
    assert parse_manifest(data).constraints.turn_deadline_s == expected


@pytest.mark.parametrize("posted", ["", "soon", "nan", "inf", "0"])
def test_form_errors_land_on_the_deadline_field(posted):
    base = parse_manifest(v1()).model_dump(mode="json")
    data, _ = forms.manifest_data_from_state("constraints", posted_state(base, posted), base)
    with pytest.raises(ManifestError) as info:
        parse_manifest(data)
    placed, rest = forms.errors_by_field("constraints", info.value.errors)
    assert list(placed) == ["turn_deadline_s"] and not rest


def test_history_turns_default_is_left_out_and_a_set_value_round_trips():
    from harness_editor.schemas import DEFAULT_HISTORY_TURNS

    m = parse_manifest(v1())
    assert m.constraints.history_turns == DEFAULT_HISTORY_TURNS and "history_turns" not in manifest_to_json(m)
    assert content_hash(parse_manifest(v1(history_turns=DEFAULT_HISTORY_TURNS))) == content_hash(m)
    zero = parse_manifest(v1(history_turns=0))
    assert '"history_turns":0' in manifest_to_json(zero).replace(" ", "")
    assert manifest_to_json(manifest_from_json(manifest_to_json(zero))) == manifest_to_json(zero)
    assert content_hash(zero) != content_hash(m)
    assert errors_of(v1(history_turns=-1)) == {"constraints.history_turns": "Input should be greater than or equal to 0"}
    # the tiny demo model's harness: every turn stands alone
    tiny = manifest_from_yaml((DEMO / "tiny_room.yaml").read_text(encoding="utf-8"))
    assert tiny.constraints.history_turns == 0
