"""Serve profiles produce the vLLM and local command lines."""

from __future__ import annotations

import json
import shlex

import pytest
from pydantic import ValidationError

from streams.serve_profiles import LoraAdapter, ServeProfile, local_demo_profile


def test_vllm_plain():
    p = ServeProfile(name="qwen", kind="vllm", model="/models/qwen3-8b", port=8001)
    argv = p.argv()
    assert argv[:3] == ["vllm", "serve", "/models/qwen3-8b"]
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert "--speculative-config" not in argv and "--enable-lora" not in argv
    assert p.base_url == "http://127.0.0.1:8001/v1"


def test_vllm_with_mtp():
    p = ServeProfile(name="mtp", kind="vllm", model="m", mtp_speculative_tokens=2)
    argv = p.argv()
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 2}
    line = p.command_line()
    assert """--speculative-config '{"method":"mtp","num_speculative_tokens":2}'""" in line
    assert shlex.split(line)[1:][: len(argv)] == argv


def test_vllm_with_lora():
    p = ServeProfile(
        name="lora", kind="vllm", model="m", enable_lora=True, runtime_lora_updating=True, max_lora_rank=16,
        lora_adapters=[LoraAdapter(name="hat-v1", path="/adapters/hat-v1")],
    )
    argv = p.argv()
    assert "--enable-lora" in argv and argv[argv.index("--max-lora-rank") + 1] == "16"
    assert argv[argv.index("--lora-modules") + 1] == "hat-v1=/adapters/hat-v1"
    assert p.env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert p.command_line().startswith("HF_HUB_OFFLINE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve m")


def test_invalid_combinations():
    with pytest.raises(ValidationError):
        ServeProfile(name="x", kind="local", model="m", mtp_speculative_tokens=2)
    with pytest.raises(ValidationError):
        ServeProfile(name="x", kind="vllm", model="m", lora_adapters=[LoraAdapter(name="a", path="/a")])
    with pytest.raises(ValidationError):
        ServeProfile(name="x", kind="vllm", model="m", bogus=1)


def test_local_profile():
    p = local_demo_profile(port=8123)
    argv = p.argv(python="py")
    assert argv[:3] == ["py", "-m", "training_jobs.tiny_model.serve"]
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert p.model.endswith("models/demo-tiny") and p.request_model == p.model
