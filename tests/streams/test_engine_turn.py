"""The turn engine end to end, through the real HTTP client against a scripted loopback endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streams.engine.client import ModelEndpoint, OpenAIChatClient
from streams.engine.events import event_adapter, events_adapter
from streams.engine.faults import MALFORMED_RESULT, ToolFault
from streams.engine.turn import HOOK_FEEDBACK_PREFIX, ReplayBackend, run_turn
from tests.streams.scripted_endpoint import (
    Scripted,
    free_port,
    hermes_calls,
    http_error,
    native_calls,
    reply,
    text_chunks,
)

GOOD = "The HydraGlow serum is $24.9 right now, list price $34, and we have 180 in stock."
LOAD_PRICE_SKILL = ("load_skill", {"skill_id": "price_stock_qa"})
LOOKUP_101 = ("lookup_product", {"link_id": 101})
COMMENT = [{"viewer": "amy", "text": "how much is #101?"}]


def run(endpoint_client, manifest, room, comments=COMMENT, **kw):
    return run_turn(manifest=manifest, room=room, comments=comments, backend=endpoint_client, **kw)


def types(result):
    return [e.type for e in result.events]


def of(result, kind):
    return [e for e in result.events if e.type == kind]


def tool_messages(request):
    return [m for m in request["messages"] if m["role"] == "tool"]


def happy_script(ep):
    ep.add(hermes_calls(LOAD_PRICE_SKILL), native_calls(LOOKUP_101), reply(GOOD))


def with_hook(manifest, hook_id, **changes):
    hooks = [h.model_copy(update=changes) if h.id == hook_id else h for h in manifest.hooks]
    return manifest.model_copy(update={"hooks": hooks})


def with_constraints(manifest, **changes):
    return manifest.model_copy(update={"constraints": manifest.constraints.model_copy(update=changes)})


# --- the happy path -------------------------------------------------------------------------------------


def test_happy_turn_load_skill_tool_and_price(scripted_endpoint, engine_client, engine_manifest, engine_room):
    happy_script(scripted_endpoint)
    r = run(engine_client(), engine_manifest, engine_room, sampling={"temperature": 0.3, "max_tokens": 200})
    assert (r.reply, r.fallback, r.reason) == (GOOD, False, "ok")
    assert r.loaded_skills == ["price_stock_qa"]
    assert [(c.name, c.source) for c in r.tool_calls] == [("load_skill", "text"), ("lookup_product", "native")]
    t = types(r)
    assert t[:3] == ["comment_received", "hook_result", "prompt_built"]
    assert t[-2:] == ["reply", "timings"]
    for needed in ("model_request", "token", "tool_call", "skill_loaded", "tool_result", "hook_result"):
        assert needed in t
    product = [e for e in of(r, "tool_result") if e.name == "lookup_product"][0]
    assert product.binding == "catalog.product_info" and product.result["price"] == 24.9 and product.error is None
    before_reply = [e for e in of(r, "hook_result") if e.point == "before_reply"]
    assert {e.kind for e in before_reply} == {"reply_skill_loaded", "reply_format", "banned_phrases", "factual_risk",
                                              "quality", "relevance", "language", "tone"}
    assert all(e.passed for e in before_reply)
    timings = r.timings
    assert timings.rounds == 2 and timings.retries == 0 and timings.model_calls == 3
    assert timings.ttft_ms is not None and timings.total_ms >= timings.model_ms

    reqs = scripted_endpoint.requests
    assert len(reqs) == 3 and all(q["temperature"] == 0.3 and q["max_tokens"] == 200 for q in reqs)
    # the skill body went back as the load_skill result; the tool result as JSON with its call id
    second = reqs[1]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["function"]["name"] == "load_skill"
    assert second[-1]["role"] == "tool" and second[-1]["content"].startswith("# Price and stock questions")
    third = reqs[2]["messages"]
    assert third[-1]["tool_call_id"] == "chatcmpl-tool-0" and json.loads(third[-1]["content"])["price"] == 24.9
    # tool-call arguments in the transcript are JSON strings (vLLM parses them)
    for m in third:
        for tc in m.get("tool_calls") or []:
            assert isinstance(json.loads(tc["function"]["arguments"]), dict)
    assert r.messages[-1] == {"role": "assistant", "content": GOOD}


def test_emit_receives_every_event_in_order(scripted_endpoint, engine_client, engine_manifest, engine_room):
    happy_script(scripted_endpoint)
    seen = []
    r = run(engine_client(), engine_manifest, engine_room, emit=seen.append, turn_id="t-1")
    assert seen == r.events
    assert [e.seq for e in r.events] == list(range(len(r.events)))
    assert all(a.t_ms <= b.t_ms for a, b in zip(r.events, r.events[1:]))
    assert {e.turn_id for e in r.events} == {"t-1"}
    dumped = json.dumps([e.model_dump(mode="json") for e in r.events])
    assert events_adapter.validate_json(dumped) == r.events
    for e in r.events:
        assert event_adapter.validate_json(e.model_dump_json()) == e


# --- tool calls: both formats, and everything that can go wrong with them --------------------------------


def test_hermes_text_tool_calls_with_string_arguments(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(
        hermes_calls(LOAD_PRICE_SKILL, ("lookup_product", json.dumps({"link_id": 101})), prefix="Let me check. "),
        reply(GOOD),
    )
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "ok"
    calls = of(r, "tool_call")
    assert [(c.name, c.source, c.valid, c.arguments) for c in calls] == [
        ("load_skill", "text", True, {"skill_id": "price_stock_qa"}),
        ("lookup_product", "text", True, {"link_id": 101}),
    ]
    assert "tool_call" not in r.reply


def test_malformed_tool_json_becomes_a_tool_error(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(
        reply('<tool_call>{"name": "lookup_product", "arguments": {"link_id": 101</tool_call>'),
        native_calls(("lookup_product", '{"link_id": 1')),
        hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101),
        reply(GOOD),
    )
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "ok" and r.reply == GOOD
    bad = [c for c in of(r, "tool_call") if not c.valid]
    assert len(bad) == 2 and all("not valid JSON" in c.error for c in bad)
    assert bad[0].source == "text" and bad[0].name == "lookup_product" and bad[1].source == "native"
    seen_by_model = json.loads(tool_messages(scripted_endpoint.requests[1])[0]["content"])
    assert seen_by_model["code"] == "invalid_json"
    # the broken call is replayed to the endpoint with valid JSON arguments
    call = scripted_endpoint.requests[2]["messages"][-2]["tool_calls"][0]["function"]
    assert call["arguments"] == "{}"


def test_unknown_tool_is_an_error_the_model_sees(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(native_calls(("get_price", {"link_id": 101})), hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101),
                          reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "ok"
    first = of(r, "tool_call")[0]
    assert first.name == "get_price" and not first.valid and "unknown tool" in first.error
    msg = json.loads(tool_messages(scripted_endpoint.requests[1])[0]["content"])
    assert msg["code"] == "unknown_tool" and "lookup_product" in msg["error"]


def test_schema_invalid_arguments_fail_tool_args_hook(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(native_calls(("lookup_product", {"link_id": "one-oh-one", "color": "red"})),
                          hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "ok"
    first = of(r, "tool_call")[0]
    assert not first.valid and "schema" in first.error
    hook = [h for h in of(r, "hook_result") if h.kind == "tool_args"][0]
    assert not hook.passed and "link_id" in hook.detail
    msg = json.loads(tool_messages(scripted_endpoint.requests[1])[0]["content"])
    assert msg["code"] == "invalid_arguments" and "Check the parameter names" in msg["error"]  # the hook message
    assert not [e for e in of(r, "tool_result") if e.binding and e.error is None and e.call_id == first.call_id]


def test_tool_args_hook_block_ends_turn(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_hook(engine_manifest, "tool-args", on_fail="block")
    scripted_endpoint.add(native_calls(("lookup_product", {"link_id": "x"})))
    r = run(engine_client(), m, engine_room)
    assert r.fallback and r.reason == "blocked:tool-args" and len(scripted_endpoint.requests) == 1


def test_unknown_skill_id(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "nope"})), hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101),
                          reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "ok" and r.loaded_skills == ["price_stock_qa"]
    assert "unknown skill" in json.loads(tool_messages(scripted_endpoint.requests[1])[0]["content"])["error"]


def test_tool_round_limit(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_constraints(engine_manifest, max_tool_rounds=1)
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL), native_calls(LOOKUP_101), reply("Check the card on screen for the price!"))
    r = run(engine_client(), m, engine_room)
    assert r.reason == "ok" and r.timings.rounds == 1
    refused = json.loads(tool_messages(scripted_endpoint.requests[2])[-1]["content"])
    assert refused["code"] == "round_limit"
    assert not [e for e in of(r, "tool_result") if e.name == "lookup_product" and e.error is None]


def test_turn_limit_bounds_model_calls(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_constraints(engine_manifest, turn_limit=3, max_tool_rounds=10)
    scripted_endpoint.add(*[native_calls(LOOKUP_101) for _ in range(5)])
    r = run(engine_client(), m, engine_room)
    assert r.fallback and r.reason == "turn_limit" and len(scripted_endpoint.requests) == 3


# --- the endpoint failing --------------------------------------------------------------------------------


def test_endpoint_timeout_gives_fallback(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(Scripted(chunks=text_chunks("late"), hang_s=5))
    r = run(engine_client(timeout_s=0.3), engine_manifest, engine_room)
    assert r.fallback and r.reason == "model_error"
    assert r.reply == engine_manifest.hooks[-1].fallback_reply
    err = of(r, "error")[0]
    assert (err.stage, err.kind) == ("model", "timeout")
    assert types(r)[-2:] == ["reply", "timings"]


def test_http_500_retried_once_then_fallback(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(http_error(500, '{"error": "malformed tool call JSON"}'), http_error(500))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.fallback and r.reason == "model_error"
    assert [(e.attempt, e.call_index) for e in of(r, "model_request")] == [(1, 0), (2, 1)]
    assert [(e.kind, e.status) for e in of(r, "error")] == [("http", 500), ("http", 500)]


def test_http_500_then_success(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(http_error(500), hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "ok" and r.reply == GOOD


def test_http_400_not_retried(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(http_error(400), reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reason == "model_error" and len(scripted_endpoint.requests) == 1


def test_connection_refused_gives_fallback(engine_manifest, engine_room):
    client = OpenAIChatClient(ModelEndpoint(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m",
                                            connect_timeout_s=1, timeout_s=2))
    r = run(client, engine_manifest, engine_room)
    assert r.fallback and of(r, "error")[0].kind == "connect"


def test_backend_bug_does_not_crash(engine_manifest, engine_room):
    class Broken:
        def stream_chat(self, messages, tools, **kw):
            raise RuntimeError("backend exploded")
            yield  # pragma: no cover

    r = run(Broken(), engine_manifest, engine_room)
    assert r.fallback and "backend exploded" in of(r, "error")[0].message


# --- hooks before the reply: retry, exhaustion, block -------------------------------------------------------


def test_hook_retry_then_success(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101),
                          reply("It is only $21.5 today, grab it!"), reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert (r.reply, r.fallback, r.timings.retries) == (GOOD, False, 1)
    risk = [e for e in of(r, "hook_result") if e.kind == "factual_risk"]
    assert [e.passed for e in risk] == [False, True] and "$21.5" in risk[0].detail
    retry = of(r, "retry")[0]
    assert retry.hook_id == "facts-backed" and retry.attempt == 1
    last = scripted_endpoint.requests[-1]["messages"]
    assert last[-2] == {"role": "assistant", "content": "It is only $21.5 today, grab it!"}
    assert last[-1]["role"] == "user" and last[-1]["content"].startswith(HOOK_FEEDBACK_PREFIX)
    assert "use its exact number" in last[-1]["content"]


def test_retry_exhaustion_gives_fallback(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL), *[reply("**Only $5!** https://cheap.example.com") for _ in range(3)])
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.fallback and r.reason == "retries_exhausted" and r.timings.retries == 2
    assert r.reply == "Let me double-check that for you. The product card on screen has the latest details!"
    rc = [e for e in of(r, "hook_result") if e.kind == "retry_control"]
    assert [e.passed for e in rc] == [True, True, False]
    assert len(of(r, "retry")) == 2 and len(scripted_endpoint.requests) == 4


def test_reply_without_skill_retries(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(reply("Hi there, welcome to the room!"), hermes_calls(("load_skill", {"skill_id": "chit_chat"})),
                          reply("Hi there, welcome to the room!"))
    r = run(engine_client(), engine_manifest, engine_room, comments=[{"viewer": "bo", "text": "hello!"}])
    assert r.reason == "ok" and of(r, "retry")[0].hook_id == "reply-skill-loaded"


def test_block_hook_gives_fallback_without_retry(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_hook(engine_manifest, "banned-medical-claims", on_fail="block")
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "efficacy_compliance"})),
                          reply("This serum cures acne in a week, trust me."))
    r = run(engine_client(), m, engine_room)
    assert r.fallback and r.reason == "blocked:banned-medical-claims" and not of(r, "retry")
    assert "cures acne" not in r.reply


def test_empty_reply_is_retried(scripted_endpoint, engine_client, engine_manifest, engine_room):
    m = with_constraints(engine_manifest, reply_min_chars=0)
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL), reply("<think>nothing to say</think>"), reply("Welcome in, friends!"))
    r = run(engine_client(), m, engine_room, comments=[{"viewer": "amy", "text": "hi everyone!"}])
    assert r.reason == "ok" and r.reply == "Welcome in, friends!" and r.timings.retries == 1


def test_viewer_input_retry_adds_note_and_block_skips_model(scripted_endpoint, engine_client, engine_manifest, engine_room):
    comments = [{"viewer": "sam", "text": "DM me on telegram for a cheaper deal"}]
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "chit_chat"})),
                          reply("We only sell right here in the live room, friends!"))
    r = run(engine_client(), engine_manifest, engine_room, comments=comments)
    assert r.reason == "ok"
    v = of(r, "hook_result")[0]
    assert v.kind == "viewer_input" and not v.passed and "telegram" in v.detail
    assert scripted_endpoint.requests[0]["messages"][-1]["content"].startswith(HOOK_FEEDBACK_PREFIX)

    blocked = with_hook(engine_manifest, "viewer-input-guard", on_fail="block")
    n = len(scripted_endpoint.requests)
    r2 = run(engine_client(), blocked, engine_room, comments=comments)
    assert r2.fallback and r2.reason == "blocked:viewer-input-guard" and len(scripted_endpoint.requests) == n
    assert "model_request" not in types(r2)


def test_long_comment_truncated(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(hermes_calls(("load_skill", {"skill_id": "chit_chat"})), reply("Thanks for the long note, friend!"))
    r = run(engine_client(), engine_manifest, engine_room, comments=[{"viewer": "kim", "text": "a" * 500}])
    assert of(r, "comment_received")[0].truncated
    user = [m for m in scripted_endpoint.requests[0]["messages"] if m["role"] == "user"][0]
    assert len(user["content"]) < 320


# --- faults ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["catalog.product_info", "lookup_product"])
@pytest.mark.parametrize("kind", ["timeout", "malformed", "permission_denied", "slow"])
def test_tool_faults(scripted_endpoint, engine_client, engine_manifest, engine_room, kind, key):
    fault = ToolFault(binding=key, kind=kind, delay_ms=30 if kind == "slow" else 0)
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), reply(GOOD), reply("Please check the product card on screen!"))
    r = run(engine_client(), engine_manifest, engine_room, faults={key: fault})
    res = [e for e in of(r, "tool_result") if e.name == "lookup_product"][0]
    assert res.fault == kind
    seen = tool_messages(scripted_endpoint.requests[1])[-1]["content"]
    if kind == "slow":
        assert res.duration_ms >= 30 and json.loads(seen)["price"] == 24.9 and res.error is None
        assert r.reason == "ok" and r.reply == GOOD
        return
    if kind == "malformed":
        assert seen == MALFORMED_RESULT
        with pytest.raises(ValueError):
            json.loads(seen)
    else:
        assert json.loads(seen)["code"] == kind
        assert "timed out" in res.error if kind == "timeout" else "permission denied" in res.error
    # the price in GOOD is no longer backed by a tool result: factual risk sends the model back
    risk = [e for e in of(r, "hook_result") if e.kind == "factual_risk"]
    assert not risk[0].passed and risk[-1].passed
    assert r.reply == "Please check the product card on screen!"


def test_fault_on_coupon_still_mutates_for_malformed_only(scripted_endpoint, engine_client, engine_manifest, engine_room):
    call = ("issue_coupon", {"coupon_code": "GLOW5", "viewer_id": "amy"})
    scripted_endpoint.add(hermes_calls(call))
    run(engine_client(), engine_manifest, engine_room, faults={"coupons.issue": ToolFault(binding="coupons.issue", kind="permission_denied")})
    assert engine_room["coupons"][0]["remaining"] == 200
    scripted_endpoint.add(hermes_calls(call))
    run(engine_client(), engine_manifest, engine_room, faults={"coupons.issue": ToolFault(binding="coupons.issue", kind="malformed")})
    assert engine_room["coupons"][0]["remaining"] == 199


# --- what reaches the viewer -------------------------------------------------------------------------------


def test_reasoning_never_reaches_the_reply(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(
        hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101),
        reply("<think>maybe say $99 to sound fancy</think>" + GOOD, reasoning="the serum costs about $12, guess"),
    )
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reply == GOOD and r.reason == "ok"
    assert "$99" not in r.reply and "$12" not in r.reply
    assert any(e.channel == "reasoning" for e in of(r, "token"))
    assert "think" not in r.messages[-1]["content"]


def test_unclosed_think_and_leaked_im_end(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), reply(GOOD + "<|im_end|>"))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reply == GOOD

    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), reply(GOOD + "<think>and then $5<|im_end|>"))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reply == GOOD and "<|" not in r.reply


# --- replay -------------------------------------------------------------------------------------------------


def _comparable(events):
    drop = {"t_ms", "duration_ms", "ttft_ms", "model_ms", "tool_ms", "engine_ms", "total_ms"}
    return [e.model_dump(mode="json", exclude=drop) for e in events]


def test_replay_reproduces_the_turn(scripted_endpoint, engine_client, engine_manifest, engine_room, _engine_demo_room):
    import copy

    scripted_endpoint.add(
        reply("<think>price question</think>", reasoning="load the skill first"),  # empty reply → retry
        hermes_calls(LOAD_PRICE_SKILL),
        native_calls(LOOKUP_101, ("check_stock", '{"link_id": 10')),
        http_error(500),
        reply("It is $21.5!"),
        reply(GOOD + "<|im_end|>"),
    )
    faults = {"check_stock": ToolFault(binding="check_stock", kind="slow", delay_ms=1)}
    recorded = run(engine_client(), engine_manifest, engine_room, turn_id="rec-1", faults=faults)
    assert recorded.reason == "ok" and recorded.timings.retries == 2

    stored = json.dumps([e.model_dump(mode="json") for e in recorded.events])
    loaded = events_adapter.validate_json(stored)
    replayed = run_turn(manifest=engine_manifest, room=copy.deepcopy(_engine_demo_room), comments=COMMENT,
                        backend=ReplayBackend(loaded), turn_id="rec-1", faults=faults)
    assert replayed.reply == recorded.reply
    assert [(c.name, c.arguments_raw) for c in replayed.tool_calls] == [(c.name, c.arguments_raw) for c in recorded.tool_calls]
    assert [(v.hook_id, v.passed) for v in replayed.verdicts] == [(v.hook_id, v.passed) for v in recorded.verdicts]
    assert _comparable(replayed.events) == _comparable(recorded.events)
    assert replayed.messages == recorded.messages


def test_replay_of_a_failed_turn_and_from_plain_dicts(scripted_endpoint, engine_client, engine_manifest, engine_room):
    scripted_endpoint.add(Scripted(chunks=text_chunks("partial answer"), stall_after=1, stall_s=5))
    recorded = run(engine_client(timeout_s=0.3), engine_manifest, engine_room, turn_id="x")
    assert recorded.reason == "model_error"
    dicts = [e.model_dump(mode="json") for e in recorded.events]
    replayed = run(ReplayBackend(dicts), engine_manifest, engine_room, turn_id="x")
    assert _comparable(replayed.events) == _comparable(recorded.events)


def test_replay_runs_out_cleanly(engine_manifest, engine_room):
    r = run(ReplayBackend([]), engine_manifest, engine_room)
    assert r.fallback and of(r, "error")[0].kind == "replay"


# --- plain Python ------------------------------------------------------------------------------------------


def test_engine_imports_no_django():
    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys\n"
        "import streams.engine.turn, streams.engine.client, streams.engine.hooks, streams.engine.events, "
        "streams.engine.toolcalls, streams.engine.faults, streams.engine\n"
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith(('django.', 'rest_framework', 'channels')))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_history_goes_before_the_comments(scripted_endpoint, engine_client, engine_manifest, engine_room):
    history = [{"role": "user", "content": "[amy] hi"}, {"role": "assistant", "content": "Hi Amy, welcome!"}]
    happy_script(scripted_endpoint)
    r = run(engine_client(), engine_manifest, engine_room, history=history)
    sent = scripted_endpoint.requests[0]["messages"]
    assert sent[1:3] == history and sent[3]["content"] == "[amy] how much is #101?"
    assert r.messages[1:3] == history


def test_comment_shapes_are_normalised(scripted_endpoint, engine_client, engine_manifest, engine_room):
    happy_script(scripted_endpoint)
    r = run(engine_client(), engine_manifest, engine_room,
            comments=["is 101 on sale?", {"user": "bo", "user_id": "u7", "content": "price?"}])
    got = [(e.viewer, e.viewer_id, e.text) for e in of(r, "comment_received")]
    assert got == [("viewer", "viewer", "is 101 on sale?"), ("bo", "u7", "price?")]
    assert r.reason == "ok"


def test_emit_exception_cancels_the_turn(scripted_endpoint, engine_client, engine_manifest, engine_room):
    class Cancelled(Exception):
        pass

    def emit(event):
        if event.type == "token":
            raise Cancelled

    happy_script(scripted_endpoint)
    with pytest.raises(Cancelled):
        run(engine_client(), engine_manifest, engine_room, emit=emit)


# --- dialogue history ---------------------------------------------------------------------------------------

HISTORY = [
    {"role": "user", "content": "[ann] hi"}, {"role": "assistant", "content": "Hi ann, welcome!"},
    {"role": "user", "content": "[bo] price of #101?"}, {"role": "assistant", "content": "It is $24.9 now."},
    {"role": "user", "content": "[cara] any coupons?"}, {"role": "assistant", "content": "Use code GLOW5."},
]


@pytest.mark.parametrize("turns, kept", [(0, 0), (1, 2), (2, 4), (3, 6), (50, 6)])
def test_the_model_sees_the_last_history_turns_the_harness_allows(scripted_endpoint, engine_client, engine_manifest,
                                                                   engine_room, turns, kept):
    happy_script(scripted_endpoint)
    manifest = with_constraints(engine_manifest, history_turns=turns)
    r = run(engine_client(), manifest, engine_room, history=HISTORY)
    assert r.reply == GOOD
    sent = scripted_endpoint.requests[0]["messages"]
    # system prompt, the kept history (the most recent turns, in order), then this turn's comment
    assert sent[1:1 + kept] == HISTORY[len(HISTORY) - kept:]
    assert sent[1 + kept]["role"] == "user" and "[ann] hi" not in sent[1 + kept]["content"]
    assert len(sent) == kept + 2


def test_reply_with_a_leaked_tool_call_is_not_spoken(scripted_endpoint, engine_client, engine_manifest, engine_room):
    leaked = '{"name": "get_shipping", "arguments": {}}'
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL), native_calls(LOOKUP_101), reply(leaked), reply(GOOD))
    r = run(engine_client(), engine_manifest, engine_room)
    assert r.reply == GOOD and r.timings.retries == 1
    failed = [e for e in of(r, "hook_result") if not e.passed]
    assert any("code or a tool call in a spoken reply" in e.detail for e in failed)
