"""Written gold turns under a harness that does not require a reply skill (issue 26 §6): the written-turn check
judges a turn by the harness's own conventions, as the turn engine does, so ``require_reply_skill: false`` lets a
turn answer without loading a skill; the live room's requirement still refuses one that loads none."""

from __future__ import annotations

import pytest

from harness_editor.schemas import parse_manifest
from training_jobs.hsa.samples import LoadSkill, Reply, ToolCall, load_demo_manifest, target_problems
from training_jobs.hsa.written import WrittenTurnError, written_sample

TURN = {"id": "status-a1002", "comment": "Where is my order A1002?",
        "calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1002"}}],
        "reply": "Order A1002 has shipped."}


def _desk(require_reply_skill: bool):
    data = load_demo_manifest("order_desk").model_dump(mode="json")
    if not require_reply_skill:
        data["conventions"] = {**data.get("conventions", {}), "require_reply_skill": False}
        data["hooks"] = [h for h in data["hooks"] if h["kind"] != "reply_skill_loaded"]
    return parse_manifest(data)


def test_a_turn_without_a_skill_is_accepted_when_the_harness_does_not_require_one():
    desk = _desk(require_reply_skill=False)
    sample = written_sample(desk, TURN)
    assert [type(s) for s in sample.target] == [ToolCall, Reply]
    assert target_problems(desk, sample, full=True) == []
    with_skill = written_sample(desk, {**TURN, "skill": "order_status"})  # loading one stays allowed
    assert [type(s) for s in with_skill.target] == [LoadSkill, ToolCall, Reply]


def test_the_live_room_requirement_still_refuses_a_turn_without_a_reply_skill():
    with pytest.raises(WrittenTurnError, match="no reply skill loaded"):
        written_sample(_desk(require_reply_skill=True), TURN)
