"""Integration: the committed demo checkpoint behind the real local OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import time

import pytest

from training_jobs.tiny_model.gold import load_demo_room, load_tiny_manifest
from training_jobs.tiny_model.serve import DEMO_MODEL_DIR

pytestmark = pytest.mark.skipif(
    not (DEMO_MODEL_DIR / "model.safetensors").exists(), reason="models/demo-tiny is not built"
)


@pytest.fixture
def local_server(local_model_server):
    return local_model_server


def test_streaming_chat_completion_with_tools(local_server):
    from openai import OpenAI

    from harness_editor.render import render_prompt

    rendered = render_prompt(
        load_tiny_manifest(), room=load_demo_room(), comments=[{"viewer": "max", "text": "how much is #102?"}]
    )
    client = OpenAI(base_url=local_server.openai_base_url, api_key="local", timeout=60)
    t0 = time.perf_counter()
    first = None
    content, calls, chunks = [], {}, 0
    stream = client.chat.completions.create(
        model=local_server.model, messages=rendered.messages, tools=rendered.tools, stream=True, max_tokens=64,
    )
    for chunk in stream:
        if not chunk.choices:
            continue
        chunks += 1
        first = first if first is not None else time.perf_counter() - t0
        delta = chunk.choices[0].delta
        if delta.content:
            content.append(delta.content)
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function and tc.function.name:
                entry["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                entry["arguments"] += tc.function.arguments
    assert chunks > 1 and first is not None
    # the demo model answers a price question by loading its reply skill (a tool call) first
    assert calls, f"no tool call; content={''.join(content)!r}"
    call = calls[0]
    assert call["name"] in {t["function"]["name"] for t in rendered.tools}
    json.loads(call["arguments"]) if isinstance(call["arguments"], str) else call["arguments"]
