"""The OpenAI-compatible streaming client against a real loopback HTTP server."""

from __future__ import annotations

import json
import time

import pytest

from streams.engine.client import ChatDelta, ModelEndpoint, ModelError, OpenAIChatClient
from tests.streams.scripted_endpoint import (
    Scripted,
    _chunk,
    finish_chunk,
    free_port,
    http_error,
    native_calls,
    reply,
    text_chunks,
)

OPENAI_CHAT_FIELDS = {
    "model", "messages", "stream", "tools", "tool_choice", "temperature", "max_tokens", "top_p", "seed", "stop",
    "stream_options", "frequency_penalty", "presence_penalty", "n", "logprobs", "user", "response_format",
}
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d",
                                           "parameters": {"type": "object", "properties": {}}}}]


def collect(client, **kw) -> list[ChatDelta]:
    return list(client.stream_chat(MESSAGES, TOOLS, **kw))


def test_streams_content_and_request_shape(scripted_endpoint, engine_client):
    scripted_endpoint.add(reply("Hello there, viewers!"))
    deltas = collect(engine_client(extra_body={"top_k": 20}), temperature=0.2, max_tokens=64, seed=7)
    assert "".join(d.content for d in deltas) == "Hello there, viewers!"
    assert deltas[-1].finish_reason == "stop" and deltas[-1].tool_calls == ()
    body = scripted_endpoint.requests[0]
    assert body["_path"] == "/v1/chat/completions"
    assert body["stream"] is True and body["tool_choice"] == "auto" and body["tools"] == TOOLS
    assert body["temperature"] == 0.2 and body["max_tokens"] == 64 and body["seed"] == 7
    assert set(body) - {"_path", "top_k"} <= OPENAI_CHAT_FIELDS  # only standard fields + extra_body
    assert body["top_k"] == 20


def test_no_tools_means_no_tool_choice(scripted_endpoint, engine_client):
    scripted_endpoint.add(reply("ok then"))
    list(engine_client().stream_chat(MESSAGES, []))
    assert "tools" not in scripted_endpoint.requests[0] and "tool_choice" not in scripted_endpoint.requests[0]


def test_reasoning_content_on_its_own_channel(scripted_endpoint, engine_client):
    scripted_endpoint.add(reply("The answer.", reasoning="let me think about prices"))
    deltas = collect(engine_client())
    assert "".join(d.reasoning for d in deltas) == "let me think about prices"
    assert "".join(d.content for d in deltas) == "The answer."


def test_native_tool_calls_accumulated_by_index(scripted_endpoint, engine_client):
    scripted_endpoint.add(native_calls(("lookup_product", {"link_id": 101}), ("check_stock", {"link_id": 102})))
    deltas = collect(engine_client())
    calls = [c for d in deltas for c in d.tool_calls]
    assert [(c.index, c.name, json.loads(c.arguments)) for c in calls] == [
        (0, "lookup_product", {"link_id": 101}), (1, "check_stock", {"link_id": 102})]
    assert calls[0].id == "chatcmpl-tool-0"
    assert deltas[-1].finish_reason == "tool_calls"


def test_leaked_special_tokens_stripped_even_across_chunks(scripted_endpoint, engine_client):
    scripted_endpoint.add(reply("Price is on the card.<|im_end|><|endoftext|>", size=3))
    text = "".join(d.content for d in collect(engine_client()))
    assert text == "Price is on the card."


def test_http_500_is_a_model_error(scripted_endpoint, engine_client):
    scripted_endpoint.add(http_error(500, '{"error": "Failed to parse tool call JSON"}'))
    with pytest.raises(ModelError) as info:
        collect(engine_client())
    assert info.value.kind == "http" and info.value.status == 500 and info.value.transient
    assert "tool call JSON" in info.value.message


def test_http_4xx_is_not_transient(scripted_endpoint, engine_client):
    scripted_endpoint.add(http_error(422, '{"detail": "Unexpected fields"}'))
    with pytest.raises(ModelError) as info:
        collect(engine_client())
    assert info.value.status == 422 and not info.value.transient


def test_endpoint_that_never_answers_times_out(scripted_endpoint, engine_client):
    scripted_endpoint.add(Scripted(chunks=text_chunks("late"), hang_s=5))
    start = time.monotonic()
    with pytest.raises(ModelError) as info:
        collect(engine_client(timeout_s=0.4))
    assert info.value.kind == "timeout"
    assert time.monotonic() - start < 2.0


def test_stream_that_stalls_midway_times_out(scripted_endpoint, engine_client):
    scripted_endpoint.add(Scripted(chunks=text_chunks("some words then silence"), stall_after=2, stall_s=5))
    got: list[str] = []
    with pytest.raises(ModelError) as info:
        for d in engine_client(timeout_s=0.4).stream_chat(MESSAGES, TOOLS):
            got.append(d.content)
    assert info.value.kind == "timeout" and "".join(got)  # tokens before the stall were delivered


def test_total_deadline_with_a_trickling_server(scripted_endpoint, engine_client):
    # Every chunk arrives within the read timeout, but the whole response would take too long.
    chunks = text_chunks("x" * 40, size=1)
    scripted_endpoint.add(Scripted(chunks=chunks, stall_after=1, stall_s=0.3))
    endpoint_client = engine_client(timeout_s=0.2, read_timeout_s=1.0)
    with pytest.raises(ModelError) as info:
        collect(endpoint_client)
    assert info.value.kind == "timeout"


def test_connection_refused(engine_client):
    c = engine_client(base_url=f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(ModelError) as info:
        collect(c)
    assert info.value.kind == "connect"


def test_garbage_chunk_and_in_stream_error(scripted_endpoint, engine_client):
    scripted_endpoint.add(Scripted(chunks=["{not json"]), Scripted(chunks=[{"error": {"message": "boom", "code": 503}}]))
    with pytest.raises(ModelError) as a:
        collect(engine_client())
    assert a.value.kind == "protocol"
    with pytest.raises(ModelError) as b:
        collect(engine_client())
    assert b.value.kind == "http" and b.value.status == 503


def test_missing_done_marker_still_finishes(scripted_endpoint, engine_client):
    scripted_endpoint.add(Scripted(chunks=text_chunks("no done marker") + [finish_chunk()], done=False))
    assert "".join(d.content for d in collect(engine_client())) == "no done marker"


def test_api_key_sent_as_bearer(scripted_endpoint, engine_client):
    # the server records bodies only; check the header through the client's own config
    c = engine_client(api_key="sk-test")
    assert c._http.headers["Authorization"] == "Bearer sk-test"
    scripted_endpoint.add(Scripted(chunks=[_chunk({"content": "ok"})]))
    assert "".join(d.content for d in collect(c)) == "ok"


def test_endpoint_config_is_validated():
    with pytest.raises(ValueError):
        ModelEndpoint(base_url="http://x/v1", model="m", kind="tgi")
    with pytest.raises(ValueError):
        ModelEndpoint(base_url="http://x/v1", model="m", timeout_s=0)
    ep = ModelEndpoint(base_url="http://x/v1/", model="m")
    assert OpenAIChatClient(ep).url == "http://x/v1/chat/completions"


def test_tool_call_deltas_without_index(scripted_endpoint, engine_client):
    scripted_endpoint.add(Scripted(chunks=[
        _chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x"'}}]}),
        _chunk({"tool_calls": [{"function": {"arguments": ': 1}'}}]}),
        _chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": {"y": 2}}}]}),
        finish_chunk("tool_calls"),
    ]))
    calls = [c for d in collect(engine_client()) for c in d.tool_calls]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [("a", "f", {"x": 1}), ("b", "g", {"y": 2})]
