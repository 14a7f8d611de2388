"""The turn engine end to end against the real local model: the committed demo checkpoint behind the
OpenAI-compatible server on loopback (tests/conftest.py ``local_model_server``). No scripted endpoint here.

The tiny model is weak on unseen wording (see models/demo-tiny/MODEL_CARD.md), so the assertions are about
the plumbing a real model exercises — streamed tokens, a parsed tool call executed through a binding, hook
verdicts and a speakable reply — on a comment phrased like its training data."""

from __future__ import annotations

import pytest

from streams.engine.client import ModelEndpoint, OpenAIChatClient
from streams.engine.events import event_adapter
from streams.engine.turn import ReplayBackend, run_turn
from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest


@pytest.fixture(scope="module")
def real_turn(local_model_server):
    client = OpenAIChatClient(ModelEndpoint(base_url=local_model_server.openai_base_url,
                                            model=local_model_server.model, timeout_s=60))
    manifest, room = load_tiny_manifest(), load_demo_room()
    result = run_turn(manifest=manifest, room=room, comments=[{"viewer": "max", "text": "how much is #102?"}],
                      backend=client, sampling={"temperature": 0.0})
    return manifest, result


def test_real_model_turn_streams_calls_tools_and_replies(real_turn):
    _, result = real_turn
    types = [e.type for e in result.events]
    assert types[0] == "comment_received" and types[-1] == "timings"
    assert "token" in types and "model_request" in types
    assert [e.seq for e in result.events] == sorted(e.seq for e in result.events)
    assert result.tool_calls, "the model made no tool call"
    tool_results = [e for e in result.events if e.type == "tool_result"]
    assert tool_results, "no tool was executed"
    assert any(e.type == "hook_result" for e in result.events)
    reply = next(e for e in result.events if e.type == "reply")
    assert reply.text.strip() and "<" not in reply.text  # speakable: no think/tool-call markup
    timings = result.events[-1]
    assert timings.ttft_ms is not None and timings.ttft_ms > 0 and timings.total_ms >= timings.model_ms


def test_real_model_turn_is_reproducible_from_its_events(real_turn):
    manifest, result = real_turn
    recorded = [event_adapter.validate_python(e.model_dump()) for e in result.events]
    replayed = run_turn(manifest=manifest, room=load_demo_room(),
                        comments=[{"viewer": "max", "text": "how much is #102?"}],
                        backend=ReplayBackend(recorded), turn_id=result.turn_id)
    assert replayed.reply == result.reply
    assert [(c.name, c.arguments) for c in replayed.tool_calls] == [(c.name, c.arguments) for c in result.tool_calls]
