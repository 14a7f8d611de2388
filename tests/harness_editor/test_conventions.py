"""The manifest's conventions (issue 13, section 7): the live-room scaffolding (the ``[viewer]`` label, the
``load_skill`` line and the reply-skill requirement, the output-format lines, the fallback line) comes from the
manifest, with the live room's values as defaults. A manifest without the section serialises, hashes and renders
exactly as before the section existed. Pure Python: no Django, no database."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from harness_editor.render import LOAD_SKILL_INSTRUCTION, render_comments, render_prompt
from harness_editor.schemas import (
    DEFAULT_FALLBACK_REPLY,
    Conventions,
    ManifestError,
    content_hash,
    load_yaml,
    manifest_from_json,
    manifest_from_yaml,
    manifest_to_json,
    manifest_to_yaml,
    parse_manifest,
)
from streams.engine import hooks as H
from tests.harness_editor import render_reference

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"
LIVE_ROOM_HARNESSES = ("skincare_v1", "skincare_v2", "skincare_v3", "tiny_room")
ROOM = load_yaml((DEMO / "room.yaml").read_text(encoding="utf-8"))
COMMENTS = [{"viewer": "amy", "text": "how much is #101?"}, {"text": "and shipping?"}]

# The canonical JSON's sha256 of each committed live-room harness as stored before conventions existed (computed at
# the commit before the section was added): stored versions must keep their hash.
STORED_HASHES = {
    "skincare_v1": "5a3d59aecf2d",
    "skincare_v2": "fc678da870ec",
    "skincare_v3": "f8615760c918",
    "tiny_room": "e6a66f4d5079",
}


def _data(name: str) -> dict:
    return load_yaml((DEMO / f"{name}.yaml").read_text(encoding="utf-8"))


def _with(name: str, **conventions) -> dict:
    data = copy.deepcopy(_data(name))
    data["conventions"] = conventions
    return data


@pytest.mark.parametrize("name", LIVE_ROOM_HARNESSES)
def test_without_the_section_nothing_changes(name: str) -> None:
    m = manifest_from_yaml((DEMO / f"{name}.yaml").read_text(encoding="utf-8"))
    assert m.conventions == Conventions() and m.conventions.is_default()
    text = manifest_to_json(m)
    assert "conventions" not in text and "conventions" not in manifest_to_yaml(m)
    assert content_hash(m).startswith(STORED_HASHES[name])
    assert hashlib.sha256(text.encode()).hexdigest() == content_hash(m)
    # rendered exactly as the reference renderer (the renderer before conventions) renders it
    for layout in ("markdown", "xml", "json", "plain"):
        data = copy.deepcopy(_data(name))
        data["prompt"]["layout"] = layout
        lm = parse_manifest(data)
        ours = render_prompt(lm, room=ROOM, comments=COMMENTS)
        ref = render_reference.render_prompt(lm, room=ROOM, comments=COMMENTS)
        assert ours.messages == ref.messages and ours.tools == ref.tools
    assert render_comments(COMMENTS) == "[amy] how much is #101?\n[viewer] and shipping?"
    assert H.retry_policy(m.model_copy(update={"hooks": []}))[1] == DEFAULT_FALLBACK_REPLY


def test_explicit_defaults_are_the_same_manifest() -> None:
    """Writing the defaults down changes nothing: same canonical JSON, same hash (nothing to review)."""
    plain = manifest_from_yaml((DEMO / "tiny_room.yaml").read_text(encoding="utf-8"))
    spelled = parse_manifest(_with("tiny_room", speaker_label="viewer", require_reply_skill=True,
                                   load_skill_instruction=None, output_format=True, fallback_reply=None))
    assert manifest_to_json(spelled) == manifest_to_json(plain) and content_hash(spelled) == content_hash(plain)


def test_only_what_changed_is_written_and_it_round_trips() -> None:
    m = parse_manifest(_with("tiny_room", speaker_label="customer", fallback_reply="An agent will e-mail you."))
    data = json.loads(manifest_to_json(m))
    assert list(data)[-1] == "conventions"  # declared last
    assert data["conventions"] == {"speaker_label": "customer", "fallback_reply": "An agent will e-mail you."}
    assert content_hash(m) != content_hash(manifest_from_yaml((DEMO / "tiny_room.yaml").read_text()))
    for again in (manifest_from_json(manifest_to_json(m)), manifest_from_yaml(manifest_to_yaml(m))):
        assert manifest_to_json(again) == manifest_to_json(m)


def test_the_order_desk_reads_like_a_support_desk() -> None:
    m = manifest_from_yaml((DEMO / "order_desk.yaml").read_text(encoding="utf-8"))
    rendered = render_prompt(m, room=None, comments=[{"text": "where is my order A1002?"},
                                                     {"viewer": "dana", "text": "it's A1002"}])
    text = rendered.system_text
    assert rendered.messages[-1]["content"] == "[customer] where is my order A1002?\n[dana] it's A1002"
    assert m.conventions.load_skill_instruction in text and LOAD_SKILL_INSTRUCTION not in text
    assert "## How to answer\n- Plain text for a chat window, at most four short sentences." in text
    for live_room in ("[viewer]", "read aloud", "Speakable", "product card", "Reply length"):
        assert live_room not in text
    assert text.count("## ") == len(m.prompt.blocks)  # no block appended: the manifest has both generated roles
    assert H.retry_policy(m)[1] == m.conventions.fallback_reply
    bare = m.model_copy(update={"hooks": [h for h in m.hooks if h.kind != "retry_control"]})
    assert H.retry_policy(bare) == (H.DEFAULT_MAX_RETRIES, m.conventions.fallback_reply, None)


def test_output_format_off_adds_no_block_and_custom_lines_replace_the_constraints() -> None:
    data = _with("tiny_room", output_format=False)
    data["prompt"]["blocks"] = [b for b in data["prompt"]["blocks"] if b["role"] != "output_format"]
    text = render_prompt(parse_manifest(data)).system_text
    assert "OUTPUT FORMAT:" not in text and "Reply length" not in text
    kept = render_prompt(parse_manifest(_with("tiny_room", output_format=False))).system_text
    assert kept.endswith("OUTPUT:")  # the manifest's own block stays, with its own (empty) content
    custom = render_prompt(parse_manifest(_with("tiny_room", output_format=["Two sentences.", "No emoji."])))
    assert custom.system_text.endswith("OUTPUT:\n1. Two sentences.\n2. No emoji.")


def test_reply_skill_requirement() -> None:
    """Off: the prompt no longer asks for a reply skill, skills may all be strategies, and a hook that asks for one
    is an error at its own path (every error at once)."""
    data = _with("tiny_room", require_reply_skill=False)
    data["hooks"] = [h for h in data["hooks"] if h["kind"] != "reply_skill_loaded"]
    for s in data["skills"]:
        s["kind"] = "strategy"
    m = parse_manifest(data)
    text = render_prompt(m).system_text
    assert "Call load_skill(skill_id) to read a skill's instructions." in text
    assert "Load at least one reply skill" not in text

    with pytest.raises(ManifestError) as exc:  # the same skills with the live room's requirement
        parse_manifest({**data, "conventions": {}})
    assert [e.path for e in exc.value.errors] == ["skills"]

    clash = _with("tiny_room", require_reply_skill=False)
    with pytest.raises(ManifestError) as exc:
        parse_manifest(clash)
    i = next(i for i, h in enumerate(clash["hooks"]) if h["kind"] == "reply_skill_loaded")
    assert [e.path for e in exc.value.errors] == [f"hooks[{i}].kind"]
    assert "require_reply_skill" in exc.value.errors[0].message


@pytest.mark.parametrize("conventions, path", [
    ({"speaker_label": "[admin]"}, "conventions.speaker_label"),
    ({"speaker_label": ""}, "conventions.speaker_label"),
    ({"output_format": []}, "conventions.output_format"),
    ({"output_format": "on"}, "conventions.output_format"),
    ({"fallback_reply": "  "}, "conventions.fallback_reply"),
    ({"load_skill_instruction": ""}, "conventions.load_skill_instruction"),
    ({"speaker": "customer"}, "conventions.speaker"),
])
def test_bad_conventions_are_located(conventions: dict, path: str) -> None:
    with pytest.raises(ManifestError) as exc:
        parse_manifest(_with("tiny_room", **conventions))
    assert any(e.path == path or e.path.startswith(path + ".") or e.path.startswith(path + "[")
               for e in exc.value.errors), [e.path for e in exc.value.errors]
