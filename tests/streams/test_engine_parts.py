"""Tool-call parsing and fault application."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from streams.engine.client import NativeToolCall, _SpecialTokenFilter
from streams.engine.faults import MALFORMED_RESULT, ToolFault, apply_fault, find_fault
from streams.engine.toolcalls import from_native, parse_arguments, split_content, strip_think

# --- tool calls -------------------------------------------------------------------------------------------


def test_hermes_blocks_object_and_string_arguments():
    text = ('Sure! <tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>'
            '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>')
    s = split_content(text, id_prefix="c")
    assert s.text == "Sure!"
    assert [(c.id, c.name, c.arguments, c.source, c.error) for c in s.calls] == [
        ("c_0", "a", {"x": 1}, "text", None), ("c_1", "b", {"y": 2}, "text", None)]


@pytest.mark.parametrize("block", [
    '<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>',
    '<tool_call>{"name": "a", "arguments": {"x": </tool_call>',
    '<tool_call>not json at all</tool_call>',
    '<tool_call>["a"]</tool_call>',
    '<tool_call>{"arguments": {}}</tool_call>',
    '<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>',
    '<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>',
    '<tool_call>{"name": "a", "arguments": {"x": 1}',  # unclosed block
])
def test_malformed_blocks_are_errors_not_exceptions(block):
    s = split_content("text " + block)
    assert len(s.calls) == 1 and s.calls[0].error and s.calls[0].arguments is None
    assert "tool_call" not in s.text


def test_native_calls_parsed():
    calls = from_native([NativeToolCall(0, "id0", "a", '{"x": 1}'), NativeToolCall(1, "id1", "b", ""),
                         NativeToolCall(2, "id2", "c", '{"x": '), NativeToolCall(3, "id3", "", "{}")])
    assert [(c.arguments, c.error is None) for c in calls] == [({"x": 1}, True), ({}, True), (None, False), ({}, False)]
    assert all(c.source == "native" for c in calls)


def test_parse_arguments_variants():
    assert parse_arguments({"a": 1}) == ({"a": 1}, None)
    assert parse_arguments(None) == ({}, None)
    assert parse_arguments(json.dumps(json.dumps({"a": 1}))) == ({"a": 1}, None)  # double-encoded
    assert parse_arguments("[1]")[0] is None
    assert parse_arguments("{" * 100000)[0] is None  # too long / too deep: an error, not a crash
    assert parse_arguments(5)[0] is None


def test_think_blocks():
    assert strip_think("<think>a</think>Hello") == ("Hello", "a")
    assert strip_think("Hello<think>unfinished") == ("Hello", "unfinished")
    assert strip_think("reasoning only</think>Hello") == ("Hello", "reasoning only")
    s = split_content("<think>x</think>Hi <|im_end|>there<|endoftext|>")
    assert (s.text, s.reasoning) == ("Hi there", "x")


def test_special_token_filter_across_chunks():
    f = _SpecialTokenFilter()
    out = "".join(f.feed(p) for p in ["Hi<", "|im_", "end|>", " there <|", "endoftext|>"]) + f.flush()
    assert out == "Hi there "
    f = _SpecialTokenFilter()
    assert f.feed("a < b") == "a < b" and f.feed("<|not closed") == "" and f.flush() == "<|not closed"


# --- faults ---------------------------------------------------------------------------------------------


def test_tool_fault_model():
    f = ToolFault(binding="catalog.stock", kind="slow", delay_ms=5)
    with pytest.raises(ValidationError):
        ToolFault(binding="x", kind="explode")
    with pytest.raises(ValidationError):
        ToolFault(binding="x", kind="slow", delay_ms=60001)
    with pytest.raises(ValidationError):
        ToolFault(binding="x", kind="slow", extra=1)
    with pytest.raises(ValidationError):
        f.kind = "timeout"  # frozen
    assert ToolFault.model_validate_json(f.model_dump_json()) == f


def test_apply_fault_kinds():
    calls = []
    slept = []

    def call():
        calls.append(1)
        return {"price": 24.9}

    assert apply_fault(None, call).result == {"price": 24.9}
    t = apply_fault(ToolFault(binding="b", kind="timeout"), call, name="lookup")
    assert (t.fault, t.result["code"], t.error, t.called) == ("timeout", "timeout", "lookup timed out", False)
    p = apply_fault(ToolFault(binding="b", kind="permission_denied"), call)
    assert p.result["code"] == "permission_denied" and not p.called
    m = apply_fault(ToolFault(binding="b", kind="malformed"), call)
    assert m.result is None and m.raw == MALFORMED_RESULT and m.called
    with pytest.raises(ValueError):
        json.loads(m.raw)
    s = apply_fault(ToolFault(binding="b", kind="slow", delay_ms=250), call, sleep=slept.append)
    assert s.result == {"price": 24.9} and s.fault == "slow" and slept == [0.25]
    assert len(calls) == 3  # malformed and slow call the binding; timeout and permission_denied do not


def test_binding_exception_is_contained():
    def boom():
        raise KeyError("x")

    out = apply_fault(None, boom, name="t")
    assert out.result["code"] == "internal" and out.error


def test_find_fault_by_name_then_binding():
    a = ToolFault(binding="lookup_product", kind="timeout")
    b = ToolFault(binding="catalog.product_info", kind="slow")
    assert find_fault({"lookup_product": a, "catalog.product_info": b}, "lookup_product", "catalog.product_info") is a
    assert find_fault({"catalog.product_info": b}, "lookup_product", "catalog.product_info") is b
    assert find_fault(None, "x", "y") is None


def test_package_exports_lazily():
    import streams.engine as engine

    assert engine.run_turn.__module__ == "streams.engine.turn"
    assert engine.ToolFault.__module__ == "streams.engine.faults"
    with pytest.raises(AttributeError):
        engine.nope  # noqa: B018


def test_overhead_bench_runs():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "bench/engine_overhead.py", "--turns", "20", "--warmup", "2",
                          "--target-ms", "1000"], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "median" in out.stdout and "PASS" in out.stdout
