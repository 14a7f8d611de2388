"""Helpers of the eval-set tests: small valid cases as JSON lines, and a real preview room with one finished turn
(the scripted loopback endpoint answers through the real client and the one turn engine)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.streams.preview_helpers import GOOD, price_script, scripted_model  # noqa: F401
from tests.streams.scripted_endpoint import scripted_endpoint  # noqa: F401

ROOM = yaml.safe_load((Path(__file__).resolve().parents[2] / "harness_editor" / "demo" / "room.yaml")
                      .read_text(encoding="utf-8"))


def t1_case(n: int, *, tags=("price",), text: str | None = None, **extra) -> dict:
    case = {
        "id": f"t1-{n:03d}", "kind": "t1", "harness": "skincare_v1", "room": copy.deepcopy(ROOM),
        "comments": [{"viewer": f"viewer{n}", "text": text or f"how much is the serum?? ({n})"}],
        "gold_facts": [{"binding": "catalog.product_info", "arguments": {"link_id": 101}, "field": "price",
                        "value": 24.9, "say": "24.9", "link_id": 101}],
        "expected_tools": [{"binding": "catalog.product_info", "arguments": {"link_id": 101}}],
        "expected_skills": ["price_stock_qa"],
        "forbidden_claims": [{"kind": "efficacy", "text": "heals acne"}],
        "tags": list(tags),
    }
    case.update(extra)
    return case


def t4_case(n: int, instruction: str = "punctuation:no_comma", **extra) -> dict:
    case = {"id": f"ifeval-{n}", "kind": "t4", "prompt": f"Write a haiku number {n} without commas.",
            "instruction_id_list": [instruction], "kwargs": [{}], "tags": [instruction.split(":")[0]]}
    case.update(extra)
    return case


def canonical_jsonl(cases: list[dict]) -> str:
    """What training_jobs.evals.cases.write_cases would write for these cases."""
    from training_jobs.evals.cases import cases_to_jsonl, parse_case

    return cases_to_jsonl([parse_case(c) for c in cases])


def loose_jsonl(cases: list[dict]) -> str:
    """The same cases written by hand: spaces, blank lines, CRLF."""
    return "\r\n".join(json.dumps(c, indent=None) for c in cases) + "\r\n\r\n"


@pytest.fixture
def preview_turn(manager, harness_with_history, scripted_model, scripted_endpoint,  # noqa: F811
                 django_capture_on_commit_callbacks):
    """A preview room of `manager` on glow-gadget v1 with one finished turn: load_skill → lookup_product 101 →
    GOOD (the price, list price and stock of #101). Returns (room, turn_id)."""
    from streams import services

    room = services.preview_open(user=manager, version=harness_with_history["v1"], endpoint=scripted_model)
    with django_capture_on_commit_callbacks(execute=False):
        turn_id = services.preview_comment_post(user=manager, room=room, text="how much is #101? and stock??")
    price_script(scripted_endpoint)
    result = services.preview_turn_run(room_id=room.pk, turn_id=turn_id)
    assert result.reply == GOOD and not result.fallback
    room.refresh_from_db()
    return room, turn_id
